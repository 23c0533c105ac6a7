"""The fsync thread: group commit for -f0, the -f MS rate and tail timer. It runs
beside the event loop and hands finished syncs back to it through a pipe."""
from __future__ import annotations

import os
from collections.abc import Collection
from time import monotonic_ns
from typing import TYPE_CHECKING, Final, Protocol

from ..core.hist import Hist
from .files import Wal

if TYPE_CHECKING:
    import asyncio


class _Gate(Protocol):
    """What the Syncer tells and asks the server's reply gate
    (server/gate.py, which binlog/ does not import)."""

    @property
    def held(self) -> Collection[object]: ...  # clients whose replies wait for safe()
    def advanced(self) -> int: ...  # safe() moved on: answer who it covers
    def binlog_failed(self) -> None: ...  # nothing to wait for: answer all
    def sync_starting(self) -> None: ...  # an fsync starts (--cluster -f0: ship)
    def sync_waits(self) -> bool: ...  # hold the next fsync back (its acks)
    def flush(self) -> None: ...  # the server's end of a pass


# The clock, as a name bound once: compiled, a Final name is read from a C
# static, where an imported global is a dict lookup at each call (about 130
# instructions). -f0 with one writer reads it twice between a put's read
# and its reply (the fsync's start and end).
clock: Final = monotonic_ns

# -f0: a client other than the last one synced inline that writes within
# this long of it means more than one is writing (Syncer._alone)
ALONE_NS = 2_000_000


def fsync_all(fds: list[int], dirfd: int | None) -> None:
    # fdatasync: the files are preallocated, so only data (and the extent
    # state needed to read it back) must reach the disk; it is 3x cheaper
    # than fsync on fallocated space here. dirfd is the Wal's, kept open.
    for fd in fds:
        os.fdatasync(fd)
    if dirfd is not None:
        os.fsync(dirfd)


def sync_inline(wal: Wal) -> None:
    """fsync all that wal has written, on this thread (OSError if it fails;
    the fds retired meanwhile are closed either way)."""
    if not wal.retired.files and not wal.new_files:
        # Nearly every fsync: the current file's records alone (what
        # sync_targets would say), without its lists to build. This runs
        # between a -f0 put's read and its reply.
        cur = wal.cur
        if cur is not None and cur.unsynced and cur.open:
            cur.unsynced = False
            os.fdatasync(cur.fd)
        wal.synced_to(wal.written)
        return
    fds, dirfd, close = wal.sync_targets()
    try:
        fsync_all(fds, dirfd)
    finally:
        for fd in close:
            os.close(fd)
    wal.synced_to(wal.written)


class Syncer:
    """fsync policy, off the event loop, in one dedicated thread.

    -f0 is group commit: replies to writing commands are held until an fsync
    covers their records; records written while one fsync runs share the
    next. With one writer waiting (and one in the last group) the fsync
    runs inline instead: there is no group to share it. -f MS syncs at
    most every MS ms, and a timer syncs the tail within MS even if no
    further write comes. -F never syncs.
    The thread reports back through a pipe the loop watches: cheaper per
    cycle than an executor future.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, wal: Wal, gate: _Gate, wantsync: bool,
                 rate_ns: int, announce: bool = True) -> None:
        import queue
        import threading

        self.loop = loop
        self.wal = wal
        self.gate = gate
        # Does the gate act on sync_starting (--cluster -f0 ships then)? If
        # not, the call (through the _Gate protocol, not a native call) is
        # left out of each fsync's start: for -f0 and one writer, that is
        # between the put's read and its reply.
        self.announce = announce
        self.wantsync = wantsync
        self.rate = rate_ns
        # (target lsn, fds to close) while a sync runs
        self.busy: tuple[int, list[int]] | None = None
        self.expect = 0  # clients the next fsync should cover (see _done)
        self.gather_until = 0
        self.gathering = False
        self.timer: asyncio.TimerHandle | None = None
        self.last = 0
        self.error: OSError | None = None
        # ns the last fsync took: set by the thread (read in _done) or by an
        # inline sync, and observed by regroup once its replies went out
        self.took = 0
        # -f0: the client the last fsync run inline was for, and when it ended
        self.inline_for: object = None
        self.inline_at = 0
        self.fsync_hist = Hist()  # for the metrics
        self.jobs: queue.SimpleQueue[tuple[list[int], int | None]] = queue.SimpleQueue()
        self.rfd, self.wfd = os.pipe()
        os.set_blocking(self.rfd, False)
        loop.add_reader(self.rfd, self._done)
        threading.Thread(target=self._run, name="fsync", daemon=True).start()

    def _run(self) -> None:
        while True:
            fds, dirfd = self.jobs.get()
            t0 = clock()
            try:
                fsync_all(fds, dirfd)
            except OSError as e:
                self.error = e
            self.took = clock() - t0
            os.write(self.wfd, b"x")

    def kick(self) -> None:
        wal = self.wal
        if not wal.use:  # the binlog failed: nothing to wait for
            self.gate.binlog_failed()
            return
        if (self.busy or self.timer is not None or not self.wantsync
                or (wal.synced >= wal.lsn and not wal.retired.files)):
            return  # a sync runs, or the timer will start one
        if self.gate.sync_waits():
            # --cluster -f0: the last group is not acked yet; the next grows
            # meanwhile (kicked again on the ack).
            return
        now = clock()
        if self.rate == 0 and len(self.gate.held) < self.expect and now < self.gather_until:
            # The clients just answered are likely sending their next write:
            # wait (at most 0.2 ms) so that one fsync covers all of them.
            if not self.gathering:
                self.gathering = True
                self.loop.call_soon(self._gather)
            return
        if self.rate == 0 and self.expect <= 1 and self._alone():
            # -f0 with one writer, as the last group was one: no group to
            # gather, and the hand-off to the thread and back (two wake-ups,
            # a pipe) costs more than the fdatasync itself. Sync here, as
            # the reference does for every write.
            self._inline()
        elif now >= self.last + self.rate:
            self._start(now)
        else:
            self.timer = self.loop.call_later((self.last + self.rate - now) / 1e9, self._due)

    def _gather(self) -> None:
        self.gathering = False
        self.kick()

    def _due(self) -> None:
        self.timer = None
        self.wal.flush()
        self.kick()

    def _begin(self) -> int:
        """An fsync starts (on the thread or inline): the records go to
        the kernel first. Returns what it will cover."""
        self.wal.flush()
        if self.announce:
            self.gate.sync_starting()
        return self.wal.written

    def _start(self, now: int) -> None:
        self.last = now
        self._begin()
        fds, dirfd, close = self.wal.sync_targets()
        self.busy = (self.wal.written, close)
        self.jobs.put((fds, dirfd))

    def _alone(self) -> bool:
        """Is one client writing, the one whose reply waits now? A sync
        inline holds the loop, so other writers' commands wait unread and
        no group forms (held stays at one): a second client writing within
        ALONE_NS of the last inline sync sends the syncs back to the
        thread, where a group gathers while each runs."""
        held = self.gate.held
        if len(held) > 1:
            return False
        if not held:
            return True  # (an HTTP action's wait, or records nobody waits for)
        return self._alone_with(next(iter(held)))

    def _alone_with(self, s: object) -> bool:
        """_alone, s being the one connection whose reply waits. (The
        clock is read only for another client than the last one synced
        inline: with one writer, not at all.)"""
        if s is self.inline_for:
            return True
        if clock() - self.inline_at > ALONE_NS:
            self.inline_for = s
            return True
        return False

    def sync_for(self, s: object) -> bool:
        """-f0: s's reply waits for an fsync, and no other reply does (the
        gate holds none). If kick would sync inline, sync now and return
        True: s's reply may go, and the gate sends it, then calls regroup
        (with inline_at). False: nothing was done (the gate holds s and
        kicks)."""
        if (self.busy or self.timer is not None or self.rate or not self.wantsync
                or self.expect > 1):
            return False  # (kick would wait, gather, or use the thread)
        if not self._alone_with(s):
            return False
        self._sync_here()
        return True

    def _inline(self) -> None:
        """An fsync on the loop's thread (kick says when), then its replies."""
        self._sync_here()
        self.regroup(self.gate.advanced(), self.inline_at)

    def _sync_here(self) -> None:
        """Write and fsync the records here. What the replies wait for is
        done (wal.synced moves on); what can wait for them is left to
        regroup, which the caller calls once they went out. The clock is
        read twice, around the fsync alone: its time (self.took, for the
        metrics) is the fdatasync's, as the thread's is, not the write's."""
        target = self._begin()
        t0 = self.last = clock()
        try:
            sync_inline(self.wal)
        except OSError as e:
            self.wal.fail(f"fsync: {e}")  # (as the thread's: see _done)
        end = self.inline_at = clock()
        self.took = end - t0
        self._synced(target)

    def _done(self) -> None:
        try:
            os.read(self.rfd, 64)
        except BlockingIOError:
            return
        # The pipe is written once per fsync that _start began, and _start set
        # busy: not None here (left unchecked, once per fsync).
        target, close = self.busy  # type: ignore[misc]
        self.busy = None
        if self.error is not None:
            # After a failed fsync the kernel may have dropped the writes it
            # could not make, and marked them done: nothing written before it
            # can be called safe, now or by a later fsync. The binlog stops
            # (one line says so; the replies go, as after a failed write),
            # and the files let go meanwhile stay where they are.
            self.wal.fail(f"fsync: {self.error}")
            self.error = None
        for fd in close:
            os.close(fd)
        self._synced(target)
        self.regroup(self.gate.advanced(), clock())  # (the replies it covers go out)
        self.gate.flush()  # records written meanwhile go out and their sync starts

    def _synced(self, target: int) -> None:
        """An fsync covering binlog bytes up to target ended (inline or on
        the thread): they are safe, and the replies waiting for them may go."""
        if self.wal.use:  # (else it failed: nothing it covered is safe)
            self.wal.synced_to(target)

    def regroup(self, released: int, now: int) -> None:
        """An fsync's replies went out, `released` of them, at about `now`
        (the clock read last: an inline fsync's end, the replies a few
        microseconds after it). Its time goes to the metrics here, after
        the replies rather than on their way. Clients still held wrote
        during this sync; with those just released, that is the group the
        next fsync should cover."""
        self.fsync_hist.observe(self.took)
        self.expect = len(self.gate.held) + released
        self.gather_until = now + 200_000

    def final(self) -> None:
        """At shutdown: write and fsync everything, inline."""
        wal = self.wal
        wal.flush()
        if self.wantsync and wal.use:
            sync_inline(wal)
        if wal.use:
            wal.in_place(wal.cur)  # (renamed over or removed: said as the server goes)

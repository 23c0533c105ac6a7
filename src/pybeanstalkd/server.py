"""asyncio/uvloop transport: feeds the Engine bytes and the monotonic clock.

One write per connection per event, however many replies a read produced.
"""
from __future__ import annotations

import asyncio
import gc
import os
import signal
import socket
import sys
from time import monotonic_ns

from .engine import Engine
from .net import default_warn as warn
from .wal import Wal


PENDING_LIMIT = 1 << 20  # bytes buffered from a client blocked in reserve


class Client(asyncio.Protocol):
    __slots__ = ("srv", "transport", "s")

    def __init__(self, srv: Server):
        self.srv = srv

    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info("socket")
        s = self.s = self.srv.engine.connect()
        s.fd = sock.fileno() if sock is not None else -1
        s.transport = transport
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.srv.clients[s] = self
        if self.srv.verbose:
            self.srv.log("accept %d" % s.fd)

    def data_received(self, data):
        srv = self.srv
        now = monotonic_ns()
        if srv.timer_at is not None and now >= srv.timer_at:
            srv.on_timer(now)  # timers first, as the reference's loop does
        s = self.s
        srv.engine.data(s, data, now)
        if s.waiting and s.plen > PENDING_LIMIT:
            # Blocked in reserve: stop reading, as the reference does, so a
            # client that keeps sending meets TCP backpressure, not our memory.
            self.transport.pause_reading()
            srv.paused.add(s)
        srv.flush()
        if s.closing and s not in srv.held:
            self.transport.close()

    def eof_received(self):
        srv = self.srv
        srv.engine.eof(self.s, monotonic_ns())
        srv.flush()
        # Replies held for an fsync (-f0) still go out: the transport stays
        # open until they are sent (Server._send closes it then).
        return self.s in srv.held

    def connection_lost(self, exc):
        srv = self.srv
        s = self.s
        del srv.clients[s]
        s.transport = None
        srv.paused.discard(s)
        if srv.verbose:
            srv.log("close %d" % s.fd)
        srv.engine.close(s, monotonic_ns())
        srv.flush()

    # A client that does not read its replies stops being read (as the reference).
    def pause_writing(self):
        self.transport.pause_reading()

    def resume_writing(self):
        self.transport.resume_reading()


class Server:
    def __init__(self, loop, engine: Engine, verbose: int = 0):
        self.loop = loop
        self.engine = engine
        self.verbose = verbose
        self.clients: dict = {}  # Session -> Client
        self.timer = None
        self.timer_at = None
        self.held: set = set()  # sessions whose replies wait for an fsync (-f0)
        self.paused: set = set()  # sessions not read while blocked in reserve
        self.syncer: Syncer | None = None

    @staticmethod
    def log(msg: str):
        print(msg, flush=True)

    def flush(self):
        engine = self.engine
        syncer = self.syncer
        if syncer is not None and not engine.hold_writes:
            # Records reach the kernel before any reply goes out. With -f0
            # replies wait for the fsync anyway: one write per group (_start).
            syncer.wal.flush()
        dirty = engine.dirty
        if dirty:
            synced = 0 if syncer is None else (syncer.wal.synced if syncer.wal.use else 1 << 62)
            for s in dirty:
                if s.hold > synced:
                    self.held.add(s)
                else:
                    self._send(s)
            dirty.clear()
        if syncer is not None:
            syncer.kick()
        if self.paused:
            for s in [s for s in self.paused if not s.waiting]:
                self.paused.discard(s)
                t = s.transport
                if t is not None and not t.is_closing():
                    t.resume_reading()
        due = engine.q.due
        if due is not None:
            engine.q.due = None
            if self.timer_at is None or due < self.timer_at:
                self.arm(due)

    @staticmethod
    def _send(s):
        out = s.out
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        t = s.transport
        if t is not None and not t.is_closing():
            t.write(data)
            if s.closing:
                t.close()

    def release_held(self, synced: int) -> int:
        ready = [s for s in self.held if s.hold <= synced]
        for s in ready:
            self.held.discard(s)
            self._send(s)
        return len(ready)

    def arm(self, due: int):
        if self.timer is not None:
            self.timer.cancel()
        self.timer_at = due
        delay = (due - monotonic_ns()) / 1e9
        self.timer = self.loop.call_later(delay if delay > 0 else 0, self.on_timer)

    def on_timer(self, now=None):
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.timer_at = None
        engine = self.engine
        engine.tick(monotonic_ns() if now is None else now)
        engine.q.due = None
        self.flush()
        due = engine.next_due()
        if due is not None and (self.timer_at is None or due < self.timer_at):
            self.arm(due)


def new_loop():
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _freeze_survivors(phase: str, info: dict):
    if phase == "stop" and info["generation"] == 0:
        gc.freeze()


def serve(sock: socket.socket, opts) -> int:
    # Every stored job is a GC-tracked object. Left to the default policy,
    # older generations are rescanned as the queue grows: 14% of puts, and
    # stalls of a second once a queue passes millions of jobs. Objects that
    # survive a young collection are frozen instead: never scanned again,
    # still freed by reference counting. The server makes no cyclic garbage
    # of its own (167 objects, all from imports, after 3,000 connections),
    # so this keeps nothing that a full collection would have freed.
    gc.callbacks.append(_freeze_survivors)
    loop = new_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(_serve(loop, sock, opts))
    finally:
        sys.stdout.flush()


def open_binlog(engine: Engine, opts) -> Wal:
    """Lock and recover the binlog directory (exits as the reference does)."""
    from .recovery import RecoveryError, lock_dir, recover

    try:
        lock_dir(opts.wal_dir)
    except RecoveryError as e:
        for line in e.args:
            warn(line)
        raise SystemExit(10) from None
    wal = Wal(opts.wal_dir, opts.filesize, wantsync=opts.wantsync, warn=warn)
    try:
        recover(wal, engine.q, engine.max_job_size, monotonic_ns(), warn)
    except RecoveryError as e:
        for line in e.args:
            warn(line)
        raise SystemExit(1) from None
    engine.q.store = wal
    engine.hold_writes = opts.wantsync and opts.syncrate_ms == 0
    return wal


async def _serve(loop, sock: socket.socket, opts) -> int:
    engine = Engine(monotonic_ns(), max_job_size=opts.max_job_size,
                    verbose=opts.verbose, filesize=opts.filesize,
                    log=Server.log)
    srv = Server(loop, engine, opts.verbose)
    if opts.wal_dir is not None:
        wal = open_binlog(engine, opts)
        srv.syncer = Syncer(loop, wal, srv, opts.wantsync, opts.syncrate_ms * 1_000_000)
    stop = loop.create_future()

    def drain():
        engine.draining = True

    def terminate():
        if not stop.done():
            stop.set_result(0)

    # Handlers go in before the listener serves anyone, and everything runs in
    # one run of the loop: a signal must never arrive while it is not running.
    loop.add_signal_handler(signal.SIGUSR1, drain)
    loop.add_signal_handler(signal.SIGTERM, terminate)
    loop.add_signal_handler(signal.SIGINT, terminate)
    factory = lambda: Client(srv)  # noqa: E731
    if sock.family == socket.AF_UNIX:
        listener = await loop.create_unix_server(factory, sock=sock, backlog=1024)
    else:
        listener = await loop.create_server(factory, sock=sock, backlog=1024)
    try:
        return await stop
    finally:
        listener.close()
        if srv.syncer is not None:
            srv.syncer.final()
        for c in list(srv.clients.values()):
            c.transport.abort()


def _fsync_all(fds, dirfd):
    # fdatasync: the files are preallocated, so only data (and the extent
    # state needed to read it back) must reach the disk; it is 3x cheaper
    # than fsync on fallocated space here.
    try:
        for fd in fds:
            os.fdatasync(fd)
        if dirfd is not None:
            os.fsync(dirfd)
    finally:
        if dirfd is not None:
            os.close(dirfd)


class Syncer:
    """fsync policy, off the event loop, in one dedicated thread.

    -f0 is group commit: replies to writing commands are held until an fsync
    covers their records; records written while one fsync runs share the
    next. -f MS syncs at most every MS ms, and a timer syncs the tail within
    MS even if no further write comes. -F never syncs.
    The thread reports back through a pipe the loop watches: cheaper per
    cycle than an executor future.
    """

    def __init__(self, loop, wal: Wal, srv: Server, wantsync: bool, rate_ns: int):
        import queue
        import threading

        self.loop = loop
        self.wal = wal
        self.srv = srv
        self.wantsync = wantsync
        self.rate = rate_ns
        self.busy = None  # (target lsn, fds to close) while a sync runs
        self.expect = 0  # clients the next fsync should cover (see _done)
        self.gather_until = 0
        self.gathering = False
        self.timer = None
        self.last = 0
        self.error = None
        self.jobs = queue.SimpleQueue()
        self.rfd, self.wfd = os.pipe()
        os.set_blocking(self.rfd, False)
        loop.add_reader(self.rfd, self._done)
        threading.Thread(target=self._run, name="fsync", daemon=True).start()

    def _run(self):
        while True:
            fds, dirfd = self.jobs.get()
            try:
                _fsync_all(fds, dirfd)
            except OSError as e:
                self.error = e
            os.write(self.wfd, b"x")

    def kick(self):
        wal = self.wal
        if not wal.use:  # the binlog failed: nothing to wait for
            if self.srv.held:
                self.srv.release_held(1 << 62)
            return
        if (self.busy or self.timer is not None or not self.wantsync
                or (wal.synced >= wal.lsn and not wal.retired)):
            return  # a sync runs, or the timer will start one
        now = monotonic_ns()
        if self.rate == 0 and len(self.srv.held) < self.expect and now < self.gather_until:
            # The clients just answered are likely sending their next write:
            # wait (at most 0.2 ms) so that one fsync covers all of them.
            if not self.gathering:
                self.gathering = True
                self.loop.call_soon(self._gather)
            return
        if now >= self.last + self.rate:
            self._start(now)
        else:
            self.timer = self.loop.call_later((self.last + self.rate - now) / 1e9, self._due)

    def _gather(self):
        self.gathering = False
        self.kick()

    def _due(self):
        self.timer = None
        self.wal.flush()
        self.kick()

    def _start(self, now: int):
        self.last = now
        self.wal.flush()
        fds, dirfd, close = self.wal.sync_targets()
        self.busy = (self.wal.written, close)
        self.jobs.put((fds, dirfd))

    def _done(self):
        try:
            os.read(self.rfd, 64)
        except BlockingIOError:
            return
        target, close = self.busy
        self.busy = None
        if self.error is not None:
            warn(f"fsync: {self.error}")
            self.error = None
        for fd in close:
            os.close(fd)
        self.wal.synced = max(self.wal.synced, target)
        released = self.srv.release_held(self.wal.synced)
        # Clients still held wrote during this sync; with those just released,
        # that is the group the next fsync should cover.
        self.expect = len(self.srv.held) + released
        self.gather_until = monotonic_ns() + 200_000
        self.srv.flush()  # records written meanwhile go out and their sync starts

    def final(self):
        """At shutdown: write and fsync everything, inline."""
        wal = self.wal
        wal.flush()
        if self.wantsync and wal.use:
            fds, dirfd, close = wal.sync_targets()
            _fsync_all(fds, dirfd)
            for fd in close:
                os.close(fd)
            wal.synced = wal.written

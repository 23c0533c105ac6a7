"""-b -f0, in-process, on the real engine, binlog, Syncer and Server: an
event trace of fdatasync calls and reply writes, per client, checks that no
reply to a write leaves before an fdatasync covering its record returned
(inline or on the thread, one writer or several, switching between them);
that a failed fsync is said once, never counted as covering what it was
to cover, and the server goes on without the binlog; and that the fsync
histogram holds one value per fsync, each its own duration."""
from __future__ import annotations

import asyncio
import errno
import os
import random
import threading
import time
from collections import deque

import pytest

from fakeclock import with_binlog
from pybeanstalkd.core.engine import HOLD_NONE, HOLD_WRITES
from pybeanstalkd.server.gate import Outlet, Synced, Written
from pybeanstalkd.server.transport import Server

# An fdatasync made slow: its value is >= 2**25 ns (33.5 ms), bit length 26
# or more; a fast one's (no call at all, a wait for the GIL at most) is far
# below that.
SLOW_S = 0.050
SLOW_BITS = 26


class Trace:
    """fdatasync (os.fdatasync patched; the real one is not called: what is
    checked is the order, not the disk) and each client's replies, in one
    order; a reply is checked as it is written."""

    def __init__(self, wal, monkeypatch, fail_at=None, slow=()):
        self.wal = wal
        self.lock = threading.Lock()
        self.durable = 0  # binlog bytes an fdatasync that returned covered
        self.calls = 0
        self.failed_at = None  # wal.written when the failed fdatasync began
        self.fail_at = fail_at  # the call (0-based) that fails
        self.slow = set(slow)  # the calls that take SLOW_S
        self.after_failure = 0  # fdatasync calls after the failed one
        self.where: list[str] = []  # each call's thread: "inline" or "thread"
        self.replies = 0
        self.unchecked = 0  # replies after the failure (nothing is durable)
        self.errors: list[str] = []
        monkeypatch.setattr(os, "fdatasync", self.fdatasync)

    def fdatasync(self, fd):
        covers = self.wal.written  # (written before this call: what it flushes)
        with self.lock:
            i = self.calls
            self.calls += 1
            main = threading.current_thread() is threading.main_thread()
            self.where.append("inline" if main else "thread")
            if self.failed_at is not None:
                self.after_failure += 1
        if i in self.slow:
            time.sleep(SLOW_S)
        if i == self.fail_at:
            with self.lock:
                self.failed_at = covers
            raise OSError(errno.EIO, "Input/output error")
        with self.lock:
            if self.failed_at is None and covers > self.durable:
                self.durable = covers

    def reply(self, expected: deque, data: bytes):
        for _ in range(data.count(b"\r\n")):
            what, end = expected.popleft()
            self.replies += 1
            with self.lock:
                if self.failed_at is not None:
                    self.unchecked += 1
                elif self.durable < end:
                    self.errors.append(f"{what} answered before its fsync: {self.durable} < {end}")


class Pipe:
    def __init__(self, trace: Trace):
        self.trace = trace
        self.expected: deque = deque()  # (command, binlog end of its record)
        self.data = bytearray()

    def write(self, b):
        self.trace.reply(self.expected, bytes(b))
        self.data += b

    def writelines(self, pieces):
        self.write(b"".join(pieces))

    def is_closing(self):
        return False

    def close(self):
        pass


class Rig:
    def __init__(self, tmp_path, monkeypatch, n, rate_ms=0, filesize=10485760, **kw):
        self.warned: list[str] = []
        hold = HOLD_NONE if rate_ms else HOLD_WRITES
        self.h, self.wal = with_binlog(tmp_path, filesize=filesize, hold=hold,
                                       warn=self.warned.append)
        self.loop = asyncio.new_event_loop()
        rate = rate_ms * 1_000_000
        gate = Written if rate_ms else Synced
        self.srv = Server(self.loop, self.h.e, gate=lambda srv: gate(srv, self.wal, True, rate))
        self.trace = Trace(self.wal, monkeypatch, **kw)
        self.conns = []
        for _ in range(n):
            s = self.h.e.connect()
            s.transport = Outlet(Pipe(self.trace))
            self.conns.append(s)
        self.ids: list[list[int]] = [[] for _ in range(n)]  # jobs each put, answered
        self.sent = 0
        self.deleted = 0

    def send(self, i: int, data: bytes, what: str):
        """Run one command of client i (not the end of the pass)."""
        s = self.conns[i]
        self.h.e.data(s, data, self.h.now)
        self.sent += 1
        s.transport.t.expected.append((what, self.wal.lsn))

    def put(self, i: int):
        self.send(i, b"put 0 0 60 1\r\nx\r\n", "put")

    def delete(self, i: int):
        self.send(i, b"delete %d\r\n" % self.ids[i].pop(0), "delete")

    def settle(self):
        """End the pass; run the loop until every reply went out."""
        self.srv.flush()
        end = time.monotonic() + 10
        while self.trace.replies < self.sent:
            assert time.monotonic() < end, "timed out"
            self.loop.run_until_complete(asyncio.sleep(0.001))
        for i, s in enumerate(self.conns):
            data = bytes(s.transport.t.data)
            for line in data.split(b"\r\n")[:-1]:
                if line.startswith(b"INSERTED "):
                    self.ids[i].append(int(line.split()[1]))
                else:
                    assert line == b"DELETED", line
                    self.deleted += 1
            s.transport.t.data.clear()

    def close(self):
        sy = self.srv.syncer
        self.loop.remove_reader(sy.rfd)
        os.close(sy.rfd)
        os.close(sy.wfd)  # (its thread waits on its queue for good: a daemon)
        self.loop.close()


def run_rounds(rig: Rig, rounds: int, seed: int):
    """Rounds of writes from a random set of clients (one alone: inline; two
    or more in one pass: the thread), some rounds after a pause longer than
    ALONE_NS (a new lone writer goes inline again)."""
    rnd = random.Random(seed)
    n = len(rig.conns)
    for _ in range(rounds):
        who = rnd.sample(range(n), rnd.choice([1, 1, 1, 2, n]))
        for i in who:
            if rig.ids[i] and rnd.random() < 0.4:
                rig.delete(i)
            else:
                rig.put(i)
        rig.settle()
        if rnd.random() < 0.2:
            time.sleep(0.003)  # (> ALONE_NS)


def hist_of(rig):
    return rig.srv.syncer.fsync_hist


@pytest.mark.parametrize("seed", range(4))
def test_no_reply_precedes_its_fsync_as_writers_come_and_go(tmp_path, monkeypatch, seed):
    rig = Rig(tmp_path, monkeypatch, 3, slow={5, 17, 30})
    try:
        run_rounds(rig, 60, seed)
        t = rig.trace
        assert t.errors == [] and t.replies == rig.sent and rig.deleted > 10
        assert {"inline", "thread"} <= set(t.where)  # (both paths were taken)
        assert rig.wal.use and rig.wal.synced == rig.wal.lsn and not rig.warned
        # one value per fsync, each its own time: the slow ones, and no other, are slow
        h = hist_of(rig)
        assert h.count() == t.calls
        assert sum(h.counts[SLOW_BITS:]) == len({5, 17, 30} & set(range(t.calls)))
        assert h.total >= SLOW_S * 1e9 * sum(h.counts[SLOW_BITS:])
    finally:
        rig.close()


@pytest.mark.parametrize("lone", [True, False], ids=["inline", "thread"])
def test_the_last_fsyncs_own_time_is_counted(tmp_path, monkeypatch, lone):
    """Fast fsyncs, then a slow one: the histogram holds the slow one's
    time once it is answered (not the one before it, not twice)."""
    rig = Rig(tmp_path, monkeypatch, 2, slow={3})
    try:
        for _ in range(4):
            if lone:
                rig.put(0)
            else:
                rig.put(0)
                rig.put(1)
            rig.settle()
        h = hist_of(rig)
        assert rig.trace.calls == 4 and h.count() == 4 and not rig.trace.errors
        assert rig.trace.where[-1] == ("inline" if lone else "thread")
        assert sum(h.counts[SLOW_BITS:]) == 1
        assert SLOW_S * 1e9 <= h.total < SLOW_S * 1e9 + 4 * 20_000_000
    finally:
        rig.close()


@pytest.mark.parametrize("fail_at", [0, 3, 9])
@pytest.mark.parametrize("seed", range(2))
def test_a_failed_fsync_is_never_taken_for_one_that_covered(tmp_path, monkeypatch, fail_at, seed):
    """An fdatasync fails (inline or on the thread, whichever it is then):
    nothing it was to cover is called synced, the binlog stops with one
    line, every command is still answered (as after a failed write), and
    no fsync is tried again."""
    rig = Rig(tmp_path, monkeypatch, 3, fail_at=fail_at)
    try:
        run_rounds(rig, 30, seed)
        t = rig.trace
        assert t.errors == [] and t.replies == rig.sent
        assert t.failed_at is not None and t.after_failure == 0 and t.calls == fail_at + 1
        assert not rig.wal.use and rig.wal.synced <= t.durable < rig.wal.lsn
        assert rig.wal.synced < t.failed_at
        assert rig.warned == ["binlog disabled: fsync: [Errno 5] Input/output error;"
                              " jobs are kept in memory only"]
        assert hist_of(rig).count() == t.calls  # (the failed one's time too)
    finally:
        rig.close()


def test_a_failed_inline_fsync_then_more_puts_from_the_same_client(tmp_path, monkeypatch):
    """The lone writer's path (Synced.replies' sync_for): its fsync fails;
    its reply goes after the attempt, and its next puts are answered at
    once, without an fsync, from memory."""
    rig = Rig(tmp_path, monkeypatch, 1, fail_at=1)
    try:
        rig.put(0)
        rig.settle()
        assert rig.trace.calls == 1 and rig.srv.syncer.busy is None
        rig.put(0)
        rig.settle()  # (the failed fsync, inline: settle needs no loop turn)
        assert rig.trace.calls == 2 and rig.trace.failed_at is not None
        end = rig.wal.synced
        for _ in range(5):
            rig.put(0)
            rig.settle()
        assert rig.trace.calls == 2 and rig.trace.unchecked == 6 and not rig.trace.errors
        assert rig.wal.synced == end < rig.trace.failed_at and len(rig.warned) == 1
        assert rig.ids[0] == [1, 2, 3, 4, 5, 6, 7]
        assert hist_of(rig).count() == 2
    finally:
        rig.close()


def test_f_ms_syncs_on_its_timer_and_counts_each_fsync_once(tmp_path, monkeypatch):
    """-f MS (the timer path): replies go with the write, fsyncs run at
    most one per MS on the thread, the tail is synced by the timer, and
    the histogram holds one value per fsync."""
    rig = Rig(tmp_path, monkeypatch, 2, rate_ms=5, slow={2})
    try:
        start = time.monotonic()
        for k in range(40):
            rig.put(k % 2)
            rig.srv.flush()
            assert rig.trace.replies == rig.sent  # (not held)
            time.sleep(0.0005)
            rig.loop.run_until_complete(asyncio.sleep(0))
        end = time.monotonic() + 5
        while rig.wal.synced < rig.wal.lsn or rig.srv.syncer.busy:
            assert time.monotonic() < end, "the tail was not synced"
            rig.loop.run_until_complete(asyncio.sleep(0.002))
        took = time.monotonic() - start
        t = rig.trace
        assert set(t.where) == {"thread"} and 2 <= t.calls <= took / 0.005 + 2
        h = hist_of(rig)
        assert h.count() == t.calls and sum(h.counts[SLOW_BITS:]) == 1
    finally:
        rig.close()



def test_records_written_at_a_file_switch_are_not_taken_for_synced(tmp_path, monkeypatch):
    """While the thread's fsync of two writers' puts runs (slow), a third
    client puts, then a fourth puts enough to fill the binlog file: the
    switch to the next file writes what is buffered, the third client's
    record with it. Written is not synced: the third client's reply must
    wait for the next fsync (the gate goes by synced; by written it would
    go now)."""
    rig = Rig(tmp_path, monkeypatch, 4, filesize=2048, slow={0})
    try:
        rig.put(0)
        rig.put(1)
        rig.srv.flush()
        end = time.monotonic() + 5
        while rig.trace.calls == 0:  # (the fsync starts on the thread, and sleeps)
            assert time.monotonic() < end, "no fsync started"
            rig.loop.run_until_complete(asyncio.sleep(0.0005))
        assert rig.trace.where == ["thread"]
        rig.put(2)
        mine = rig.conns[2].hold
        seq = rig.wal.cur.seq
        for _ in range(30):
            rig.put(3)
        assert rig.wal.cur.seq > seq  # (a file switch wrote the buffer)
        assert rig.wal.synced < mine <= rig.wal.written  # (the window this is about)
        rig.srv.flush()
        rig.settle()
        assert rig.trace.errors == [] and rig.trace.replies == rig.sent
        assert rig.wal.use and not rig.warned
    finally:
        rig.close()

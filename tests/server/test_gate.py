"""The reply gate (server/gate.py): each kind lets a reply out exactly when
the settings promise, on the real engine, binlog, Syncer and Server
in-process; the fsync thread is held back where a test needs to see the
moment between a record's write and its fsync."""
from __future__ import annotations

import asyncio
import os
import threading
import time
from types import SimpleNamespace

import pytest

from fakeclock import with_binlog
from pybeanstalkd.cli import parse_args
from pybeanstalkd.core.engine import HOLD_ALL, HOLD_NONE, HOLD_WRITES
from pybeanstalkd.server.gate import Immediate, Outlet, Replicated, Synced, Written, gate_for, hold_for
from pybeanstalkd.server.transport import Server


class Pipe:
    """A transport that keeps what is written."""

    def __init__(self):
        self.data = bytearray()

    def write(self, b):
        self.data += b

    def writelines(self, pieces):
        for p in pieces:
            self.data += p

    def is_closing(self):
        return False

    def close(self):
        pass


def conn(h):
    s = h.e.connect()
    s.transport = Outlet(Pipe())
    return s


def command(h, srv, s, data: bytes) -> bytes:
    """Run data on s and end the pass; what s has been sent so far."""
    h.e.data(s, data, h.now)
    srv.flush()
    return bytes(s.transport.t.data)


@pytest.fixture
def fsync_held(monkeypatch):
    """fsyncs wait until the returned event is set."""
    go = threading.Event()
    real = os.fdatasync

    def held(fd):
        go.wait(10)
        real(fd)
    monkeypatch.setattr(os, "fdatasync", held)
    yield go
    go.set()


def until(loop, cond, timeout=5.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        loop.run_until_complete(asyncio.sleep(0.005))


@pytest.mark.parametrize("argv, gate, hold", [
    ([], Immediate, HOLD_NONE),
    (["-f0"], Immediate, HOLD_NONE),  # (no binlog: nothing to wait for)
    (["-b", "{d}"], Written, HOLD_NONE),
    (["-b", "{d}", "-f", "20"], Written, HOLD_NONE),
    (["-b", "{d}", "-F"], Written, HOLD_NONE),
    (["-b", "{d}", "-f0"], Synced, HOLD_WRITES),
    (["-b", "{d}", "-f0", "--cluster", "c", "--etcd", "127.0.0.1:2379", "--node", "n",
      "--peer-listen", "127.0.0.1:1"], Replicated, HOLD_ALL),
    (["-b", "{d}", "-f", "50", "--cluster", "c", "--etcd", "127.0.0.1:2379", "--node", "n",
      "--peer-listen", "127.0.0.1:1"], Replicated, HOLD_ALL),
])
def test_the_settings_choose_the_gate_once(tmp_path, argv, gate, hold):
    opts = parse_args([a.format(d=tmp_path) for a in argv])
    h, wal = with_binlog(tmp_path, hold=hold_for(opts))
    loop = asyncio.new_event_loop()
    try:
        srv = Server(loop, h.e, gate=gate_for(opts, None if gate is Immediate else wal))
        assert type(srv.gate) is gate and srv.gate.hold == hold == h.e.hold
        assert (srv.syncer is None) == (gate is Immediate)
        # (only a cluster's gate acts on an fsync's start: the Syncer calls it then)
        assert srv.syncer is None or srv.syncer.announce == (gate is Replicated)
        if isinstance(srv.gate, Replicated):
            assert srv.gate.each_write == opts.fsync_each_write
    finally:
        loop.close()


def test_written_writes_the_records_before_the_replies(tmp_path):
    """-f MS: the replies of a pass go out after its records reach the
    kernel, never after the fsync."""
    h, wal = with_binlog(tmp_path)
    loop = asyncio.new_event_loop()
    try:
        srv = Server(loop, h.e, gate=lambda srv: Written(srv, wal, True, 10_000_000_000))
        srv.syncer.last = time.monotonic_ns()  # (the next fsync is 10 s away)
        a = conn(h)
        assert command(h, srv, a, b"put 0 0 60 1\r\nx\r\n") == b"INSERTED 1\r\n"
        assert wal.written == wal.lsn > wal.synced
    finally:
        loop.close()


def test_synced_answers_after_the_fsync_not_the_write(tmp_path, fsync_held):
    """-f0: the record is written as its fsync starts; the reply waits for
    the fsync to end, whatever else the loop does meanwhile."""
    h, wal = with_binlog(tmp_path, hold=HOLD_WRITES)
    loop = asyncio.new_event_loop()
    try:
        srv = Server(loop, h.e, gate=lambda srv: Synced(srv, wal, True, 0))
        srv.syncer.expect = 2  # (as after a group of two: the fsync thread syncs)
        a, b = conn(h), conn(h)
        assert command(h, srv, a, b"put 0 0 60 1\r\nx\r\n") == b""
        until(loop, lambda: srv.syncer.busy)  # the fsync runs
        assert wal.written == wal.lsn > wal.synced  # written, not on disk
        # Other passes of the loop, a reply that wrote nothing among them
        assert command(h, srv, b, b"list-tube-used\r\n") == b"USING default\r\n"
        assert srv.gate.advanced() == 0 and a in srv.held
        assert bytes(a.transport.t.data) == b""
        fsync_held.set()
        until(loop, lambda: a.transport.t.data)
        assert bytes(a.transport.t.data) == b"INSERTED 1\r\n" and wal.synced == wal.lsn
        assert not srv.held
    finally:
        fsync_held.set()
        loop.close()


def test_synced_with_one_writer_answers_once_synced_inline(tmp_path, monkeypatch):
    """-f0, one client writing: the fsync runs in the pass that wrote (no
    hand-off to the fsync thread), and the reply goes out after it."""
    h, wal = with_binlog(tmp_path, hold=HOLD_WRITES)
    loop = asyncio.new_event_loop()
    sent_at_fsync = []
    real = os.fdatasync

    def fdatasync(fd):
        sent_at_fsync.append(bytes(a.transport.t.data))  # (what a had been sent by then)
        real(fd)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    try:
        srv = Server(loop, h.e, gate=lambda srv: Synced(srv, wal, True, 0))
        a = conn(h)
        for i in (1, 2, 3):
            assert command(h, srv, a, b"put 0 0 60 1\r\nx\r\n") == b"INSERTED %d\r\n" % i
            assert wal.synced == wal.lsn and srv.syncer.busy is None and not srv.held
            assert sent_at_fsync == [b""] * i  # each reply after its fsync
            a.transport.t.data.clear()
        # a reply that waits for nothing goes at once, no fsync
        assert command(h, srv, a, b"list-tube-used\r\n") == b"USING default\r\n"
        assert len(sent_at_fsync) == 3
    finally:
        loop.close()


def test_synced_one_writer_then_a_group(tmp_path, fsync_held):
    """Once the last fsync answered more than one client (a group may
    form), a lone writer's fsync goes to the thread: its reply waits for
    it there."""
    h, wal = with_binlog(tmp_path, hold=HOLD_WRITES)
    loop = asyncio.new_event_loop()
    try:
        srv = Server(loop, h.e, gate=lambda srv: Synced(srv, wal, True, 0))
        a, b = conn(h), conn(h)
        fsync_held.set()  # (a's inline fsync runs through)
        assert command(h, srv, a, b"put 0 0 60 1\r\nx\r\n") == b"INSERTED 1\r\n"
        fsync_held.clear()
        srv.syncer.expect = 2  # (as after a group of two)
        assert command(h, srv, b, b"put 0 0 60 1\r\ny\r\n") == b""  # (not inline: held)
        assert b in srv.held and wal.synced < wal.lsn
        until(loop, lambda: srv.syncer.busy)  # on the thread
        assert bytes(b.transport.t.data) == b""
        fsync_held.set()
        until(loop, lambda: b.transport.t.data)
        assert bytes(b.transport.t.data) == b"INSERTED 2\r\n" and wal.synced == wal.lsn
    finally:
        fsync_held.set()
        loop.close()


def test_replicated_answers_once_the_leader_says_it_is_committed(tmp_path):
    """--cluster: every reply (a read's too) waits for the leader's
    committed(): on this node, and acked by the ISR."""
    h, wal = with_binlog(tmp_path, hold=HOLD_ALL)
    loop = asyncio.new_event_loop()
    try:
        srv = Server(loop, h.e, gate=lambda srv: Replicated(srv, wal, True, 0, each_write=False))
        a = conn(h)
        shipped = []
        acked = {"lsn": 0}

        def ship_soon() -> None:  # (None, as the leader's: a compiled gate checks)
            shipped.append(1)
            wal.flush()
        srv.gate.lead(SimpleNamespace(
            committed=lambda: min(acked["lsn"], wal.written), ship=None,
            ship_soon=ship_soon, in_flight=lambda: False))
        assert command(h, srv, a, b"list-tube-used\r\n") == b"USING default\r\n"
        a.transport.t.data.clear()
        assert command(h, srv, a, b"put 0 0 60 1\r\nx\r\n") == b"" and shipped
        assert command(h, srv, a, b"list-tube-used\r\n") == b""  # behind the put
        assert srv.gate.advanced() == 0  # on this node, not acked
        acked["lsn"] = wal.lsn
        assert srv.gate.advanced() == 1
        assert bytes(a.transport.t.data) == b"INSERTED 1\r\nUSING default\r\n"
    finally:
        loop.close()


def test_an_http_action_waits_as_a_reply_does(tmp_path, fsync_held):
    h, wal = with_binlog(tmp_path, hold=HOLD_WRITES)
    loop = asyncio.new_event_loop()
    try:
        srv = Server(loop, h.e, gate=lambda srv: Synced(srv, wal, True, 0))
        srv.syncer.expect = 2  # (as after a group of two: the fsync thread syncs)
        assert command(h, srv, conn(h), b"put 0 0 60 1\r\nx\r\n") == b""
        waiting = loop.create_task(srv.gate.wait(wal.lsn))
        until(loop, lambda: srv.syncer.busy)
        loop.run_until_complete(asyncio.sleep(0.05))
        assert not waiting.done()
        fsync_held.set()
        until(loop, waiting.done)
        assert wal.synced >= wal.lsn
    finally:
        fsync_held.set()
        loop.close()


def test_a_failed_binlog_leaves_nothing_waiting(tmp_path, fsync_held):
    """The server goes on without a binlog that failed (as the reference
    does): what waited for it is answered."""
    h, wal = with_binlog(tmp_path, hold=HOLD_WRITES)
    loop = asyncio.new_event_loop()
    try:
        srv = Server(loop, h.e, gate=lambda srv: Synced(srv, wal, True, 0))
        srv.syncer.wantsync = False  # (no fsync starts: the record stays unsynced)
        a = conn(h)
        assert command(h, srv, a, b"put 0 0 60 1\r\nx\r\n") == b""
        wal.use = False
        srv.syncer.kick()
        assert bytes(a.transport.t.data) == b"INSERTED 1\r\n"
    finally:
        loop.close()

"""-f0 with one writer: the fsync runs on the loop's thread, at once (no
hand-off to the fsync thread and back); a second client writing sends the
syncs back to the thread, where a group gathers (binlog/sync.py)."""
from __future__ import annotations

import asyncio
import os
import time

import pytest

from loadtools import run_load
from fakeclock import OPEN_WALS
from pybeanstalkd.binlog.files import Wal
from pybeanstalkd.binlog.recovery import recover
from pybeanstalkd.binlog.sync import Syncer
from pybeanstalkd.core.engine import Engine


class Gate:
    """What the Syncer asks of the server's reply gate (server/gate.py)."""

    def __init__(self):
        self.held: set = set()
        self.released = []

    def advanced(self) -> int:
        n = len(self.held)
        self.released.append(set(self.held))
        self.held.clear()
        return n

    def binlog_failed(self):
        pass

    def sync_starting(self):
        pass

    def sync_waits(self) -> bool:
        return False

    def flush(self):
        pass


def setup(tmp_path):
    loop = asyncio.new_event_loop()
    wal = Wal(str(tmp_path), 1 << 20, warn=lambda m: None)
    OPEN_WALS.append(wal)
    e = Engine(0, store=wal, log=lambda m: None)
    recover(wal, e.q, e.max_job_size, 0, lambda m: None)
    gate = Gate()
    return loop, wal, e, gate, Syncer(loop, wal, gate, True, 0)


def done(loop, sy):
    loop.remove_reader(sy.rfd)
    os.close(sy.rfd)
    os.close(sy.wfd)  # (its thread waits on its queue for good: a daemon)
    loop.close()


def put(e, s):
    e.data(s, b"put 0 0 60 1\r\nx\r\n", 1)
    s.out.clear()


def test_one_writer_is_synced_inline(tmp_path):
    loop, wal, e, gate, sy = setup(tmp_path)
    a = e.connect()
    for _ in range(3):
        put(e, a)
        gate.held.add(a)
        sy.kick()
        assert sy.busy is None  # (nothing handed to the thread)
        assert wal.synced == wal.written == wal.lsn  # written and synced, here
        assert gate.released[-1] == {a}  # its reply may go
    done(loop, sy)


def test_sync_for_one_writer_syncs_here_and_leaves_the_reply_to_the_gate(tmp_path):
    loop, wal, e, gate, sy = setup(tmp_path)
    a, b = e.connect(), e.connect()
    for _ in range(2):
        put(e, a)
        assert wal.synced < wal.lsn
        assert sy.sync_for(a) is True
        assert wal.synced == wal.written == wal.lsn and sy.busy is None
        assert gate.released == []  # (the gate sends a's reply itself)
        sy.regroup(1, sy.inline_at)
        assert sy.expect == 1
    put(e, b)  # another client, within ALONE_NS of a's sync: not here
    sy.inline_at = time.monotonic_ns() + 10**9  # (however slow this machine is)
    assert sy.sync_for(b) is False and wal.synced < wal.lsn and sy.busy is None
    sy.expect = 2  # (after a group of two: kick gathers or uses the thread)
    sy.inline_for = b
    assert sy.sync_for(b) is False and wal.synced < wal.lsn
    done(loop, sy)


def test_a_second_writer_sends_the_syncs_to_the_thread(tmp_path):
    loop, wal, e, gate, sy = setup(tmp_path)
    a, b = e.connect(), e.connect()
    put(e, a)
    gate.held.add(a)
    sy.kick()
    assert gate.released == [{a}]
    put(e, b)  # another client writes at once: a group may form
    gate.held.add(b)
    sy.kick()
    assert sy.busy is not None and gate.released == [{a}]  # the thread syncs it

    async def synced():
        while sy.busy is not None:
            await asyncio.sleep(0.001)
    loop.run_until_complete(asyncio.wait_for(synced(), 5))
    assert gate.released == [{a}, {b}] and wal.synced == wal.lsn
    done(loop, sy)


def test_two_waiting_are_synced_by_the_thread(tmp_path):
    loop, wal, e, gate, sy = setup(tmp_path)
    a, b = e.connect(), e.connect()
    put(e, a)
    put(e, b)
    gate.held |= {a, b}
    sy.kick()
    assert sy.busy is not None

    async def synced():
        while sy.busy is not None:
            await asyncio.sleep(0.001)
    loop.run_until_complete(asyncio.wait_for(synced(), 5))
    done(loop, sy)


@pytest.mark.parametrize("producers", [1, 64])
def test_kill9_under_f0_loses_no_acknowledged_put(servers, tmp_path, producers):
    """-f0 from 1 producer (each fsync inline) and from 64 (groups on the
    thread): after kill -9, every put that was answered is there."""
    wal = tmp_path / "wal"
    wal.mkdir()
    w = servers("ours", wal, "-f0")
    log = run_load(w, 1.0, producers=producers, deleters=1)
    assert "Traceback" not in w.exited.text, w.exited.text
    assert not log.errors, log.errors[:5]
    assert len(log.put_acked) >= 20
    r = servers("ours", wal, "-f0")
    c = r.client()
    for jid in sorted(set(log.put_acked) - log.delete_sent):
        assert c.peek(jid) == log.put_acked[jid], jid
    for jid in sorted(log.delete_acked):
        assert c.stats_job(jid) is None, jid


@pytest.mark.parametrize("inline", [True, False])
def test_a_failed_fsync_stops_the_binlog_and_unlinks_nothing(tmp_path, monkeypatch, inline):
    """After a failed fsync, what was written before it cannot be called
    safe (the kernel may have dropped it): the binlog stops, with one line,
    and no file is unlinked on the strength of that fsync."""
    import errno

    loop, wal, e, gate, sy = setup(tmp_path)
    warned = []
    wal.warn = warned.append
    a, b = e.connect(), e.connect()
    put(e, a)
    wal.retired.doomed.append((wal.lsn, str(tmp_path / "binlog.1")))  # (a file let go: waits)

    def eio(fd):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(os, "fdatasync", eio)
    monkeypatch.setattr(os, "fsync", eio)
    gate.held.add(a)
    if inline:
        sy.kick()
    else:
        put(e, b)  # (a second writer: the thread syncs)
        sy.inline_at = time.monotonic_ns() + 10**9
        gate.held.add(b)
        sy.kick()

        async def synced():
            while sy.busy is not None:
                await asyncio.sleep(0.001)
        loop.run_until_complete(asyncio.wait_for(synced(), 5))
    assert not wal.use and warned == ["binlog disabled: fsync: [Errno 5] Input/output error;"
                                      " jobs are kept in memory only"]
    assert os.path.exists(tmp_path / "binlog.1") and wal.synced < wal.lsn
    done(loop, sy)


def test_inline_sync_of_the_current_file_alone(tmp_path, monkeypatch):
    """sync_inline's common case (no file retired or created since the last
    sync) fdatasyncs the current file alone; a new file's directory is
    fsynced once, as sync_targets says; nothing unsynced, no call."""
    from pybeanstalkd.binlog.sync import sync_inline

    loop, wal, e, gate, sy = setup(tmp_path)
    calls = []
    real_fdatasync, real_fsync = os.fdatasync, os.fsync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append(("data", fd)), real_fdatasync(fd))[1])
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("full", fd)), real_fsync(fd))[1])
    a = e.connect()
    put(e, a)
    wal.flush()
    first_new = wal.new_files
    sync_inline(wal)
    assert wal.synced == wal.written == wal.lsn
    assert calls[0] == ("data", wal.cur.fd)
    assert calls[1:] == ([("full", wal.dirfd)] if first_new else [])
    for _ in range(2):
        calls.clear()
        put(e, a)
        wal.flush()
        assert not wal.retired.files and not wal.new_files
        sync_inline(wal)
        assert calls == [("data", wal.cur.fd)] and not wal.cur.unsynced
        assert wal.synced == wal.written == wal.lsn
    calls.clear()
    sync_inline(wal)  # (nothing written since)
    assert calls == [] and wal.synced == wal.lsn
    done(loop, sy)


@pytest.mark.parametrize("announce", [True, False])
def test_sync_starting_only_for_a_gate_that_announces(tmp_path, announce):
    """The Syncer tells the gate an fsync starts only if the gate acts on it
    (--cluster -f0 ships its group then); -f0 alone leaves the call out
    (which gates announce: test_gate's test_the_settings_choose_the_gate_once)."""
    loop, wal, e, gate, first = setup(tmp_path)
    loop.remove_reader(first.rfd)  # (setup's own Syncer: not used here)
    os.close(first.rfd)
    os.close(first.wfd)
    started = []
    gate.sync_starting = lambda: started.append(1)
    sy = Syncer(loop, wal, gate, True, 0, announce)
    a = e.connect()
    put(e, a)
    assert sy.sync_for(a) is True and wal.synced == wal.lsn
    assert started == ([1] if announce else [])
    done(loop, sy)

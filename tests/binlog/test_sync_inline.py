"""-f0 with one writer: the fsync runs on the loop's thread, at once (no
hand-off to the fsync thread and back); a second client writing sends the
syncs back to the thread, where a group gathers (binlog/sync.py)."""
from __future__ import annotations

import asyncio

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
    e = Engine(0, store=wal, log=lambda m: None)
    recover(wal, e.q, e.max_job_size, 0, lambda m: None)
    gate = Gate()
    return loop, wal, e, gate, Syncer(loop, wal, gate, True, 0)


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
    loop.close()


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

    async def done():
        while sy.busy is not None:
            await asyncio.sleep(0.001)
    loop.run_until_complete(asyncio.wait_for(done(), 5))
    assert gate.released == [{a}, {b}] and wal.synced == wal.lsn
    loop.close()


def test_two_waiting_are_synced_by_the_thread(tmp_path):
    loop, wal, e, gate, sy = setup(tmp_path)
    a, b = e.connect(), e.connect()
    put(e, a)
    put(e, b)
    gate.held |= {a, b}
    sy.kick()
    assert sy.busy is not None
    loop.close()

"""The binlog's own fixes, driven through the pure engine on a fake clock."""
import asyncio
import errno
import os
import time

import pytest

from fakeclock import Harness, synced, with_binlog
from pybeanstalkd.binlog.recovery import recover

from pybeanstalkd.binlog.files import ZERO_AHEAD, _falloc


def binlogs(path):
    return sorted(p for p in os.listdir(path) if p.startswith("binlog."))


def restart(h, wal, tmp_path, filesize=10485760):
    wal.flush()
    h2, wal2 = with_binlog(tmp_path, filesize)
    return h2, wal2


def test_repeated_delayed_release_does_not_grow_the_log(tmp_path):
    """beanstalkd #622: short records pinned the job's first file forever."""
    h, wal = with_binlog(tmp_path, filesize=4096)
    c = h.conn()
    assert h.send(c, b"put 0 100 60 5\r\nhello\r\n") == b"INSERTED 1\r\n"
    for _ in range(2000):  # 2000 short records: 40 files' worth
        assert h.send(c, b"reserve-job 1\r\n").startswith(b"RESERVED 1 5")
        assert h.send(c, b"release 1 0 100\r\n") == b"RELEASED\r\n"
        wal.flush()
    synced(wal)  # (a file let go is unlinked once an fsync covers its jobs' new records)
    assert len(binlogs(tmp_path)) <= 4
    h2, _ = restart(h, wal, tmp_path, 4096)
    c2 = h2.conn()
    assert b"releases: 2000\n" in h2.send(c2, b"stats-job 1\r\n")


def test_compaction_finds_a_live_job_behind_many_stale_ids(tmp_path):
    """A file's ids are kept stale and all (8 bytes a record): compaction
    walks them from the end, LIVE_SCAN a step, to the one live job left at
    the front, moves it, and the file goes."""
    from pybeanstalkd.binlog.files import LIVE_SCAN

    h, wal = with_binlog(tmp_path, filesize=131072)
    c = h.conn()
    first = wal.cur
    n = 0
    while wal.cur is first:  # fill the first file
        n += 1
        assert h.send(c, b"put 0 0 60 10\r\n%010d\r\n" % n) == b"INSERTED %d\r\n" % n
    assert len(first.ids) > 3 * LIVE_SCAN
    for i in range(2, n + 1):  # all but job 1
        assert h.send(c, b"delete %d\r\n" % i) == b"DELETED\r\n"
    assert first.refs == 1 and "binlog.1" in binlogs(tmp_path)
    dropped = []  # stale ids dropped by each command's compaction
    for i in range(n + 1, 20 * n):  # keep writing: compaction runs
        for cmd in (b"put 0 0 60 10\r\n%010d\r\n" % i, b"delete %d\r\n" % i):
            before = len(first.ids)
            h.send(c, cmd)
            dropped.append(before - len(first.ids))
        synced(wal)
        if "binlog.1" not in binlogs(tmp_path):
            break
    assert "binlog.1" not in binlogs(tmp_path) and wal.nmig >= 1
    steps = [d for d in dropped if d]
    assert len(steps) > 1 and max(steps) == LIVE_SCAN  # in bounded steps
    h2, _ = restart(h, wal, tmp_path, 131072)
    assert h2.send(h2.conn(), b"peek 1\r\n") == b"FOUND 1 10\r\n0000000001\r\n"


def test_buried_order_and_count_survive_restarts(tmp_path):
    """beanstalkd #668: buries grew on every restart and the order changed."""
    h, wal = with_binlog(tmp_path)
    c = h.conn()
    for i in range(1, 5):
        h.send(c, b"put 0 0 60 1\r\n%d\r\n" % i)
    for i in (3, 1, 4, 2):  # bury out of id order
        h.send(c, b"reserve-job %d\r\nbury %d 0\r\n" % (i, i))
    for _ in range(3):
        h, wal = restart(h, wal, tmp_path)
    c = h.conn()
    order = []
    for _ in range(4):
        order.append(h.send(c, b"peek-buried\r\n").split()[1])
        h.send(c, b"kick 1\r\n")
    assert order == [b"3", b"1", b"4", b"2"]
    assert b"buries: 1\n" in h.send(c, b"stats-job 3\r\n")


def filling_disk():
    """A falloc that fails with ENOSPC once `full` (a list) is not empty."""
    full = []

    def falloc(fd, size):
        if full:
            raise OSError(errno.ENOSPC, "No space left on device")
        _falloc(fd, size)
    return full, falloc


def test_out_of_space_loses_nothing(tmp_path):
    """No acknowledged job is lost when the next binlog file cannot be made."""
    full, falloc = filling_disk()
    h, wal = with_binlog(tmp_path, filesize=4096, falloc=falloc)
    c = h.conn()
    n = 0
    while True:
        reply = h.send(c, b"put 0 0 60 50\r\n" + b"x" * 50 + b"\r\n")
        if reply == b"OUT_OF_MEMORY\r\n":
            break
        n += 1
        if n == 20:
            full.append(True)  # the disk fills up from here on
    assert h.send(c, b"peek %d\r\n" % (n + 1)) == b"NOT_FOUND\r\n"  # no half-made job
    # Fill the current file's reserve with buries until updates cannot be logged.
    replies = set()
    for i in range(1, n + 1):
        h.send(c, b"reserve-job %d\r\n" % i)
        replies.add(h.send(c, b"bury %d 0\r\n" % i))
    assert b"INTERNAL_ERROR\r\n" in replies
    st = h.send(c, b"stats\r\n")
    assert b"current-jobs-reserved: " in st
    # Every job is still somewhere: buried, or still reserved by us.
    for i in range(1, n + 1):
        assert h.send(c, b"stats-job %d\r\n" % i).startswith(b"OK ")
    for i in range(1, n + 1):  # and every delete can be logged
        assert h.send(c, b"delete %d\r\n" % i) == b"DELETED\r\n"


def test_release_with_delay_on_full_disk_keeps_the_job(tmp_path):
    full, falloc = filling_disk()
    h, wal = with_binlog(tmp_path, filesize=4096, falloc=falloc)
    c = h.conn()
    h.send(c, b"put 0 0 60 1\r\nx\r\nreserve\r\n")
    full.append(True)  # no next file, and no room left in this one:
    wal.cur.free = 0  # no more space anywhere
    assert h.send(c, b"release 1 0 10\r\n") == b"OUT_OF_MEMORY\r\n"
    assert b"state: reserved\n" in h.send(c, b"stats-job 1\r\n")
    assert h.send(c, b"kick-job 1\r\n") == b"NOT_FOUND\r\n"
    assert h.send(c, b"release 1 0 0\r\n") == b"RELEASED\r\n"  # no record needed


def test_tail_is_synced_by_timer_without_further_writes(tmp_path):
    """-f MS: the last writes of a burst are fsynced within MS, not left behind."""
    from pybeanstalkd.server.gate import Written
    from pybeanstalkd.server.transport import Server

    h, wal = with_binlog(tmp_path)
    c = h.conn()
    h.send(c, b"put 0 0 60 1\r\nx\r\n")
    loop = asyncio.new_event_loop()
    try:
        srv = Server(loop, h.e, gate=lambda srv: Written(srv, wal, wantsync=True, rate_ns=50_000_000))
        syncer = srv.syncer
        syncer.last = time.monotonic_ns()  # as if a sync had just run: the next waits
        srv.flush()
        assert wal.written == wal.lsn > wal.synced  # written, not yet synced
        loop.run_until_complete(asyncio.sleep(0.2))
        assert wal.synced == wal.written
    finally:
        loop.close()


@pytest.mark.parametrize("records", [1, 50])
def test_file_field_and_stats(tmp_path, records):
    h, wal = with_binlog(tmp_path, filesize=4096)
    c = h.conn()
    for _ in range(records):
        h.send(c, b"put 0 0 60 100\r\n" + b"y" * 100 + b"\r\n")
    st = h.send(c, b"stats\r\n")
    cur = wal.cur.seq
    assert b"binlog-current-index: %d\n" % cur in st
    assert b"binlog-records-written: %d\n" % wal.nrec in st
    assert b"file: %d\n" % cur in h.send(c, b"stats-job %d\r\n" % records)


def test_group_commit_answers_a_client_that_half_closed(tmp_path):
    """-f0 holds a put's reply until its fsync; a client that already shut
    down its sending side must still get it (and the rest it pipelined)."""
    import socket

    from support import Server, ours_argv

    srv = Server(ours_argv(), extra=["-b", str(tmp_path), "-f0"])
    try:
        for _ in range(10):
            s = srv.connect()
            s.sendall(b"put 0 0 60 1\r\nx\r\nlist-tube-used\r\n")
            s.shutdown(socket.SHUT_WR)
            out = b""
            while chunk := s.recv(100):
                out += chunk
            s.close()
            assert out.startswith(b"INSERTED ") and out.endswith(b"USING default\r\n"), out
    finally:
        srv.stop()


@pytest.mark.parametrize("name", [b"default", b"t", b"x" * 200])
def test_fresh_record_bytes_match_the_format(name):
    # encode packs a never-reserved ready job with its zero fields left out;
    # the bytes must be the version-7 record all the same.
    from binlogtools import full_record
    from pybeanstalkd.binlog import format as walfile
    from pybeanstalkd.core.job import READY, Job, Tube

    wall = 1_700_000_000 * 10**9
    j = Job(42, Tube(name), 7, 0, 60 * 10**9, b"hello\r\n", 123)
    j.state = READY
    got = walfile.encode(j, True, wall)
    want = bytearray(full_record(7, name.decode(), b"hello", id=42, pri=7, ttr=60 * 10**9,
                                 created_at=123 + wall))
    want[-7 - 3:-7] = walfile.MARK
    assert got == bytes(want)
    j.counts = 1  # reserved once: the general path, which writes the counter
    want[4 + len(name) + 56:4 + len(name) + 60] = (1).to_bytes(4, "little")
    assert walfile.encode(j, True, wall) == bytes(want)


@pytest.mark.parametrize("state", [0, 2, 3, 4])
def test_record_fields_in_every_state(state):
    # Counters (each a uint32, the largest too), deadline and bury position
    # land where the version-7 Jobrec has them, in short and full records.
    from binlogtools import JOBREC7
    from pybeanstalkd.binlog import format as walfile
    from pybeanstalkd.core.job import Job, Tube, pack_counters

    wall = 1_700_000_000 * 10**9
    j = Job(2**63 + 5, Tube(b"tube"), 2**32 - 1, 3 * 10**9, 60 * 10**9, b"ab\r\n", 1000)
    j.state = state
    j.counts = pack_counters(1, 2, 3, 2**32 - 1, 5)
    j.deadline = (7 << 32 | 1234) if state == 3 else 5000
    deadline = 5000 + wall if state in (2, 4) else 0
    want = JOBREC7.pack(2**63 + 5, 2**32 - 1, 3 * 10**9, 60 * 10**9, 4, 1000 + wall, deadline,
                        1, 2, 3, 2**32 - 1, 5, state)
    short = walfile.encode(j, False, wall)
    assert short[:4] == b"\0\0\0\0" and len(short) == walfile.SHORT_SIZE
    rec = short[4:]
    if state == 3:  # the bury position, in the two padding words
        assert rec[12:16] == (1234).to_bytes(4, "little") and rec[36:40] == (7).to_bytes(4, "little")
        rec = rec[:12] + bytes(4) + rec[16:36] + bytes(4) + rec[40:]
    assert rec[:77] == want[:77] and rec[77:] == walfile.MARK
    full = walfile.encode(j, True, wall)
    assert full[:8] == b"\4\0\0\0tube" and full[8:88] == short[4:] and full[88:] == b"ab\r\n"


def test_zeros_are_written_ahead_of_the_records_within_the_file(tmp_path):
    """posix_fallocate's unwritten extents make every fdatasync commit the
    filesystem's journal too; the records go where zeros were written
    before. Without preallocation here, the zeros show in the file's size."""
    filesize = 4 * ZERO_AHEAD
    h, wal = with_binlog(tmp_path, filesize=filesize, falloc=lambda fd, size: None,
                         zero_ahead=True)  # (-f0)
    c = h.conn()
    path = os.path.join(tmp_path, binlogs(tmp_path)[-1])
    size = lambda: os.stat(path).st_size  # noqa: E731
    assert size() == 4  # the version: nothing flushed yet
    assert h.send(c, b"put 0 0 60 5\r\nhello\r\n") == b"INSERTED 1\r\n"
    wal.flush()
    end = wal.used(wal.cur)
    assert size() == end + ZERO_AHEAD
    with open(path, "rb") as f:
        data = f.read()
    assert data[end:] == bytes(len(data) - end) and data[end - 7:end] == b"hello\r\n"
    body = b"x" * 1000
    for i in range(2, 3 * ZERO_AHEAD // 1100):
        assert h.send(c, b"put 0 0 60 1000\r\n%s\r\n" % body) == b"INSERTED %d\r\n" % i
        wal.flush()
        # at least half of ZERO_AHEAD ahead, and never past the file's size
        assert min(wal.used(wal.cur) + ZERO_AHEAD // 2, filesize) <= size() <= filesize
    assert size() == filesize
    # The records read back, none lost among the zeros.
    h2, _ = restart(h, wal, tmp_path, filesize)
    assert b"current-jobs-ready: %d\n" % (i) in h2.send(h2.conn(), b"stats\r\n")


@pytest.mark.parametrize("flags, ahead", [(["-f0"], True), (["-f", "50"], False), (["-F"], False)])
def test_zeros_ahead_with_f0_only(tmp_path, flags, ahead):
    """-f0 fsyncs back to back; with -f MS (one journal commit per MS) or -F
    the zeros would only double what is written. The server's settings
    choose it when the binlog is opened."""
    from pybeanstalkd.cli import parse_args
    from pybeanstalkd.server.loop import lock_binlog

    wal = lock_binlog(parse_args(["-b", str(tmp_path), *flags]), None)
    wal.falloc = lambda fd, size: None  # (no preallocation: the zeros show in the size)
    h = Harness(store=wal)
    recover(wal, h.e.q, h.e.max_job_size, h.now, lambda m: None)
    assert h.send(h.conn(), b"put 0 0 60 5\r\nhello\r\n") == b"INSERTED 1\r\n"
    wal.flush()
    size = os.stat(os.path.join(tmp_path, binlogs(tmp_path)[-1])).st_size
    assert size == wal.used(wal.cur) + (ZERO_AHEAD if ahead else 0)

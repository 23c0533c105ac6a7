"""--bodies-on-disk on the pure engine (binlog/bodies.py): a body leaves RAM
once its record is written, comes back for reserve and peek, follows its job
through compaction, is not loaded by recovery, and a body that cannot be
read answers INTERNAL_ERROR without losing the job."""
from __future__ import annotations

import os

import pytest

from fakeclock import OPEN_WALS, synced, with_binlog
from pybeanstalkd.binlog.bodies import IN_RAM, DiskBodies
from pybeanstalkd.binlog.files import Wal
from pybeanstalkd.binlog.recovery import recover
from pybeanstalkd.cluster.apply import snapshot_parts
from pybeanstalkd.core import admin
from pybeanstalkd.core.job import BURIED, READY, OnDisk
from pybeanstalkd.ops import api
from fakeclock import Harness


def put(h, c, body: bytes, pri=0) -> int:
    r = h.send(c, b"put %d 0 60 %d\r\n%s\r\n" % (pri, len(body), body))
    assert r.startswith(b"INSERTED "), r
    return int(r.split()[1])


def stats(h, c) -> dict:
    text = h.send(c, b"stats\r\n").split(b"\r\n", 1)[1]
    return dict(line.split(b": ", 1) for line in text.splitlines()[1:] if b": " in line)


def restart(h, wal, tmp_path, ram_min=0, filesize=10485760, warn=lambda m: None, **kw):
    wal.flush()
    return with_binlog(tmp_path, filesize, ram_min=ram_min, warn=warn, **kw)


def test_a_body_leaves_ram_once_its_record_is_written(tmp_path):
    h, wal = with_binlog(tmp_path, ram_min=0)
    c = h.conn()
    put(h, c, b"hello")
    j = h.e.q.jobs[1]
    assert j.body == b"hello\r\n"  # (its record is still in the write buffer)
    wal.flush()
    assert type(j.body) is OnDisk and len(j.body) == 7
    assert h.send(c, b"peek 1\r\n") == b"FOUND 1 5\r\nhello\r\n"
    assert h.send(c, b"reserve\r\n") == b"RESERVED 1 5\r\nhello\r\n"
    st = stats(h, c)
    assert (st[b"body-bytes-on-disk"], st[b"body-bytes-in-ram"]) == (b"7", b"0")
    assert h.send(c, b"delete 1\r\n") == b"DELETED\r\n"
    assert wal.on_disk == 0


def test_bodies_under_the_minimum_stay_in_ram(tmp_path):
    h, wal = with_binlog(tmp_path, ram_min=102)  # (--body-ram-min 100)
    c = h.conn()
    put(h, c, b"s" * 99)
    put(h, c, b"b" * 100)
    wal.flush()
    assert type(h.e.q.jobs[1].body) is bytes
    assert type(h.e.q.jobs[2].body) is OnDisk
    st = stats(h, c)
    assert (st[b"body-bytes-on-disk"], st[b"body-bytes-in-ram"]) == (b"102", b"101")


def test_stats_keys_only_with_the_flag(tmp_path):
    h, _ = with_binlog(tmp_path)
    c = h.conn()
    assert b"body-bytes-on-disk" not in h.send(c, b"stats\r\n")


def test_a_job_put_and_deleted_before_the_write_stays_out_of_the_count(tmp_path):
    h, wal = with_binlog(tmp_path, ram_min=0)
    c = h.conn()
    assert h.send(c, b"put 0 0 60 1\r\nx\r\ndelete 1\r\n") == b"INSERTED 1\r\nDELETED\r\n"
    wal.flush()
    assert wal.on_disk == 0 and not wal.bodies.unwritten


def test_a_job_moved_twice_is_read_from_its_last_place(tmp_path):
    """Compaction moves the job's record (and body) into the current file;
    the old files go. Each move reads the body back first."""
    h, wal = with_binlog(tmp_path, filesize=8192, ram_min=0)
    c = h.conn()
    body = bytes(range(256)) * 2
    put(h, c, body, pri=5)
    wal.flush()
    target = h.e.q.jobs[1]
    places = [target.file.seq]
    filler = b"f" * 600
    for _ in range(400):
        i = put(h, c, filler, pri=9)
        assert h.send(c, b"delete %d\r\n" % i) == b"DELETED\r\n"
        synced(wal)
        if target.file.seq != places[-1]:
            places.append(target.file.seq)
            if len(places) == 3:
                break
    assert len(places) == 3, places  # moved twice
    assert type(target.body) is OnDisk
    assert min(int(n.split(".")[1]) for n in os.listdir(tmp_path) if n.startswith("binlog.")) \
        == places[-1]  # (the files it was in are gone)
    assert h.send(c, b"reserve\r\n") == b"RESERVED 1 512\r\n" + body + b"\r\n"
    assert h.send(c, b"release 1 5 0\r\n") == b"RELEASED\r\n"
    h2, wal2 = restart(h, wal, tmp_path, filesize=8192)
    c2 = h2.conn()
    assert h2.send(c2, b"peek 1\r\n") == b"FOUND 1 512\r\n" + body + b"\r\n"


def test_recovery_loads_no_body(tmp_path):
    h, wal = with_binlog(tmp_path)  # written without the flag
    c = h.conn()
    bodies = {put(h, c, b"job-%d-" % i + b"z" * i): b"job-%d-" % i + b"z" * i
              for i in range(50)}
    h.send(c, b"reserve\r\n")
    assert h.send(c, b"bury 1 0\r\n") == b"BURIED\r\n"
    h2, wal2 = restart(h, wal, tmp_path, ram_min=0)
    q = h2.e.q
    assert all(type(j.body) is OnDisk for j in q.jobs.values())
    assert wal2.on_disk == sum(len(b) + 2 for b in bodies.values())
    assert q.memory_used() == 50 * 400  # (JOB_OVERHEAD each, no body bytes)
    c2 = h2.conn()
    for i, b in bodies.items():
        assert h2.send(c2, b"peek %d\r\n" % i) == b"FOUND %d %d\r\n%s\r\n" % (i, len(b), b)
    assert q.jobs[1].state == BURIED


def test_a_truncated_file_answers_internal_error_and_buries(tmp_path):
    warned = []
    h, wal = with_binlog(tmp_path, ram_min=0, warn=warned.append)
    c = h.conn()
    put(h, c, b"a" * 100, pri=5)  # the first record of the file
    put(h, c, b"b" * 100, pri=1)  # the second: reserved first, then cut off
    wal.flush()
    second = h.e.q.jobs[2]
    path = second.file.path
    pos = second.body.offset
    os.truncate(path, pos + 50)
    assert h.send(c, b"peek 2\r\n") == b"INTERNAL_ERROR\r\n"
    assert h.e.q.jobs[2].state == READY  # (a peek changes nothing)
    assert h.send(c, b"reserve-with-timeout 0\r\n") == b"INTERNAL_ERROR\r\n"
    assert h.e.q.jobs[2].state == BURIED  # kept, out of the way
    assert h.send(c, b"reserve-with-timeout 0\r\n") == b"RESERVED 1 100\r\n" + b"a" * 100 + b"\r\n"
    assert warned == [f"{path}:{pos}: job 2: its body could not be read: only 50 of its 102"
                      " bytes: the file is cut short"]  # (once per body)
    assert wal.bodies.errors == 2


def test_a_reserve_batch_leaves_out_a_body_it_cannot_read(tmp_path):
    h, wal = with_binlog(tmp_path, ram_min=0, extensions=True)
    c = h.conn()
    for pri, ch in ((1, b"a"), (2, b"b"), (3, b"c")):
        put(h, c, ch * 10, pri=pri)
    wal.flush()
    j = h.e.q.jobs[2]
    with open(j.file.path, "r+b") as f:  # its CRLF damaged in place
        f.seek(j.body.offset + 10)
        f.write(b"!!")
    out = h.send(c, b"reserve-batch 3\r\n")
    assert out == (b"RESERVED_BATCH 2\r\nRESERVED 1 10\r\n" + b"a" * 10 + b"\r\n"
                   b"RESERVED 3 10\r\n" + b"c" * 10 + b"\r\n")
    assert h.e.q.jobs[2].state == BURIED


def test_the_memory_cap_counts_only_bodies_in_ram(tmp_path):
    cap = 1 << 20
    body = b"x" * 8192
    counts = {}
    for ram_min in (None, 0):
        d = tmp_path / str(ram_min)
        d.mkdir()
        h, wal = with_binlog(d, ram_min=ram_min, max_memory=cap)
        c = h.conn()
        n = 0
        while n < 5000:
            r = h.send(c, b"put 0 0 60 8192\r\n" + body + b"\r\n")
            wal.flush()  # (as the server does after each read)
            if r != b"INSERTED %d\r\n" % (n + 1):
                assert r == b"OUT_OF_MEMORY\r\n"
                break
            n += 1
        counts[ram_min] = n
    assert counts[None] == cap // (8194 + 400)  # 122: the bodies fill it
    # only each job's own cost, and the body of the put being admitted
    assert counts[0] == (cap - 8194 - 400) // 400 + 1  # 2,600


def test_compaction_waits_on_a_body_it_cannot_read(tmp_path):
    """A live job in the oldest file whose body is gone cannot be moved (its
    record needs its bytes), and files go in order: compaction waits for
    the job's delete, says so once, and reads the body no more; once the
    job is deleted the binlog shrinks again."""
    warned = []
    h, wal = with_binlog(tmp_path, filesize=8192, ram_min=0, warn=warned.append)
    c = h.conn()
    put(h, c, b"k" * 300, pri=5)
    wal.flush()
    kept = h.e.q.jobs[1]
    first = kept.file.path
    os.truncate(first, kept.body.offset + 10)

    def churn(n):
        for _ in range(n):
            i = put(h, c, b"f" * 600, pri=9)
            h.send(c, b"delete %d\r\n" % i)
            synced(wal)

    churn(60)  # enough for compaction to want the first file
    assert kept.file.seq == 1 and os.path.exists(kept.file.path)
    assert len(warned) == 2 and "job 1: its body could not be read" in warned[0]
    assert "compaction waits until job 1 is deleted" in warned[1]
    assert wal.bodies.errors == 1  # (not read again at each write)
    assert h.send(c, b"stats-job 1\r\n").startswith(b"OK ")
    assert h.send(c, b"delete 1\r\n") == b"DELETED\r\n"
    churn(60)
    assert not os.path.exists(first)
    assert len([n for n in os.listdir(tmp_path) if n.startswith("binlog.")]) <= 4


def test_verbose_sessions_log_the_job_sent(tmp_path):
    logged = []
    h, wal = with_binlog(tmp_path, ram_min=0, verbose=2)
    h.e.log = logged.append
    c = h.conn()
    put(h, c, b"abc")
    wal.flush()
    assert h.send(c, b"reserve\r\n") == b"RESERVED 1 3\r\nabc\r\n"
    assert ">%d reply RESERVED 1 3" % c.fd in logged


def test_what_reads_a_body_outside_the_protocol(tmp_path):
    """A move (HTTP, admin), the HTTP job preview and a cluster snapshot
    read bodies back too."""
    h, wal = with_binlog(tmp_path, ram_min=0)
    c = h.conn()
    put(h, c, b"first")
    put(h, c, b"second")
    wal.flush()
    q = h.e.q
    assert api.job(q.jobs[1], h.now, (), q.store)["preview"]["text"] == "first"
    records = b"".join(snapshot_parts(q, wal.wall_offset))
    assert b"first\r\n" in records and b"second\r\n" in records
    gen = admin.move(h.e, q.tubes.named[b"default"], b"other", READY, 10, h.now)
    try:
        while True:
            next(gen)
    except StopIteration as e:
        assert e.value == (2, admin.DONE)
    wal.flush()
    t = q.tubes.named[b"other"]
    assert [q.store.body(q.jobs[i]) for i in sorted(q.jobs)] == [b"first\r\n", b"second\r\n"]
    assert all(j.tube is t for j in q.jobs.values())


def test_a_plain_binlog_is_untouched(tmp_path):
    """Without the flag the binlog's bodies' policy is the null one:
    bodies stay bytes."""
    h, wal = with_binlog(tmp_path)
    assert wal.bodies is IN_RAM
    c = h.conn()
    put(h, c, b"x" * 5000)
    wal.flush()
    assert type(h.e.q.jobs[1].body) is bytes and wal.on_disk == 0


def test_bodies_on_disk_recover_in_place(tmp_path):
    """recover() on a Wal with the on-disk bodies' policy built by hand, as
    the server does."""
    h, wal = with_binlog(tmp_path)
    put(h, h.conn(), b"y" * 2000)
    wal.flush()
    d = str(tmp_path / "")
    w = Wal(d, 10485760, warn=lambda m: None, bodies=DiskBodies(d, 1024, lambda m: None))
    OPEN_WALS.append(w)
    h2 = Harness(store=w, bodies_on_disk=True)
    recover(w, h2.e.q, h2.e.max_job_size, h2.now, lambda m: None)
    j = h2.e.q.jobs[1]
    assert type(j.body) is OnDisk and w.body(j) == b"y" * 2000 + b"\r\n"


def test_one_binlog_class_with_a_bodies_policy(tmp_path):
    """With the flag or without, the binlog is a Wal; what differs is the
    bodies' policy it owns, which owns what it counts."""
    for ram_min in (None, 4):
        (tmp_path / str(ram_min)).mkdir()
        h, wal = with_binlog(tmp_path / str(ram_min), ram_min=ram_min)
        c = h.conn()
        put(h, c, b"x" * 10)
        wal.flush()
        assert type(wal) is Wal
        assert isinstance(wal.bodies, DiskBodies) is (ram_min is not None)
        assert wal.on_disk == wal.bodies.on_disk == (12 if ram_min else 0)
        with pytest.raises(AttributeError):  # (the policy's count, read through)
            wal.on_disk = 0
        h.send(c, b"reserve\r\ndelete 1\r\n")
        assert wal.on_disk == 0


def _flip(j, at: int = 100) -> None:
    """Change one byte of j's body where its file holds it."""
    path = j.file.path
    pos = (j.body >> 32 & 0xFFFFFFFF) + at  # (j.body.offset)
    os.chmod(path, 0o600)
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)
        f.seek(pos)
        f.write(bytes([byte[0] ^ 0x20]))


def test_a_body_changed_on_disk_is_not_served_as_the_job(tmp_path):
    """A body whose bytes changed in its file (bit rot, a stray write)
    fails its CRC-32: INTERNAL_ERROR, never the changed bytes; a reserve
    buries the job, as for a body that cannot be read; counted apart."""
    warned = []
    h, wal = with_binlog(tmp_path, ram_min=0, warn=warned.append)
    c = h.conn()
    body = bytes(range(256)) * 16  # 4 KiB
    jid = put(h, c, body, pri=1)
    other = put(h, c, b"o" * 4096, pri=2)
    wal.flush()
    _flip(h.e.q.jobs[jid])
    assert h.send(c, b"peek-ready\r\n") == b"INTERNAL_ERROR\r\n"
    assert h.e.q.jobs[jid].state == READY  # (a peek changes nothing)
    assert h.send(c, b"reserve-with-timeout 0\r\n") == b"INTERNAL_ERROR\r\n"
    assert h.e.q.jobs[jid].state == BURIED  # kept for an operator, out of the way
    assert h.send(c, b"reserve-with-timeout 0\r\n") == b"RESERVED %d 4096\r\n%s\r\n" % (other, b"o" * 4096)
    assert (wal.bodies.mismatches, wal.bodies.errors) == (2, 2)
    assert sum("CRC-32 mismatch" in w and "job %d" % jid in w for w in warned) == 1
    # Its record carries the CRC: after a restart the changed bytes are
    # still found out, and the job is still there (buried).
    h2, wal2 = restart(h, wal, tmp_path)
    c2 = h2.conn()
    assert h2.send(c2, b"peek %d\r\n" % jid) == b"INTERNAL_ERROR\r\n"
    assert h2.e.q.jobs[jid].state == BURIED
    assert wal2.bodies.mismatches == 1


def test_a_body_from_a_record_without_its_crc_is_checked_from_the_start(tmp_path):
    """A record the reference wrote (or a binlog without --bodies-on-disk)
    carries no CRC: the one reckoned at recovery, from the bytes read then,
    still finds out a later change."""
    h, wal = with_binlog(tmp_path)  # a plain binlog: every body in RAM
    c = h.conn()
    jid = put(h, c, b"p" * 3000)
    h2, wal2 = restart(h, wal, tmp_path, ram_min=0)
    assert type(h2.e.q.jobs[jid].body) is OnDisk
    c2 = h2.conn()
    assert h2.send(c2, b"peek %d\r\n" % jid) == b"FOUND %d 3000\r\n%s\r\n" % (jid, b"p" * 3000)
    _flip(h2.e.q.jobs[jid], 2999)
    assert h2.send(c2, b"peek %d\r\n" % jid) == b"INTERNAL_ERROR\r\n"
    assert wal2.bodies.mismatches == 1

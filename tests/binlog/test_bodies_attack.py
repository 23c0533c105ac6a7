"""--bodies-on-disk under attack: unreadable bodies met by a peek, by a
cluster snapshot and by compaction; a binlog that failed; and a
differential run against a plain binlog, through restarts and damaged
files, that must answer and store the same."""
from __future__ import annotations

import os
import random

from fakeclock import synced, with_binlog
from pybeanstalkd.binlog import format as F
from pybeanstalkd.cluster.apply import Restore, snapshot_parts
from pybeanstalkd.core.job import BURIED, RESERVED, OnDisk


def put(h, c, body: bytes, pri=0) -> int:
    r = h.send(c, b"put %d 0 60 %d\r\n%s\r\n" % (pri, len(body), body))
    assert r.startswith(b"INSERTED "), r
    return int(r.split()[1])


def damage_crlf(j):
    with open(j.file.path, "r+b") as f:
        f.seek(j.body.offset + len(j.body) - 2)
        f.write(b"!!")


def test_a_peek_by_the_owner_does_not_bury_its_reserved_job(tmp_path):
    """Only a reserve buries a job whose body cannot be read: a worker that
    peeks at the job it holds gets INTERNAL_ERROR and keeps it."""
    h, wal = with_binlog(tmp_path, ram_min=0)
    c = h.conn()
    put(h, c, b"hello")
    wal.flush()
    assert h.send(c, b"reserve\r\n") == b"RESERVED 1 5\r\nhello\r\n"
    damage_crlf(h.e.q.jobs[1])
    assert h.send(c, b"peek 1\r\n") == b"INTERNAL_ERROR\r\n"
    assert h.e.q.jobs[1].state == RESERVED  # (a peek changes nothing)
    assert h.send(c, b"release 1 0 0\r\n") == b"RELEASED\r\n"


def test_on_disk_is_kept_when_the_binlog_is_disabled(tmp_path):
    """Once a write fails (Wal.fail: the binlog out of use), a delete still
    takes its body off on_disk: body-bytes-in-ram and --max-memory's count
    stay true."""
    h, wal = with_binlog(tmp_path, ram_min=0)
    c = h.conn()
    for _ in range(3):
        put(h, c, b"x" * 1000)
    wal.flush()
    assert wal.on_disk == 3 * 1002
    # the next write fails (as on EIO / ENOSPC): cur's fd made read-only
    ro = os.open(wal.cur.path, os.O_RDONLY)
    os.dup2(ro, wal.cur.fd)
    os.close(ro)
    put(h, c, b"y")
    wal.flush()
    assert not wal.use
    for i in (1, 2, 3, 4):
        assert h.send(c, b"delete %d\r\n" % i) == b"DELETED\r\n"
    assert h.e.q.body_bytes == 0
    assert wal.on_disk == 0, wal.on_disk
    assert h.e.q.memory_used() >= 0


def test_a_snapshot_does_not_make_a_follower_delete_a_job_it_holds(tmp_path):
    """A job whose body the leader cannot read goes into a snapshot as a
    short record: the follower, whose snapshot's end deletes every job no
    record named, keeps its good copy."""
    (tmp_path / "l").mkdir()
    (tmp_path / "f").mkdir()
    h, wal = with_binlog(tmp_path / "l", ram_min=0)
    fh, fwal = with_binlog(tmp_path / "f", ram_min=0)
    c = h.conn()
    put(h, c, b"hello")
    put(h, c, b"world")
    wal.flush()

    def resync(key):
        r = Restore(key)
        for part in snapshot_parts(h.e.q, wal.wall_offset):
            r.part(fh.e.q, part, fwal.wall_offset, fh.now, 65535)
        r.end(fh.e.q, fh.now)
        fwal.flush()

    resync(1)
    assert sorted(fh.e.q.jobs) == [1, 2]
    damage_crlf(h.e.q.jobs[1])
    resync(2)
    assert 1 in h.e.q.jobs
    assert sorted(fh.e.q.jobs) == [1, 2]
    assert fwal.body(fh.e.q.jobs[1]) == b"hello\r\n"


def _cut_short_then_churn(tmp_path, n):
    h, wal = with_binlog(tmp_path, filesize=8192, ram_min=0)
    c = h.conn()
    put(h, c, b"k" * 300, pri=5)
    wal.flush()
    kept = h.e.q.jobs[1]
    os.truncate(kept.file.path, kept.body.offset + 10)
    assert h.send(c, b"reserve-with-timeout 0\r\n") == b"INTERNAL_ERROR\r\n"
    assert kept.state == BURIED
    errors = wal.bodies.errors
    for _ in range(n):
        i = put(h, c, b"f" * 600, pri=9)
        h.send(c, b"delete %d\r\n" % i)
        wal.flush()
    synced(wal)  # (a file let go would be unlinked here)
    return h, wal, c, errors


def _nfiles(d):
    return len([n for n in os.listdir(d) if n.startswith("binlog.")])


def test_compaction_does_not_read_a_body_it_could_not_read_on_every_write(tmp_path):
    """Compaction does not read a body it could not read again at every
    write: its errors (pybeanstalkd_body_read_errors) counts reads that
    failed, not compaction's attempts."""
    h, wal, c, errors = _cut_short_then_churn(tmp_path, 600)
    assert wal.bodies.errors - errors < 10, wal.bodies.errors - errors


def test_the_binlog_shrinks_once_the_unreadable_job_is_deleted(tmp_path):
    """While a job whose body cannot be read is in the oldest file,
    compaction cannot move it and no file is unlinked (files go in order):
    the directory grows, and the warning says to delete the job. Once it
    is deleted, the binlog shrinks back."""
    h, wal, c, _ = _cut_short_then_churn(tmp_path, 600)
    assert _nfiles(tmp_path) > 40  # (grown: nothing was collected)
    assert h.send(c, b"delete 1\r\n") == b"DELETED\r\n"
    for _ in range(200):
        i = put(h, c, b"f" * 600, pri=9)
        h.send(c, b"delete %d\r\n" % i)
        wal.flush()
    synced(wal)  # (a file let go is unlinked once an fsync covers its jobs' new records)
    assert _nfiles(tmp_path) < 10
    assert wal.on_disk == 0


# -- a differential run against a plain binlog ------------------------------

class _Clock:
    """Wall time that follows the harnesses' fake clock, so that the two
    binlogs hold the same bytes and restarts keep delays' order."""
    ORIGIN = 1_000_000 * 10**9

    def __init__(self):
        self.elapsed = 0

    def time_ns(self):
        return 1_700_000_000 * 10**9 + self.elapsed


def _check(hd, wd, hp):
    q, qp = hd.e.q, hp.e.q
    on_disk = 0
    for j in list(q.jobs.values()):
        if type(j.body) is OnDisk:
            on_disk += len(j.body)
            assert os.path.exists(j.file.path)
        jp = qp.jobs[j.id]
        assert (wd.body(j), j.state) == (jp.body, jp.state), j.id
    assert wd.on_disk == on_disk
    assert q.job_count() == qp.job_count() and q.body_bytes == qp.body_bytes


def _records(path):
    """A file's records, a body's CRC-32 left out (a plain binlog's record
    has zeros where a --bodies-on-disk server's carries it, and a buried
    job's bury position in the pads, where the other has it as a deadline)."""
    data = open(path, "rb").read()
    out = []
    for r in F.read_records(data, F.VERSION, 1 << 20, str(path), print, [0, True]):
        off, name, body = r.offset, r.name, r.body
        f = (r.id, r.pri, r.pad1, r.delay, r.ttr, r.size, r.pad2, r.created, r.deadline,
             r.counts, r.state, r.mark)
        if f[11] == F.MARK_CRC:
            f = f[:2] + (0,) + f[3:11] + (F.MARK,)
        elif f[11] == F.MARK_BURIED_CRC:
            pos = f[8]
            f = f[:2] + (pos & 0xFFFFFFFF,) + f[3:6] + (pos >> 32, f[7], 0) + f[9:11] + (F.MARK,)
        out.append((off, name, f, body))
    return data[:4], out


def _in_a_checked_record(path, at) -> bool:
    """Is byte `at` of the file in a full record that carries its body's
    CRC-32 (its pads or its bytes)? Changed there, the two binlogs answer
    differently by design: INTERNAL_ERROR at run time, and at a restart
    the record counts as a short one, against the changed bytes served."""
    data = open(path, "rb").read()
    for r in F.read_records(data, F.VERSION, 1 << 20, str(path), lambda m: None, [0, True]):
        if r.name and r.mark in (F.MARK_CRC, F.MARK_BURIED_CRC):
            if r.offset <= at < r.offset + F.full_size(r.name, r.size):
                return True
    return False


def test_the_same_as_a_plain_binlog_through_restarts_and_damage(tmp_path):
    """Random commands, flushes, restarts and the same bytes damaged in both
    directories: the same replies, bodies and states as a plain binlog; the
    files the same records; on_disk the sum of the OnDisk bodies. (A body
    left on disk and changed there is no longer served: damage goes
    elsewhere here, and test_a_body_changed_on_disk_* covers it.)"""
    clock = _Clock()
    for seed in range(6):
        rnd = random.Random(seed)
        dd, dp = tmp_path / f"d{seed}", tmp_path / f"p{seed}"
        dd.mkdir()
        dp.mkdir()
        ram_min, fs, ext = rnd.choice((0, 50)), rnd.choice((4096, 8192)), seed % 2 == 1
        clock.elapsed = 0

        def both(dd=dd, dp=dp, fs=fs, ram_min=ram_min, ext=ext):
            hd, wd = with_binlog(dd, filesize=fs, ram_min=ram_min, extensions=ext, wall=clock)
            hp, wp = with_binlog(dp, filesize=fs, extensions=ext, wall=clock)
            return hd, wd, hp, wp, [(hd.conn(), hp.conn()) for _ in range(2)]

        hd, wd, hp, wp, conns = both()
        ids = [1]
        for _ in range(800):
            cd, cp = rnd.choice(conns)
            op, jid = rnd.random(), rnd.choice(ids)
            if op < 0.3:
                size = rnd.choice((0, 1, 48, 200, 1500))
                tags = b" grp:g aft:h" if ext and rnd.random() < 0.2 else b""
                cmd = b"put %d %d 2 %d%s\r\n%s\r\n" % (rnd.randrange(3), rnd.choice((0, 0, 1)),
                                                       size, tags, rnd.randbytes(size))
            elif op < 0.85:
                cmd = rnd.choice((b"reserve-with-timeout 0", b"delete %d" % jid,
                                  b"release %d 1 %d" % (jid, rnd.choice((0, 1))),
                                  b"bury %d 0" % jid, b"kick 2", b"peek %d" % jid,
                                  b"reserve-job %d" % jid, b"touch %d" % jid)
                                 + ((b"reserve-batch 3", b"delete-batch %d %d" % (jid, jid + 1),
                                     b"peek-reserved") if ext else ())) + b"\r\n"
            elif op < 0.9:
                hd.advance(1)
                hp.advance(1)
                continue
            else:
                wd.flush()
                wp.flush()
                if op > 0.97:  # the same bytes damaged in both, then a restart
                    names = sorted(n for n in os.listdir(dd) if n.startswith("binlog."))
                    name = rnd.choice(names)
                    at = rnd.randrange(4, max(5, os.path.getsize(dd / name)))
                    assert _records(dd / name) == _records(dp / name)
                    for d in (dd, dp) if not _in_a_checked_record(dd / name, at) else ():
                        os.chmod(d / name, 0o600)
                        with open(d / name, "r+b") as f:
                            f.seek(at)
                            f.write(b"\xff\x00")
                if op > 0.95:
                    clock.elapsed += hd.now - _Clock.ORIGIN
                    hd, wd, hp, wp, conns = both()
                _check(hd, wd, hp)
                continue
            got = hd.send(cd, cmd)
            assert got == hp.send(cp, cmd), (seed, cmd)
            ids += [int(w.split()[1]) for w in got.split(b"\r\n") if w.startswith(b"INSERTED")]
            if rnd.random() < 0.6:
                wd.flush()
                wp.flush()
            _check(hd, wd, hp)

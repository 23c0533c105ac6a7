"""A binlog file is unlinked only once the records that replace its jobs are
safe: compaction rewrites a job from the oldest file into the current one,
and the oldest goes once no job's latest full record is in it. If it went
while the rewrite was still in the write buffer (a kill -9 then loses the
job) or written but not fsynced (a power loss does), an acknowledged job
would be gone.

The engine runs on a fake clock with files of 8 KiB, so that compaction
moves jobs and files go all the time. Every unlink of a binlog file is a
crash point: the directory as it is then, in two images, is recovered by a
new binlog and must hold every acknowledged job and none acknowledged as
deleted. The images:

* kill -9: what the kernel has (every byte written, every unlink done);
* power loss: for each file, what its last fdatasync covered (a file never
  synced is not there), and every unlink done at once.

With -f0 a command is acknowledged once an fsync covers it, and both images
are checked; with -F once its records are written, and only the kill -9
image (-F promises nothing on a power loss). One fsync (or write) covers
one command, or a group of them, as in a group commit: then a job moved
by one command may see its old file let go by a later one before the
records are written. fdatasync is replaced by one that records what it
would have made durable, so the run is deterministic and takes no disk
flushes.
"""
from __future__ import annotations

import os
import random

import pytest

from fakeclock import synced, with_binlog
from pybeanstalkd.binlog.sync import sync_inline

FILESIZE = 8192


class Crashes:
    """Watches one binlog directory: what its files held at their last
    fdatasync, and the crash images checked at each unlink."""

    def __init__(self, monkeypatch, wal_dir, check, power: bool):
        self.dir = str(wal_dir)
        self.durable: dict[str, bytes] = {}  # path -> its bytes at its last fdatasync
        self.unlinks = 0
        real_unlink, real_fdatasync = os.unlink, os.fdatasync

        def fdatasync(fd):
            path = os.readlink(f"/proc/self/fd/{fd}")
            if os.path.dirname(path) != self.dir:
                return real_fdatasync(fd)
            with open(path, "rb") as f:
                self.durable[path] = f.read()

        def unlink(path, *a, **kw):
            real_unlink(path, *a, **kw)
            if os.path.dirname(str(path)) == self.dir:
                self.unlinks += 1
                self.durable.pop(str(path), None)
                check("kill -9", self._kernel_image())
                if power:
                    check("power loss", dict(self.durable))

        monkeypatch.setattr(os, "fdatasync", fdatasync)
        monkeypatch.setattr(os, "unlink", unlink)

    def _kernel_image(self) -> dict[str, bytes]:
        out = {}
        for name in os.listdir(self.dir):
            if name.startswith("binlog."):
                path = os.path.join(self.dir, name)
                with open(path, "rb") as f:
                    out[path] = f.read()
        return out


def run(tmp_path, monkeypatch, seed: int, ram_min: int | None, each_write: bool, group: int, ops: int):
    """Puts, and deletes of random acknowledged jobs, the more of them the
    more jobs there are (about 20 stay: compaction has room to run, and
    each job lives long enough to be moved); group commands a write or
    fsync. Returns (crash points, jobs moved)."""
    rnd = random.Random(seed)
    wal_dir = tmp_path / "wal"
    wal_dir.mkdir()
    acked: dict[int, bytes] = {}  # id -> body: put, acknowledged, not deleted
    deleted: set[int] = set()  # delete acknowledged
    images = 0

    def check(kind, files):
        nonlocal images
        images += 1
        img = tmp_path / f"img{images}"
        img.mkdir()
        for path, data in files.items():
            (img / os.path.basename(path)).write_bytes(data)
        h2, _ = with_binlog(img, FILESIZE, ram_min=ram_min)
        c2 = h2.conn()
        where = f"seed={seed} {kind}, image of {sorted(os.path.basename(p) for p in files)}"
        for jid, body in acked.items():
            got = h2.send(c2, b"peek %d\r\n" % jid)
            assert got == b"FOUND %d %d\r\n%s\r\n" % (jid, len(body), body), f"{where}: job {jid} lost"
        for jid in deleted:
            assert h2.send(c2, b"peek %d\r\n" % jid) == b"NOT_FOUND\r\n", f"{where}: delete of {jid} undone"

    crashes = Crashes(monkeypatch, wal_dir, check, power=each_write)
    h, wal = with_binlog(wal_dir, FILESIZE, ram_min=ram_min)
    wal.wantsync = each_write

    def acknowledge():
        # the records are written first, as the fsync thread does (Syncer._begin)
        wal.flush()
        if each_write:
            sync_inline(wal)

    c = h.conn()
    tube = b"default"
    puts: dict[int, bytes] = {}  # this group's, not yet acknowledged
    deletes: set[int] = set()
    for n in range(1, ops + 1):
        if rnd.random() < len(acked) / 40:
            jid = rnd.choice(list(acked))
            del acked[jid]  # (in flight: either outcome is right until it is acknowledged)
            assert h.send(c, b"delete %d\r\n" % jid) == b"DELETED\r\n"
            deletes.add(jid)
        else:
            t = rnd.choice((b"default", b"load-b"))
            if t != tube:
                assert h.send(c, b"use %s\r\n" % t) == b"USING %s\r\n" % t
                tube = t
            body = rnd.randbytes(rnd.randrange(0, 300))
            got = h.send(c, b"put %d 0 120 %d\r\n%s\r\n" % (rnd.randrange(2000), len(body), body))
            assert got.startswith(b"INSERTED "), got
            puts[int(got.split()[1])] = body
        if n % group == 0:
            acknowledge()
            acked.update(puts)
            deleted.update(deletes)
            puts.clear()
            deletes.clear()
    return crashes.unlinks, wal.nmig


@pytest.mark.parametrize("group", [1, 4], ids=["one-a-sync", "four-a-sync"])
@pytest.mark.parametrize("each_write", [True, False], ids=["f0", "F"])
@pytest.mark.parametrize("ram_min", [None, 2], ids=["bodies-in-ram", "bodies-on-disk"])
@pytest.mark.parametrize("seed", range(2))
def test_no_acknowledged_job_is_lost_at_any_unlink(tmp_path, monkeypatch, seed, ram_min, each_write, group):
    unlinks, moved = run(tmp_path, monkeypatch, seed, ram_min, each_write, group, ops=1000)
    # (the run reached what it is about: files freed, jobs moved out of them)
    assert unlinks >= 15 and moved >= 50, (unlinks, moved)


def test_a_compaction_run_alone_waits_for_its_rewrite(tmp_path):
    """Compaction runs after a command's record, so the lsn a file is let
    go at is past what no fsync covers yet. Run alone, on a binlog with
    every record synced, it still must not unlink the file it empties
    before the job's rewrite is written and synced."""
    h, wal = with_binlog(tmp_path, FILESIZE)
    c = h.conn()
    # (no compaction yet: a reservation this large keeps its ratio under 3
    # while the files pile up)
    wal.resv += 1 << 40
    assert h.send(c, b"put 0 0 60 4\r\nkept\r\n") == b"INSERTED 1\r\n"
    i = 1
    while wal.cur.seq < 6:
        i += 1
        assert h.send(c, b"put 0 0 60 600\r\n%s\r\n" % (b"f" * 600)) == b"INSERTED %d\r\n" % i
        assert h.send(c, b"delete %d\r\n" % i) == b"DELETED\r\n"
    synced(wal)
    assert wal.synced == wal.lsn and h.e.q.jobs[1].file.seq == 1
    wal.resv -= 1 << 40
    wal._compact()
    assert h.e.q.jobs[1].file.seq > 1  # moved: its new record is in the write buffer only
    assert (tmp_path / "binlog.1").exists()  # (a kill -9 now finds job 1 there)
    synced(wal)
    assert not (tmp_path / "binlog.1").exists()
    wal.close()
    h2, _ = with_binlog(tmp_path, FILESIZE)
    assert h2.send(h2.conn(), b"peek 1\r\n") == b"FOUND 1 4\r\nkept\r\n"


def test_recovery_unlinks_a_file_only_once_the_later_ones_are_synced(tmp_path, monkeypatch):
    """After a kill -9, a moved job's new record may be in the page cache
    alone: recovery lets go of the old file it was moved from only once an
    fdatasync has covered the files after it (and the directory)."""
    from pybeanstalkd.binlog import recovery as R

    h, wal = with_binlog(tmp_path, FILESIZE)
    c = h.conn()
    assert h.send(c, b"put 0 0 60 4\r\nkept\r\n") == b"INSERTED 1\r\n"
    i = 1
    while wal.cur.seq < 6:
        i += 1
        assert h.send(c, b"put 0 0 60 600\r\n%s\r\n" % (b"f" * 600)) == b"INSERTED %d\r\n" % i
        assert h.send(c, b"delete %d\r\n" % i) == b"DELETED\r\n"
    wal.flush()
    if not (tmp_path / "binlog.1").exists():  # (compaction moved job 1 already)
        pytest.fail("the scenario needs job 1 still in binlog.1")
    # Its record copied on into the last file, as compaction would, and the
    # old one left: the image a kill -9 leaves before binlog.1 is unlinked.
    j = h.e.q.jobs[1]
    wal.drop(j)
    wal.reserve(wal.codec.size(j))
    wal._write(j)
    wal.flush()
    wal.close()
    events = []
    real_sync, real_unlink = R.os.fdatasync, os.unlink
    monkeypatch.setattr(R.os, "fdatasync", lambda fd: (events.append("sync"), real_sync(fd))[1])
    monkeypatch.setattr(os, "unlink", lambda p: (events.append("unlink " + os.path.basename(p)),
                                                 real_unlink(p))[1])
    h2, _ = with_binlog(tmp_path, FILESIZE)
    assert "unlink binlog.1" in events
    assert "sync" in events[:events.index("unlink binlog.1")]
    assert h2.send(h2.conn(), b"peek 1\r\n") == b"FOUND 1 4\r\nkept\r\n"

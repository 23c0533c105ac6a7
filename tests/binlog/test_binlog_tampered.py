"""--bodies-on-disk with the binlog's files tampered with under a running
server or while it is down: cut short, bytes rewritten, replaced by
another file. Whatever is done to them, every job acknowledged is served
with its own bytes or answers INTERNAL_ERROR: never other bytes, never a
crash; and after a restart a job is there with its own bytes, or a
warning says its records were damaged."""
from __future__ import annotations

import os
import random
import re
import shutil

from binlogtools import BinlogServer, Conn
from fakeclock import OPEN_WALS, Harness
from pybeanstalkd.binlog.bodies import DiskBodies
from pybeanstalkd.binlog.files import Wal
from pybeanstalkd.binlog.recovery import recover
from pybeanstalkd.core.job import OnDisk


def start(d, filesize, ram_min, warned):
    """A server's engine on the binlog in d (ram_min None: a plain binlog)."""
    if ram_min is None:
        wal = Wal(str(d), filesize, warn=warned.append)
    else:
        wal = Wal(str(d), filesize, warn=warned.append,
                  bodies=DiskBodies(str(d), ram_min, warned.append))
    OPEN_WALS.append(wal)
    h = Harness(filesize=filesize, store=wal, bodies_on_disk=ram_min is not None)
    recover(wal, h.e.q, h.e.max_job_size, h.now, warned.append)
    return h, wal


def put(h, c, body: bytes, pri=0) -> int:
    r = h.send(c, b"put %d 0 60 %d\r\n%s\r\n" % (pri, len(body), body))
    assert r.startswith(b"INSERTED "), r
    return int(r.split()[1])


def served(r: bytes) -> list[tuple[int, bytes]]:
    """The jobs a reply hands out, with their bytes."""
    out = []
    for m in re.finditer(rb"(?:FOUND|RESERVED) (\d+) (\d+)\r\n", r):
        out.append((int(m.group(1)), r[m.end():m.end() + int(m.group(2))]))
    return out


def test_a_body_read_into_ram_at_a_restart_is_checked_against_its_crc(tmp_path):
    """A record of a body left on disk carries its CRC-32. Restarted with
    the body kept in RAM instead (a plain binlog, or a higher
    --body-ram-min), a body changed meanwhile is not taken as the job's:
    the record counts as a short one (its job's state, not its bytes), a
    warning names it, and the records after it are read on."""
    for ram_min in (None, 1 << 20):
        d = tmp_path / str(ram_min)
        d.mkdir()
        h, wal = start(d, 10485760, 0, [])
        c = h.conn()
        damaged = put(h, c, b"d" * 300)
        after = put(h, c, b"a" * 300)
        wal.flush()
        j = h.e.q.jobs[damaged]
        with open(j.file.path, "r+b") as f:
            os.chmod(j.file.path, 0o600)
            f.seek(j.body.offset + 10)
            f.write(b"X")
        wal.close()
        warned: list[str] = []
        h2, _ = start(d, 10485760, ram_min, warned)
        c2 = h2.conn()
        assert h2.send(c2, b"peek %d\r\n" % damaged) == b"NOT_FOUND\r\n"
        assert h2.send(c2, b"peek %d\r\n" % after) == b"FOUND %d 300\r\n%s\r\n" % (after, b"a" * 300)
        assert any("job %d" % damaged in w and "CRC-32" in w for w in warned), warned


def _record_start(j) -> int:
    """Where job j's full record starts (its body is on disk)."""
    return j.body.offset - 80 - len(j.tube.name) - 4


def test_records_written_after_a_cut_are_read_on_at_a_restart(tmp_path):
    """The current file cut short under the running server, at a record's
    start or in the middle of one: the server writes on at its offset,
    past a hole of zeros. Meanwhile the jobs whose bodies were cut answer
    INTERNAL_ERROR and the rest their own bytes. After a restart the jobs
    put after the cut are there (the reference stops at the zeros, and
    they were lost without a word); those cut are gone, and a warning
    says where."""
    for how in ("at a record", "mid-record"):
        d = tmp_path / how.replace(" ", "-")
        d.mkdir()
        h, wal = start(d, 1 << 20, 0, [])
        c = h.conn()
        bodies = {}
        for k in range(10):
            if k == 5:
                wal.flush()
                cut = _record_start(h.e.q.jobs[3]) + (0 if how == "at a record" else 30)
                os.truncate(wal.cur.path, cut)
            body = b"%d" % k * 40
            bodies[put(h, c, body)] = body
        wal.flush()
        for i, body in bodies.items():
            got = h.send(c, b"peek %d\r\n" % i)
            if i in (3, 4, 5):
                assert got == b"INTERNAL_ERROR\r\n", (how, i, got)
            else:
                assert served(got) == [(i, body)], (how, i, got)
        wal.close()
        warned: list[str] = []
        h2, _ = start(d, 1 << 20, 0, warned)
        c2 = h2.conn()
        for i, body in bodies.items():
            got = h2.send(c2, b"peek %d\r\n" % i)
            if i in (3, 4, 5):
                assert got == b"NOT_FOUND\r\n", (how, i, got)
            else:
                assert served(got) == [(i, body)], (how, i, got)
        assert any(f"binlog.1:{_record_start_of(3, bodies)}" in w for w in warned), warned


def _record_start_of(i, bodies) -> int:
    """Job i's record's start in a file holding jobs 1.. of the default
    tube, one full record each (bodies by id)."""
    return 4 + sum(4 + len(b"default") + 80 + len(bodies[k]) + 2 for k in range(1, i))


def _tamper(rnd, d, q, wal) -> str:
    """One thing done to the binlog's files behind the server's back."""
    names = sorted((n for n in os.listdir(d) if n.startswith("binlog.")), key=lambda n: int(n[7:]))
    path = os.path.join(d, rnd.choice(names))
    os.chmod(path, 0o600)
    kind = rnd.choice(("cut", "rewrite", "replaced", "replaced by another", "removed"))
    if kind == "cut":
        os.truncate(path, rnd.randrange(os.path.getsize(path) + 1))
    elif kind == "removed" and path != wal.cur.path:
        os.unlink(path)
    elif kind in ("rewrite", "replaced"):
        # bytes in bodies left on disk only: a record's fields changed
        # while the server is down make another job of it, which no
        # binlog can tell (the reference's has no checksum at all)
        on_disk = [j for j in q.jobs.values() if type(j.body) is OnDisk and j.file.path == path]
        target = path + ".new" if kind == "replaced" else path
        if kind == "replaced":
            shutil.copyfile(path, target)
        with open(target, "r+b") as f:
            for j in rnd.sample(on_disk, min(len(on_disk), 3)):
                f.seek(j.body.offset + rnd.randrange(len(j.body)))
                f.write(rnd.randbytes(rnd.choice((1, 4))))
        if kind == "replaced":
            os.rename(target, path)
    elif kind == "replaced by another":
        shutil.copyfile(os.path.join(d, rnd.choice(names)), path + ".new")
        os.rename(path + ".new", path)
    return kind


def test_tampered_files_never_serve_other_bytes(tmp_path):
    """Random work on 4 KiB files (compaction moves jobs all along), with
    the files cut short, rewritten, replaced and removed under it, and
    restarts (bodies on disk, or in RAM): every job handed out is handed
    out with its own bytes (or INTERNAL_ERROR), nothing raises, and the
    server keeps serving."""
    for seed in range(6):
        rnd = random.Random(seed)
        d = tmp_path / str(seed)
        d.mkdir()
        h, wal = start(d, 4096, 0, [])
        c = h.conn()
        acked: dict[int, bytes] = {}
        for _ in range(500):
            op = rnd.random()
            jid = rnd.choice(list(acked) or [1])
            if op < 0.35:
                body = rnd.randbytes(rnd.choice((10, 100, 600, 1500)))
                got = h.send(c, b"put %d 0 60 %d\r\n%s\r\n" % (rnd.randrange(3), len(body), body))
                assert got.startswith((b"INSERTED ", b"OUT_OF_MEMORY")), got
                if got.startswith(b"INSERTED "):
                    acked[int(got.split()[1])] = body
                continue
            if op < 0.85:
                cmd = rnd.choice((b"reserve-with-timeout 0", b"delete %d" % jid, b"peek %d" % jid,
                                  b"release %d 1 0" % jid, b"release %d 1 1" % jid,
                                  b"bury %d 1" % jid, b"kick 5"))
                got = h.send(c, cmd + b"\r\n")
                for i, body in served(got):
                    assert acked.get(i) == body, (seed, cmd, i)
                if rnd.random() < 0.1:
                    h.advance(2)
                continue
            wal.flush()
            if op > 0.96:
                _tamper(rnd, d, h.e.q, wal)
                if rnd.random() < 0.5:
                    wal.close()  # (and back with bodies in RAM at times: checked as they load)
                    h, wal = start(d, 4096, rnd.choice((0, 0, 1 << 20)), [])
                    c = h.conn()
                    for i, body in acked.items():
                        for j, got in served(h.send(c, b"peek %d\r\n" % i)):
                            assert (j, got) == (i, body), (seed, "after a restart", i)
        assert put(h, c, b"still serving") in h.e.q.jobs


def test_a_file_replaced_while_written_is_said(tmp_path):
    """The current file renamed over (or removed) while the server writes
    to it: its records go on to the file it opened, which the directory
    no longer holds, and a restart would not have their jobs. Nothing can
    bring them back, but it is said, when the file is left for the next
    (and at shutdown), rather than found at the restart."""
    for how in ("replaced", "removed"):
        d = tmp_path / how
        d.mkdir()
        warned: list[str] = []
        h, wal = start(d, 4096, 0, warned)
        c = h.conn()
        put(h, c, b"a" * 100)
        wal.flush()
        path = wal.cur.path
        if how == "replaced":
            shutil.copyfile(path, path + ".new")
            os.rename(path + ".new", path)
        else:
            os.unlink(path)
        while wal.cur.path == path:
            i = put(h, c, b"b" * 300)
            wal.flush()
            got = h.send(c, b"peek %d\r\n" % i)  # (its own bytes, or none)
            assert got == b"INTERNAL_ERROR\r\n" or served(got) == [(i, b"b" * 300)], got
        assert sum(path in w and "replaced or removed" in w for w in warned) == 1, warned


def test_a_file_replaced_while_written_is_said_at_shutdown(tmp_path):
    """The same, for the file being written when the server stops."""
    wal_dir = tmp_path / "wal"
    wal_dir.mkdir()
    srv = BinlogServer("ours", wal_dir, ("--bodies-on-disk",))
    try:
        c = Conn(srv.connect())
        c.put(b"before")
        path = os.path.join(wal_dir, "binlog.1")
        shutil.copyfile(path, path + ".new")
        os.rename(path + ".new", path)
        c.put(b"after")
        err = srv.term().text
        assert f"{path} is not the file written to (replaced or removed in use)" in err, err
    finally:
        srv.stop()

"""--bodies-on-disk out of descriptors: a body is read back through a
descriptor of its own file, and the process may have none left (EMFILE,
with many clients, or a low `ulimit -n`). That is no fault of the body:
the job must not be buried, marked unreadable, or handed out wrong, the
fsync path must not fail, and all is well once descriptors free up."""
from __future__ import annotations

import errno
import os
import resource
import time
from contextlib import contextmanager

import pytest

from binlogtools import BinlogServer, Conn
from fakeclock import synced, with_binlog
from pybeanstalkd.binlog import bodies as B
from pybeanstalkd.cluster.apply import snapshot_parts
from pybeanstalkd.core.job import READY, RESERVED, OnDisk


def put(h, c, body: bytes, pri=0) -> int:
    r = h.send(c, b"put %d 0 60 %d\r\n%s\r\n" % (pri, len(body), body))
    assert r.startswith(b"INSERTED "), r
    return int(r.split()[1])


@contextmanager
def no_descriptors_left():
    """Every descriptor number this process may use taken (a lowered soft
    limit, filled with /dev/null), as when clients took the last of them;
    all given back at the end."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = max(int(n) for n in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (top + 16, hard))
    taken = []
    try:
        while True:
            try:
                taken.append(os.open(os.devnull, os.O_RDONLY))
            except OSError as e:
                assert e.errno == errno.EMFILE
                break
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _files_of(h, wal, n):
    """n jobs, each in a file of its own (small files), bodies on disk."""
    c = h.conn()
    bodies = {}
    for k in range(n):
        body = b"%d-" % k + bytes([97 + k % 26]) * 3000
        bodies[put(h, c, body, pri=k)] = body
        wal.flush()
    assert len({h.e.q.jobs[i].file.seq for i in bodies}) == n
    assert all(type(h.e.q.jobs[i].body) is OnDisk for i in bodies)
    return c, bodies


def test_a_reserve_out_of_descriptors_is_served(tmp_path):
    """Out of descriptors, a body is still read: a read fd kept for
    another file is given up for it, or else the one descriptor the
    bodies keep in reserve. Each reserve gets its job's own bytes."""
    h, wal = with_binlog(tmp_path, filesize=4096, ram_min=0)
    c, bodies = _files_of(h, wal, 6)
    first = min(bodies)
    assert h.send(c, b"peek %d\r\n" % first).startswith(b"FOUND")  # (its file's fd is kept)
    with no_descriptors_left():
        for i in sorted(bodies):
            assert h.send(c, b"reserve-with-timeout 0\r\n") == (
                b"RESERVED %d %d\r\n%s\r\n" % (i, len(bodies[i]), bodies[i]))
    assert wal.bodies.errors == 0
    for i in sorted(bodies):
        assert h.send(c, b"release %d 0 0\r\n" % i) == b"RELEASED\r\n"
    close_read_fds(wal)
    with no_descriptors_left():  # (no fd kept that another file could give up)
        i = min(bodies)
        assert h.send(c, b"reserve-with-timeout 0\r\n") == (
            b"RESERVED %d %d\r\n%s\r\n" % (i, len(bodies[i]), bodies[i]))


def close_read_fds(wal):
    wal.bodies.close_before(None)


def test_a_body_not_read_for_want_of_descriptors_is_not_the_jobs_fault(tmp_path, monkeypatch):
    """When no descriptor can be had at all, the reserve answers
    INTERNAL_ERROR and its job goes back to ready, as it was: not buried,
    its reserve not counted, not marked unreadable (compaction still moves
    it), one warning; once descriptors are back, it is served."""
    warned = []
    h, wal = with_binlog(tmp_path, filesize=4096, ram_min=0, warn=warned.append)
    c, bodies = _files_of(h, wal, 3)
    first = min(bodies)
    close_read_fds(wal)
    real = os.open

    def emfile(path, *a, **kw):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(B.os, "open", emfile)
    for _ in range(3):
        assert h.send(c, b"reserve-with-timeout 0\r\n") == b"INTERNAL_ERROR\r\n"
        j = h.e.q.jobs[first]
        assert j.state == READY
        assert h.send(c, b"peek %d\r\n" % first) == b"INTERNAL_ERROR\r\n"
    assert h.send(c, b"stats-job %d\r\n" % first).count(b"\nreserves: 0\n") == 1
    assert sum("descriptors" in w or "Too many open files" in w for w in warned) == 1, warned
    assert not wal.bodies.bad
    monkeypatch.setattr(B.os, "open", real)
    assert h.send(c, b"reserve-with-timeout 0\r\n") == (
        b"RESERVED %d %d\r\n%s\r\n" % (first, len(bodies[first]), bodies[first]))
    assert h.e.q.jobs[first].state == RESERVED
    assert h.send(c, b"release %d 0 0\r\n" % first) == b"RELEASED\r\n"
    # Compaction moves it on: the files it was in go.
    seq = h.e.q.jobs[first].file.seq
    for _ in range(60):
        h.send(c, b"delete %d\r\n" % put(h, c, b"f" * 600, pri=99))
        synced(wal)  # (a file let go is unlinked once what replaced it is synced)
    assert h.e.q.jobs[first].file.seq > seq
    assert not os.path.exists(wal.path_of(seq))
    assert h.send(c, b"peek %d\r\n" % first) == (
        b"FOUND %d %d\r\n%s\r\n" % (first, len(bodies[first]), bodies[first]))


def test_the_fsync_path_needs_no_new_descriptor(tmp_path):
    """A file made since the last fsync means the directory must be synced
    too: its descriptor is kept from the start, not opened then (out of
    descriptors, that open failed and took the fsync, and the connection
    being answered, with it)."""
    h, wal = with_binlog(tmp_path, filesize=4096, ram_min=0)
    c = h.conn()
    put(h, c, b"x" * 100)
    wal.flush()
    assert wal.new_files
    with no_descriptors_left():
        fds, dirfd, close = wal.sync_targets()
    assert dirfd is not None and fds == [wal.cur.fd] and not wal.new_files
    os.fsync(dirfd)


def test_a_server_out_of_descriptors_serves_right_and_recovers(tmp_path):
    """A real server under `ulimit -n 40`, its descriptors all taken by
    clients: reserves get their jobs' own bytes, puts are answered (one
    that needs a new file and cannot have one gets OUT_OF_MEMORY), no
    connection is dropped, no job buried; once clients leave, everything
    works, and a restart has every acknowledged job."""
    wal_dir = tmp_path / "wal"
    wal_dir.mkdir()
    flags = ("--bodies-on-disk", "--body-ram-min", "0", "-s", "4096")
    srv = BinlogServer("ours", wal_dir, flags, nofile=40)
    try:
        c = Conn(srv.connect())
        acked = {}
        for k in range(12):
            body = b"%02d" % k * 700
            acked[c.put(body)] = body
        others = []
        while True:  # clients until the server can take no more
            s = srv.connect(timeout=0.5)
            try:
                s.sendall(b"list-tube-used\r\n")
                if s.recv(64) != b"USING default\r\n":
                    raise OSError
            except OSError:
                s.close()
                break
            others.append(s)
            assert len(others) < 60
        assert len(others) > 5
        refused = 0
        for k in range(12, 24):
            body = b"%02d" % k * 700
            got = c.cmd(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
            if got == b"OUT_OF_MEMORY\r\n":
                refused += 1
            else:
                acked[int(got.split()[1])] = body
        for i in sorted(acked):
            got = c.cmd(b"reserve-with-timeout 0\r\n")
            assert got == b"RESERVED %d %d\r\n%s\r\n" % (i, len(acked[i]), acked[i]), (i, got[:40])
        st = c.stats()
        assert st["current-jobs-buried"] == 0
        for s in others:
            s.close()
        deadline = time.monotonic() + 10
        while True:  # accepting resumes once descriptors are back
            try:
                c2 = Conn(srv.connect(timeout=1))
                c2.use("default")
                break
            except OSError:
                assert time.monotonic() < deadline
        c = c2
        for k in range(24, 40):
            body = b"%02d" % k * 700
            acked[c.put(body)] = body
        for i in sorted(acked):
            assert c.peek(i) == acked[i], i
        srv.term()
        assert "Traceback" not in srv.exited.text, srv.exited.text
        srv = BinlogServer("ours", wal_dir, flags)
        c = Conn(srv.connect())
        for i in sorted(acked):
            assert c.peek(i) == acked[i], i
        assert c.stats()["current-jobs-buried"] == 0
    finally:
        srv.stop()


def test_a_snapshot_is_not_sent_without_a_body_it_could_not_read_for_now(tmp_path, monkeypatch):
    """A cluster snapshot in which a body cannot be read for want of
    descriptors fails (the link is dropped and the follower asks again)
    rather than go out without the job: a follower that lacks it would
    never get it."""
    h, wal = with_binlog(tmp_path, ram_min=0)
    c = h.conn()
    put(h, c, b"hello")
    wal.flush()
    close_read_fds(wal)

    def emfile(path, *a, **kw):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(B.os, "open", emfile)
    with pytest.raises(OSError):
        b"".join(snapshot_parts(h.e.q, wal.wall_offset))


def test_clients_get_the_descriptors_idle_read_fds_hold(tmp_path):
    """A read fd is kept per binlog file read from, up to 64: under
    `ulimit -n 100`, reading bodies from 90 files left the server 13
    descriptors short of its limit, and the next client was never served
    (accept failing with EMFILE for good). Out of descriptors, accepting
    now takes them back from the idle read fds."""
    wal_dir = tmp_path / "wal"
    wal_dir.mkdir()
    srv = BinlogServer("ours", wal_dir, ("--bodies-on-disk", "--body-ram-min", "0",
                                         "-s", "4096"), nofile=100)
    try:
        c = Conn(srv.connect())
        bodies = {}
        for k in range(90):  # (one file each; paced, so that each fsync closes the last)
            body = b"%03d" % k * 1000
            bodies[c.put(body)] = body
            time.sleep(0.005)
        for i, body in bodies.items():  # a read fd for each file, up to 64 kept
            assert c.peek(i) == body
        clients = []
        for _ in range(40):
            s = srv.connect(timeout=5)
            s.sendall(b"list-tube-used\r\n")
            assert s.recv(64) == b"USING default\r\n", len(clients)
            clients.append(s)
        for i, body in bodies.items():  # and bodies are still read
            assert c.peek(i) == body
    finally:
        srv.stop()


def test_a_reserve_batch_out_of_descriptors_leaves_its_jobs_ready(tmp_path, monkeypatch):
    """A reserve-batch whose bodies cannot be read for want of descriptors
    leaves them out of its entries, and their jobs ready, not buried."""
    h, wal = with_binlog(tmp_path, filesize=4096, ram_min=0, extensions=True)
    c, bodies = _files_of(h, wal, 3)
    close_read_fds(wal)

    def emfile(path, *a, **kw):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(B.os, "open", emfile)
    assert h.send(c, b"reserve-batch 3\r\n") == b"RESERVED_BATCH 0\r\n"
    assert [h.e.q.jobs[i].state for i in sorted(bodies)] == [READY] * 3
    monkeypatch.undo()
    got = h.send(c, b"reserve-batch 3\r\n")
    assert got.startswith(b"RESERVED_BATCH 3\r\n") and all(b in got for b in bodies.values())

"""--bodies-on-disk on a disk that fills up while compaction wants to move
jobs: no job acknowledged is lost, none is served with other bytes, the
server keeps serving; once space is back, the binlog shrinks again."""
from __future__ import annotations

import errno
import os
import re
import subprocess
import time

import pytest

from binlogtools import BinlogServer, Conn
from fakeclock import with_binlog
from pybeanstalkd.binlog.files import _falloc

FLAGS = ("--bodies-on-disk", "--body-ram-min", "0", "-s", "16384")


@pytest.fixture
def small_fs(tmp_path):
    """A 2 MiB tmpfs (needs root, as the full-disk test of
    test_binlog_crash.py)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.fail(f"cannot mount a 2 MiB tmpfs: {res.stderr.strip() or res.returncode}")
    yield str(mnt)
    subprocess.run(["umount", str(mnt)], capture_output=True)
    if os.path.ismount(str(mnt)):
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def files(d) -> list[int]:
    return sorted(int(n[7:]) for n in os.listdir(d) if n.startswith("binlog."))


def test_a_full_disk_while_compaction_wants_room(small_fs):
    wal = os.path.join(small_fs, "wal")
    os.mkdir(wal)
    ballast = os.path.join(small_fs, "ballast")
    with open(ballast, "wb") as f:  # half the disk, given back later
        f.write(bytes(1 << 20))
    srv = BinlogServer("ours", wal, FLAGS)
    try:
        c = Conn(srv.connect())
        acked: dict[int, bytes] = {}
        while True:  # fill the disk
            body = b"%06d:" % len(acked) + os.urandom(1500)
            got = c.cmd(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
            if got == b"OUT_OF_MEMORY\r\n":
                break
            acked[int(re.fullmatch(rb"INSERTED (\d+)\r\n", got).group(1))] = body
            assert len(acked) < 5000, "the disk never filled up"
        full = len(files(wal))
        # Keep one job in every file and delete the rest: no file can go,
        # the disk stays full, and compaction wants to move the ones kept
        # out of the oldest files into a new one it has no room for.
        kept: dict[int, bytes] = {}
        seen = set()
        for i in sorted(acked):
            in_file = c.stats_job(i)["file"]
            if in_file not in seen:
                seen.add(in_file)
                kept[i] = acked[i]
            else:
                c.delete(i)
        assert len(kept) > 20
        for _ in range(20):  # more writes: each tries compaction; puts mostly get no room
            got = c.cmd(b"put 0 0 60 1500\r\n%s\r\n" % (b"n" * 1500))
            if got != b"OUT_OF_MEMORY\r\n":  # (compaction moved a job, a file went: room)
                kept[int(re.fullmatch(rb"INSERTED (\d+)\r\n", got).group(1))] = b"n" * 1500
        for i, body in kept.items():  # served, with their own bytes
            assert c.peek(i) == body
            assert c.cmd(b"reserve-job %d\r\n" % i) == b"RESERVED %d %d\r\n%s\r\n" % (
                i, len(body), body)
            assert c.cmd(b"release %d 0 0\r\n" % i) == b"RELEASED\r\n"
        assert c.stats()["current-jobs-buried"] == 0
        # Space comes back: compaction moves the jobs kept, and the files go.
        os.remove(ballast)
        for i in sorted(kept)[: len(kept) // 2]:
            c.delete(i)
            del kept[i]
        for n in range(400):
            body = b"churn %d " % n + b"c" * 1200
            end = time.monotonic() + 10
            while (got := c.cmd(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))) == (
                    b"OUT_OF_MEMORY\r\n"):  # (a file let go goes after the fsync that follows)
                assert time.monotonic() < end, "no room came back"
                time.sleep(0.02)
            c.delete(int(re.fullmatch(rb"INSERTED (\d+)\r\n", got).group(1)))
        deadline = time.monotonic() + 10
        while len(files(wal)) >= full // 2:  # (a file goes after the fsync that follows: -f 50)
            assert time.monotonic() < deadline, (files(wal), full)
            time.sleep(0.02)
        for i, body in kept.items():
            assert c.peek(i) == body
        srv.kill9()
        assert "Traceback" not in srv.exited.text, srv.exited.text
        srv = BinlogServer("ours", wal, FLAGS)
        c = Conn(srv.connect())
        for i, body in kept.items():
            assert c.peek(i) == body
        for i in set(acked) - set(kept):
            assert c.stats_job(i) is None, i
    finally:
        srv.stop()


def test_a_full_disk_is_said_once_not_at_every_write(tmp_path):
    """While no next file can be made, every put and every compaction
    tries again: one warning says so (not one a try, thousands a second
    on a busy server), and one says when files can be made again."""
    full = []

    def falloc(fd, size):
        if full:
            raise OSError(errno.ENOSPC, "No space left on device")
        _falloc(fd, size)

    warned: list[str] = []
    h, wal = with_binlog(tmp_path, filesize=4096, ram_min=0, falloc=falloc, warn=warned.append)
    c = h.conn()
    full.append(True)
    refused = 0
    for _ in range(200):
        got = h.send(c, b"put 0 0 60 500\r\n%s\r\n" % (b"x" * 500))
        refused += got == b"OUT_OF_MEMORY\r\n"
        wal.flush()
    assert refused > 150
    assert len(warned) == 1 and "No space left on device" in warned[0], warned
    full.clear()
    assert h.send(c, b"put 0 0 60 500\r\n%s\r\n" % (b"x" * 500)).startswith(b"INSERTED")
    assert len(warned) == 2 and "again" in warned[1], warned
    full.append(True)
    for _ in range(50):
        h.send(c, b"put 0 0 60 500\r\n%s\r\n" % (b"x" * 500))
    assert len(warned) == 3, warned

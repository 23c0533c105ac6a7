"""--bodies-on-disk, black box: kill -9 under load while compaction moves
bodies, a directory the reference wrote, the reference reading ours, and a
binlog file cut short under the running server."""
from __future__ import annotations

import os
import random
import re
import shutil
import time

from loadtools import run_load

DISK = ("--bodies-on-disk", "--body-ram-min", "0")


def no_traceback(text: str):
    assert "Traceback" not in text, text


def test_kill9_under_load_while_compaction_moves_bodies(servers, tmp_path):
    """Files of 8 KiB roll over every few puts, so compaction moves live
    jobs (and reads their bodies back) all along. Every acknowledged job
    comes back with its body; so does the reference, from a copy."""
    seed = int(os.environ.get("BINLOG_CRASH_SEED", "0")) or random.randrange(1 << 30)
    rnd = random.Random(seed)
    for round_no in range(2):
        wal = tmp_path / f"wal{round_no}"
        wal.mkdir()
        kill_after = rnd.uniform(0.8, 1.6)
        where = f"seed={seed} round={round_no} kill_after={kill_after:.3f}s"
        w = servers("ours", wal, "-f0", "-s", "8192", *DISK)
        # (16 to 64 jobs at a time: at most, their records and reservations
        # take 4 of these files, so from 12 files on compaction runs and frees
        # the oldest, however slow the deleters are, and the kill waits for
        # it; at least, jobs are there to come back, however fast they are)
        log = run_load(w, kill_after, producers=3, deleters=2, jobs=(16, 64),
                       until=lambda d=wal: _rolled_and_freed(d))
        no_traceback(w.exited.text)
        assert "binlog disabled" not in w.exited.text, (where, w.exited.text)  # (it promises nothing then)
        assert not log.errors, (where, log.errors[:5])
        assert len(log.put_acked) >= 20, (where, len(log.put_acked))
        copy = tmp_path / f"copy{round_no}"
        shutil.copytree(wal, copy)
        must_exist = set(log.put_acked) - log.delete_sent
        for kind, d, flags in (("ours", wal, ("-s", "8192", *DISK)), ("reference", copy, ())):
            r = servers(kind, d, *flags)
            c = r.client()
            for jid in sorted(must_exist):
                assert c.peek(jid) == log.put_acked[jid], f"{where} {kind}: job {jid}"
            for jid in sorted(log.delete_acked):
                assert c.stats_job(jid) is None, f"{where} {kind}: delete of {jid} undone"
            if kind == "ours":
                st = c.stats()
                assert st["body-bytes-on-disk"] > 0 and st["body-bytes-in-ram"] == 0, st
            r.kill9()
            no_traceback(r.exited.text)
        assert _rolled_and_freed(copy), (where, os.listdir(copy))


def _rolled_and_freed(d) -> bool:
    """The binlog rolled over ten files and freed its first."""
    numbers = sorted(int(n[7:]) for n in os.listdir(d) if n.startswith("binlog.") and n[7:].isdigit())
    return bool(numbers) and numbers[0] > 1 and numbers[-1] > 10


def test_a_directory_the_reference_wrote(servers, wal):
    w = servers("reference", wal)
    c = w.client()
    bodies = {c.put(b"r%d-" % i + os.urandom(700 + i)): None for i in range(30)}
    for jid in bodies:
        bodies[jid] = c.peek(jid)
    c.bury(c.reserve(), 3)
    w.kill9()
    r = servers("ours", wal, "--bodies-on-disk", "--body-ram-min", "600")
    c = r.client()
    for jid, body in bodies.items():
        assert c.peek(jid) == body
    st = c.stats()
    assert st["body-bytes-on-disk"] == sum(len(b) + 2 for b in bodies.values())
    assert st["current-jobs-buried"] == 1


def test_a_file_cut_short_under_the_server(servers, wal):
    s = servers("ours", wal, *DISK)
    c = s.client()
    first = c.put(b"a" * 5000, pri=5)
    second = c.put(b"b" * 5000, pri=1)
    path = os.path.join(wal, "binlog.1")
    os.truncate(path, 7000)  # (the second job's body is past it)
    assert c.cmd(b"peek %d\r\n" % second) == b"INTERNAL_ERROR\r\n"
    assert c.cmd(b"reserve-with-timeout 0\r\n") == b"INTERNAL_ERROR\r\n"
    assert c.stats_job(second)["state"] == "buried"
    assert c.reserve() == first
    deadline = time.monotonic() + 2
    while True:
        err = s.stderr_so_far().decode()
        if "could not be read" in err or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    m = re.search(r"binlog\.1:(\d+): job %d: its body could not be read: only \d+ of its"
                  r" 5002 bytes: the file is cut short" % second, err)
    assert m, err
    assert int(m.group(1)) > 5000
    c.put(b"still serving")
    no_traceback(err)

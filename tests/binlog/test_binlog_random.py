"""Random workloads, recovered twice: a directory that one server wrote
(reference or ours, killed mid-run with -f0) is read back by the reference
and by ours. Both must show the same jobs in the same states, and what the
writer acknowledged: no job lost, no delete undone, and every job whose
last change was logged exactly as the writer showed it.

Small files (-s 4096) make the writers roll over, compact and collect
files all the time, which the scripted tests in test_binlog_interop.py
reach only at a few chosen points. The one expected difference is the
reference's bug #668: it counts one more bury for each buried job it
recovers (COMPATIBILITY.md).
"""
from __future__ import annotations

import random
import shutil

import pytest

from binlogtools import KINDS, snapshot

TUBES = ("default", "a", "b-2", "c.d")
OPS = 500


class Track:
    """What the workload knows: the ids put, those acknowledged deleted, and
    the "dirty" ones, changed without a log record since their last logged
    change (reserve, release with no delay: docs 4.3). A dirty job's fields
    after recovery depend on whether compaction happened to rewrite it."""

    def __init__(self, ids=()):
        self.ids = list(ids)
        self.deleted: set[int] = set()
        self.dirty: set[int] = set()

    def logged(self, jid, reply: bytes, ok: bytes):
        if reply.startswith(ok):
            self.dirty.discard(jid)


def run_random_workload(srv, rnd: random.Random, ids=()) -> Track:
    """Drive srv with random commands on new jobs and on `ids`. A command on a
    job in another state may fail; what happened is read from the replies."""
    conns = [srv.client(), srv.client()]  # the second holds reservations too
    tr = Track(ids)
    for _ in range(OPS):
        c = rnd.choice(conns)
        op = rnd.random()
        if op < 0.3 or not tr.ids:
            c.cmd(b"use %s\r\n" % rnd.choice(TUBES).encode())
            body = rnd.randbytes(rnd.randrange(0, 300))
            delay = rnd.choice((0, 0, 0, 5000))
            got = c.cmd(b"put %d %d 60 %d\r\n%s\r\n" % (rnd.randrange(2000), delay, len(body), body))
            assert got.startswith(b"INSERTED "), got
            tr.ids.append(int(got.split()[1]))
            continue
        jid = rnd.choice(tr.ids)
        if op < 0.45:
            if c.cmd(b"reserve-job %d\r\n" % jid).startswith(b"RESERVED"):
                tr.dirty.add(jid)
                if rnd.random() < 0.5:
                    tr.logged(jid, c.cmd(b"bury %d %d\r\n" % (jid, rnd.randrange(2000))), b"BURIED")
        elif op < 0.55:
            delay = rnd.choice((0, 4000))
            got = c.cmd(b"release %d %d %d\r\n" % (jid, rnd.randrange(2000), delay))
            if got == b"RELEASED\r\n" and not delay:
                tr.dirty.add(jid)
            tr.logged(jid, got if delay else b"", b"RELEASED")
        elif op < 0.65:
            tr.logged(jid, c.cmd(b"bury %d %d\r\n" % (jid, rnd.randrange(2000))), b"BURIED")
        elif op < 0.72:
            tr.logged(jid, c.cmd(b"kick-job %d\r\n" % jid), b"KICKED")
        elif op < 0.76:  # kicks buried or delayed jobs only: never a dirty one
            c.cmd(b"use %s\r\nkick %d\r\n" % (rnd.choice(TUBES).encode(), rnd.randrange(1, 4)))
            c.reply()  # the kick's reply, after use's
        elif op < 0.80:
            c.cmd(b"touch %d\r\n" % jid)
        elif c.cmd(b"delete %d\r\n" % jid) == b"DELETED\r\n":
            tr.deleted.add(jid)
            tr.dirty.discard(jid)
    for c in conns:  # their reservations go back to ready, unlogged (already dirty)
        c.close()
    return tr


def write_then_kill(servers, kind, d, rnd, ids=()):
    """(Track, the writer's snapshot of every job just before SIGKILL)"""
    w = servers(kind, str(d), "-s", "4096", "-f0")
    tr = run_random_workload(w, rnd, ids)
    before = snapshot(w, range(1, max(tr.ids) + 1))
    ex = w.kill9()
    assert b"Traceback" not in ex.stderr
    return tr, before


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("writer", KINDS)
def test_both_readers_recover_the_same_jobs(servers, tmp_path, writer, seed):
    written = tmp_path / "written"
    written.mkdir()
    tr, before = write_then_kill(servers, writer, written, random.Random(f"{writer}-{seed}"))
    assert len(list(written.glob("binlog.*"))) > 1  # it did roll over
    shots = check_readers_agree(servers, tmp_path, written, max(tr.ids))
    # Against what the writer acknowledged: nothing lost, no delete undone,
    # and every job whose last change was logged exactly as the writer had it.
    for reader, shot in shots.items():
        assert {j for j in tr.ids if shot.jobs[j] is None} == tr.deleted, reader
        clean = 0
        for jid in set(tr.ids) - tr.deleted - tr.dirty:
            want = dict(before.jobs[jid].fields)
            if reader == "reference" and want["state"] == "buried":
                want["buries"] += 1  # bug #668
            assert shot.jobs[jid].fields == want, (reader, jid)
            assert shot.jobs[jid].body == before.jobs[jid].body, (reader, jid)
            clean += 1
        assert clean > len(tr.dirty), "too few jobs to compare with the writer"


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("first,second", [("reference", "ours"), ("ours", "reference")])
def test_a_directory_moved_between_servers(servers, tmp_path, first, second, seed):
    # A user moves to the other server and keeps writing into the same
    # directory: its files, compaction and collection continue the first's.
    written = tmp_path / "written"
    written.mkdir()
    rnd = random.Random(f"{first}-{second}-{seed}")
    tr, _ = write_then_kill(servers, first, written, rnd)
    tr, _ = write_then_kill(servers, second, written, rnd, tr.ids)
    check_readers_agree(servers, tmp_path, written, max(tr.ids))


def check_readers_agree(servers, tmp_path, written, top):
    shots, next_ids = {}, {}
    for reader in KINDS:
        d = tmp_path / reader
        shutil.copytree(written, d)
        r = servers(reader, str(d))
        shots[reader] = snapshot(r, range(1, top + 2))
        c = r.client()
        next_ids[reader] = c.put(b"after")
        c.close()

    ref, ours = shots["reference"], shots["ours"]
    assert set(ref.live()) == set(ours.live())
    assert ref.live(), "nothing survived: the workload is too weak to test anything"
    states = set()
    for jid, a in ref.live().items():
        b = ours.live()[jid]
        want = dict(b.fields)
        if want["state"] == "buried":
            want["buries"] += 1  # bug #668, kept by the reference
        assert a.fields == want, jid
        assert a.body == b.body, jid
        states.add(b.fields["state"])
    assert {"ready", "buried", "delayed"} <= states
    assert ref.tubes == ours.tubes
    assert next_ids["reference"] == next_ids["ours"]
    return shots

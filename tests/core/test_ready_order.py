"""Ready order and per-job counters against an independent model.

The queue keeps fresh jobs in a per-tube run and everything else in a heap,
and packs the five counters into one int; this checks the observable result,
min (pri, id) first and exact stats-job counts, over random command mixes."""
from __future__ import annotations

import random

import pytest

from fakeclock import Harness
from pybeanstalkd.core.job import KICKS, M32, RESERVES, Job, Tube, bump, counters, pack_counters


def stats_job(h, c, jid) -> dict:
    out = h.send(c, b"stats-job %d\r\n" % jid)
    body = out.split(b"\r\n", 1)[1]
    return dict(line.split(": ", 1) for line in body.decode().splitlines()[1:] if ": " in line)


class Model:
    """What the protocol promises: ready jobs come out by (pri, id)."""

    def __init__(self):
        self.ready: dict[int, int] = {}  # id -> pri
        self.reserved: dict[int, int] = {}
        self.buried: list[int] = []  # FIFO
        self.counts: dict[int, list[int]] = {}  # reserves, timeouts, releases, buries, kicks

    def best(self):
        return min(self.ready, key=lambda i: (self.ready[i], i), default=None)


@pytest.mark.parametrize("seed", range(8))
def test_reserve_order_and_counters_match_a_model(seed):
    rnd = random.Random(seed)
    h = Harness()
    p, w, late = h.conn(), h.conn(), h.conn()
    m = Model()
    late_id = None  # a put whose body has not arrived yet
    for step in range(1500):
        op = rnd.random()
        pri = rnd.choice((0, 1, 5, 5, 5, 1024))
        if op < 0.35:
            out = h.send(p, b"put %d 0 60 1\r\nx\r\n" % pri)
            jid = int(out.split()[1])
            m.ready[jid] = pri
            m.counts[jid] = [0] * 5
        elif op < 0.40 and late_id is None:
            # the id is taken now, the job is inserted when the body comes,
            # after later puts: out of id order for the tube's run
            h.send(late, b"put %d 0 60 1\r\n" % pri)
            late_id = (pri,)
        elif op < 0.45 and late_id is not None:
            out = h.send(late, b"y\r\n")
            jid = int(out.split()[1])
            m.ready[jid] = late_id[0]
            m.counts[jid] = [0] * 5
            late_id = None
        elif op < 0.62:
            out = h.send(w, b"reserve-with-timeout 0\r\n")
            best = m.best()
            if best is None:
                assert out == b"TIMED_OUT\r\n", step
                continue
            assert out.split(b"\r\n")[0] == b"RESERVED %d 1" % best, step
            m.reserved[best] = m.ready.pop(best)
            m.counts[best][0] += 1
        elif op < 0.66 and m.ready:
            jid = rnd.choice(list(m.ready))  # reserve-job takes one from the middle
            assert h.send(w, b"reserve-job %d\r\n" % jid).startswith(b"RESERVED %d " % jid)
            m.reserved[jid] = m.ready.pop(jid)
            m.counts[jid][0] += 1
        elif op < 0.76 and m.reserved:
            jid = rnd.choice(list(m.reserved))
            assert h.send(w, b"release %d %d 0\r\n" % (jid, pri)) == b"RELEASED\r\n"
            del m.reserved[jid]
            m.ready[jid] = pri
            m.counts[jid][2] += 1
        elif op < 0.82 and m.reserved:
            jid = rnd.choice(list(m.reserved))
            assert h.send(w, b"bury %d %d\r\n" % (jid, pri)) == b"BURIED\r\n"
            del m.reserved[jid]
            m.buried.append(jid)
            m.counts[jid][3] += 1
            m.counts[jid].append(pri)  # its priority when kicked
        elif op < 0.86 and m.buried:
            if rnd.random() < 0.5:
                jid = m.buried.pop(0)
                assert h.send(p, b"kick 1\r\n") == b"KICKED 1\r\n"
            else:
                jid = m.buried.pop(rnd.randrange(len(m.buried)))
                assert h.send(p, b"kick-job %d\r\n" % jid) == b"KICKED\r\n"
            m.ready[jid] = m.counts[jid].pop()
            m.counts[jid][4] += 1
        elif op < 0.94 and (m.ready or m.reserved):
            pool = list(m.ready) + list(m.reserved)
            jid = rnd.choice(pool)
            assert h.send(p if jid in m.ready else w, b"delete %d\r\n" % jid) == b"DELETED\r\n"
            m.ready.pop(jid, None)
            m.reserved.pop(jid, None)
            del m.counts[jid]
        else:
            best = m.best()
            out = h.send(p, b"peek-ready\r\n")
            assert out.split(b"\r\n")[0] == (b"NOT_FOUND" if best is None else b"FOUND %d 1" % best)
    for jid, c in m.counts.items():
        st = stats_job(h, p, jid)
        got = [int(st[k]) for k in ("reserves", "timeouts", "releases", "buries", "kicks")]
        assert got == c[:5], jid
    # every stale entry is bounded by the live ones
    t = h.e.q.tubes.named[b"default"]
    assert len(t.ready.entries) + (0 if t.run is None else t.run.n) <= 2 * t.nready + 64


def test_a_reserve_job_then_release_does_not_revive_the_run_entry():
    """Job 1 sits in the run; reserve-job takes it out of the middle and it
    comes back with a worse priority: it must be ordered by the new one."""
    h = Harness()
    c = h.conn()
    for _ in range(3):
        h.send(c, b"put 5 0 60 1\r\nx\r\n")
    h.send(c, b"reserve-job 1\r\n")
    assert h.send(c, b"release 1 9 0\r\n") == b"RELEASED\r\n"
    order = [h.send(c, b"reserve-with-timeout 0\r\n").split()[1] for _ in range(3)]
    assert order == [b"2", b"3", b"1"]


def test_bury_then_kick_without_a_binlog_does_not_revive_the_run_entry():
    h = Harness()
    c = h.conn()
    h.send(c, b"put 5 0 60 1\r\nx\r\n")
    h.send(c, b"put 5 0 60 1\r\nx\r\n")
    h.send(c, b"reserve-job 1\r\n")
    h.send(c, b"bury 1 7\r\n")
    assert h.send(c, b"kick 1\r\n") == b"KICKED 1\r\n"
    order = [h.send(c, b"reserve-with-timeout 0\r\n").split()[1] for _ in range(2)]
    assert order == [b"2", b"1"]
    assert h.send(c, b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"


def test_deleting_ready_jobs_keeps_the_run_small():
    h = Harness()
    c = h.conn()
    for _ in range(1000):
        h.send(c, b"put 5 0 60 1\r\nx\r\n")
    for i in range(1, 1000):
        h.send(c, b"delete %d\r\n" % i)
    h.send(c, b"put 5 0 60 1\r\nx\r\n")
    t = h.e.q.tubes.named[b"default"]
    assert t.run.n <= 2 * t.nready + 64
    assert h.send(c, b"reserve-with-timeout 0\r\n").split()[1] == b"1000"


def test_counters_are_uint32_and_wrap_alone():
    c = pack_counters(M32, 0, 7, 0, M32)
    c = bump(c, RESERVES)
    c = bump(c, KICKS)
    j = Job(1, Tube(b"default"), 0, 0, 0, b"x\r\n", 0)
    j.counts = c
    assert counters(j) == (0, 0, 7, 0, 0)
    j.counts = bump(bump(0, KICKS), RESERVES)
    assert counters(j) == (1, 0, 0, 0, 1)


def test_a_put_whose_body_comes_late_keeps_id_order():
    """Job 1's id is taken before job 2's, but its body arrives after: the
    run (ids in arrival order) must not put it behind job 2."""
    h = Harness()
    a, b = h.conn(), h.conn()
    h.send(a, b"put 5 0 60 1\r\n")
    assert h.send(b, b"put 5 0 60 1\r\nx\r\n") == b"INSERTED 2\r\n"
    assert h.send(a, b"y\r\n") == b"INSERTED 1\r\n"
    h.send(b, b"put 5 0 60 1\r\nx\r\n")
    order = [h.send(b, b"reserve-with-timeout 0\r\n").split()[1] for _ in range(3)]
    assert order == [b"1", b"2", b"3"]

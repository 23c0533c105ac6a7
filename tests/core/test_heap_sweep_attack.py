"""StaleHeap (a native class owning `entries`) swept in slices while
puts, reserves, releases, kicks, deletes, pause-tube and delays coming
due run between the slices: every reserve gets the best ready job of
the tubes watched, and every heap keeps each live job's entry."""
import random

import pytest

from fakeclock import Harness
from pybeanstalkd.core.heaps import SHIFT
from pybeanstalkd.core.job import DELAYED, READY, RESERVED

TUBES = [b"default", b"t2"]


def live_entries_kept(h):
    q = h.e.q
    errs = []
    for t in q.tubes.named.values():
        ready = set(t.ready.entries)
        run = set(t.run.entries()) if t.run is not None else set()
        dl = set(t.delayed.entries)
        for j in q.jobs.values():
            if j.tube is not t:
                continue
            if j.state == READY and q.ext is None:
                if ((j.pri << SHIFT) | j.id) not in ready and j.id not in run:
                    errs.append(f"ready {j.id} lost")
            if j.state == DELAYED:
                if ((j.deadline << SHIFT) | j.id) not in dl:
                    errs.append(f"delayed {j.id} lost from its tube")
                if ((j.deadline << SHIFT) | j.id) not in set(q.timers.delay_heap.entries):
                    errs.append(f"delayed {j.id} lost from the timers")
    assert not errs, errs


def best(h, c, now):
    q = h.e.q
    cands = [j for j in q.jobs.values() if j.state == READY and j.tube in c.watch
             and j.tube.unpause_at <= now]
    return min(cands, key=lambda j: (j.pri, j.id), default=None)


@pytest.mark.parametrize("seed", range(12))
def test_sweeps_in_slices_with_work_between(seed):
    r = random.Random(seed)
    h = Harness(auto=False)
    a, b = h.conn(), h.conn()
    h.send(a, b"watch t2\r\n")
    for c in (a, b):
        for _ in range(1500):
            h.send(c, b"put %d %d 100 1\r\nx\r\n" % (r.randint(0, 50), r.choice([0, 0, 5, 30])))
        h.send(c, b"use t2\r\n")
    for step in range(4000):
        c = r.choice([a, b])
        op = r.random()
        ids = list(h.e.q.jobs) or [1]
        if op < 0.2:
            h.send(c, b"put %d %d 100 1\r\nx\r\n" % (r.randint(0, 50), r.choice([0, 0, 2, 30])))
        elif op < 0.4:
            exp = best(h, c, h.now)
            out = h.send(c, b"reserve-with-timeout 0\r\n")
            if exp is None:
                assert out in (b"TIMED_OUT\r\n", b"DEADLINE_SOON\r\n"), (step, out)
            elif out != b"DEADLINE_SOON\r\n":
                assert out.startswith(b"RESERVED %d " % exp.id), (step, exp.id, exp.pri, out)
        elif op < 0.5:
            mine = [j.id for j in h.e.q.jobs.values() if j.state == RESERVED]
            if mine:
                h.send(c, b"release %d %d %d\r\n" % (r.choice(mine), r.randint(0, 50), r.choice([0, 1, 3])))
        elif op < 0.6:
            for _ in range(r.randint(1, 30)):
                h.send(c, b"delete %d\r\n" % r.choice(ids))
        elif op < 0.65:
            mine = [j.id for j in h.e.q.jobs.values() if j.state == RESERVED]
            if mine:
                h.send(c, b"bury %d 3\r\n" % r.choice(mine))
        elif op < 0.7:
            h.send(c, b"kick %d\r\n" % r.randint(1, 50))
        elif op < 0.72:
            h.send(c, b"pause-tube %s %d\r\n" % (r.choice(TUBES), r.choice([0, 1, 2])))
        elif op < 0.8:
            h.advance(r.choice([0.2, 1, 3]))
        elif op < 0.83:
            h.send(c, b"kick-job %d\r\n" % r.choice(ids))
        else:
            for _ in range(r.randint(1, 5)):
                h.step()
        if step % 50 == 0:
            live_entries_kept(h)
    while h.step():
        pass
    live_entries_kept(h)

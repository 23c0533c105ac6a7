"""Big heaps of hidden jobs (con: keys with no room; > 2048 entries, so
swept in slices) while reserves, releases, deletes, kicks and puts run
between the slices: every invariant of the tags' model holds, and each
reserve gets the best ready job whose key has room."""
import random

import pytest

from fakeclock import Harness
from pybeanstalkd.core.job import RESERVED

from tagtools import check, expected_reserve


def reserved(jobs):
    return [j.id for j in jobs.values() if j.state == RESERVED]


def reserve_as_predicted(h, c, jobs, step):
    """A reserve that returns at once gets the job the model predicts
    (the best ready one whose key has room), or none if there is none."""
    exp = expected_reserve(h, c, jobs)
    out = h.send(c, b"reserve-with-timeout 0\r\n")
    if out == b"DEADLINE_SOON\r\n":
        return
    if exp is None:
        assert not out.startswith(b"RESERVED"), (step, out)
    else:
        assert out.startswith(b"RESERVED %d " % exp.id), (step, exp.id, out)


def walk(h, conns, r, steps, seed, act):
    """steps random steps, each after a check of the tags' model: with
    one chance in 0.3 a reserve that gets the job the model predicts, else
    act(c, jobs, ids, op) (op drawn in [0.3, 1)); then every slice left
    runs, and a last check."""
    for step in range(steps):
        jobs = check(h, conns, f"seed {seed} step {step}")
        ids = list(jobs) or [1]
        c = r.choice(conns)
        op = r.random()
        if op < 0.3:
            reserve_as_predicted(h, c, jobs, step)
        else:
            act(c, jobs, ids, op)
    while h.step():
        pass
    check(h, conns, f"seed {seed} end")


@pytest.mark.parametrize("seed", range(6))
def test_hidden_heaps_swept_in_slices(seed):
    r = random.Random(seed)
    h = Harness(auto=False, extensions=True)
    a, b = h.conn(), h.conn()
    for _ in range(2600):
        h.send(a, b"put %d 0 100 1 con:%s\r\nx\r\n" % (r.randint(0, 20), r.choice([b"x", b"x", b"y"])))
    for _ in range(200):
        h.send(a, b"put %d 0 100 1\r\nx\r\n" % r.randint(10, 30))
    conns = [a, b]

    def act(c, jobs, ids, op):
        if op < 0.45:
            for _ in range(r.randint(1, 15)):
                h.send(c, b"delete %d\r\n" % r.choice(ids))
        elif op < 0.55:
            mine = reserved(jobs)
            if mine:
                h.send(c, b"release %d %d 0\r\n" % (r.choice(mine), r.randint(0, 20)))
        elif op < 0.6:
            mine = reserved(jobs)
            if mine:
                h.send(c, b"bury %d 3\r\n" % r.choice(mine))
        elif op < 0.65:
            h.send(c, b"kick %d\r\n" % r.randint(1, 100))
        elif op < 0.75:
            for _ in range(r.randint(1, 50)):
                h.send(c, b"put %d 0 100 1 con:%s\r\nx\r\n" % (r.randint(0, 20), r.choice([b"x", b"y", b"z:2"])))
        elif op < 0.8:
            h.advance(r.choice([1, 50, 101]))
        else:
            for _ in range(r.randint(1, 3)):
                h.step()

    walk(h, conns, r, 400, seed, act)


@pytest.mark.parametrize("seed", range(8))
def test_a_hidden_heap_swept_in_slices_while_its_key_frees(seed):
    """Thousands of hidden jobs, most deleted, then one more hidden: its
    heap is swept in slices, and between them its key frees and fills."""
    r = random.Random(seed)
    h = Harness(auto=False, extensions=True)
    a, b = h.conn(), h.conn()
    for _ in range(5000):
        h.send(a, b"put %d 0 100 1 con:x\r\nx\r\n" % r.randint(0, 20))
    first = h.send(b, b"reserve-with-timeout 0\r\n")
    assert first.startswith(b"RESERVED")
    held = int(first.split()[1])
    assert h.send(b, b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"
    ids = [i for i in h.e.q.jobs if i != held]
    r.shuffle(ids)
    for i in ids[:3500]:
        h.send(a, b"delete %d\r\n" % i)
    h.send(a, b"put 0 0 100 1 con:x\r\nx\r\n")
    h.send(b, b"reserve-with-timeout 0\r\n")  # (hides the new one: a push, a sweep)
    conns = [a, b]

    def act(c, jobs, ids, op):
        if op < 0.45:
            mine = reserved(jobs)
            if mine:
                h.send(c, b"%s %d %d 0\r\n" % (r.choice([b"release", b"release", b"bury"]),
                                               r.choice(mine), r.randint(0, 20)))
        elif op < 0.55:
            mine = reserved(jobs)
            if mine:
                h.send(c, b"delete %d\r\n" % r.choice(mine))
        elif op < 0.65:
            for _ in range(r.randint(1, 10)):
                h.send(c, b"delete %d\r\n" % r.choice(ids))
        elif op < 0.7:
            h.send(c, b"kick %d\r\n" % r.randint(1, 5))
        elif op < 0.8:
            h.send(c, b"put %d 0 100 1 con:x\r\nx\r\n" % r.randint(0, 20))
        else:
            for _ in range(r.randint(1, 2)):
                h.step()

    walk(h, conns, r, 300, seed, act)

"""The heaps of reserved jobs by deadline (core/job.py), against a
model: the soonest (deadline, id) first, each job's place kept, and a
remove of a job the heap does not hold changes nothing."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from pybeanstalkd.core.job import Deadlines, Job, Tube

TUBE = Tube(b"default")


def job(id_: int, deadline: int) -> Job:
    j = Job(id_, TUBE, 0, 0, 1, b"x\r\n", 0)
    j.deadline = deadline
    return j


def check(h: Deadlines, model: dict[int, Job]) -> None:
    """The heap holds the model's jobs, each where its place says, each
    no sooner than its parent's; first() is the model's soonest."""
    jobs = h.jobs
    assert len(h) == len(model)
    assert sorted(j.id for j in jobs) == sorted(model)
    for i, j in enumerate(jobs):
        assert (j.conn_at if h.conn else j.ttr_at) == i
        if i:
            p = jobs[(i - 1) >> 1]
            assert (p.deadline, p.id) <= (j.deadline, j.id)
    soonest = min(model.values(), key=lambda j: (j.deadline, j.id), default=None)
    assert h.first() is soonest


ops = st.lists(st.tuples(st.sampled_from(["push", "remove", "touch", "pop"]),
                         st.integers(1, 40), st.integers(0, 8)), max_size=200)


@settings(max_examples=300, deadline=None)
@given(ops, st.booleans())
def test_the_heap_follows_a_model(steps, conn):
    h = Deadlines(conn=conn)
    jobs = {i: job(i, 0) for i in range(1, 41)}
    model: dict[int, Job] = {}
    for op, id_, t in steps:
        j = jobs[id_]
        if op == "push":
            if id_ not in model:
                j.deadline = t
                h.push(j)
                model[id_] = j
        elif op == "remove":
            h.remove(j)  # (a job not in it: nothing)
            model.pop(id_, None)
        elif op == "touch":
            if id_ in model:
                j.deadline += t  # (a touch's deadline is never earlier)
                h.moved(j)
        else:
            first = h.first()
            if first is not None:
                h.remove(first)
                del model[first.id]
        check(h, model)


def test_both_heaps_hold_a_job_each_at_its_own_place():
    ttr, mine = Deadlines(conn=False), Deadlines(conn=True)
    a, b, c = job(1, 30), job(2, 20), job(3, 10)
    for j in (a, b, c):
        ttr.push(j)
    mine.push(a)
    check(ttr, {1: a, 2: b, 3: c})
    check(mine, {1: a})
    ttr.remove(a)
    check(ttr, {2: b, 3: c})
    check(mine, {1: a})  # (its place in the other heap is kept)
    assert a.ttr_at == -1 and a.conn_at == 0


def test_a_remove_of_a_job_held_elsewhere_changes_nothing():
    one, other = Deadlines(conn=False), Deadlines(conn=False)
    a, b = job(1, 10), job(2, 20)
    one.push(a)
    other.push(b)  # b's place (0) is a place in `one` too
    one.remove(b)
    check(one, {1: a})
    one.remove(a)
    one.remove(a)  # (twice: the second finds it gone)
    check(one, {})
    check(other, {2: b})

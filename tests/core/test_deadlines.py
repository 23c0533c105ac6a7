"""The heaps of reserved jobs by deadline (core/job.py: a connection's;
core/timers.py: the queue's heap of holders), against a model: the
soonest (deadline, id) first, each job's and holder's place kept, and a
remove of a job the heap does not hold changes nothing."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from pybeanstalkd.core.job import NO_JOB, SPARE, Conn, Deadlines, Held, Job, Tube
from pybeanstalkd.core.heaps import CONN_SLACK
from pybeanstalkd.core.timers import Expiries

from deadlinetools import check_expiries as check_expiries_whole

TUBE = Tube(b"default")


def job(id_: int, deadline: int) -> Job:
    j = Job(id_, TUBE, 0, 0, 1, b"x\r\n", 0)
    j.deadline = deadline
    return j


def check(h: Deadlines, model: dict[int, Job]) -> None:
    """The heap holds the model's jobs, each where its place says, each
    no sooner than its parent's; first() is the model's soonest."""
    jobs = h.entries()
    room = h.jobs[:h.base] + h.jobs[h.base + len(jobs):]
    assert all(x is NO_JOB for x in room)  # (no job kept alive)
    assert h.base <= len(jobs) + SPARE + 1  # (room in front dropped)
    assert len(h.jobs) - h.base <= max(SPARE, 2 * len(jobs) + 8)  # (room past shrinks)
    assert len(h) == len(model)
    assert sorted(j.id for j in jobs) == sorted(model)
    if h.in_order:
        assert jobs == sorted(jobs, key=lambda j: (j.deadline, j.id))
    for i, j in enumerate(jobs):
        assert j.conn_at == h.origin + i
        if i:
            p = jobs[(i - 1) >> 1]
            assert (p.deadline, p.id) <= (j.deadline, j.id)
    soonest = min(model.values(), key=lambda j: (j.deadline, j.id), default=None)
    assert h.first() is soonest


ops = st.lists(st.tuples(st.sampled_from(["push", "remove", "touch", "pop"]),
                         st.integers(1, 40), st.integers(0, 8)), max_size=200)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_the_heap_follows_a_model(steps):
    h = Deadlines()
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
                h.remove(j)  # (as touch does)
                h.push(j)
        else:
            first = h.first()
            if first is not None:
                h.remove(first)
                del model[first.id]
        check(h, model)


def test_the_room_past_the_entries_holds_no_job_and_shrinks():
    """A heap that held many keeps no reference to a job it let go, and
    its list shrinks back as it empties; one that holds one at a time
    keeps its SPARE slots (no reallocation a reservation)."""
    h = Deadlines()
    many = [job(i, i) for i in range(1, 10_001)]
    for j in many:
        h.push(j)
    slots = h.jobs
    for j in many[:9_990]:
        assert h.remove(j) == 0
    # (taken in order, first each time: the room in front is dropped once
    # it passes the entries plus SPARE, the room past once half the list)
    assert len(h) == 10 and h.jobs is slots
    assert h.base <= 10 + SPARE + 1 and len(h.jobs) <= h.base + 10 + SPARE
    assert sorted(j.id for j in h.entries()) == list(range(9_991, 10_001))
    assert h.jobs[:h.base] + h.jobs[h.base + 10:] == [NO_JOB] * (len(h.jobs) - 10)
    for j in many[9_990:]:
        h.remove(j)
    room = len(h.jobs)
    assert len(h) == 0 and h.first() is None and h.jobs == [NO_JOB] * room and room <= SPARE
    h.push(many[0])
    h.remove(many[0])
    assert h.jobs is slots and h.jobs == [NO_JOB] * room


def test_a_sorted_run_takes_its_first_without_sinking():
    """Pushed in order and taken first each time (a worker holding a few,
    deletes in the order of reservation), the entries stay a sorted run:
    nothing sinks, the room in front is dropped as it grows, and the
    list stays small. One out of order ends the run, and the heap goes
    on as a heap; emptied, it is a run again."""
    h = Deadlines()
    model: dict[int, Job] = {}
    for i in range(1, 1001):
        j = job(i, i // 3)  # (equal deadlines: the ids order them)
        h.push(j)
        model[i] = j
        if i > 5:
            first = h.first()
            assert h.remove(first) == 0
            del model[first.id]
        check(h, model)
        assert h.in_order and len(h.jobs) <= 5 + 2 * SPARE + 2
    late = job(2000, 10)  # sooner than the last: out of order
    h.push(late)
    model[2000] = late
    assert not h.in_order
    check(h, model)
    for j in list(model.values()):
        h.remove(j)
        del model[j.id]
        check(h, model)
    h.push(job(3000, 5))
    assert h.in_order and h.first().id == 3000 and h.base <= SPARE


def test_a_remove_of_a_job_held_elsewhere_changes_nothing():
    one, other = Deadlines(), Deadlines()
    a, b = job(1, 10), job(2, 20)
    one.push(a)
    other.push(b)  # b's place (0) is a place in `one` too
    assert one.remove(b) == -1
    check(one, {1: a})
    assert one.remove(a) == 0
    assert one.remove(a) == -1  # (twice: the second finds it gone)
    check(one, {})
    check(other, {2: b})


def check_expiries(e: Expiries, conns: list[Conn], model: dict[int, tuple[int, Job]]) -> None:
    """Each connection's heap holds its jobs of the model; the holders'
    heap has a current entry for each holding any, no later than its
    soonest (deadlinetools.check_expiries)."""
    for k, c in enumerate(conns):
        check(c.deadlines, {id_: j for id_, (owner, j) in model.items() if owner == k})
    check_expiries_whole(e, [c for c in conns if len(c.deadlines)])
    assert len(e) <= 2 * len(conns) + 1 + CONN_SLACK  # (stale entries swept)


holder_ops = st.lists(st.tuples(st.sampled_from(["push", "remove", "touch", "expire", "drop"]),
                                st.integers(1, 40), st.integers(0, 5), st.integers(0, 8)),
                      max_size=200)


def expire(e: Expiries, now: int) -> list[Job]:
    """What the tick expires at `now` (tick.py), in its order."""
    out = []
    while e.due(now):
        j = e.expiring()
        if j is not None:
            out.append(j)
            j.holder.conn.deadlines.remove(j)
            j.holder = None
    return out


@settings(max_examples=300, deadline=None)
@given(holder_ops)
def test_the_holders_heap_follows_a_model(steps):
    """Reservations expire in (deadline, id) order across the holders,
    each once its deadline has passed, however they were reserved,
    ended, touched and dropped before."""
    e = Expiries()
    conns = [Conn() for _ in range(6)]
    held = [Held(c, 0) for c in conns]  # (a reserved job refers to its holder's block)
    jobs = {i: job(i, 0) for i in range(1, 41)}
    model: dict[int, tuple[int, Job]] = {}  # id -> (its holder's number, job)
    now = 0
    for op, id_, k, t in steps:
        j = jobs[id_]
        c = conns[k]
        if op == "push":
            if id_ not in model:
                j.deadline = now + t
                j.holder = held[k]
                if c.deadlines.push(j):
                    e.lower(c.deadlines, j)
                model[id_] = (k, j)
        elif op == "remove":
            if model.get(id_, (-1, j))[0] == k:
                j.holder = None  # (as the queue does: cleared before the heaps hear of it)
                del model[id_]
            c.deadlines.remove(j)  # (another's job, or none: nothing)
        elif op == "touch":
            if id_ in model:
                j.deadline += t
                d = conns[model[id_][0]].deadlines
                d.remove(j)  # (as touch does)
                if d.push(j):
                    e.lower(d, j)
        elif op == "expire":
            now += t
            due = sorted((j for _, j in model.values() if j.deadline < now),
                         key=lambda j: (j.deadline, j.id))
            assert expire(e, now) == due
            for j in due:
                del model[j.id]
        else:  # a connection closes: its reservations no longer expire
            e.drop(c)
            model = {i: v for i, v in model.items() if v[0] != k}
            for j in jobs.values():
                if j.holder is held[k]:
                    j.holder = None  # (returned in slices, reserving.py)
        check_expiries(e, conns, model)


def test_a_worker_enters_the_expiries_once():
    """A connection reserving and ending one job at a time makes one
    entry, at its first reserve; it leaves when it comes due holding
    none, and a close makes its entry stale."""
    e = Expiries()
    c = Conn()
    held = Held(c, 0)
    for i in range(1, 101):
        j = job(i, i)
        j.holder = held
        assert c.deadlines.push(j) == (i == 1)  # (later than its entry: no call)
        if i == 1:
            assert e.lower(c.deadlines, j)
        c.deadlines.remove(j)
        j.holder = None
    assert len(e) == 1 and e.current == 1
    assert expire(e, 1000) == [] and len(e) == 0 and e.current == 0
    j = job(200, 2000)
    j.holder = held
    assert c.deadlines.push(j) and e.lower(c.deadlines, j) and e.current == 1
    e.drop(c)
    assert e.current == 0 and e.holders() == [] and expire(e, 10**6) == []


def test_stale_entries_are_swept():
    """A holder whose soonest keeps coming sooner leaves stale entries
    behind: swept once they outnumber the current ones past CONN_SLACK."""
    e = Expiries()
    c = Conn()
    held = Held(c, 0)
    for i in range(1000):
        j = job(i + 1, 10**6 - i)
        j.holder = held
        assert c.deadlines.push(j) and e.lower(c.deadlines, j)
        assert len(e) <= 2 + CONN_SLACK + 1
    assert e.current == 1 and e.holders() == [c]


def test_clear_gives_back_the_entries_without_the_room():
    h = Deadlines()
    many = [job(i, i) for i in range(1, 201)]
    for j in many:
        h.push(j)
    for j in many[:120]:
        h.remove(j)
    held = h.clear()
    assert sorted(j.id for j in held) == list(range(121, 201)) and NO_JOB not in held
    assert len(h) == 0 and h.first() is None and h.jobs == []

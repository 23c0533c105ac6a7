"""The heaps of reserved jobs (core/job.py: Deadlines, core/timers.py:
Expiries), checked whole against the queue's reservations: tests/core's
attacks on them share it."""
from pybeanstalkd.core.job import NO_JOB, RESERVED
from pybeanstalkd.core.timers import ttr_key


def check_heaps(h, conns):
    """Every reserved job refers to a block of its holder's that holds it;
    each live connection's heap holds exactly its reservations, at their
    recorded places, in heap order, and gives its soonest first; the
    queue's heap of holders has an entry for each live connection
    holding some, no later than its soonest (conns: the live ones)."""
    q = h.e.q
    reserved = {j.id: j for j in q.jobs.values() if j.state == RESERVED}
    for j in q.jobs.values():
        if j.state != RESERVED:
            assert j.holder is None, ("holder", j.id, j.state)
    for id_, j in reserved.items():
        held = j.holder
        assert held is not None and held.jobs.get(id_) is j, ("held", id_)
        assert held.conn.held.get(held.key) is held, ("block", id_)
    expiries = q.timers.ttr_heap
    holding = []
    for c in conns:
        d = c.deadlines
        js = d.entries()
        assert all(x is NO_JOB for x in d.jobs[:d.base] + d.jobs[d.base + len(js):])  # (no job kept alive)
        for i, j in enumerate(js):
            assert j.conn_at == d.origin + i, ("conn_at", j.id, j.conn_at, i)
            assert j.state == RESERVED, ("conn state", j.id, j.state)
            assert j.holder.conn is c, ("owner", j.id)
            if i:
                p = js[(i - 1) >> 1]
                assert (p.deadline, p.id) < (j.deadline, j.id)
        mine = [j for j in reserved.values() if j.holder.conn is c]
        assert len(mine) == len(js) == c.nreserved, (len(mine), len(js), c.nreserved)
        if mine:
            soon = min(mine, key=lambda j: (j.deadline, j.id))
            assert c.deadlines.first() is soon
            holding.append(c)
    check_expiries(expiries, holding)
    assert q.reserved_ct == len(reserved)


def check_expiries(expiries, holding):
    """The queue's heap of holders is a heap; each connection holding
    reservations (holding) has a current entry, no later than its
    soonest; holders() gives them; `current` counts the connections
    with one."""
    heap = expiries.heap
    for i in range(1, len(heap)):
        assert heap[(i - 1) >> 1] <= heap[i]
    current = {id(e[2]): e[2] for e in heap if e[0] == e[2].bound}
    assert expiries.current == len(current)
    for c in holding:
        soon = c.deadlines.first()
        assert id(c.deadlines) in current, ("no entry", c)
        assert c.deadlines.bound <= ttr_key(soon), ("entry later than its soonest", c)
    assert sorted(map(id, expiries.holders())) == sorted(map(id, holding))

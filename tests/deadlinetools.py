"""The heaps of reserved jobs (core/job.py: Deadlines), checked whole
against the queue's reservations: tests/core's attacks on them share it."""
from pybeanstalkd.core.job import RESERVED


def check_heaps(h, conns):
    """Every reserved job is in the TTR heap and in exactly its live
    owner's heap, at its recorded places, in heap order, and nothing else
    is in them; each live connection's heap holds its nreserved and gives
    its soonest first (conns: the live ones)."""
    q = h.e.q
    ttr = q.timers.ttr_heap
    reserved = {}
    for blk in q.owners.values():
        for id_, held in blk.items():
            reserved[id_] = held
    for id_, held in reserved.items():
        assert held.jobs[id_].state == RESERVED
    for i, j in enumerate(ttr.jobs):
        assert j.ttr_at == i, ("ttr_at", j.id, j.ttr_at, i)
        assert j.state == RESERVED, ("ttr state", j.id, j.state)
        assert j.id in reserved
        if i:
            p = ttr.jobs[(i - 1) >> 1]
            assert (p.deadline, p.id) < (j.deadline, j.id)
    for c in conns:
        js = c.deadlines.jobs
        for i, j in enumerate(js):
            assert j.conn_at == i, ("conn_at", j.id, j.conn_at, i)
            assert j.state == RESERVED, ("conn state", j.id, j.state)
            assert reserved[j.id].conn is c, ("owner", j.id)
            if i:
                p = js[(i - 1) >> 1]
                assert (p.deadline, p.id) < (j.deadline, j.id)
        mine = [held.jobs[id_] for id_, held in reserved.items() if held.conn is c]
        assert len(mine) == len(js) == c.nreserved, (len(mine), len(js), c.nreserved)
        if mine:
            soon = min(mine, key=lambda j: (j.deadline, j.id))
            assert c.deadlines.first() is soon
    for id_, held in reserved.items():
        j = held.jobs[id_]
        if held.conn.gone:
            continue
        assert ttr.jobs[j.ttr_at] is j, ("not in ttr", id_)
    assert sum(1 for h_ in reserved.values() if not h_.conn.gone) <= len(ttr)
    assert q.reserved_ct == len(reserved)

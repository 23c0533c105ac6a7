"""The id map's invariants (core/jobmap.py), checked by the tests that attack it."""
from pybeanstalkd.core.jobmap import BITS, LOW, NO_JOBS, Block, Sparse

SIZE = 1 << BITS


def check_map(q, live=None):
    """The JobMap invariants; live: the ids the model says are stored."""
    jm = q.jobs
    assert jm.blocks is q.blocks
    found = []
    for k, b in q.blocks.items():
        assert b.__class__ in (Block, Sparse), type(b)
        assert b is not NO_JOBS and b is not jm.spare
        if b.__class__ is Block:
            assert len(b) == SIZE
            slots = [i for i, j in enumerate(b) if j is not None]
        else:
            assert all(0 <= i <= LOW for i in b)
            slots = [i for i, j in b.items() if j is not None]
        assert b.live == len(slots), (k, b.live, len(slots))
        assert b.live > 0, "an empty block left in q.blocks: %d" % k
        ids = b.ids(k)
        # ascending within a Block; a Sparse lists in the order its slots
        # were written (an id written into it after the copy comes last), as
        # the dict blocks before it did: nothing relies on the order
        if b.__class__ is Block:
            assert ids == sorted(ids), "ids not ascending within block %d" % k
        assert sorted(ids) == sorted((k << BITS) + i for i in slots)
        for i in slots:
            assert b[i].id == (k << BITS) + i
        found += ids
    if (q.ids.next >> BITS) in q.blocks:
        assert q.blocks[q.ids.next >> BITS].__class__ is Block, \
            "a Sparse for the block holding next_id"
    listed = list(jm)
    assert sorted(listed) == sorted(found) and len(set(listed)) == len(listed)
    assert len(jm) == len(listed)
    assert sorted(j.id for j in jm.values()) == sorted(listed)
    for i in listed:
        assert i in jm and jm[i].id == i and jm.get(i) is jm[i]
    if live is not None:
        assert set(listed) == set(live)
    # the stand-ins are never written to
    assert NO_JOBS.live == 0 and NO_JOBS.count(None) == SIZE
    if jm.spare is not None:
        assert jm.spare.__class__ is Block and jm.spare.live == 0
        assert jm.spare.count(None) == SIZE
        assert all(b is not jm.spare for b in q.blocks.values())

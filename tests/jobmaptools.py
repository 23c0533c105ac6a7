"""The id map's invariants (core/jobmap.py), checked by the tests that attack it."""
from pybeanstalkd.core.jobmap import BITS, LOW, Block

SIZE = 1 << BITS


def check_map(q, live=None):
    """The JobMap invariants; live: the ids the model says are stored."""
    jm = q.jobs
    found = []
    for k, b in jm.blocks.items():
        assert b.__class__ is Block, type(b)
        assert b is not jm.spare
        if b.few is None:
            assert len(b.table) == SIZE
            slots = [i for i, j in enumerate(b.table) if j is not None]
        else:
            assert b.table == [] and all(0 <= i <= LOW for i in b.few)
            assert None not in b.few.values()
            slots = list(b.few)
        assert b.live == len(slots), (k, b.live, len(slots))
        assert b.live > 0, "an empty block left in the map: %d" % k
        ids = b.ids(k)
        # ascending within a full block; a thinned one lists in the order
        # its slots were written (an id written into it after it thinned
        # comes last): nothing relies on the order
        if b.few is None:
            assert ids == sorted(ids), "ids not ascending within block %d" % k
        assert sorted(ids) == sorted((k << BITS) + i for i in slots)
        for i in slots:
            assert jm.get((k << BITS) + i).id == (k << BITS) + i
        found += ids
    if (q.ids.next >> BITS) in jm.blocks:
        assert jm.blocks[q.ids.next >> BITS].few is None, \
            "the block holding next_id thinned"
    listed = list(jm)
    assert sorted(listed) == sorted(found) and len(set(listed)) == len(listed)
    assert len(jm) == len(listed)
    assert sorted(j.id for j in jm.values()) == sorted(listed)
    for i in listed:
        assert i in jm and jm[i].id == i and jm.get(i) is jm[i]
    if live is not None:
        assert set(listed) == set(live)
    # the spare is empty and full-sized, and in no other place
    if jm.spare is not None:
        assert jm.spare.few is None and jm.spare.live == 0
        assert jm.spare.table.count(None) == SIZE
        assert all(b is not jm.spare for b in jm.blocks.values())

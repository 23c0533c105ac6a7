"""The id blocks of the tags' state (core/idmap.py): a map by job id that
answers as a dict would, each block a small dict while it has DENSE values
or fewer and a table past that, back to a small dict at THIN, gone empty."""
from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from pybeanstalkd.core.idmap import BITS, DENSE, LOW, THIN, IdMap

SIZE = 1 << BITS


def check(m: IdMap, model: dict) -> None:
    """m holds what model does, and its blocks keep their rules."""
    assert len(m) == len(model) and bool(m) == bool(model)
    assert sorted(m) == sorted(model)
    assert dict(m.items()) == model
    for id_, v in model.items():
        assert m.get(id_) == v and m[id_] == v and id_ in m
    seen = 0
    for k, b in m.blocks.items():
        slots = b.slots()
        assert b.live == len(slots) > 0, "an empty block kept"
        if b.few is None:  # (down to THIN only if made a table from the start)
            assert len(b.table) == SIZE and slots == sorted(slots)
        else:
            assert b.table == [] and len(b.few) <= DENSE
        assert m.ids(k) == [(k << BITS) + i for i in slots]
        seen += b.live
    assert seen == len(model)
    if m.k >= 0:
        assert m.blocks.get(m.k) is m.last, "the block at hand is not the map's"


def test_a_block_is_a_small_dict_then_a_table_then_a_small_dict():
    m: IdMap[int] = IdMap()
    model = {}
    for id_ in range(SIZE, SIZE + DENSE):
        m[id_] = model[id_] = id_
    b = m.blocks[1]
    assert b.few is not None and b.live == DENSE
    m[SIZE + DENSE] = model[SIZE + DENSE] = 0  # (a value may be anything but None)
    assert b.few is None and b.table[DENSE] == 0
    check(m, model)
    for id_ in range(SIZE, SIZE + DENSE - THIN + 1):
        assert m.pop(id_) == model.pop(id_)
    assert b.few is not None and b.live == THIN
    check(m, model)
    for id_ in list(model):
        del m[id_]
        del model[id_]
    assert m.blocks == {} and m.k == -1 and m.get(SIZE) is None
    check(m, model)


def test_the_block_after_a_dense_one_is_a_table_from_the_start():
    m: IdMap[bool] = IdMap()
    for id_ in range(1, SIZE + 1):
        m[id_] = True
    assert m.blocks[1].few is None and m.blocks[1].live == 1
    sparse: IdMap[bool] = IdMap()
    for id_ in range(0, 3 * SIZE, 64):  # (64 a block: small dicts all along)
        sparse[id_] = True
    assert all(b.few is not None for b in sparse.blocks.values())


def test_a_value_replaced_and_missing_ids():
    m: IdMap[str] = IdMap()
    m[5] = "a"
    m[5] = "b"
    assert len(m) == 1 and m[5] == "b"
    assert m.get(6) is None and m.pop(6) is None and m.pop(1 << 40) is None
    for missing in (6, 1 << 40):
        try:
            del m[missing]
        except KeyError:
            pass
        else:
            raise AssertionError("no KeyError")
    m.clear()
    assert not m and m.get(5) is None
    m[5] = "c"
    assert m[5] == "c"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3 * SIZE - 1)), max_size=400),
       st.integers(0, 2**32))
def test_against_a_dict(ops, seed):
    """Random sets and pops, dense runs among them, as a dict answers."""
    m: IdMap[int] = IdMap()
    model: dict[int, int] = {}
    rnd = random.Random(seed)
    for setting, id_ in ops:
        if rnd.random() < 0.05:  # a run of puts: blocks fill past DENSE
            start = id_ & ~LOW
            for i in range(start, start + rnd.randrange(DENSE + 50)):
                m[i] = model[i] = i
        if setting:
            m[id_] = model[id_] = rnd.randrange(3)
        else:
            assert m.pop(id_) == model.pop(id_, None)
    check(m, model)
    for id_ in list(model):  # drained: down through THIN, each block going
        assert m.pop(id_) == model.pop(id_)
    check(m, model)

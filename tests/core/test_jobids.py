"""Job ids come from one place: handed out once each, never below an id a
record used, never past the bound."""
from hypothesis import given
from hypothesis import strategies as st

from pybeanstalkd.core.jobids import SHORT_MAX, JobIds
from pybeanstalkd.core.protocol import U64_MAX


def test_ids_go_up_from_one_until_the_bound():
    ids = JobIds()
    assert [ids.take(), ids.take()] == [1, 2] and ids.left() == U64_MAX - 2
    ids.bound(3)
    assert ids.take() == 3 and ids.used_up() and ids.take() == 0 and ids.left() == 0
    assert ids.next == 4  # (a refused take uses nothing up)


def test_a_record_s_id_is_never_handed_out():
    ids = JobIds()
    ids.seen(41)
    assert ids.take() == 42
    ids.seen(7)  # (an older one moves nothing)
    assert ids.take() == 43


def test_a_block_that_does_not_follow_skips_ahead():
    ids = JobIds()
    ids.bound(0)
    assert ids.used_up()
    ids.skip_to(100)
    ids.bound(103)
    assert [ids.take() for _ in range(5)] == [100, 101, 102, 103, 0]
    ids.skip_to(50)  # (never back)
    assert ids.next == 104


@given(st.lists(st.one_of(st.just(("take",)), st.tuples(st.just("seen"), st.integers(0, 60)),
                          st.tuples(st.just("skip"), st.integers(0, 60)),
                          st.tuples(st.just("bound"), st.integers(0, 60))), max_size=40),
       st.one_of(st.just(U64_MAX), st.integers(0, 50)))
def test_no_id_twice_none_seen_none_past_the_bound(ops, top):
    ids = JobIds(top)
    given_out, seen = set(), set()
    for op in ops:
        if op[0] == "take":
            last = ids.last
            id_ = ids.take()
            if id_:
                assert id_ not in given_out and id_ not in seen and 1 <= id_ <= last
                given_out.add(id_)
            else:
                assert ids.used_up()
        elif op[0] == "seen":
            ids.seen(op[1])
            seen.add(op[1])
        elif op[0] == "skip":
            ids.skip_to(op[1])
        else:
            ids.bound(op[1])
        assert ids.last <= top and ids.next <= top + 1


def test_nothing_moves_the_ids_past_their_top():
    """The top (2**63 - 1 with --extensions, whose records take the ids
    above): a record's id, a block or a bound past it stops there, so the
    next id always fits 64 bits."""
    ids = JobIds(10)
    ids.seen(U64_MAX)
    assert ids.next == 11 and ids.used_up() and ids.take() == 0
    ids = JobIds(10)
    ids.skip_to(1 << 70)
    ids.bound(1 << 70)
    assert (ids.next, ids.last, ids.left()) == (11, 10, 0)
    ids = JobIds()
    ids.seen(U64_MAX)
    assert ids.next == U64_MAX + 1 and ids.take() == 0


@given(st.sampled_from([0, SHORT_MAX - 30, (1 << 63) - 60, U64_MAX - 60]),
       st.lists(st.one_of(st.just(("take",)), st.tuples(st.just("seen"), st.integers(0, 60)),
                          st.tuples(st.just("bound"), st.integers(0, 60))), max_size=40),
       st.sampled_from([U64_MAX, (1 << 63) - 1, SHORT_MAX, SHORT_MAX + 5]))
def test_ids_about_the_biggest_unboxed_int_end_where_the_bound_says(base, ops, top):
    # (JobIds.near: the bound is compared only past SHORT_MAX)
    ids = JobIds(top)
    ids.seen(base)
    for op in ops:
        if op[0] == "take":
            n, last = ids.next, ids.last
            id_ = ids.take()
            assert id_ == (n if n <= last else 0)
            assert ids.used_up() == (ids.next > ids.last)
        elif op[0] == "seen":
            ids.seen(base + op[1])
        else:
            ids.bound(base + op[1])
        assert ids.last <= top and ids.next <= top + 1

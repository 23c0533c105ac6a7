"""Attacks on the indexed Deadlines heaps: each test fails if
a heap keeps a job whose reservation ended, misses a reserved one, or a
job's recorded place is wrong."""
from deadlinetools import check_heaps
from fakeclock import Harness
from test_core_admin import put, reserve as reserve_id
from pybeanstalkd.core.job import RESERVED
from pybeanstalkd.core.slices import SLICE


def hold_in_two_tubes(h, a):
    """a puts SLICE jobs in default (TTR 100) and 3 in f (TTR 10), then
    reserves all of them: SLICE default ones first."""
    for _ in range(SLICE):
        put(h, a, ttr=100)
    h.send(a, b"use f\r\n")
    for _ in range(3):
        put(h, a, ttr=10)
    for _ in range(SLICE):
        reserve_id(h, a)
    h.send(a, b"watch f\r\n")
    h.send(a, b"ignore default\r\n")
    for _ in range(3):
        reserve_id(h, a)


def test_flush_of_a_gone_conns_job_misplaces_a_job_now_held_by_another():
    """A closes holding SLICE default jobs (ttr 100) then a few jobs of
    tube f (ttr 10). Its first return slice puts the default jobs back;
    B reserves (reserve-job) the one at the end of A's (not yet cleared)
    heap; flush-tube f deletes A's f jobs, still RESERVED by the gone A:
    _unreserve removes each from A's heap, whose sift moves B's job and
    overwrites its conn_at. B's delete then leaves it in B's heap."""
    h = Harness(auto=False, extensions=True)
    a, b, x = h.conn(), h.conn(), h.conn()
    hold_in_two_tubes(h, a)
    last = a.deadlines.entries()[-1]
    assert last.tube.name == b"default"
    h.e.close(a, h.now)  # first slice: the SLICE default jobs back to ready
    assert last.state != RESERVED
    out = h.send(b, b"reserve-job %d\r\n" % last.id)
    assert out.startswith(b"RESERVED %d " % last.id), out
    assert last.conn_at == 0
    out = h.send(x, b"flush-tube f\r\n")
    while h.step():
        pass
    out += h.take(x)
    check_heaps(h, [b, x])
    assert h.send(b, b"delete %d\r\n" % last.id) == b"DELETED\r\n"
    assert len(b.deadlines) == 0, [j.id for j in b.deadlines.entries()]
    # on the wire: B holds nothing, so a reserve with no jobs times out,
    # never DEADLINE_SOON
    h.send(b, b"watch g\r\n")
    h.send(b, b"ignore default\r\n")  # (A's other jobs are ready there)
    h.advance(200)
    assert h.send(b, b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"


def test_flush_of_a_gone_conns_job_wire_symptom():
    """The same sequence, seen only on the wire: B deletes the one job it
    holds, and 200 s later its reserve-with-timeout 0 (no ready jobs)
    must be TIMED_OUT; a stale entry left in B's heap makes it DEADLINE_SOON."""
    h = Harness(auto=False, extensions=True)
    a, b, x = h.conn(), h.conn(), h.conn()
    hold_in_two_tubes(h, a)
    # (which job ends A's heap follows from the heap's order alone; the
    # white-box read only names it)
    last = 8  # (= a.deadlines.jobs[-1].id: a constant, so the test runs on the old code too)
    h.e.close(a, h.now)
    # B takes the job A gave back that ends A's heap, then flush-tube f runs
    ids = [last]
    out = h.send(b, b"reserve-job %d\r\n" % last)
    assert out.startswith(b"RESERVED %d " % last), out
    h.send(x, b"flush-tube f\r\n")
    while h.step():
        pass
    for id_ in ids:
        assert h.send(b, b"delete %d\r\n" % id_) == b"DELETED\r\n"
    h.send(b, b"watch g\r\n")
    h.send(b, b"ignore default\r\n")  # (A's other jobs are ready there)
    h.advance(200)
    assert h.send(b, b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"


def test_equal_deadlines_expire_by_id_whatever_the_reserve_order():
    """--max-tries 1: each expiry buries, so the buried (kick) order shows
    the expiry order, which must be (deadline, id) as the reference's."""
    h = Harness(auto=True, max_tries=1)
    a, b = h.conn(), h.conn()
    for _ in range(6):
        put(h, a, ttr=1)
    for id_, c in ((5, a), (3, b), (6, a), (1, b), (4, a), (2, b)):
        out = h.send(c, b"reserve-job %d\r\n" % id_)
        assert out.startswith(b"RESERVED %d " % id_), out
    h.send(a, b"touch 5\r\n")  # same now: same deadline again
    h.advance(3)
    kicked = []
    for _ in range(6):
        assert h.send(a, b"kick 1\r\n") == b"KICKED 1\r\n"
        out = h.send(a, b"reserve-with-timeout 0\r\n")
        kicked.append(int(out.split()[1]))
    assert kicked == [1, 2, 3, 4, 5, 6]


def test_deadline_soon_follows_touch_and_delete():
    h = Harness(auto=True)
    a = h.conn()
    put(h, a, ttr=2)
    put(h, a, ttr=100)
    assert reserve_id(h, a) == 1
    assert reserve_id(h, a) == 2
    h.advance(1.5)
    assert h.send(a, b"reserve-with-timeout 0\r\n") == b"DEADLINE_SOON\r\n"
    assert h.send(a, b"touch 1\r\n") == b"TOUCHED\r\n"
    assert h.send(a, b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"
    h.advance(1.5)
    assert h.send(a, b"reserve-with-timeout 0\r\n") == b"DEADLINE_SOON\r\n"
    assert h.send(a, b"delete 1\r\n") == b"DELETED\r\n"
    assert h.send(a, b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"
    h.advance(96.5)  # 99.5 s of job 2's 100
    assert h.send(a, b"reserve-with-timeout 0\r\n") == b"DEADLINE_SOON\r\n"
    h.advance(1)
    assert h.send(a, b"reserve-with-timeout 0\r\n") == b"RESERVED 2 1\r\nx\r\n"


def close_steps(keep: int, first: int) -> int:
    """The background steps a close takes when its connection reserved
    `first` jobs and deleted all but `keep` of them before closing."""
    h = Harness(auto=False)
    a, p = h.conn(), h.conn()
    for _ in range(first):
        put(h, p)
    ids = [reserve_id(h, a) for _ in range(first)]
    for i in ids[:first - keep]:
        assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    h.e.close(a, h.now)
    steps = 1
    while h.step():
        steps += 1
    check_heaps(h, [p])
    return steps


def test_a_close_frees_its_reservations_not_its_heaps_room():
    """A heap keeps room past its entries (job.py: Deadlines); a close's
    slices free the reservations left, and take no more steps for the
    room the deleted ones left behind."""
    keep = SLICE + 6
    assert close_steps(keep, first=2 * SLICE + 2) == close_steps(keep, first=keep)

"""Bounded work per loop pass, on the pure engine with the fake clock.

Big kicks, closes with many reservations, timers coming due together and an
unpaused tube's waiters move at most SLICE jobs per slice, with other
clients served in between; the job map grows in blocks; big heaps are swept
in slices. Each test checks the bound, so it fails if the work is done in
one step.
"""
import heapq
import random
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakeclock import Harness
from pybeanstalkd.core.jobmap import BITS, THIN
from pybeanstalkd.core.protocol import NS
from pybeanstalkd.core.queue import SMALL_HEAP
from pybeanstalkd.core.slices import SLICE

N = 3 * SLICE + 17  # spans four slices


@pytest.fixture
def h():
    return Harness(auto=False)


def put(h, s, body=b"x", pri=0, delay=0, ttr=60):
    return h.send(s, b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body))


def stat(h, s, cmd: bytes) -> dict:
    out = h.send(s, cmd)
    assert out.startswith(b"OK "), out
    lines = out.split(b"\r\n", 1)[1].decode().splitlines()[1:]
    return dict(line.split(": ", 1) for line in lines if line)


def reserve_id(h, s) -> int:
    out = h.send(s, b"reserve-with-timeout 0\r\n")
    assert out.startswith(b"RESERVED "), out
    return int(out.split()[1])


def hold(h, s, n, **put_kw):
    """Put n jobs, then reserve them all on s."""
    for _ in range(n):
        put(h, s, **put_kw)
    for _ in range(n):
        reserve_id(h, s)


def drain(h) -> int:
    steps = 0
    while h.step():
        steps += 1
    return steps + 1


def assert_heap(heap):
    for i in range(1, len(heap)):
        assert heap[(i - 1) >> 1] <= heap[i], i


# -- kick ------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["buried", "delayed"])
def test_kick_spans_slices_while_others_reserve_and_delete(h, kind):
    a, b = h.conn(), h.conn()
    for _ in range(N):
        put(h, a, delay=100 if kind == "delayed" else 0)
    if kind == "buried":
        for i in range(1, N + 1):
            assert reserve_id(h, a) == i
            assert h.send(a, b"bury %d 0\r\n" % i) == b"BURIED\r\n"
    q = h.e.q
    # The reply, and the commands pipelined after it, wait for the last slice.
    assert h.send(a, b"kick 1000000\r\nlist-tube-used\r\n") == b""
    assert q.ready_ct == SLICE
    taken = []
    while q.slices.work:
        st = stat(h, b, b"stats-tube default\r\n")  # partial counts, exact
        assert int(st["current-jobs-ready"]) + int(st[f"current-jobs-{kind}"]) \
            == N - len(taken)
        j = reserve_id(h, b)
        taken.append(j)
        assert h.send(b, b"delete %d\r\n" % j) == b"DELETED\r\n"
        assert h.take(a) == b""
        h.step()
    assert h.take(a) == b"KICKED %d\r\nUSING default\r\n" % N
    assert taken == list(range(1, len(taken) + 1))  # priority then id, as kicked
    rest = [reserve_id(h, b) for _ in range(N - len(taken))]
    assert rest == list(range(len(taken) + 1, N + 1))
    st = stat(h, a, b"stats-job %d\r\n" % N)
    assert st["kicks"] == "1"
    st = stat(h, a, b"stats\r\n")
    assert st["cmd-kick"] == "1" and st[f"current-jobs-{kind}"] == "0"
    assert st["current-jobs-reserved"] == str(N - len(taken))


def test_kick_below_a_slice_answers_at_once(h):
    a = h.conn()
    for _ in range(SLICE):
        put(h, a, delay=100)
    assert h.send(a, b"kick %d\r\n" % SLICE) == b"KICKED %d\r\n" % SLICE
    assert not h.e.q.slices.work


def test_kick_stops_at_what_the_tube_held(h):
    """A kick moves at most as many jobs as the tube held when it started;
    each slice takes the best delayed job at that time."""
    a, b = h.conn(), h.conn()
    for _ in range(N):
        put(h, a, delay=100)
    assert h.send(a, b"kick 1000000\r\n") == b""
    put(h, b, delay=1)  # due before every other delayed job
    drain(h)
    assert h.take(a) == b"KICKED %d\r\n" % N
    assert stat(h, b, b"stats-job %d\r\n" % (N + 1))["state"] == "ready"
    assert stat(h, b, b"stats-job %d\r\n" % N)["state"] == "delayed"


def test_half_close_during_a_kick_answers_then_closes(h):
    a = h.conn()
    for _ in range(N):
        put(h, a, delay=100)
    assert h.send(a, b"kick %d\r\nuse x\r\n" % N) == b""
    h.e.eof(a, h.now)
    assert not a.closing
    drain(h)
    # The rest of its input runs one reply a pass, as after any hang-up.
    assert h.take(a) == b"KICKED %d\r\n" % N and not a.closing
    assert h.e.backlog == [a]
    h.e.backlog.clear()
    h.e.more(a, h.now)
    assert h.take(a) == b"USING x\r\n"
    assert a.closing and not h.e.backlog


# -- timers ----------------------------------------------------------------

def test_delayed_jobs_due_together_move_in_slices(h):
    a, b = h.conn(), h.conn()
    for _ in range(N):
        put(h, a, delay=2)
    q = h.e.q
    h.now += 2 * NS
    h.e.tick(h.now)
    assert q.ready_ct == SLICE and q.delayed_ct == N - SLICE
    assert h.e.next_due() <= h.now  # the rest is still due: tick again soon
    assert reserve_id(h, b) == 1  # served between slices
    ticks = 1
    while h.e.next_due() is not None and h.e.next_due() <= h.now:
        h.e.tick(h.now)
        ticks += 1
    assert ticks == 4
    assert q.delayed_ct == 0 and q.ready_ct == N - 1
    assert [reserve_id(h, b) for _ in range(N - 1)] == list(range(2, N + 1))


def test_ttr_expiries_due_together_move_in_slices(h):
    a, b = h.conn(), h.conn()
    for _ in range(N):
        put(h, a, ttr=1)
    for _ in range(N):
        reserve_id(h, a)
    q = h.e.q
    h.now += NS + 1
    h.e.tick(h.now)
    # (a tick's SLICE steps: each expiry of a's, then a's entry in the
    # expiries moving on to its next: timers.py)
    st = stat(h, b, b"stats\r\n")
    assert st["job-timeouts"] == str(SLICE // 2) and st["current-jobs-ready"] == str(SLICE // 2)
    assert st["current-jobs-reserved"] == str(N - SLICE // 2)
    while (due := h.e.next_due()) is not None and due <= h.now:
        h.e.tick(h.now)
    st = stat(h, b, b"stats\r\n")
    assert st["job-timeouts"] == str(N) and q.reserved_ct == 0


# -- a close with many reservations ----------------------------------------

def test_close_returns_reservations_in_slices(h):
    a, b = h.conn(), h.conn()
    hold(h, a, N, ttr=5)
    q = h.e.q
    h.close(a)
    assert q.reserved_ct == N - SLICE and q.ready_ct == SLICE
    assert stat(h, b, b"stats\r\n")["current-connections"] == "1"
    assert reserve_id(h, b) == 1  # returned first: the first reserved
    # The TTRs pass before the slices end: only b's job times out; the
    # closed connection's jobs do not, as when the reference returns them
    # all at close.
    h.now += 6 * NS
    h.e.tick(h.now)
    assert q.reserved_ct == N - SLICE
    drain(h)
    st = stat(h, b, b"stats\r\n")
    assert st["job-timeouts"] == "1" and st["current-jobs-reserved"] == "0"
    assert st["current-jobs-ready"] == str(N)
    assert stat(h, b, b"stats-job 2\r\n")["timeouts"] == "0"
    assert not a.nreserved and not a.held and len(a.deadlines) == 0


def test_close_hands_jobs_to_waiters_in_reservation_order(h):
    a = h.conn()
    for _ in range(N):
        put(h, a)
    for i in range(N, 0, -1):  # reserved last to first
        assert h.send(a, b"reserve-job %d\r\n" % i).startswith(b"RESERVED")
    waiters = [h.conn() for _ in range(3)]
    for w in waiters:
        assert h.send(w, b"reserve\r\n") == b""
    h.close(a)
    got = [int(h.take(w).split()[1]) for w in waiters]
    assert got == [N, N - 1, N - 2]


# -- an unpaused tube's waiters ---------------------------------------------

def test_unpause_serves_many_waiters_in_slices_first_come_first_served(h):
    p = h.conn()
    assert h.send(p, b"pause-tube default 1\r\n") == b"PAUSED\r\n"
    waiters = [h.conn() for _ in range(N)]
    for w in waiters:
        assert h.send(w, b"reserve\r\n") == b""
    for _ in range(N + 5):
        put(h, p)
    q = h.e.q
    h.now += NS
    h.e.tick(h.now)
    assert q.reserved_ct == SLICE - 1  # (the pause's end counts as one)
    assert q.waiting_ct == N - q.reserved_ct
    late = h.conn()
    assert h.send(late, b"reserve\r\n") == b""  # queued behind the others
    drain(h)
    got = [int(h.take(w).split()[1]) for w in waiters]
    assert got == list(range(1, N + 1))
    assert int(h.take(late).split()[1]) == N + 1
    assert q.waiting_ct == 0 and q.ready_ct == 4


def test_reserve_during_unpause_slices_takes_another_tubes_job(h):
    p = h.conn()
    h.send(p, b"use other\r\n")
    put(h, p)  # job 1 in tube "other"
    h.send(p, b"use default\r\npause-tube default 1\r\n")
    waiters = [h.conn() for _ in range(N)]
    for w in waiters:
        h.send(w, b"reserve\r\n")
    for _ in range(N):
        put(h, p)
    h.now += NS
    h.e.tick(h.now)
    c = h.conn()
    assert h.send(c, b"watch other\r\nreserve\r\n") == b"WATCHING 2\r\nRESERVED 1 1\r\nx\r\n"


# -- the job map -----------------------------------------------------------

def test_job_map_across_block_boundaries(h):
    a = h.conn()
    q = h.e.q
    for start in (1 << BITS, 65536):
        q.ids.next = start - 5
        ids = [int(put(h, a).split()[1]) for _ in range(10)]
        assert ids == list(range(start - 5, start + 5))
        for i in ids:
            assert h.send(a, b"peek %d\r\n" % i) == b"FOUND %d 1\r\nx\r\n" % i
            assert i in q.jobs and q.jobs[i].id == i
        assert (start - 5) >> BITS in q.jobs.blocks and start >> BITS in q.jobs.blocks
        for i in ids[:5]:  # empties the lower block: it is dropped
            assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
        assert (start - 5) >> BITS not in q.jobs.blocks
        assert h.send(a, b"peek %d\r\n" % (start - 1)) == b"NOT_FOUND\r\n"
        assert h.send(a, b"delete %d\r\n" % (start - 1)) == b"NOT_FOUND\r\n"
        for i in ids[5:]:
            assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    assert q.job_count() == 0 and list(q.jobs) == [] and not q.jobs.blocks
    with pytest.raises(KeyError):
        q.jobs[65536]
    with pytest.raises(KeyError):
        del q.jobs[65536]


def test_an_emptied_block_is_dropped_and_kept_as_the_spare(h):
    a = h.conn()
    q = h.e.q
    ids = [int(put(h, a).split()[1]) for _ in range(3)]
    block = q.jobs.blocks[0]
    for i in ids:
        assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    assert not q.jobs.blocks and q.jobs.spare is block  # (no block left empty)
    assert put(h, a) == b"INSERTED 4\r\n"
    assert q.jobs.blocks[0] is block and q.jobs.spare is None and block.live == 1
    assert list(q.jobs) == [4] and block.table.count(None) == len(block.table) - 1


def test_a_thinned_block_is_copied_small(h):
    a = h.conn()
    q = h.e.q
    n = 1 << BITS
    for _ in range(n + 1):  # job n+1 is in the next block, which takes new ids
        put(h, a)
    big = sys.getsizeof(q.jobs.blocks[0].table)
    for i in range(1, n - THIN):
        assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    b = q.jobs.blocks[0]
    assert len(b.few) == THIN and not b.table and sys.getsizeof(b.few) < big // 50
    assert q.job_count() == THIN + 2  # (block 0 has no id 0)
    assert [j.id for j in q.jobs.values()] == list(range(n - THIN, n + 2))
    assert list(q.jobs) == list(range(n - THIN, n + 2))
    # the small copy answers as the block did: its jobs, and none elsewhere
    assert h.send(a, b"peek %d\r\n" % (n - THIN)) == b"FOUND %d 1\r\nx\r\n" % (n - THIN)
    for gone in (1, n - THIN - 1):
        assert h.send(a, b"peek %d\r\n" % gone) == b"NOT_FOUND\r\n"
        assert h.send(a, b"delete %d\r\n" % gone) == b"NOT_FOUND\r\n"
    assert h.send(a, b"reserve-with-timeout 0\r\n") == b"RESERVED %d 1\r\nx\r\n" % (n - THIN)
    for i in range(n - THIN, n):
        assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    assert 0 not in q.jobs.blocks and list(q.jobs) == [n, n + 1]


# -- sweeping stale heap entries --------------------------------------------

def test_a_big_stale_heap_is_swept_in_slices(h):
    a = h.conn()
    n = 2 * SMALL_HEAP
    for _ in range(n):
        put(h, a, delay=100)
    h.send(a, b"kick %d\r\n" % n)  # (in slices) n stale entries in delay_heap
    q = h.e.q
    drain(h)
    assert q.ready_ct == n and not q.delayed_ct
    stale = q.timers.delay_heap
    heap = stale.entries
    assert len(heap) == n and not q.slices.work
    put(h, a, delay=100)  # over the threshold: a sweep starts, nothing swept yet
    assert len(heap) == n + 1 and q.slices.work
    sizes = []
    while h.step():
        sizes.append(len(heap))
        assert_heap(heap)
    assert all(x - y <= SLICE for x, y in zip([n + 1] + sizes, sizes))
    assert len(heap) == 1 and q.timers.delay_heap is stale and stale.entries is heap


def test_sweeps_keep_ready_and_delayed_order_under_random_work():
    rnd = random.Random(7)
    h = Harness(auto=False)
    a = h.conn()
    n = 3 * SMALL_HEAP
    for _ in range(n):
        put(h, a, pri=rnd.randrange(5), delay=rnd.randrange(1, 50))
    q = h.e.q
    alive = set(range(1, n + 1))
    for i in rnd.sample(sorted(alive), 2 * n // 3):
        assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
        alive.discard(i)
    put(h, a, delay=60)  # triggers the sweeps of the delayed heaps
    alive.add(n + 1)
    assert q.slices.work
    while h.step():
        for _ in range(3):
            i = rnd.choice(sorted(alive))
            h.send(a, b"kick-job %d\r\n" % i)
        assert_heap(q.timers.delay_heap.entries)
        assert_heap(q.tubes.named[b"default"].delayed.entries)
    assert len(q.timers.delay_heap.entries) <= 2 * q.delayed_ct + 1024
    h.now += 100 * NS
    while h.e.next_due() is not None and h.e.next_due() <= h.now:
        h.e.tick(h.now)
    drain(h)
    got = [reserve_id(h, a) for _ in range(len(alive))]
    want = sorted(alive, key=lambda i: (q.jobs[i].pri, i))
    assert got == want


def test_a_stale_run_is_drained_to_the_heap_in_order(h):
    a = h.conn()
    n = 4 * SLICE
    for _ in range(n):
        put(h, a)
    q = h.e.q
    for i in range(1, n + 1):
        if i % 4:
            h.send(a, b"delete %d\r\n" % i)
    put(h, a)  # the run is mostly stale: its live entries move to the heap
    assert q.slices.work
    steps = drain(h)
    assert steps >= 2
    t = q.tubes.named[b"default"]
    assert t.run.n <= t.nready + 33 and len(t.ready.entries) + t.run.n <= 2 * t.nready + 64
    got = [reserve_id(h, a) for _ in range(n // 4 + 1)]
    assert got == [i for i in range(4, n + 1, 4)] + [n + 1]


def test_heap_removal_keeps_the_heap_property():
    rnd = random.Random(3)
    from pybeanstalkd.core.heaps import StaleHeap

    for _trial in range(50):
        stale_heap = StaleHeap(0)
        heap = stale_heap.entries
        heap += [rnd.randrange(1000) for _ in range(rnd.randrange(1, 3000))]
        heapq.heapify(heap)
        stale = {k for k in heap if rnd.random() < 0.6}
        want = sorted(k for k in heap if k not in stale)
        # (a live count that never calls for the final compaction)
        gen = stale_heap._sweeper(lambda k, stale=stale: k not in stale, lambda heap=heap: len(heap))
        for _ in gen:
            assert_heap(heap)
        assert sorted(heap) == want


def test_a_sweep_keeps_the_heaps_list():
    """A heap's list is never replaced: tick's loop holds it while the
    work it does may sweep that heap."""
    from pybeanstalkd.core.heaps import StaleHeap
    from pybeanstalkd.core.slices import Slices

    heap = StaleHeap(0)
    entries = heap.entries
    entries += [5, 3, 9, 1, 3]
    heapq.heapify(entries)
    work = Slices()
    heap.sweep(work, lambda k: k != 3, lambda: 3)
    assert not work.work  # (small: at once)
    assert heap.entries is entries and sorted(entries) == [1, 5, 9]
    assert_heap(entries)


def test_deletes_by_id_start_the_sweeps(h):
    a = h.conn()
    n = 3 * SMALL_HEAP
    for _ in range(n):
        put(h, a, delay=100)
    for _ in range(n):
        put(h, a)
    q = h.e.q
    for i in range(1, n):  # all delayed jobs but the last, then ready ones
        assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    for i in range(n + 1, n + 3 * n // 4):  # the front of the run
        assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    assert q.slices.work
    drain(h)
    assert len(q.timers.delay_heap.entries) <= 1024 + 2
    assert len(q.tubes.named[b"default"].delayed.entries) <= 64 + 2
    run = q.tubes.named[b"default"].run
    assert not q.tubes.named[b"default"].ready.entries and run.n == q.tubes.named[b"default"].nready  # none moved
    assert h.send(a, b"peek-delayed\r\n") == b"FOUND %d 1\r\nx\r\n" % n
    assert reserve_id(h, a) == n + 3 * n // 4


# -- reservations in blocks (held.py) ----------------------------------------

@pytest.fixture
def small_held():
    """The reservations a block holds (held.SIZE: a constant the compiled
    queue inlines, so the tests run with the real one)."""
    from pybeanstalkd.core.held import SIZE
    return SIZE


def test_reservations_across_blocks_return_in_reservation_order(h, small_held):
    a = h.conn()
    n = 5 * small_held + 7
    for _ in range(n):
        put(h, a)
    order = list(range(n, 0, -3)) + [i for i in range(1, n + 1) if (n - i) % 3]
    for i in order:  # ids and blocks in different orders
        assert h.send(a, b"reserve-job %d\r\n" % i).startswith(b"RESERVED")
    q = h.e.q
    assert len(a.held) == 6 and a.nreserved == n
    assert all(len(b.jobs) <= small_held for b in a.held.values())
    # Some reservations end, from several blocks: the order of the rest holds.
    for i in order[10:200:7]:
        assert h.send(a, b"release %d 0 0\r\n" % i) == b"RELEASED\r\n"
        assert reserve_id(h, a) == i  # (the only ready job: reserved again, last)
    order = [i for i in order if i not in order[10:200:7]] + order[10:200:7]
    waiters = [h.conn() for _ in range(n)]
    for w in waiters:
        assert h.send(w, b"reserve\r\n") == b""
    h.close(a)
    drain(h)
    assert [int(h.take(w).split()[1]) for w in waiters] == order
    assert q.ready_ct == 0 and q.reserved_ct == n
    assert not a.held and not a.nreserved and a.open_held is None


def test_other_connections_cannot_touch_a_held_job(h, small_held):
    a, b = h.conn(), h.conn()
    hold(h, a, 3 * small_held)
    for cmd in (b"delete 70", b"release 70 0 0", b"bury 70 0", b"touch 70"):
        assert h.send(b, cmd + b"\r\n") == b"NOT_FOUND\r\n"
    assert h.send(a, b"touch 70\r\n") == b"TOUCHED\r\n"
    assert h.send(a, b"delete 70\r\n") == b"DELETED\r\n"
    assert h.send(a, b"delete 70\r\n") == b"NOT_FOUND\r\n"


def test_emptied_blocks_are_dropped_and_thinned_ones_copied(h, small_held):
    a = h.conn()
    n = 4 * small_held
    hold(h, a, n)
    q = h.e.q
    first = a.held[0]
    table = sys.getsizeof(first.jobs)
    for i in range(1, small_held - THIN + 1):  # block 0 down to THIN
        assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    assert len(first.jobs) == THIN and sys.getsizeof(first.jobs) < table
    for i in range(small_held - THIN + 1, 2 * small_held + 1):  # blocks 0 and 1
        assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    assert sorted(a.held) == [2, 3]
    assert sum(len(b.jobs) for b in a.held.values()) == a.nreserved == 2 * small_held
    assert all(j.holder is b for b in a.held.values() for j in b.jobs.values())
    for i in range(2 * small_held + 1, n + 1):
        assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    # What is left: the open block, empty; no job refers to a block.
    assert list(a.held) == [3] and not a.open_held.jobs
    assert all(j.holder is None for j in q.jobs.values())


def test_a_worker_reserving_one_at_a_time_keeps_one_small_block(h, small_held):
    a = h.conn()
    for _ in range(10 * small_held):
        put(h, a)
        i = reserve_id(h, a)
        assert len(a.held) == 1 and a.nreserved == 1
        assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    put(h, a)
    reserve_id(h, a)
    put(h, a)
    reserve_id(h, a)
    assert len(a.held) == 1 and len(a.open_held.jobs) == 2


def test_a_run_emptied_while_its_stale_entries_are_dropped():
    """Deletes by id leave a tube's run mostly stale, and the slices that
    drop its stale entries start; between two of them, a client reserves
    every ready job, emptying the run: the next slice finds it empty."""
    h = Harness(auto=False)
    a, b = h.conn(), h.conn()
    h.send(a, b"put 0 0 10 1\r\nx\r\n" * 300)
    h.send(a, b"".join(b"delete %d\r\n" % i for i in range(1, 201)))
    h.take(a)
    for _ in range(3):
        h.step()
    t = h.e.q.tubes.named[b"default"]
    assert t.run.draining and t.run.n > t.nready
    out = h.send(b, b"reserve-with-timeout 0\r\n" * (t.nready + 1))
    assert out.count(b"RESERVED ") == 100 and out.endswith(b"TIMED_OUT\r\n")
    while h.step():
        pass
    assert not t.run.draining and t.run.n == 0
    assert h.send(a, b"put 0 0 10 1\r\nx\r\n") == b"INSERTED 301\r\n"
    assert h.send(b, b"reserve-with-timeout 0\r\n").startswith(b"RESERVED 301 ")


def test_a_tick_runs_at_most_n_timer_entries(h):
    a = h.conn()
    for _ in range(100):
        put(h, a, delay=1)
    q = h.e.q
    h.now += 2 * NS
    assert h.e.tick(h.now, 10) is True  # stopped by the count, more due (transport's way)
    assert q.ready_ct == 10 and q.delayed_ct == 90
    assert h.e.next_due() <= h.now  # the rest is still due: the caller ticks again
    calls = 1
    while h.e.tick(h.now, 10):
        calls += 1
    calls += 1  # the one that returned False: it ran the last 10 entries
    assert q.delayed_ct == 0 and calls == 10
    assert [reserve_id(h, a) for _ in range(100)] == list(range(1, 101))


class StepClock:
    """A clock that advances by `cost` ns each time it is read."""

    def __init__(self, cost, start=0):
        self.t, self.cost, self.reads = start, cost, 0

    def __call__(self):
        self.reads += 1
        self.t += self.cost
        return self.t


def test_run_timers_stops_at_the_time_budget_between_small_chunks(h):
    from pybeanstalkd.server.transport import TICK_BUDGET_NS, TICK_CHUNK, run_timers

    a = h.conn()
    for _ in range(1000):
        put(h, a, delay=1)
    q = h.e.q
    h.now += 2 * NS
    # Each chunk "costs" a quarter of the budget: four chunks, then a stop
    # with the rest still due, whatever the count would have allowed.
    clock = StepClock(TICK_BUDGET_NS // 4)
    assert run_timers(h.e, h.now, clock) is True
    assert q.ready_ct == 4 * TICK_CHUNK and h.e.next_due() <= h.now
    # A slow chunk (memory gone cold) ends the pass after that chunk alone.
    clock = StepClock(TICK_BUDGET_NS)
    assert run_timers(h.e, h.now, clock) is True
    assert q.ready_ct == 5 * TICK_CHUNK
    # A cheap clock: everything due runs in one pass, and False says so.
    clock = StepClock(1)
    assert run_timers(h.e, h.now, clock) is False
    assert q.ready_ct == 1000 and q.delayed_ct == 0
    # (read once at the start and after every chunk but the last)
    assert clock.reads == (1000 - 5 * TICK_CHUNK) // TICK_CHUNK
    assert [reserve_id(h, a) for _ in range(1000)] == list(range(1, 1001))


def test_run_work_runs_slices_until_the_time_budget(h):
    from pybeanstalkd.server.transport import STEP_BUDGET_NS, run_work

    a = h.conn()
    n = 20 * SLICE
    for _ in range(n):
        put(h, a, delay=100)
    h.send(a, b"use default\r\n")
    q = h.e.q
    assert h.send(a, b"kick %d\r\n" % n) == b""  # the first slice ran at once
    assert q.ready_ct == SLICE
    # Each slice "costs" a quarter of the budget: four more slices, then a
    # stop with work left, whatever the count of slices.
    assert run_work(h.e, StepClock(STEP_BUDGET_NS // 4, h.now)) is True
    assert q.ready_ct == 5 * SLICE
    # A slow slice (memory gone cold) ends the pass after that slice alone.
    assert run_work(h.e, StepClock(STEP_BUDGET_NS, h.now)) is True
    assert q.ready_ct == 6 * SLICE
    # A cheap clock: the rest in one pass, then the reply.
    assert run_work(h.e, StepClock(1, h.now)) is False
    assert q.ready_ct == n and h.take(a) == b"KICKED %d\r\n" % n


@given(st.lists(st.integers(0, 50), max_size=60), st.data())
def test_removing_any_entry_in_place_keeps_a_heap(values, data):
    """The sweep's removal (the last entry into the hole, then up or down)
    leaves a heap holding exactly the other entries."""
    from pybeanstalkd.core.heaps import StaleHeap

    stale = StaleHeap(0)
    heap = stale.entries
    heap.extend(values)
    heapq.heapify(heap)
    dead = set(data.draw(st.lists(st.sampled_from(values), max_size=len(values)))) if values else set()
    stale.sweeping = True
    for _ in stale._sweeper(lambda k: k not in dead, lambda: len(heap)):
        pass
    assert sorted(heap) == sorted(v for v in values if v not in dead)
    assert all(heap[(i - 1) >> 1] <= heap[i] for i in range(1, len(heap)))

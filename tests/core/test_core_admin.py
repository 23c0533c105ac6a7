"""The pure parts of the HTTP side, on a fake clock: the histograms counted in
core (hist.py, queue.py), serve-order listing and paging, and the admin
actions of core/admin.py (delete, kick-job, move, flush, put, pause), run in
slices like a big kick."""
from __future__ import annotations

import random

import pytest

from fakeclock import Harness
from pybeanstalkd.core import jobmoves
from pybeanstalkd.core import admin, hist
from pybeanstalkd.core.outcome import Outcome
from pybeanstalkd.core.job import BURIED, DELAYED, READY, RESERVED
from pybeanstalkd.core.protocol import NS
from pybeanstalkd.core.queue import WORK_BURY, WORK_DELETE, WORK_RELEASE
from pybeanstalkd.core.slices import SLICE


def stats(h, s) -> dict:
    out = h.send(s, b"stats\r\n").split(b"\r\n", 1)[1]
    return dict(line.split(": ", 1) for line in out.decode().splitlines()[1:] if ": " in line)


def run(gen, h, started=False):
    """Run a generator of slices to the end, as Queue.step would (sending
    the time); (value, number of slices)."""
    n = 1
    try:
        if not started:
            next(gen)
        while True:
            n += 1
            gen.send(h.now)
    except StopIteration as e:
        return e.value, n


def put(h, s, tube=b"default", pri=0, delay=0, ttr=60, body=b"x"):
    if tube != b"default":
        h.send(s, b"use %s\r\n" % tube)
    r = h.send(s, b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body))
    assert r.startswith(b"INSERTED "), r
    return int(r.split()[1])


def reserve(h, s) -> int:
    r = h.send(s, b"reserve-with-timeout 0\r\n")
    assert r.startswith(b"RESERVED "), r
    return int(r.split()[1])


# -- hist.py -------------------------------------------------------------------

def test_hist_slots_are_bit_lengths_and_buckets_cumulative():
    h = hist.Hist()
    values = [0, 1, 3, 4, 1023, 1024, 2**20 - 1, 2**20, 2**21, 5 * NS, 10**13, 2**64 - 1]
    for v in values:
        h.observe(v)
    assert h.total == sum(values) and h.count() == len(values)
    for v in values:
        assert h.counts[v.bit_length()] >= 1
    buckets, count, total = h.buckets((10, 20, 21))
    # below 2**10 ns: 0, 1, 3, 4, 1023; below 2**20: and 1024, 2**20-1; below 2**21: and 2**20
    assert buckets == [(1024 / NS, 5), (2**20 / NS, 7), (2**21 / NS, 8), (float("inf"), 12)]
    assert (count, total) == (12, sum(values))
    h.take_back(2**64 - 1)
    assert h.total == sum(values[:-1]) and h.count() == len(values) - 1 and not h.counts[64]


def test_reported_bounds_cover_ms_to_an_hour():
    les = [le for le, _ in hist.Hist().buckets(hist.JOB_LE)[0]]
    assert les[0] < 0.0011 and 3600 < les[-2] < 7200 and les[-1] == float("inf")


# -- the histograms and counters on a tube -----------------------------------------

def counted(h: hist.Hist) -> list[int]:
    """The slots (bit lengths of the values) counted in h."""
    return [k for k in range(hist.SLOTS) for _ in range(h.counts[k])]


def bl(seconds: float) -> int:
    return round(seconds * NS).bit_length()


def test_wait_counts_from_put_to_reserve():
    h = Harness()
    s = h.conn()
    put(h, s)
    h.advance(2)
    reserve(h, s)
    t = h.e.q.tubes.named[b"default"]
    assert counted(t.wait_hist) == [bl(2)]
    assert t.wait_hist.total == 2 * NS


def test_wait_counts_from_the_end_of_a_delay():
    h = Harness()
    s = h.conn()
    put(h, s, delay=5)
    h.advance(5)
    h.advance(0.02)
    reserve(h, s)
    assert h.e.q.tubes.named[b"default"].wait_hist.total == round(0.02 * NS)


@pytest.mark.parametrize("back", ["release", "timeout", "kick", "close"])
def test_wait_counts_from_the_last_return_to_ready(back):
    h = Harness()
    s = h.conn()
    jid = put(h, s, ttr=1)
    reserve(h, s)
    since = h.now
    if back == "release":
        h.send(s, b"release %d 0 0\r\n" % jid)
    elif back == "timeout":
        h.advance(1.5)
        since += NS + 1  # expiry is when deadline < now
    elif back == "kick":
        h.send(s, b"bury %d 0\r\n" % jid)
        h.advance(30)
        h.send(s, b"kick 1\r\n")
    else:
        h.close(s)
        s = h.conn()
    if back != "timeout":
        since = h.now
    h.advance(0.3)
    reserve(h, s)
    t = h.e.q.tubes.named[b"default"]
    assert counted(t.wait_hist) == [0, (h.now - since).bit_length()]  # the first waited 0
    assert t.wait_hist.total == h.now - since


def test_reserve_job_counts_a_wait_only_from_ready():
    h = Harness()
    s = h.conn()
    a = put(h, s)
    b = put(h, s, delay=100)
    h.advance(1)
    assert h.send(s, b"reserve-job %d\r\n" % b).startswith(b"RESERVED")
    assert counted(h.e.q.tubes.named[b"default"].wait_hist) == []
    assert h.send(s, b"reserve-job %d\r\n" % a).startswith(b"RESERVED")
    assert counted(h.e.q.tubes.named[b"default"].wait_hist) == [bl(1)]


def test_work_counts_reserve_to_delete_release_bury():
    h = Harness()
    s = h.conn()
    ids = [put(h, s) for _ in range(3)]
    for i, (cmd, secs) in enumerate(((b"delete %d", 0.2), (b"release %d 10 0", 3), (b"bury %d 0", 40))):
        assert reserve(h, s) == ids[i]
        h.advance(secs)
        h.send(s, cmd % ids[i] + b"\r\n")
    w = h.e.q.tubes.named[b"default"].work_hist
    assert counted(w[WORK_DELETE]) == [bl(0.2)]
    assert counted(w[WORK_RELEASE]) == [bl(3)]
    assert counted(w[WORK_BURY]) == [bl(40)]
    assert [x.total for x in w] == [round(0.2 * NS), 3 * NS, 40 * NS]


def test_work_counts_from_the_last_touch():
    h = Harness()
    s = h.conn()
    jid = put(h, s)
    reserve(h, s)
    h.advance(20)
    h.send(s, b"touch %d\r\n" % jid)
    h.advance(2)
    h.send(s, b"delete %d\r\n" % jid)
    assert h.e.q.tubes.named[b"default"].work_hist[WORK_DELETE].total == 2 * NS


def test_tube_timeouts_and_buries():
    h = Harness()
    s = h.conn()
    for tube in (b"a", b"b"):
        h.send(s, b"watch %s\r\n" % tube)
    for _ in range(3):
        put(h, s, tube=b"a", ttr=1)
    put(h, s, tube=b"b", ttr=1)
    for _ in range(4):
        reserve(h, s)
    h.advance(1.5)
    for _ in range(2):
        h.send(s, b"bury %d 0\r\n" % reserve(h, s))
    q = h.e.q
    assert (q.tubes.named[b"a"].timeouts, q.tubes.named[b"b"].timeouts) == (3, 1)
    assert q.tubes.named[b"a"].buries + q.tubes.named[b"b"].buries == 2
    assert q.timeouts_ct == 4


# -- serve order and pages ------------------------------------------------------------

def ready_model(q, t):
    return sorted((j for j in q.jobs.values() if j.tube is t and j.state == READY),
                  key=lambda j: (j.pri, j.id))


def test_ready_in_serve_order_matches_reserve_order():
    h = Harness()
    s = h.conn()
    rnd = random.Random(7)
    for _ in range(300):
        put(h, s, pri=rnd.choice((5, 5, 5, 1, 9)))
    for _ in range(40):  # some back through the heap, some deleted
        jid = reserve(h, s)
        if rnd.random() < 0.5:
            h.send(s, b"release %d %d 0\r\n" % (jid, rnd.choice((1, 5, 7))))
        else:
            h.send(s, b"delete %d\r\n" % jid)
    q = h.e.q
    t = q.tubes.named[b"default"]
    listed = list(admin.in_order(q, t, READY))
    assert listed == ready_model(q, t)
    assert [reserve(h, s) for _ in range(len(listed))] == [j.id for j in listed]


def test_delayed_buried_reserved_in_serve_order():
    h = Harness()
    s, w = h.conn(), h.conn()
    for d in (30, 10, 20, 10):
        put(h, s, delay=d)
    ids = [put(h, s, ttr=t) for t in (50, 20, 40)]
    for _ in ids:
        reserve(h, w)
    h.send(w, b"bury %d 0\r\n" % ids[2])
    h.send(w, b"bury %d 0\r\n" % ids[0])
    q = h.e.q
    t = q.tubes.named[b"default"]
    assert [j.id for j in admin.in_order(q, t, DELAYED)] == [2, 4, 3, 1]
    assert [j.id for j in admin.in_order(q, t, BURIED)] == [ids[2], ids[0]]
    assert [j.id for j in admin.in_order(q, t, RESERVED)] == [ids[1]]
    h.send(w, b"kick 1\r\n")  # kick order is the listed buried order
    assert q.jobs[ids[2]].state == READY


@pytest.mark.parametrize("state", [READY, DELAYED, BURIED])
def test_pages_deep_and_shallow_agree_with_the_full_order(state):
    h = Harness(auto=False)
    s = h.conn()
    n = 3 * SLICE + 17
    rnd = random.Random(state)
    for _i in range(n):
        pri = 0 if state == BURIED else rnd.randrange(4)  # buried: reserved in id order
        h.send(s, b"put %d %d 60 1\r\nx\r\n" % (pri, 100 + rnd.randrange(50) if state == DELAYED else 0))
    if state == BURIED:
        h.send(s, b"".join(b"reserve\r\nbury %d 0\r\n" % (i + 1) for i in range(n)))
        h.take(s)
        while h.step():
            pass
    q = h.e.q
    t = q.tubes.named[b"default"]
    full = list(admin.in_order(q, t, state))
    assert len(full) == n
    for offset, limit in ((0, 50), (10, 20), (SLICE, 2 * SLICE), (n - 5, 50), (n + 3, 10), (700, 0)):
        (total, jobs), slices = run(admin.page(q, t, state, offset, limit), h)
        assert total == n
        assert jobs == full[offset:offset + limit]
        if offset + limit > SLICE and state != BURIED:
            assert slices > 1


def test_a_deep_page_leaves_out_jobs_that_left_meanwhile():
    h = Harness(auto=False)
    s = h.conn()
    for _ in range(2 * SLICE):
        h.send(s, b"put 0 0 60 1\r\nx\r\n")
    q = h.e.q
    t = q.tubes.named[b"default"]
    gen = admin.page(q, t, READY, 0, 2 * SLICE)
    next(gen)
    gone = reserve(h, s)  # between slices
    (total, jobs), _ = run(gen, h, started=True)
    assert gone not in [j.id for j in jobs]
    assert len(jobs) == 2 * SLICE - 1


# -- actions --------------------------------------------------------------------------

def test_admin_delete_and_kick_job_count_no_command():
    h = Harness()
    s = h.conn()
    _a, b, c = put(h, s), put(h, s, delay=50), put(h, s)
    reserve(h, s)  # a
    before = stats(h, s)
    q = h.e.q
    assert jobmoves.kick_job(q, 999, h.now) is Outcome.NOT_FOUND
    assert jobmoves.kick_job(q, c, h.now) is Outcome.WRONG_STATE
    assert jobmoves.kick_job(q, b, h.now) is Outcome.DONE
    assert q.jobs[b].state == READY
    assert admin.delete(q, q.jobs[c], h.now) is Outcome.DONE
    assert c not in q.jobs
    after = stats(h, s)
    assert after["cmd-delete"] == before["cmd-delete"] and after["cmd-kick"] == before["cmd-kick"]
    assert int(after["cmd-stats"]) == int(before["cmd-stats"]) + 1
    assert after["current-jobs-ready"] == "1" and after["current-jobs-delayed"] == "0"
    tube = h.send(s, b"stats-tube default\r\n")
    assert b"cmd-delete: 0\n" in tube
    assert b"kicks: 1\n" in h.send(s, b"stats-job %d\r\n" % b)


def test_admin_pause_is_not_a_pause_tube_command():
    h = Harness()
    s = h.conn()
    t = h.e.q.tubes.named[b"default"]
    admin.pause(h.e.q, t, 10, h.now)
    out = h.send(s, b"stats-tube default\r\n")
    assert b"cmd-pause-tube: 0\n" in out and b"pause: 10\n" in out
    h.advance(11)
    assert b"pause: 0\n" in h.send(s, b"stats-tube default\r\n")


def test_flush_runs_in_slices_with_other_clients_served_between():
    h = Harness(auto=False)
    s, other = h.conn(), h.conn()
    n = 4 * SLICE + 3
    h.send(s, b"put 0 0 60 1\r\nx\r\n" * n)
    h.send(s, b"put 0 0 60 1\r\ny\r\n")
    h.take(s)
    q = h.e.q
    t = q.tubes.named[b"default"]
    gen = admin.flush(q, t, READY, h.now)
    assert not q.slices.spawn(gen)  # one slice done, the rest queued as background work
    assert t.nready == n + 1 - SLICE
    # Another client is served between slices.
    assert h.send(other, b"peek-ready\r\n").startswith(b"FOUND")
    out = h.send(other, b"stats-tube default\r\n")
    assert b"current-jobs-ready: %d\n" % (n + 1 - SLICE) in out
    slices = 1
    while True:
        slices += 1
        if not h.step():
            break
    assert slices >= 5
    assert t.nready == 0 and q.job_count() == 0


def test_flush_stops_at_what_the_tube_held():
    h = Harness(auto=False)
    s = h.conn()
    h.send(s, b"put 0 0 60 1\r\nx\r\n" * (SLICE + 5))
    q = h.e.q
    t = q.tubes.named[b"default"]
    gen = admin.flush(q, t, READY, h.now)
    next(gen)
    h.send(s, b"put 0 0 60 1\r\nx\r\n" * 10)  # between slices
    (value, outcome), _ = run(gen, h, started=True)
    assert value == SLICE + 5 and outcome is Outcome.DONE
    assert t.nready == 10


@pytest.mark.parametrize("state", [READY, DELAYED, BURIED])
def test_move_puts_copies_with_new_ids_and_deletes_the_originals(state):
    h = Harness()
    s = h.conn()
    ids = [put(h, s, pri=p, ttr=30, delay=40 if state == DELAYED else 0, body=b"job%d" % p)
           for p in (3, 1, 2)]
    if state == BURIED:
        for _ in ids:
            h.send(s, b"bury %d 7\r\n" % reserve(h, s))
    h.advance(10)
    q = h.e.q
    order = [j.id for j in admin.in_order(q, q.tubes.named[b"default"], state)]
    ((moved, outcome), _) = run(admin.move(h.e, q.tubes.named[b"default"], b"dest", state, 2, h.now), h)
    assert moved == 2 and outcome is Outcome.DONE
    assert all(i not in q.jobs for i in order[:2]) and order[2] in q.jobs
    dest = q.tubes.named[b"dest"]
    new = sorted(j for j in q.jobs if q.jobs[j].tube is dest)
    assert new == [max(ids) + 1, max(ids) + 2]
    for _old_id, new_id in zip(order, new):
        j = q.jobs[new_id]
        assert j.ttr == 30 * NS
        assert j.state == (DELAYED if state == DELAYED else READY)
        if state == DELAYED:
            assert j.deadline - h.now == 30 * NS  # the delay left
    assert dest.total_jobs == 2
    assert q.tubes.named[b"default"].cmd_delete == 0


def test_move_into_a_tube_with_a_waiting_worker_hands_it_over():
    h = Harness()
    p, w = h.conn(), h.conn()
    jid = put(h, p)
    h.send(w, b"watch dest\r\nignore default\r\n")
    assert h.send(w, b"reserve\r\n") == b""
    q = h.e.q
    run(admin.move(h.e, q.tubes.named[b"default"], b"dest", READY, 10, h.now), h)
    h.e.settle(h.now)
    assert h.take(w) == b"RESERVED %d 1\r\nx\r\n" % (jid + 1)


def test_put_checks_size_draining_and_the_memory_cap():
    h = Harness(max_job_size=10)
    e = h.e
    assert admin.put(e, b"t", b"x" * 11, 0, 0, 0, h.now) == (Outcome.TOO_BIG, 0)
    why, jid = admin.put(e, b"t", b"hello", 5, 0, 0, h.now)
    assert why is Outcome.DONE and e.q.jobs[jid].ttr == NS  # ttr 0 is 1 s, as put
    assert e.q.jobs[jid].body == b"hello\r\n" and e.q.total_jobs == 1
    assert e.counts["put"] == 0
    e.max_memory = e.q.memory_used() + 100
    assert admin.put(e, b"u", b"x", 0, 0, 0, h.now) == (Outcome.OVER_CAP, 0)
    e.max_memory = None
    e.draining = True
    ids = e.q.ids.next
    assert admin.put(e, b"u", b"x", 0, 0, 0, h.now) == (Outcome.DRAINING, 0)
    assert b"u" not in e.q.tubes.named  # nothing was made
    assert e.q.ids.next == ids  # and no id used up (the whole body was there)


def test_a_move_passes_neither_the_cap_nor_draining():
    """A move adds no job and is no new work: at the memory cap, and while
    the server drains, it still moves."""
    h = Harness()
    s = h.conn()
    for _ in range(3):
        put(h, s)
    e = h.e
    e.max_memory = e.q.memory_used()
    e.draining = True
    (moved, outcome), _ = run(admin.move(e, e.q.tubes.named[b"default"], b"dest", READY, 10, h.now), h)
    assert (moved, outcome) == (3, Outcome.DONE)
    assert e.q.tubes.named[b"dest"].nready == 3 and e.q.memory_used() == e.max_memory


def test_put_with_a_delay():
    h = Harness()
    why, jid = admin.put(h.e, b"later", b"x", 0, 5 * NS, 60 * NS, h.now)
    assert h.e.q.jobs[jid].state == DELAYED
    h.advance(5)
    assert h.e.q.jobs[jid].state == READY


def test_flush_deletes_what_was_there_and_leaves_what_came_meanwhile():
    """The jobs of the state at the start go, whatever comes to the top
    meanwhile; these stay: a job put then (at a better priority), one
    reserved at the start and released then, a delayed one come due."""
    h = Harness(auto=False)
    s, w = h.conn(), h.conn()
    h.send(s, b"put 5 0 60 1\r\nx\r\n" * (2 * SLICE + 5))
    h.send(s, b"put 5 3 60 1\r\nd\r\n")
    back = 2 * SLICE  # reserved at the start: a stale entry of it stays in the tube's run
    assert h.send(w, b"reserve-job %d\r\n" % back).startswith(b"RESERVED")
    q = h.e.q
    t = q.tubes.named[b"default"]
    before = {j.id for j in admin.in_order(q, t, READY)}
    gen = admin.flush(q, t, READY, h.now)
    next(gen)
    h.advance(5)  # the delayed job comes due
    new = put(h, s, pri=0)
    h.send(w, b"release %d 0 0\r\n" % back)
    (value, outcome), _ = run(gen, h, started=True)
    assert (value, outcome) == (len(before), Outcome.DONE)
    assert not before & set(q.jobs)
    assert {j.id for j in admin.in_order(q, t, READY)} == {new, back, 2 * SLICE + 6}


@pytest.mark.parametrize("state", [DELAYED, BURIED])
def test_flush_of_delayed_or_buried_leaves_what_came_meanwhile(state):
    h = Harness(auto=False)
    s = h.conn()
    n = SLICE + 3
    if state == DELAYED:
        h.send(s, b"put 0 100 60 1\r\nx\r\n" * n)
    else:
        h.send(s, b"put 0 0 60 1\r\nx\r\n" * (n + 1))
        h.send(s, b"".join(b"reserve\r\nbury %d 0\r\n" % (i + 1) for i in range(n)))
        h.take(s)
        late = reserve(h, s)
    q = h.e.q
    t = q.tubes.named[b"default"]
    if state == DELAYED:  # one reserved at the start: its stale delayed entry stays
        back = n  # (past the first slice)
        assert h.send(s, b"reserve-job %d\r\n" % back).startswith(b"RESERVED")
        n -= 1
    h.advance(0.001)
    gen = admin.flush(q, t, state, h.now)
    next(gen)
    if state == DELAYED:
        late = put(h, s, delay=1)
        h.send(s, b"release %d 0 50\r\n" % back)
        stay = [late, back]
    else:
        h.send(s, b"bury %d 0\r\n" % late)
        stay = [late]
    (value, outcome), _ = run(gen, h, started=True)
    assert (value, outcome) == (n, Outcome.DONE)
    assert [j.id for j in admin.in_order(q, t, state)] == stay


def test_flush_deletes_ready_jobs_hidden_by_a_concurrency_key():
    h = Harness(extensions=True)
    s, w = h.conn(), h.conn()
    for _ in range(3):
        h.send(s, b"put 0 0 60 1 con:k\r\nx\r\n")
    plain = put(h, s)
    held = reserve(h, w)  # the key's one slot
    assert reserve(h, w) == plain  # the other two are hidden now
    assert h.send(w, b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"
    q = h.e.q
    t = q.tubes.named[b"default"]
    assert len(q.tags.hidden(t)) == 2 and t.nready == 2
    h.advance(0.001)
    (value, outcome), _ = run(admin.flush(q, t, READY, h.now), h)
    assert (value, outcome) == (2, Outcome.DONE)
    assert t.nready == 0 and set(q.jobs) == {held, plain}
    out = h.send(s, b"stats-tube default\r\n")
    assert b"current-jobs-ready: 0\n" in out
    assert q.ext.blocked.get(b"default", 0) == 0  # (no hidden job is counted any more)
    h.send(w, b"delete %d\r\n" % held)
    assert h.send(w, b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"


@pytest.mark.parametrize("state", [READY, DELAYED, BURIED])
def test_a_big_flush_deletes_at_most_a_slice_a_step(state):
    h = Harness(auto=False)
    s = h.conn()
    n = 40 * SLICE + 11
    delay = 100 if state == DELAYED else 0
    rnd = random.Random(n)
    pris = [0 if state == BURIED else rnd.randrange(3) for _ in range(n)]
    h.send(s, b"".join(b"put %d %d 60 1\r\nx\r\n" % (p, delay) for p in pris))
    while h.step():  # (the rest of a long read's commands)
        pass
    if state == BURIED:  # (pri 0: reserved, and so buried, in id order)
        for i in range(0, n, 500):  # (a few replies at a time: not so many unread)
            h.send(s, b"".join(b"reserve\r\nbury %d 0\r\n" % (k + 1)
                               for k in range(i, min(i + 500, n))))
            while h.step():
                pass
    h.take(s)
    q = h.e.q
    t = q.tubes.named[b"default"]
    assert admin.count(t, state) == n
    h.advance(0.001)  # (a clock moves on: the puts' times were the frozen one plus a ns each)
    gen = admin.flush(q, t, state, h.now)
    assert not q.slices.spawn(gen)  # the first slice at once, the rest as background work
    left = [q.job_count()]
    assert n - left[0] <= SLICE
    while h.step():
        left.append(q.job_count())
    left.append(q.job_count())
    steps = [a - b for a, b in zip(left, left[1:])]
    assert max(steps) <= SLICE and len(steps) >= n // SLICE
    assert q.job_count() == 0 and admin.count(t, state) == 0

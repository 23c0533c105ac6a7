"""Random command sequences on three connections through the Harness
(slices run only when the sequence steps), checking after each step that
the Deadlines heaps hold exactly the reservations (test_deadlines_attack)."""
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from deadlinetools import check_heaps
from fakeclock import Harness
from pybeanstalkd.core.protocol import NS

FLUSH = True  # (flush-tube deletes a reservation whoever holds it)
MAX_TRIES = 0
EXAMPLES = 150

ids = st.integers(1, 200)
conn = st.integers(0, 2)
ops = [
    st.tuples(st.just("put"), conn, st.sampled_from([b"default", b"f"]), st.integers(0, 3),
              st.integers(1, 4), st.integers(0, 2)),
    st.tuples(st.just("reserve"), conn),
    st.tuples(st.just("reserve-job"), conn, ids),
    st.tuples(st.just("delete"), conn, ids),
    st.tuples(st.just("release"), conn, ids, st.integers(0, 3), st.integers(0, 2)),
    st.tuples(st.just("bury"), conn, ids),
    st.tuples(st.just("touch"), conn, ids),
    st.tuples(st.just("kick"), conn, st.integers(1, 5)),
    st.tuples(st.just("kick-job"), conn, ids),
    st.tuples(st.just("close"), conn),
    st.tuples(st.just("advance"), st.integers(0, 3000)),  # ms
    st.tuples(st.just("step")),
    st.tuples(st.just("fill"), conn, st.integers(60, 80), st.integers(0, 2**80)),  # many reservations
    st.tuples(st.just("reserve-many"), conn, st.integers(1, 70)),
    st.tuples(st.just("close"), conn),
]
if FLUSH:
    ops.append(st.tuples(st.just("flush"), conn, st.sampled_from([b"default", b"f"])))


def run(h, conns, gone, op):
    kind = op[0]
    if kind == "put":
        _, c, tube, pri, ttr, delay = op
        s = conns[c]
        h.send(s, b"use %s\r\n" % tube)
        h.send(s, b"put %d %d %d 1\r\nx\r\n" % (pri, delay, ttr))
    elif kind == "reserve":
        h.send(conns[op[1]], b"reserve-with-timeout 0\r\n")
    elif kind == "reserve-job":
        h.send(conns[op[1]], b"reserve-job %d\r\n" % op[2])
    elif kind == "delete":
        h.send(conns[op[1]], b"delete %d\r\n" % op[2])
    elif kind == "release":
        h.send(conns[op[1]], b"release %d %d %d\r\n" % op[2:])
    elif kind == "bury":
        h.send(conns[op[1]], b"bury %d 0\r\n" % op[2])
    elif kind == "touch":
        h.send(conns[op[1]], b"touch %d\r\n" % op[2])
    elif kind == "kick":
        h.send(conns[op[1]], b"kick %d\r\n" % op[2])
    elif kind == "kick-job":
        h.send(conns[op[1]], b"kick-job %d\r\n" % op[2])
    elif kind == "flush":
        h.send(conns[op[1]], b"flush-tube %s\r\n" % op[2])
    elif kind == "close":
        s = conns[op[1]]
        h.e.close(s, h.now)
        gone.append(s)
        conns[op[1]] = new_conn(h)
    elif kind == "advance":
        h.now += op[1] * NS // 1000
        h.e.tick(h.now)
    elif kind == "step":
        h.step()
    elif kind == "fill":
        _, c, n, bits = op
        s = conns[c]
        for i in range(n):
            h.send(s, b"use %s\r\n" % (b"f" if bits >> i & 1 else b"default"))
            h.send(s, b"put 0 0 %d 1\r\nx\r\n" % (1 + (bits >> (i + 1)) % 4))
        for _ in range(n):
            h.send(s, b"reserve-with-timeout 0\r\n")
    elif kind == "reserve-many":
        for _ in range(op[2]):
            h.send(conns[op[1]], b"reserve-with-timeout 0\r\n")
    for s in conns:
        s.out = []


def new_conn(h):
    s = h.conn()
    h.send(s, b"watch f\r\n")
    s.out = []
    return s


def drain_and_expire(h, conns, gone):
    """Run the slices left, let every TTR pass, run them again: the heaps
    hold, and the closed connections hold nothing."""
    while h.step():
        check_heaps(h, conns)
    h.now += 10 * NS
    h.e.tick(h.now)
    while h.step():
        check_heaps(h, conns)
    for g in gone:
        assert len(g.deadlines) == 0 and g.nreserved == 0


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.one_of(*ops), max_size=60))
def test_heaps_hold_exactly_the_reservations(seq):
    h = Harness(auto=False, extensions=True, max_tries=MAX_TRIES)
    conns = [new_conn(h) for _ in range(3)]
    gone = []
    maxres = 0
    for op in seq:
        run(h, conns, gone, op)
        check_heaps(h, conns)
        maxres = max(maxres, h.e.q.reserved_ct)
        if op[0] == "flush" and h.e.q.slices.work and any(g.nreserved for g in gone):
            event("flush while a gone conn's slices run")
    event("max reserved %s" % (">60" if maxres > 60 else ">5" if maxres > 5 else ">0" if maxres else "0"))
    drain_and_expire(h, conns, gone)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.integers(60, 140), st.integers(0, 2**160), st.integers(0, 2),
       st.lists(st.one_of(*ops), min_size=5, max_size=40))
def test_heaps_after_a_close_with_many_reservations(n, bits, closer, seq):
    """Starts with one connection holding n reservations (mixed tubes and
    TTRs) that closes, leaving its slices pending; then random steps."""
    h = Harness(auto=False, extensions=True, max_tries=MAX_TRIES)
    conns = [new_conn(h) for _ in range(3)]
    gone = []
    run(h, conns, gone, ("fill", closer, n, bits))
    run(h, conns, gone, ("close", closer))
    check_heaps(h, conns)
    for op in seq:
        run(h, conns, gone, op)
        check_heaps(h, conns)
        if op[0] == "flush" and h.e.q.slices.work and any(g.nreserved for g in gone):
            event("flush while a gone conn's slices run")
    drain_and_expire(h, conns, gone)

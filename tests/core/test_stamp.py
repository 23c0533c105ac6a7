"""A put's created time (Engine.stamp) lies within STAMP before the time
its put line ran, and never after it: across timers, the backlog,
hang-ups, bodies split over reads, and other clients' reads."""
from hypothesis import HealthCheck, given, settings, strategies as st

from fakeclock import Harness
from pybeanstalkd.core import commands
from pybeanstalkd.core.engine import STAMP
from pybeanstalkd.core.protocol import NS

BIG = b"x" * 60000

_data = st.sampled_from([
    b"put 0 0 60 1\r\nx\r\n", b"put 0 0 60 1\r\n", b"x\r\n", b"put 0 0 60 1\r\nx",
    b"\r\nput 0 0 60 1\r\ny\r\n", b"reserve-with-timeout 1\r\nput 0 0 60 1\r\na\r\n",
    b"reserve\r\nput 0 0 60 1\r\na\r\n", b"reserve-with-timeout 0\r\n",
    b"put 0 0 60 1 idp:k\r\nx\r\n", b"put 0 0 60 1 con:c\r\nx\r\n",
    b"put 0 0 1 60000\r\n" + BIG + b"\r\n",
    b"peek-ready\r\npeek-ready\r\npeek-ready\r\nput 0 0 60 1\r\nz\r\n",
    b"delete 1\r\n", b"release 1 0 0\r\n", b"stats-job 1\r\n", b"kick 10\r\n", b"bury 1 0\r\n",
    b"pause-tube default 1\r\nput 0 0 60 1\r\nq\r\n",
])
_dt = st.sampled_from([0, 1, 999, STAMP - 1, STAMP, STAMP + 1, 3 * STAMP, NS // 2, 2 * NS])
_ev = st.one_of(
    st.tuples(st.just("data"), st.integers(0, 2), _data),
    st.tuples(st.just("data"), st.integers(0, 2), _data),
    st.tuples(st.just("data"), st.integers(0, 2), _data),
    st.tuples(st.just("clock"), _dt),
    st.tuples(st.just("clock"), _dt),
    st.tuples(st.just("advance"), st.sampled_from([0.0005, 0.001, 0.0011, 1.0, 2.5])),
    st.tuples(st.just("eof"), st.integers(0, 2)),
    st.tuples(st.just("close"), st.integers(0, 2)),
    st.tuples(st.just("more"),),
    st.tuples(st.just("step"),),
)


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_ev, min_size=5, max_size=40), st.booleans())
def test_created_is_within_a_stamp_of_the_put(events, ext):
    h = Harness(extensions=ext, auto=False)
    e = h.e
    seen = []
    orig = commands.put

    def put(self, s, pri, delay, ttr, size, clean, now, tags=None):
        orig(self, s, pri, delay, ttr, size, clean, now, tags)
        if s.in_job is not None:
            assert now - self.now < 100_000  # (a ns a command)
            assert self.now == h.now
            seen.append((self.now, s.in_job))

    commands.put = put
    try:
        check_stamps(h, e, events, seen)
    finally:
        commands.put = orig


def check_stamps(h, e, events, seen):
    conns = [h.conn() for _ in range(3)]
    hup = set()
    closed = set()
    for ev in events:
        kind = ev[0]
        if kind == "data":
            c = conns[ev[1]]
            if ev[1] in closed or ev[1] in hup:
                continue
            e.data(c, ev[2], h.now)
        elif kind == "clock":
            h.now += ev[1]
        elif kind == "advance":
            h.advance(ev[1])
        elif kind == "eof":
            if ev[1] not in hup and ev[1] not in closed:
                hup.add(ev[1])
                e.eof(conns[ev[1]], h.now)
        elif kind == "close":
            c = conns[ev[1]]
            if ev[1] not in closed:
                closed.add(ev[1])
                e.close(c, h.now)
        elif kind == "more":
            b = list(e.backlog)
            e.backlog.clear()
            for c in b:
                if conns.index(c) not in closed:
                    e.more(c, h.now)
        elif kind == "step":
            e.step(h.now)
        for c in conns:
            c.out = []
        for t, j in seen:
            assert t - STAMP < j.created <= t, (t, j.created, t - j.created)
        for j in e.q.jobs.values():
            assert j.created <= h.now

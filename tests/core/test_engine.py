"""The pure engine under a fake clock: semantics and timers, no sockets."""
import pathlib

import pytest

from fakeclock import Harness
from pybeanstalkd.core.outcome import Outcome
from pybeanstalkd.core.protocol import NS


@pytest.fixture
def h():
    return Harness()


def put(h, s, body=b"x", pri=0, delay=0, ttr=60):
    return h.send(s, b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body))


def stat(h, s, cmd: bytes) -> dict:
    out = h.send(s, cmd)
    assert out.startswith(b"OK ")
    lines = out.split(b"\r\n", 1)[1].decode().splitlines()[1:]
    return dict(line.split(": ", 1) for line in lines if line)


def test_put_reserve_delete(h):
    c = h.conn()
    assert put(h, c, b"hello") == b"INSERTED 1\r\n"
    assert h.send(c, b"reserve\r\n") == b"RESERVED 1 5\r\nhello\r\n"
    assert h.send(c, b"delete 1\r\n") == b"DELETED\r\n"
    assert h.send(c, b"delete 1\r\n") == b"NOT_FOUND\r\n"


def test_pipelined_commands_in_one_feed(h):
    c = h.conn()
    assert h.send(c, b"use a\r\nuse b\r\nlist-tube-used\r\n") == (
        b"USING a\r\nUSING b\r\nUSING b\r\n")


def test_command_split_across_feeds(h):
    c = h.conn()
    assert h.send(c, b"put 0 0 1") == b""
    assert h.send(c, b"0 3\r\nab") == b""
    assert h.send(c, b"c\r") == b""
    assert h.send(c, b"\n") == b"INSERTED 1\r\n"


def test_priority_then_id_across_tubes(h):
    p, w = h.conn(), h.conn()
    h.send(p, b"use a\r\n")
    put(h, p, b"1", pri=5)
    put(h, p, b"2", pri=3)
    h.send(p, b"use b\r\n")
    put(h, p, b"3", pri=3)
    put(h, p, b"4", pri=1)
    h.send(w, b"watch a\r\nwatch b\r\n")
    order = [h.send(w, b"reserve\r\n").split()[1] for _ in range(4)]
    assert order == [b"4", b"2", b"3", b"1"]


def test_delayed_job_ready_exactly_on_time(h):
    c = h.conn()
    put(h, c, delay=2)
    h.advance(1.999)
    assert h.send(c, b"peek-ready\r\n") == b"NOT_FOUND\r\n"
    h.advance(0.001)
    assert h.send(c, b"peek-ready\r\n") == b"FOUND 1 1\r\nx\r\n"


def test_ttr_expiry_returns_job_to_ready(h):
    c = h.conn()
    put(h, c, ttr=2)
    h.send(c, b"reserve\r\n")
    h.advance(2)  # expiry is strictly after the deadline
    assert stat(h, c, b"stats-job 1\r\n")["state"] == "reserved"
    h.advance(0.001)
    st = stat(h, c, b"stats-job 1\r\n")
    assert st["state"] == "ready" and st["timeouts"] == "1"
    assert stat(h, c, b"stats\r\n")["job-timeouts"] == "1"


def test_ttr_zero_is_one_second(h):
    c = h.conn()
    put(h, c, ttr=0)
    assert stat(h, c, b"stats-job 1\r\n")["ttr"] == "1"


def test_deadline_soon_when_command_arrives(h):
    c = h.conn()
    put(h, c, ttr=1)
    h.send(c, b"reserve\r\n")
    # With ttr 1 the job is inside the 1 s safety margin at once.
    assert h.send(c, b"reserve-with-timeout 5\r\n") == b"DEADLINE_SOON\r\n"


def test_deadline_soon_during_wait(h):
    c = h.conn()
    put(h, c, ttr=3)
    h.send(c, b"reserve\r\n")
    h.advance(0.4)
    assert h.send(c, b"reserve-with-timeout 10\r\n") == b""
    h.advance(1.5)
    assert h.take(c) == b""
    h.advance(0.1)  # deadline 3.0 - margin 1.0 = 2.0 after the reservation
    assert h.take(c) == b"DEADLINE_SOON\r\n"


def test_ready_job_beats_deadline_soon(h):
    c = h.conn()
    put(h, c, ttr=1)
    put(h, c, b"y")
    h.send(c, b"reserve\r\n")
    assert h.send(c, b"reserve\r\n") == b"RESERVED 2 1\r\ny\r\n"


def test_reserve_with_timeout_zero(h):
    c = h.conn()
    assert h.send(c, b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"


def test_reserve_timeout_fires_on_time(h):
    c = h.conn()
    assert h.send(c, b"reserve-with-timeout 2\r\n") == b""
    h.advance(1.999)
    assert h.take(c) == b""
    h.advance(0.001)
    assert h.take(c) == b"TIMED_OUT\r\n"


@pytest.mark.parametrize("wake", ["put", "release", "kick", "delay", "unpause", "disconnect", "ttr"])
def test_blocking_reserve_is_woken(h, wake):
    w, p = h.conn(), h.conn()
    if wake in ("release", "disconnect", "ttr"):
        put(h, p, ttr=5)
        h.send(p, b"reserve\r\n")
    if wake == "kick":
        put(h, p)
        h.send(p, b"reserve\r\nbury 1 0\r\n")
    if wake == "unpause":
        put(h, p)
        h.send(p, b"pause-tube default 100\r\n")
    assert h.send(w, b"reserve\r\n") == b""
    if wake == "put":
        put(h, p)
    elif wake == "release":
        assert h.send(p, b"release 1 0 0\r\n") == b"RELEASED\r\n"
    elif wake == "kick":
        assert h.send(p, b"kick 1\r\n") == b"KICKED 1\r\n"
    elif wake == "delay":
        put(h, p, delay=1)
        h.advance(1)
    elif wake == "unpause":
        assert h.send(p, b"pause-tube default 0\r\n") == b"PAUSED\r\n"
        h.advance(0)
        h.advance(1e-9)
    elif wake == "disconnect":
        h.close(p)
    elif wake == "ttr":
        h.advance(5.001)
    assert h.take(w) == b"RESERVED 1 1\r\nx\r\n"


def test_pipelined_commands_after_blocking_reserve_wait(h):
    w, p = h.conn(), h.conn()
    assert h.send(w, b"reserve\r\nlist-tube-used\r\n") == b""
    put(h, p)
    assert h.take(w) == b"RESERVED 1 1\r\nx\r\nUSING default\r\n"


def test_waiting_reservers_first_come_first_served(h):
    ws = [h.conn() for _ in range(4)]
    for w in ws:
        h.send(w, b"reserve\r\n")
    p = h.conn()
    for i in range(4):
        put(h, p, b"%d" % i)
    assert [h.take(w).split()[1] for w in ws] == [b"1", b"2", b"3", b"4"]


def test_half_close_while_waiting_times_out(h):
    c = h.conn()
    h.send(c, b"reserve\r\n")
    h.e.eof(c, h.now)
    assert h.take(c) == b"TIMED_OUT\r\n"
    assert c.closing


def test_close_releases_reserved_jobs(h):
    c, d = h.conn(), h.conn()
    put(h, c)
    h.send(c, b"reserve\r\n")
    h.close(c)
    st = stat(h, d, b"stats-job 1\r\n")
    assert st["state"] == "ready" and st["timeouts"] == "0"


def test_pause_zero_is_one_nanosecond(h):
    c, w = h.conn(), h.conn()
    put(h, c)
    h.send(c, b"pause-tube default 10\r\n")
    assert h.send(w, b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"
    h.send(c, b"pause-tube default 0\r\n")
    h.advance(1e-9)
    assert h.send(w, b"reserve-with-timeout 0\r\n") == b"RESERVED 1 1\r\nx\r\n"


def test_pause_time_left_and_expiry(h):
    c = h.conn()
    h.send(c, b"pause-tube default 5\r\n")
    st = stat(h, c, b"stats-tube default\r\n")
    assert (st["pause"], st["pause-time-left"]) == ("5", "5")
    h.advance(2.5)
    assert stat(h, c, b"stats-tube default\r\n")["pause-time-left"] == "2"
    h.advance(2.5)
    st = stat(h, c, b"stats-tube default\r\n")
    assert (st["pause"], st["pause-time-left"]) == ("0", "0")


def test_tubes_freed_when_unreferenced(h):
    a, b = h.conn(), h.conn()
    h.send(a, b"watch x\r\nwatch y\r\nuse z\r\n")
    assert h.send(b, b"list-tubes\r\n").endswith(b"- default\n- x\n- y\n- z\n\r\n")
    h.close(a)
    assert h.send(b, b"list-tubes\r\n") == b"OK 14\r\n---\n- default\n\r\n"


def test_swap_remove_orders(h):
    c = h.conn()
    h.send(c, b"watch a\r\nwatch b\r\nwatch c\r\nignore default\r\n")
    assert h.send(c, b"list-tubes-watched\r\n") == b"OK 16\r\n---\n- c\n- a\n- b\n\r\n"


def test_use_creates_before_releasing_old_tube(h):
    c, d = h.conn(), h.conn()
    h.send(c, b"use a\r\n")
    h.send(d, b"use x\r\n")
    h.send(c, b"use b\r\n")  # [default a x] + b, then a's hole gets b
    assert h.send(c, b"list-tubes\r\n") == b"OK 22\r\n---\n- default\n- b\n- x\n\r\n"


def test_tube_with_jobs_is_kept(h):
    c = h.conn()
    h.send(c, b"use t\r\n")
    put(h, c)
    h.send(c, b"use default\r\n")
    assert b"- t\n" in h.send(c, b"list-tubes\r\n")
    h.send(c, b"delete 1\r\n")
    assert b"- t\n" not in h.send(c, b"list-tubes\r\n")


def test_ids_used_up_by_expected_crlf_and_draining(h):
    c = h.conn()
    assert h.send(c, b"put 0 0 1 1\r\nabc") == b"EXPECTED_CRLF\r\n"
    assert put(h, c) == b"INSERTED 2\r\n"
    d = h.conn()
    h.e.draining = True
    assert put(h, d) == b"DRAINING\r\n"
    h.e.draining = False
    assert put(h, d) == b"INSERTED 4\r\n"


def test_job_too_big_after_discarding_body(h):
    h2 = Harness(max_job_size=10)
    c = h2.conn()
    assert h2.send(c, b"put 0 0 0 11\r\n") == b""
    assert h2.send(c, b"delete 9999\r") == b""
    assert h2.send(c, b"\n") == b"JOB_TOO_BIG\r\n"
    assert h2.send(c, b"put 0 0 0 1\r\nx\r\n") == b"INSERTED 1\r\n"


def test_overlong_line_one_bad_format(h):
    c = h.conn()
    assert h.send(c, b"a" * 500 + b"\r\nuse x\r\n") == b"BAD_FORMAT\r\nUSING x\r\n"


def test_bare_cr_stalls_line_detection(h):
    c = h.conn()
    assert h.send(c, b"use a\rb\r\nlist-tube-used\r\n") == b""


def test_kick_buried_before_delayed(h):
    c = h.conn()
    put(h, c, delay=100)
    put(h, c)
    h.send(c, b"reserve\r\n")
    h.send(c, b"bury 2 7\r\n")
    assert h.send(c, b"kick 10\r\n") == b"KICKED 1\r\n"
    assert h.send(c, b"kick 10\r\n") == b"KICKED 1\r\n"  # now the delayed one
    st = stat(h, c, b"stats-job 2\r\n")
    assert (st["state"], st["pri"], st["buries"], st["kicks"]) == ("ready", "7", "1", "1")


def test_kick_delayed_soonest_first(h):
    c = h.conn()
    put(h, c, b"a", delay=30)
    put(h, c, b"b", delay=10)
    put(h, c, b"c", delay=20)
    assert h.send(c, b"kick 2\r\n") == b"KICKED 2\r\n"
    assert stat(h, c, b"stats-job 1\r\n")["state"] == "delayed"
    assert stat(h, c, b"stats-job 2\r\n")["state"] == "ready"


def test_monotonic_clock_only(h):
    """The engine never reads the clock: nothing times out without advance()."""
    c = h.conn()
    put(h, c, ttr=1)
    h.send(c, b"reserve\r\n")
    import time

    time.sleep(0.01)
    assert h.e.next_due() == h.now + NS + 1
    assert stat(h, c, b"stats-job 1\r\n")["state"] == "reserved"


def test_touch_moves_the_ttr_timer(h):
    c = h.conn()
    put(h, c, ttr=2)
    h.send(c, b"reserve\r\n")
    h.advance(1.5)
    assert h.send(c, b"touch 1\r\n") == b"TOUCHED\r\n"
    h.advance(1.9)
    assert stat(h, c, b"stats-job 1\r\n")["state"] == "reserved"
    h.advance(0.2)
    assert stat(h, c, b"stats-job 1\r\n")["state"] == "ready"


def test_many_reserved_jobs_all_time_out(h):
    """No lost TTR timers: every reserved job of every connection expires."""
    conns = [h.conn() for _ in range(20)]
    p = h.conn()
    for i in range(200):
        put(h, p, ttr=1 + i % 7)
    for i in range(200):
        h.send(conns[i % 20], b"reserve\r\n")
    h.advance(8.001)
    assert stat(h, p, b"stats\r\n")["job-timeouts"] == "200"


def test_stale_heap_entries_are_compacted(h):
    """A job released with a delay again and again must not grow the heaps."""
    c = h.conn()
    put(h, c, delay=100)
    for _ in range(3000):
        assert h.send(c, b"reserve-job 1\r\n").startswith(b"RESERVED 1 ")
        assert h.send(c, b"release 1 0 100\r\n") == b"RELEASED\r\n"
    q = h.e.q
    assert len(q.tubes.named[b"default"].delayed.entries) <= 2 + 64 + 1
    assert len(q.timers.delay_heap.entries) <= 2 + 1024 + 1
    assert len(q.timers.ttr_heap) <= 1024 + 1


def test_server_reads_only_the_monotonic_clock():
    """Wall-clock jumps cannot move timers: the I/O layer's only clock is monotonic."""
    import time

    from pybeanstalkd.binlog import sync
    from pybeanstalkd.server import loop, transport

    for mod in (transport, loop, sync):
        assert mod.monotonic_ns is time.monotonic_ns
        # (its source: compiled, __file__ is the extension beside it)
        py = pathlib.Path(mod.__file__).with_name(mod.__name__.rpartition(".")[2] + ".py")
        src = py.read_text()
        assert "time.time" not in src and "time_ns" not in src.replace("monotonic_ns", "")


def _after_hangup(h, c) -> list[bytes]:
    """What a half-closed connection's later passes answer, one each (the
    transport writes each reply before it calls more())."""
    replies = []
    while h.e.backlog:
        assert h.e.backlog == [c]
        h.e.backlog.clear()
        h.e.more(c, h.now)
        replies.append(h.take(c))
    return replies


def test_half_close_still_answers_pipelined_commands_one_reply_a_pass(h):
    c = h.conn()
    body = b"put 0 0 60 3\r\nabc\r\n"
    assert h.send(c, b"reserve\r\nlist-tube-used\r\n" + body + b"reserve\r\nuse x\r\n") == b""
    h.e.eof(c, h.now)
    assert h.take(c) == b"TIMED_OUT\r\n" and not c.closing
    assert _after_hangup(h, c) == [b"USING default\r\n", b"INSERTED 1\r\n",
                                   b"RESERVED 1 3\r\nabc\r\n", b"USING x\r\n"]
    assert c.closing and not c.plen


def test_a_peer_gone_after_its_timed_out_runs_none_of_its_later_commands(h):
    # The reference runs what follows a blocked reserve one reply at a time,
    # and stops at the first reply it cannot write: here the connection is
    # gone once TIMED_OUT has been written.
    c = h.conn()
    assert h.send(c, b"reserve\r\nuse x\r\nput 0 0 60 1\r\nx\r\n") == b""
    h.e.eof(c, h.now)
    assert h.take(c) == b"TIMED_OUT\r\n"
    h.close(c)
    assert _after_hangup(h, c) == [b""]
    o = h.conn()
    stats = stat(h, o, b"stats\r\n")
    assert (stats["cmd-use"], stats["cmd-put"], stats["total-jobs"]) == ("0", "0", "0")


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("line", [b"reserve", b"reserve-with-timeout 60"])
def test_a_reserve_after_half_close_times_out_at_once(h, fast, line):
    # Each path to a reserve (the fast path, the command table) hangs up a
    # reserve the peer can no longer wait for.
    h.e.fast = fast
    c = h.conn()
    assert h.send(c, b"reserve\r\n" + line + b"\r\nuse x\r\n") == b""
    h.e.eof(c, h.now)
    assert h.take(c) == b"TIMED_OUT\r\n"
    assert _after_hangup(h, c) == [b"TIMED_OUT\r\n", b"USING x\r\n"]
    assert c.closing and not c.waiting


def test_half_close_with_an_unfinished_command_closes(h):
    c = h.conn()
    assert h.send(c, b"reserve\r\nput 0 0 60 10\r\nabc") == b""
    h.e.eof(c, h.now)
    assert h.take(c) == b"TIMED_OUT\r\n"
    assert _after_hangup(h, c) == [b""]
    assert c.closing


def test_pause_tube_counted_before_name_check(h):
    c = h.conn()
    assert h.send(c, b"pause-tube -x 5\r\n") == b"BAD_FORMAT\r\n"  # counted
    assert h.send(c, b"pause-tube x\r\n") == b"BAD_FORMAT\r\n"  # not counted
    assert h.send(c, b"pause-tube nosuch 5\r\n") == b"NOT_FOUND\r\n"  # counted
    assert stat(h, c, b"stats\r\n")["cmd-pause-tube"] == "2"


@pytest.mark.parametrize("seed", range(5))
def test_wide_watch_reserve_matches_a_full_scan(h, seed):
    """A client watching many tubes (the tube index) gets exactly the job a
    scan of every watched tube would give: min (pri, id), paused tubes skipped."""
    import random

    rnd = random.Random(seed)
    names = [b"t%d" % i for i in range(40)]
    p, w = h.conn(), h.conn()
    for n in names[:30]:  # w watches 30 of the 40 tubes: the wide path
        h.send(w, b"watch %s\r\n" % n)
    q = h.e.q
    for step in range(600):
        op = rnd.random()
        if op < 0.5:
            h.send(p, b"use %s\r\n" % rnd.choice(names))
            h.send(p, b"put %d 0 60 1\r\nx\r\n" % rnd.randrange(5))
        elif op < 0.6 and q.jobs:
            h.send(p, b"delete %d\r\n" % rnd.choice(list(q.jobs)))
        elif op < 0.65:
            h.send(p, b"pause-tube %s %d\r\n" % (rnd.choice(names), rnd.choice((0, 1000))))
            h.advance(0.001)
        else:
            expect = None
            for t in q.tubes.named.values():
                if t.name in names[:30] and t.unpause_at <= h.now:
                    j = q.ready_top(t)
                    if j is not None and (expect is None or (j.pri, j.id) < (expect.pri, expect.id)):
                        expect = j
            out = h.send(w, b"reserve-with-timeout 0\r\n")
            if expect is None:
                assert out == b"TIMED_OUT\r\n", step
            else:
                assert out.split(b"\r\n")[0] == b"RESERVED %d 1" % expect.id, step
                h.send(w, b"delete %d\r\n" % expect.id)


@pytest.mark.parametrize("cuts", [(1,), (25, 40000), (30, 30 + 4097, 60000), (65000,)])
def test_big_body_split_across_feeds(h, cuts):
    """A 64 KiB put arriving in pieces is stored byte for byte, and the
    commands after it still parse. When a read holds the header and a big
    part of the body, that part is kept as a view (no copy until the join)."""
    body = (bytes(range(256)) * 256)[:65535]
    data = b"put 0 0 60 %d\r\n%s\r\nstats-job 1\r\n" % (len(body), body)
    c = h.conn()
    out = h.send(c, data[:cuts[0]])
    if cuts[0] > 4096 + 20:
        assert type(c.pending[0]) is memoryview
    for a, b in zip(cuts, (*cuts[1:], len(data))):
        out += h.send(c, data[a:b])
    assert out.startswith(b"INSERTED 1\r\nOK ")
    assert not c.pending
    assert h.send(c, b"reserve-with-timeout 0\r\n") == b"RESERVED 1 65535\r\n" + body + b"\r\n"


def test_young_collection_survivors_are_frozen_and_still_freed():
    """server.py's GC policy: what survives a young collection moves to the
    permanent generation (later collections never rescan it), and is still
    freed by reference counting when the queue lets go of it."""
    import gc
    import weakref

    from pybeanstalkd.server.loop import _freeze_survivors

    class Held:
        pass

    gc.callbacks.append(_freeze_survivors)
    try:
        before = gc.get_freeze_count()
        held = [Held() for _ in range(1000)]
        gc.collect(0)
        assert gc.get_freeze_count() >= before + 1000
        ref = weakref.ref(held[0])
        del held
        assert ref() is None
    finally:
        gc.callbacks.remove(_freeze_survivors)
        gc.unfreeze()


def test_a_list_grown_without_allocations_is_frozen_within_gc_passes():
    """A connection's deadlines grow with every reserve, and a reserve
    allocates no GC-tracked object: the server collects (and so freezes) the
    young generation every GC_PASSES loop passes, so such a list is never
    young for long (a collection would walk all of it)."""
    import asyncio
    import gc

    from pybeanstalkd.server.loop import _freeze_survivors
    from pybeanstalkd.core.engine import Engine
    from pybeanstalkd.server.transport import GC_PASSES, Server

    loop = asyncio.new_event_loop()
    gc.callbacks.append(_freeze_survivors)
    try:
        srv = Server(loop, Engine(0, log=lambda m: None))
        gc.collect(0)
        grown = []
        for _ in range(GC_PASSES):
            assert any(o is grown for o in gc.get_objects(0))  # young until...
            grown.extend(range(1000, 1100))  # (ints: no tracked allocation)
            srv.flush()
        assert not any(o is grown for o in gc.get_objects(0))  # ...frozen
        assert not any(o is grown for o in gc.get_objects(1) + gc.get_objects(2))
    finally:
        gc.callbacks.remove(_freeze_survivors)
        gc.unfreeze()
        loop.close()


# -- job ids used up ---------------------------------------------------------

def test_puts_are_refused_once_job_ids_are_used_up():
    from pybeanstalkd.core import admin
    from pybeanstalkd.core.protocol import U64_MAX

    logged = []
    h = Harness()
    h.e.log = logged.append
    q = h.e.q
    q.ids.next = U64_MAX
    c = h.conn()
    assert h.send(c, b"put 0 0 60 1\r\nx\r\n") == b"INSERTED %d\r\n" % U64_MAX
    # The next id does not fit: refused, its body skipped, nothing kept.
    assert h.send(c, b"put 0 0 60 3\r\nabc\r\nput 0 0 60 1\r\ny\r\nuse t\r\n") == (
        b"INTERNAL_ERROR\r\nINTERNAL_ERROR\r\nUSING t\r\n")
    assert q.job_count() == 1 and q.ready_ct == 1 and q.ids.next == U64_MAX + 1
    assert logged == ["put refused: job ids are used up (the last is %d)" % U64_MAX]
    assert admin.put(h.e, b"t", b"z", 0, 0, 0, h.now) == (Outcome.IDS_USED_UP, 0)
    assert q.job_count() == 1


# -- a pause of zero ------------------------------------------------------------

def test_a_zero_pause_is_over_for_the_next_command_of_the_same_read(h):
    c = h.conn()
    assert h.send(c, b"put 0 0 60 1\r\nx\r\npause-tube default 100\r\n") == (
        b"INSERTED 1\r\nPAUSED\r\n")
    assert h.send(c, b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"
    assert h.send(c, b"pause-tube default 0\r\nreserve-with-timeout 0\r\n") == (
        b"PAUSED\r\nRESERVED 1 1\r\nx\r\n")
    st = stat(h, c, b"stats-tube default\r\n")
    assert (st["pause"], st["pause-time-left"], st["cmd-pause-tube"]) == ("0", "0", "2")


def test_a_zero_pause_wakes_the_tubes_waiting_reservers_first(h):
    a, b = h.conn(), h.conn()
    assert h.send(a, b"put 0 0 60 1\r\nx\r\npause-tube default 100\r\n") == (
        b"INSERTED 1\r\nPAUSED\r\n")
    assert h.send(a, b"reserve\r\n") == b""  # waits
    # b unpauses and reserves in one read: a, waiting first, gets the job.
    assert h.send(b, b"pause-tube default 0\r\nreserve-with-timeout 0\r\n") == (
        b"PAUSED\r\nTIMED_OUT\r\n")
    h.advance(0)
    assert h.take(a) == b"RESERVED 1 1\r\nx\r\n"


def _framing_model(chunks: list[bytes]) -> list[bytes]:
    """The over-long line rule a buffer's worth at a time, as the reference
    reads: each line (or BAD_FORMAT for a discarded one) in order."""
    from pybeanstalkd.core.protocol import LINE_BUF_SIZE

    out, buf, skip = [], b"", False
    for chunk in chunks:
        buf += chunk
        pos = 0
        while pos < len(buf):
            end = min(len(buf), pos + LINE_BUF_SIZE)
            i = buf.find(b"\r", pos, end - 1)
            if i < 0 or buf[i + 1] != 10:
                if end - pos == LINE_BUF_SIZE:
                    pos, skip = end, True
                    continue
                break
            out.append(b"BAD_FORMAT" if skip else buf[pos:i])
            pos, skip = i + 2, False
        buf = buf[pos:]
    return out


@pytest.mark.parametrize("seed", range(20))
def test_over_long_lines_are_discarded_as_a_buffer_at_a_time(seed):
    # Junk is skipped a buffer's worth at a time as the reference does, the
    # buffers with no CR at all at once: the same lines and BAD_FORMATs.
    import random

    rnd = random.Random(seed)
    parts = []
    for _ in range(rnd.randrange(1, 40)):
        kind = rnd.random()
        if kind < 0.4:
            parts.append(b"list-tube-used\r\n")
        elif kind < 0.7:
            parts.append(b"x" * rnd.randrange(1, 3000))
        else:
            parts.append(rnd.choice([b"\r", b"\n", b"\r\n", b"y\r", b"\r\r\n"]))
    data = b"".join(parts)
    cuts = sorted(rnd.sample(range(1, len(data)), min(len(data) - 1, rnd.randrange(0, 20))))
    chunks = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
    h = Harness()
    c = h.conn()
    got = b"".join(h.send(c, chunk) for chunk in chunks)
    want = b"".join(b"BAD_FORMAT\r\n" if line == b"BAD_FORMAT"
                    else b"USING default\r\n" if line == b"list-tube-used"
                    else b"UNKNOWN_COMMAND\r\n" if line else b"UNKNOWN_COMMAND\r\n"
                    for line in _framing_model(chunks))
    assert got == want


def test_a_closed_connection_is_freed_without_the_garbage_collector():
    # The server freezes what survives a young collection (server/loop.py):
    # a closed connection caught in a reference cycle would never be freed.
    import gc

    from pybeanstalkd.core.engine import Session

    gc.collect()
    gc.disable()
    # (Sessions other tests still hold are not this test's)
    before = {id(o) for o in gc.get_objects() if type(o) is Session}
    try:
        h = Harness()
        for jid, hold in ((1, False), (2, True)):
            c = h.conn()
            got = h.send(c, b"put 0 0 60 1\r\nx\r\nreserve\r\n")
            assert got.endswith(b"RESERVED %d 1\r\nx\r\n" % jid)
            if not hold:
                assert h.send(c, b"delete %d\r\n" % jid) == b"DELETED\r\n"
            h.close(c)
            if hold:  # (its job went back to ready: another takes and deletes it)
                o = h.conn()
                assert h.send(o, b"reserve\r\ndelete %d\r\n" % jid).endswith(b"DELETED\r\n")
                h.close(o)
                del o
            del c
            h.e.dirty.clear()  # (what the transport does once it has written them)
            assert not [o for o in gc.get_objects() if type(o) is Session and id(o) not in before], hold
    finally:
        gc.enable()


def test_a_body_sent_a_byte_at_a_time_is_held_as_one(h):
    # Each read kept as an object of its own would cost tens of bytes of
    # memory a byte (and slip past --max-memory, which counts the bytes).
    c = h.conn()
    body = bytes(range(256)) * 40
    assert h.send(c, b"put 0 0 60 %d\r\n" % len(body)) == b""
    for i in range(len(body)):
        h.e.data(c, body[i:i + 1], h.now)
        assert len(c.pending) <= 33
    assert h.send(c, b"\r\n") == b"INSERTED 1\r\n"
    assert h.e.q.jobs[1].body == body + b"\r\n"
    # The same while blocked in reserve.
    assert h.send(c, b"reserve-with-timeout 1\r\n") == b"RESERVED 1 %d\r\n%s\r\n" % (len(body), body)
    w = h.conn()
    assert h.send(w, b"watch other\r\nignore default\r\nreserve\r\n").endswith(b"WATCHING 1\r\n")
    for b in b"list-tube-used\r\n" * 100:
        h.e.data(w, bytes([b]), h.now)
    assert len(w.pending) <= 33 and w.plen == 1600


def test_a_client_watching_many_tubes_runs_few_reserves_a_call(h):
    # Each reserve of a client watching W tubes costs in W: its commands
    # count as W // WIDE each against what one call runs, so that a read
    # of them does not hold everyone else (the rest run on later turns).
    from pybeanstalkd.core.engine import CALL_UNITS, WIDE

    c = h.conn()
    for i in range(20_000):
        h.e.data(c, b"watch t%d\r\n" % i, h.now)
    c.out.clear()
    h.e.backlog.clear()
    h.e.data(c, b"reserve-with-timeout 0\r\n" * 340, h.now)
    ran = c.out.count(b"TIMED_OUT\r\n")
    assert ran == 1 + CALL_UNITS // (20_001 // WIDE) == 4  # (the first runs before the batch)
    assert h.e.backlog == [c]
    while h.e.backlog:
        h.e.backlog.clear()
        h.e.more(c, h.now)
    assert c.out.count(b"TIMED_OUT\r\n") == 340


def shared_created(*jobs):
    """The jobs' created times are one int object; or, a native Job's
    (compiled), the same value in an int field, which holds no object
    (each read makes a new one)."""
    first = jobs[0].created
    if first is not jobs[0].created:  # (an int field)
        return all(j.created == first for j in jobs)
    return all(j.created is first for j in jobs)


def test_the_puts_within_a_stamp_share_their_created_time(h, tmp_path):
    """A job's created time is when a read came in, up to STAMP (131 µs)
    before its own: one int for the puts of those reads (32 bytes a
    job), its own for a read later than that; recovery shares them again."""
    from fakeclock import with_binlog
    from pybeanstalkd.core.engine import STAMP

    hb, wal = with_binlog(tmp_path)
    for hh in (h, hb):
        c = hh.conn()
        assert hh.send(c, b"put 0 0 60 1\r\na\r\nput 0 0 60 1\r\nb\r\n") == \
            b"INSERTED 1\r\nINSERTED 2\r\n"
        hh.now += STAMP - 1
        assert hh.send(c, b"put 0 0 60 1\r\nc\r\n") == b"INSERTED 3\r\n"
        hh.now += 1
        assert hh.send(c, b"put 0 0 60 1\r\nd\r\n") == b"INSERTED 4\r\n"
        jobs = hh.e.q.jobs
        assert shared_created(jobs[1], jobs[2], jobs[3])
        assert jobs[4].created == jobs[1].created + STAMP
    wal.flush()
    h2, _ = with_binlog(tmp_path)
    jobs = h2.e.q.jobs
    assert shared_created(jobs[1], jobs[2], jobs[3])
    assert jobs[4].created != jobs[3].created


def test_a_put_run_later_than_its_read_gets_a_fresh_created_time(h):
    """A put left behind a blocking reserve runs when the reserve ends (a
    timer, not a read): its created time is then, not the last read's."""
    from pybeanstalkd.core.engine import STAMP

    c = h.conn()
    assert h.send(c, b"reserve-with-timeout 5\r\nput 0 0 60 1\r\na\r\n") == b""
    start = h.now
    h.advance(6)
    assert h.e.q.jobs[1].created >= start + 5 * NS > start + STAMP


"""--extensions: tuber's batches and tube/server control, answered byte for
byte as tuber 0.6.4 answers them (the cases of its src/protocol.rs tests
and tests/integration.rs), and nothing of it without the flag."""
import pytest

from fakeclock import Harness
from pybeanstalkd.core.slices import SLICE
from pybeanstalkd.core.weighted import FIFO, FIFO_POLICY

EXT_LINES = [b"reserve-batch 2", b"delete-batch 1 2", b"flush-tube default", b"drain",
             b"undrain", b"reserve-batch", b"delete-batch", b"flush-tube"]


@pytest.fixture
def h():
    return Harness(extensions=True)


def put(h, s, body=b"x", pri=0, delay=0, tube=None):
    if tube is not None:
        h.send(s, b"use %s\r\n" % tube)
    out = h.send(s, b"put %d %d 60 %d\r\n%s\r\n" % (pri, delay, len(body), body))
    assert out.startswith(b"INSERTED ")
    return int(out.split()[1])


def test_without_the_flag_the_lines_are_answered_as_the_reference_does():
    h = Harness()
    s = h.conn()
    got = [h.send(s, line + b"\r\n") for line in EXT_LINES]
    # (the reference reads "reserve-batch" as a reserve with junk after it)
    assert got == [b"BAD_FORMAT\r\n", b"UNKNOWN_COMMAND\r\n", b"UNKNOWN_COMMAND\r\n",
                   b"UNKNOWN_COMMAND\r\n", b"UNKNOWN_COMMAND\r\n", b"BAD_FORMAT\r\n",
                   b"UNKNOWN_COMMAND\r\n", b"UNKNOWN_COMMAND\r\n"]


def test_reserve_batch_takes_jobs_in_priority_order_and_never_waits(h):
    s, w = h.conn(), h.conn()
    put(h, s, b"hello", pri=1)
    put(h, s, b"world", pri=2)
    assert h.send(w, b"reserve-batch 10\r\n") == (
        b"RESERVED_BATCH 2\r\nRESERVED 1 5\r\nhello\r\nRESERVED 2 5\r\nworld\r\n")
    assert h.send(w, b"reserve-batch 1\r\n") == b"RESERVED_BATCH 0\r\n"
    for pri in (4, 3, 2, 1, 0):
        put(h, s, pri=pri)
    got = h.send(w, b"reserve-batch 3\r\n").split(b"\r\n")
    assert got[0] == b"RESERVED_BATCH 3" and [g.split()[1] for g in got[1:6:2]] == [b"7", b"6", b"5"]
    stats = h.send(w, b"stats\r\n")
    assert b"cmd-reserve: 3\n" in stats and b"current-jobs-reserved: 5\n" in stats
    assert b"current-workers: 1\n" in stats


@pytest.mark.parametrize("line", [b"reserve-batch 0", b"reserve-batch 1001", b"reserve-batch abc",
                                  b"reserve-batch -1", b"reserve-batch ",
                                  b"reserve-batch 99999999999"])
def test_reserve_batch_bad_counts(h, line):
    assert h.send(h.conn(), line + b"\r\n") == b"BAD_FORMAT\r\n"


def test_reserve_batch_takes_tubers_number_forms(h):
    s = h.conn()
    put(h, s)
    assert h.send(s, b"reserve-batch  +5 \r\n").startswith(b"RESERVED_BATCH 1\r\n")
    assert h.send(s, b"reserve-batch 1000\r\n") == b"RESERVED_BATCH 0\r\n"


def test_reserve_batch_leaves_jobs_to_reservers_already_waiting(h):
    p, waiting, batch = h.conn(), h.conn(), h.conn()
    h.send(waiting, b"watch a\r\nwatch b\r\n")
    assert h.send(waiting, b"reserve\r\n") == b""  # blocked
    h.send(batch, b"watch a\r\n")
    jid = put(h, p, tube=b"a")
    assert h.take(waiting) == b"RESERVED %d 1\r\nx\r\n" % jid
    assert h.send(batch, b"reserve-batch 5\r\n") == b"RESERVED_BATCH 0\r\n"


def test_delete_batch(h):
    s, other = h.conn(), h.conn()
    a, b, c = put(h, s), put(h, s), put(h, s)
    h.send(s, b"reserve-batch 3\r\n")
    assert h.send(s, b"delete-batch %d %d %d\r\n" % (a, b, c)) == b"DELETED_BATCH 3 0\r\n"
    d = put(h, s)
    assert h.send(s, b"delete-batch %d 99999 88888\r\n" % d) == b"DELETED_BATCH 1 2\r\n"
    assert h.send(s, b"delete-batch 1 2 3\r\n") == b"DELETED_BATCH 0 3\r\n"
    e, f = put(h, s), put(h, s)
    assert h.send(s, b"delete-batch %d\t%d \r\n" % (e, e)) == b"DELETED_BATCH 1 1\r\n"
    h.send(other, b"reserve\r\n")  # f, held by another connection
    assert h.send(s, b"delete-batch %d\r\n" % f) == b"DELETED_BATCH 0 1\r\n"
    assert b"cmd-delete: 12\n" in h.send(s, b"stats\r\n")  # one per id


@pytest.mark.parametrize("line", [b"delete-batch ", b"delete-batch   ", b"delete-batch abc",
                                  b"delete-batch -1", b"delete-batch 1 x",
                                  b"delete-batch 18446744073709551616"])
def test_delete_batch_bad_ids_delete_nothing(h, line):
    s = h.conn()
    put(h, s)
    assert h.send(s, line + b"\r\n") == b"BAD_FORMAT\r\n"
    assert h.send(s, b"peek 1\r\n").startswith(b"FOUND 1")


def test_a_delete_batch_of_a_thousand_ids_fits_its_line_and_1001_does_not(h):
    s = h.conn()
    ids = b" ".join(b"%d" % (10**19 + i) for i in range(1000))
    assert h.send(s, b"delete-batch " + ids + b"\r\n") == b"DELETED_BATCH 0 1000\r\n"
    assert h.send(s, b"delete-batch" + b" 1" * 1001 + b"\r\n") == b"BAD_FORMAT\r\n"
    # Longer than the longest delete-batch: skipped as the reference skips
    # a line over its 224 bytes (up to the next line end, then BAD_FORMAT).
    assert h.send(s, b"delete-batch " + ids + b" 1\r\n") == b""
    assert h.send(s, b"list-tube-used\r\n") == b"BAD_FORMAT\r\n"
    assert h.send(s, b"list-tube-used\r\n") == b"USING default\r\n"


def test_flush_tube_deletes_every_state_reserved_included(h):
    s, w = h.conn(), h.conn()
    put(h, s, tube=b"t")
    put(h, s, tube=b"t", delay=3600)
    put(h, s, tube=b"t")
    h.send(w, b"watch t\r\nignore default\r\n")
    h.send(w, b"reserve\r\n")
    r = put(h, s, tube=b"t")
    jid = int(h.send(w, b"reserve\r\n").split()[1])
    assert h.send(w, b"bury %d 0\r\n" % jid) == b"BURIED\r\n"
    keep = put(h, s, tube=b"other")
    assert h.send(s, b"flush-tube t\r\n") == b"FLUSHED 4\r\n"
    st = h.send(s, b"stats-tube t\r\n")
    for state in (b"ready", b"reserved", b"delayed", b"buried"):
        assert b"current-jobs-%s: 0\n" % state in st
    assert b"cmd-delete: 4\n" in st  # the tube's; not the server's
    assert b"cmd-delete: 0\n" in h.send(s, b"stats\r\n")
    assert h.send(w, b"delete 1\r\n") == b"NOT_FOUND\r\n"  # its holder lost it
    assert h.send(s, b"peek %d\r\n" % keep).startswith(b"FOUND")
    assert r  # (put ids used)


def test_flush_tube_replies(h):
    s = h.conn()
    assert h.send(s, b"flush-tube nonexistent\r\n") == b"NOT_FOUND\r\n"
    assert h.send(s, b"flush-tube default\r\n") == b"FLUSHED 0\r\n"
    for line in (b"flush-tube -bad", b"flush-tube default ", b"flush-tube "):
        assert h.send(s, line + b"\r\n") == b"BAD_FORMAT\r\n"


def test_a_big_flush_runs_in_slices_with_others_served_between():
    h = Harness(extensions=True, auto=False)
    s, other = h.conn(), h.conn()
    n = 5 * SLICE + 3
    h.send(s, b"use big\r\n" + b"put 0 0 60 1\r\nx\r\n" * n)
    h.take(s)
    assert h.send(s, b"flush-tube big\r\nlist-tube-used\r\n") == b""  # busy: no reply yet
    assert h.send(other, b"stats-tube big\r\n").startswith(b"OK")  # served meanwhile
    steps = 0
    while h.step():
        steps += 1
    assert steps >= 4
    assert h.take(s) == b"FLUSHED %d\r\nUSING big\r\n" % n


def test_drain_and_undrain(h):
    s = h.conn()
    assert h.send(s, b"drain\r\n") == b"DRAINING\r\n"
    assert h.send(s, b"put 0 0 60 1\r\na\r\n") == b"DRAINING\r\n"
    assert b"draining: true\n" in h.send(s, b"stats\r\n")
    assert h.send(s, b"undrain\r\n") == b"NOT_DRAINING\r\n"
    assert h.send(s, b"put 0 0 60 1\r\na\r\n") == b"INSERTED 2\r\n"
    assert b"draining: false\n" in h.send(s, b"stats\r\n")
    for line in (b"drain ", b"undrain ", b"reserve-batch", b"delete-batch", b"flush-tube"):
        assert h.send(s, line + b"\r\n") == b"UNKNOWN_COMMAND\r\n"


def test_watch_with_a_weight(h):
    s = h.conn()
    assert h.send(s, b"watch foo 4\r\n") == b"WATCHING 2\r\n"
    assert h.send(s, b"watch foo 2\r\n") == b"WATCHING 2\r\n"
    assert s.weighted.weights == {b"foo": 2}
    assert h.send(s, b"watch foo\r\n") == b"WATCHING 2\r\n"  # back to 1
    assert not s.weighted.weights
    assert h.send(s, b"watch foo +9999\r\n") == b"WATCHING 2\r\n"
    for line in (b"watch foo 0", b"watch foo 10000", b"watch foo  5", b"watch foo ",
                 b"watch  foo", b"watch foo 5 6", b"watch -foo 5", b"watch foo x"):
        assert h.send(s, line + b"\r\n") == b"BAD_FORMAT\r\n", line
    assert h.send(s, b"watch foo 3\r\n") == b"WATCHING 2\r\n"
    assert h.send(s, b"ignore foo\r\n") == b"WATCHING 1\r\n"
    assert not s.weighted.weights
    assert b"cmd-watch: 5\n" in h.send(s, b"stats\r\n")
    assert h.conn().weighted is FIFO_POLICY  # (one that never named a weight or a mode)
    assert FIFO_POLICY.mode == FIFO and not FIFO_POLICY.weights


def test_reserve_mode_replies(h):
    s = h.conn()
    for mode in (b"weighted", b"weighted-fair", b"fifo"):
        assert h.send(s, b"reserve-mode %s\r\n" % mode) == b"USING %s\r\n" % mode
    for line in (b"reserve-mode FIFO", b"reserve-mode default", b"reserve-mode weighted ",
                 b"reserve-mode "):
        assert h.send(s, line + b"\r\n") == b"BAD_FORMAT\r\n", line
    assert h.send(s, b"reserve-mode\r\n") == b"UNKNOWN_COMMAND\r\n"
    assert h.send(h.conn(), b"reserve-mode weighted\r\n") == b"USING weighted\r\n"
    assert FIFO_POLICY.mode == FIFO  # (each session changed its own)


def drawn(h, s, n):
    """The tubes of n reserves, each job released at once (pri 0, no delay)."""
    got = []
    for _ in range(n):
        jid = int(h.send(s, b"reserve-with-timeout 0\r\n").split()[1])
        got.append(h.e.q.jobs[jid].tube.name)
        h.send(s, b"release %d 0 0\r\n" % jid)
    return got


def test_weighted_reserves_follow_the_weights_not_the_priorities(h):
    p, w = h.conn(), h.conn()
    for _ in range(5):
        put(h, p, tube=b"a", pri=100)
        put(h, p, tube=b"b", pri=0)  # better priorities: fifo would take only b
    h.send(w, b"watch a 9\r\nwatch b 1\r\nignore default\r\n")
    assert set(drawn(h, w, 50)) == {b"b"}  # fifo
    assert h.send(w, b"reserve-mode weighted\r\n") == b"USING weighted\r\n"
    got = drawn(h, w, 1000)
    assert 850 <= got.count(b"a") <= 950, got.count(b"a")  # weight 9 of 10


def test_weighted_fair_divides_by_the_processing_time(h):
    p, w = h.conn(), h.conn()
    h.send(w, b"watch slow\r\nwatch fast\r\nignore default\r\n")
    for tube, seconds in ((b"slow", 10), (b"fast", 0.1)):
        for _ in range(10):  # 10 samples each: the moving average counts from then on
            put(h, p, tube=tube)
            jid = int(h.send(w, b"reserve-with-timeout 0\r\n").split()[1])
            h.advance(seconds)
            assert h.send(w, b"delete %d\r\n" % jid) == b"DELETED\r\n"
    slow, fast = h.e.q.tubes.named[b"slow"], h.e.q.tubes.named[b"fast"]
    assert (slow.ewma_n, fast.ewma_n) == (10, 10)
    assert abs(slow.ewma / 1e9 - 10) < 0.01 and abs(fast.ewma / 1e9 - 0.1) < 0.01
    for _ in range(5):
        put(h, p, tube=b"slow")
        put(h, p, tube=b"fast")
    h.send(w, b"reserve-mode weighted\r\n")
    plain = drawn(h, w, 400).count(b"fast")
    assert 150 <= plain <= 250  # equal weights: about half
    h.send(w, b"reserve-mode weighted-fair\r\n")
    fair = drawn(h, w, 400).count(b"fast")
    assert fair >= 390  # 1/0.1 against 1/10: 99 in 100


def test_reserve_batch_follows_the_reserve_mode(h):
    p, w = h.conn(), h.conn()
    for _ in range(20):
        put(h, p, tube=b"a", pri=5)
        put(h, p, tube=b"b", pri=0)
    h.send(w, b"watch a 9999\r\nwatch b\r\nignore default\r\nreserve-mode weighted\r\n")
    got = h.send(w, b"reserve-batch 10\r\n").split(b"\r\n")
    tubes = [h.e.q.jobs[int(line.split()[1])].tube.name for line in got[1:-1:2]]
    assert len(tubes) == 10 and tubes.count(b"a") >= 9


def flush_in_slices(h, s, tube, between):
    """flush-tube, with between() run after its first slice; its reply."""
    assert h.send(s, b"flush-tube %s\r\n" % tube) == b""
    between()
    while h.step():
        pass
    return h.take(s)


def test_a_flush_and_a_close_with_reservations_in_slices_lose_nothing():
    """A connection holding reservations in the flushed tube and another
    closes while the flush runs: its jobs of the flushed tube are deleted,
    the others come back ready, and no slice fails."""
    h = Harness(extensions=True, auto=False)
    p, a, f = h.conn(), h.conn(), h.conn()
    for tube in (b"t", b"u"):
        h.send(p, b"use %s\r\n" % tube + b"put 0 0 60 1\r\nx\r\n" * 100)
    h.send(a, b"watch t\r\nwatch u\r\nignore default\r\n")
    for _ in range(4):
        h.send(a, b"reserve-batch 100\r\n")
    h.send(p, b"use t\r\n" + b"put 0 0 60 1\r\nx\r\n" * 100)
    while h.step():
        pass
    h.take(p)
    h.take(a)
    got = flush_in_slices(h, f, b"t", lambda: h.close(a))
    assert got == b"FLUSHED 200\r\n"
    u = h.send(f, b"stats-tube u\r\n")
    assert b"current-jobs-ready: 100\n" in u and b"current-jobs-reserved: 0\n" in u
    t = h.send(f, b"stats-tube t\r\n")
    assert b"current-jobs-ready: 0\n" in t and b"current-jobs-reserved: 0\n" in t


def test_a_flush_deletes_what_the_tube_held_when_it_started():
    h = Harness(extensions=True, auto=False)
    p, w, f = h.conn(), h.conn(), h.conn()
    h.send(p, b"use t\r\n" + b"put 100 0 1 1\r\nx\r\n" * 150)
    h.send(w, b"watch t\r\n")
    held = [int(h.send(w, b"reserve-with-timeout 0\r\n").split()[1]) for _ in range(3)]
    while h.step():
        pass
    h.take(p)

    def meanwhile():
        h.send(p, b"put 1 0 60 1\r\nn\r\n")  # put after the start: stays
        h.send(w, b"release %d 0 0\r\n" % held[0])  # back to ready: still flushed
        h.advance(2)  # the other two time out: still flushed

    got = flush_in_slices(h, f, b"t", meanwhile)
    assert got == b"FLUSHED 150\r\n"
    st = h.send(f, b"stats-tube t\r\n")
    assert b"current-jobs-ready: 1\n" in st and b"total-jobs: 151\n" in st
    assert h.send(f, b"use t\r\npeek-ready\r\n").endswith(b"FOUND 151 1\r\nn\r\n")


def test_a_flush_walks_every_holder_however_many_it_found():
    """The walk over the reservations finds as many of t's as t held at
    the start before its last holder (one ready at the start, reserved
    meanwhile by a holder walked later): the last holder's job, reserved
    throughout, is still deleted."""
    h = Harness(extensions=True, auto=False)
    p, x, w, y, z, f = (h.conn() for _ in range(6))
    h.send(p, b"use t\r\n" + b"put 0 0 100 1\r\nx\r\n" * 3
           + b"use u\r\n" + b"put 0 0 100 1\r\nx\r\n" * 65)  # t: 1-3, u: 4-68
    h.take(p)
    h.send(x, b"".join(b"reserve-job %d\r\n" % i for i in [1, *range(4, 4 + SLICE - 1)]))
    h.advance(0.1)
    h.send(w, b"reserve-job 67\r\n")
    h.advance(0.1)
    h.send(y, b"reserve-job 68\r\n")
    h.advance(0.1)  # the holders, by their soonest expiry: x, w, y, z
    assert h.send(z, b"watch t\r\nignore default\r\nreserve-with-timeout 0\r\n").endswith(
        b"RESERVED 2 1\r\nx\r\n")
    got = flush_in_slices(h, f, b"t", lambda: h.send(y, b"reserve-job 3\r\n"))
    assert got == b"FLUSHED 3\r\n"
    assert h.send(p, b"peek 2\r\n") == b"NOT_FOUND\r\n"


def test_a_flushed_reservation_is_no_work_sample(h):
    p, w = h.conn(), h.conn()
    put(h, p, tube=b"t")
    h.send(w, b"watch t\r\n")
    h.send(w, b"reserve\r\n")
    assert h.send(p, b"flush-tube t\r\n") == b"FLUSHED 1\r\n"
    assert h.e.q.tubes.named[b"t"].ewma_n == 0 and h.e.q.tubes.named[b"t"].work_hist is None


def test_a_reserve_batch_watching_many_tubes_is_cut_to_one_reads_budget(h):
    from pybeanstalkd.core.session import CALL_UNITS, WIDE

    p, w = h.conn(), h.conn()
    h.send(p, b"use t\r\n" + b"put 0 0 60 1\r\nx\r\n" * 50)
    for i in range(0, 5000, 500):
        h.send(w, b"".join(b"watch w%d\r\n" % k for k in range(i, i + 500)))
        while h.e.backlog:  # (a read stops at its budget; the rest runs next pass)
            h.e.more(h.e.backlog.pop(), h.now)
    h.send(w, b"watch t\r\n")
    h.take(w)
    want = CALL_UNITS // (5002 // WIDE)
    assert h.send(w, b"reserve-batch 50\r\n").startswith(b"RESERVED_BATCH %d\r\n" % want)


def test_a_reserve_batch_stops_at_the_reply_bound():
    """A batch of big jobs answers fewer than asked once its entries hold
    OUT_LIMIT bytes (one job at least): a client that asks and never reads
    holds no more than pipelined reserves would make it hold."""
    from pybeanstalkd.core.engine import OUT_LIMIT

    h = Harness(extensions=True, max_job_size=300_000)
    s, w = h.conn(), h.conn()
    body = b"b" * 20_000
    for _ in range(40):
        put(h, s, body, pri=5)
    got = h.send(w, b"reserve-batch 40\r\n")
    n = int(got.split(b"\r\n", 1)[0].split()[1])
    assert 1 < n < 40
    assert OUT_LIMIT <= len(got) < OUT_LIMIT + len(body) + 100
    assert got.count(b"RESERVED ") == n
    big = b"B" * 200_000
    put(h, s, big, pri=0)
    got = h.send(w, b"reserve-batch 40\r\n")
    assert got.startswith(b"RESERVED_BATCH 1\r\nRESERVED ") and got.endswith(big + b"\r\n")
    # The rest come in later batches, none lost.
    total = n + 1
    while True:
        got = h.send(w, b"reserve-batch 40\r\n")
        k = int(got.split(b"\r\n", 1)[0].split()[1])
        if not k:
            break
        total += k
    assert total == 41

"""--max-memory on the pure engine: puts at the cap get OUT_OF_MEMORY with the body
skipped, every other command keeps working, and deleting frees room again."""
import pytest

from fakeclock import Harness
from pybeanstalkd.core.outcome import Outcome
from pybeanstalkd.core.loading import load
from pybeanstalkd.core.protocol import NS
from pybeanstalkd.core.job import JOB_OVERHEAD, RESERVED_OVERHEAD

BODY = b"b" * 98  # 100 bytes with its CRLF
COST = len(BODY) + 2 + JOB_OVERHEAD


def capped(jobs: int) -> Harness:
    """An engine whose cap holds exactly `jobs` jobs of BODY."""
    h = Harness()
    h.e.max_memory = jobs * COST
    return h


def put(h, s, body=BODY, pri=0, delay=0, ttr=60):
    return h.send(s, b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body))


def stat(h, s, cmd: bytes) -> dict:
    out = h.send(s, cmd)
    lines = out.split(b"\r\n", 1)[1].decode().splitlines()[1:]
    return dict(line.split(": ", 1) for line in lines if line)


def test_put_at_the_cap_is_refused_and_the_stream_stays_in_sync():
    h = capped(3)
    c = h.conn()
    for i in (1, 2, 3):
        assert put(h, c) == b"INSERTED %d\r\n" % i
    # The refused put's body is consumed: the commands after it parse normally,
    # in the same feed and split across feeds.
    assert h.send(c, b"put 0 0 60 98\r\n" + BODY + b"\r\nlist-tube-used\r\n") == (
        b"OUT_OF_MEMORY\r\nUSING default\r\n")
    assert h.send(c, b"put 0 0 60 98\r\n" + BODY[:10]) == b""
    assert h.send(c, BODY[10:] + b"\r\nuse t\r\n") == b"OUT_OF_MEMORY\r\nUSING t\r\n"
    st = stat(h, c, b"stats\r\n")
    assert st["current-jobs-ready"] == "3" and st["total-jobs"] == "3"
    assert st["cmd-put"] == "5"  # counted, as the reference counts a put it cannot allocate


def test_no_id_is_used_up_by_a_refused_put():
    h = capped(1)
    c = h.conn()
    assert put(h, c) == b"INSERTED 1\r\n"
    assert put(h, c) == b"OUT_OF_MEMORY\r\n"
    assert h.send(c, b"delete 1\r\n") == b"DELETED\r\n"
    assert put(h, c) == b"INSERTED 2\r\n"


def test_every_other_command_works_at_the_cap():
    h = capped(4)
    c, w = h.conn(), h.conn()
    for _ in range(4):
        assert put(h, c).startswith(b"INSERTED")
    assert put(h, c) == b"OUT_OF_MEMORY\r\n"
    assert h.send(w, b"reserve\r\n") == b"RESERVED 1 98\r\n" + BODY + b"\r\n"
    assert h.send(w, b"touch 1\r\n") == b"TOUCHED\r\n"
    assert h.send(w, b"release 1 5 10\r\n") == b"RELEASED\r\n"  # delayed: never refused
    assert h.send(w, b"reserve-job 2\r\n").startswith(b"RESERVED 2 ")
    assert h.send(w, b"bury 2 0\r\n") == b"BURIED\r\n"
    assert h.send(w, b"kick 10\r\n") == b"KICKED 1\r\n"  # kicks the buried job
    assert h.send(w, b"kick-job 1\r\n") == b"KICKED\r\n"  # the delayed one
    assert h.send(w, b"peek 3\r\n").startswith(b"FOUND 3 ")
    assert h.send(w, b"peek-ready\r\n").startswith(b"FOUND ")
    assert h.send(w, b"stats-job 4\r\n").startswith(b"OK ")
    assert h.send(w, b"stats-tube default\r\n").startswith(b"OK ")
    assert stat(h, w, b"stats\r\n")["current-jobs-ready"] == "4"
    assert put(h, c) == b"OUT_OF_MEMORY\r\n"
    assert h.send(w, b"delete 4\r\n") == b"DELETED\r\n"
    assert put(h, c) == b"INSERTED 5\r\n"
    assert put(h, c) == b"OUT_OF_MEMORY\r\n"


def test_the_cap_counts_body_size():
    h = Harness()
    h.e.max_memory = 10_000 + 2 + JOB_OVERHEAD
    c = h.conn()
    assert put(h, c, b"x" * 5000) == b"INSERTED 1\r\n"
    assert put(h, c, b"x" * 5000) == b"OUT_OF_MEMORY\r\n"  # 5000 + 5002 + 2 overheads > cap
    assert put(h, c, b"x" * (10_000 - 5002 - JOB_OVERHEAD)) == b"INSERTED 2\r\n"
    assert h.e.q.memory_used() == h.e.max_memory
    assert put(h, c, b"") == b"OUT_OF_MEMORY\r\n"


def test_release_and_kick_of_many_jobs_never_fail_at_the_cap():
    h = capped(20)
    c = h.conn()
    for _ in range(20):
        put(h, c)
    for i in range(1, 21):
        assert h.send(c, b"reserve\r\n").startswith(b"RESERVED %d " % i)
        assert h.send(c, b"bury %d 0\r\n" % i) == b"BURIED\r\n"
    assert h.send(c, b"kick 20\r\n") == b"KICKED 20\r\n"
    for i in range(1, 21):
        assert h.send(c, b"reserve\r\n").startswith(b"RESERVED %d " % i)
    for i in range(1, 21):
        assert h.send(c, b"release %d 0 0\r\n" % i) == b"RELEASED\r\n"
    assert stat(h, c, b"stats\r\n")["current-jobs-ready"] == "20"


def test_memory_used_follows_puts_and_deletes():
    h = Harness()
    c = h.conn()
    assert h.e.q.memory_used() == 0
    put(h, c, b"abc")
    put(h, c, b"")
    assert h.e.q.memory_used() == 5 + 2 + 2 * JOB_OVERHEAD
    assert h.send(c, b"reserve\r\n").startswith(b"RESERVED 1 ")
    assert h.e.q.memory_used() == 5 + 2 + 2 * JOB_OVERHEAD + RESERVED_OVERHEAD
    h.send(c, b"delete 1\r\n")
    assert h.e.q.memory_used() == 2 + JOB_OVERHEAD
    h.send(c, b"delete 2\r\n")
    assert h.e.q.memory_used() == 0


def test_too_big_and_bad_format_keep_their_replies_at_the_cap():
    h = capped(0)
    h.e.max_job_size = 10
    c = h.conn()
    assert h.send(c, b"put 0 0 1 11\r\n" + b"x" * 11 + b"\r\n") == b"JOB_TOO_BIG\r\n"
    assert h.send(c, b"put 0 0 1 1 x\r\n") == b"BAD_FORMAT\r\n"
    assert h.send(c, b"put 0 0 1 1\r\nx\r\n") == b"OUT_OF_MEMORY\r\n"


def test_the_cap_transitions_are_logged_with_v():
    lines = []
    h = Harness(verbose=1)
    h.e.log = lines.append
    h.e.max_memory = 2 * COST
    c = h.conn()
    put(h, c), put(h, c), put(h, c), put(h, c)
    h.send(c, b"delete 1\r\n")
    put(h, c)
    assert lines == [
        f"puts refused: {2 * COST} of {2 * COST} bytes used by 2 jobs",
        f"puts accepted again: {COST} of {2 * COST} bytes used by 1 jobs",
    ]


@pytest.mark.parametrize("cap", [None, 10**12])
def test_without_a_reached_cap_replies_are_unchanged(cap):
    h = Harness()
    h.e.max_memory = cap
    c = h.conn()
    assert put(h, c) == b"INSERTED 1\r\n"
    assert h.send(c, b"put 0 0 1 1\r\nxyz") == b"EXPECTED_CRLF\r\n"
    assert put(h, c) == b"INSERTED 3\r\n"


def test_jobs_recovered_from_the_binlog_count_toward_the_cap():
    from pybeanstalkd.core.job import Job
    from pybeanstalkd.core.queue import Queue

    q = Queue(0)
    t = q.tubes.tube(b"t")
    jobs = [Job(i, t, 0, 0, NS, b"x" * 10 + b"\r\n", 0) for i in (1, 2, 3)]
    load(q, jobs, 0, 0)
    q.ids.next = 4  # as recovery sets it
    assert q.memory_used() == 3 * (12 + JOB_OVERHEAD)
    h = Harness()
    h.e.q = q
    h.e.max_memory = 4 * (12 + JOB_OVERHEAD) - 1
    c = h.conn()
    assert put(h, c, b"x" * 10) == b"OUT_OF_MEMORY\r\n"
    assert h.send(c, b"use t\r\ndelete 1\r\n") == b"USING t\r\nDELETED\r\n"
    assert put(h, c, b"x" * 10) == b"INSERTED 4\r\n"


def test_a_put_from_the_http_side_meets_the_same_cap_and_log():
    from pybeanstalkd.core import admin

    lines = []
    h = Harness(verbose=1)
    h.e.log = lines.append
    h.e.max_memory = 2 * COST
    c = h.conn()
    put(h, c)
    assert admin.put(h.e, b"default", BODY, 0, 0, NS, h.now) == (Outcome.DONE, 2)
    assert admin.put(h.e, b"default", BODY, 0, 0, NS, h.now) == (Outcome.OVER_CAP, 0)
    assert put(h, c) == b"OUT_OF_MEMORY\r\n"  # the protocol sees the same cap
    h.send(c, b"delete 1\r\n")
    assert admin.put(h.e, b"default", BODY, 0, 0, NS, h.now) == (Outcome.DONE, 3)
    assert lines == [
        f"puts refused: {2 * COST} of {2 * COST} bytes used by 2 jobs",
        f"puts accepted again: {COST} of {2 * COST} bytes used by 1 jobs",
    ]


# -- bodies in flight ---------------------------------------------------------

def test_bodies_in_flight_count_from_their_put_line():
    # Four producers each start a put; the cap holds three jobs. The fourth
    # is refused at its put line, before its body is buffered, not stored
    # past the cap once every body has come.
    h = capped(3)
    conns = [h.conn() for _ in range(4)]
    starts = [h.send(c, b"put 0 0 60 98\r\n" + BODY[:10]) for c in conns]
    assert starts == [b"", b"", b"", b""]
    assert [c.state for c in conns[:3]] == [2, 2, 2]  # BODY: each is counted
    assert conns[3].state == 3 and not conns[3].pending  # BITBUCKET: skipped as it comes
    assert [h.send(c, BODY[10:] + b"\r\n") for c in conns] == [
        b"INSERTED 1\r\n", b"INSERTED 2\r\n", b"INSERTED 3\r\n", b"OUT_OF_MEMORY\r\n"]
    assert h.e.q.memory_used() <= h.e.max_memory and h.e.inflight == 0


def test_a_body_that_never_comes_gives_its_room_back():
    h = capped(1)
    a, b = h.conn(), h.conn()
    assert h.send(a, b"put 0 0 60 98\r\n" + BODY[:50]) == b""
    assert put(h, b) == b"OUT_OF_MEMORY\r\n"  # a's body holds the room
    h.close(a)
    assert h.e.inflight == 0
    assert put(h, b) == b"INSERTED 2\r\n"  # (a's put used id 1 up)


def test_a_refused_body_gives_its_room_back():
    h = capped(2)
    c = h.conn()
    h.e.draining = True
    assert put(h, c) == b"DRAINING\r\n"
    assert h.send(c, b"put 0 0 60 98\r\n" + BODY + b"xx") == b"EXPECTED_CRLF\r\n"
    h.e.draining = False
    assert h.e.inflight == 0
    assert [put(h, c), put(h, c), put(h, c)] == [
        b"INSERTED 3\r\n", b"INSERTED 4\r\n", b"OUT_OF_MEMORY\r\n"]


def test_a_malformed_put_line_is_not_counted_against_the_cap():
    """An unclean put line is BAD_FORMAT before the cap is looked at, as in
    the reference: it neither flips the cap's state nor logs a crossing."""
    said = []
    h = Harness(max_memory=10, verbose=1)
    h.e.log = said.append
    s = h.conn()
    assert h.send(s, b"put 0 0 60 1 \r\n") == b"BAD_FORMAT\r\n"
    assert not h.e.at_cap and said == [] and h.e.inflight == 0
    assert h.send(s, b"put 0 0 60 1\r\nx\r\n") == b"OUT_OF_MEMORY\r\n"
    assert h.e.at_cap and len(said) == 1

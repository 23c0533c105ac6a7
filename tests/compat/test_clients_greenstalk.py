"""The server driven through the greenstalk client library (PyPI 2.1.1).

Every command greenstalk exposes is exercised through its public API, over TCP
and (where it matters) over a unix socket.  Each test gets a fresh server, so
counters and ids start from scratch.

Target selection: PYBEANSTALKD_TEST_TARGET=ours (default) or =reference, which
runs the very same tests against the installed C beanstalkd.
"""
from __future__ import annotations

import signal
import time
from contextlib import contextmanager

import greenstalk
import pytest

from support import Server, sock_path, target_argv





def start(tmp_path=None, unix=False, extra=()) -> Server:
    srv = Server(target_argv(), extra=extra, unix_path=sock_path(tmp_path) if unix else None)
    # Server() probes with one connection; give the server a moment to see it
    # close so that connection counters are settled for the stats tests.
    time.sleep(0.05)
    return srv


@pytest.fixture
def srv():
    s = start()
    yield s
    s.stop()


@pytest.fixture
def unix_srv(tmp_path):
    s = start(tmp_path, unix=True)
    yield s
    s.stop()


@pytest.fixture(params=["tcp", "unix"])
def any_srv(request, tmp_path):
    s = start(tmp_path, unix=request.param == "unix")
    yield s
    s.stop()


@pytest.fixture
def c(srv):
    with greenstalk.Client(srv.address) as client:
        yield client


@contextmanager
def takes(lo: float, hi: float):
    """Assert that the body of the with-block takes between lo and hi seconds."""
    t0 = time.monotonic()
    yield
    dt = time.monotonic() - t0
    assert lo <= dt <= hi, f"took {dt:.3f}s, expected between {lo}s and {hi}s"


# --------------------------------------------------------------------------
# basics, over both transports


def test_basic_usage(any_srv):
    with greenstalk.Client(any_srv.address) as c:
        jid = c.put("hello")
        assert isinstance(jid, int) and jid == 1
        job = c.reserve()
        assert job.id == jid
        assert job.body == "hello"
        c.delete(job)
        with pytest.raises(greenstalk.NotFoundError):
            c.peek(jid)
        with pytest.raises(greenstalk.TimedOutError):
            c.reserve(timeout=0)


def test_unix_socket_repr_and_ids(unix_srv):
    with greenstalk.Client(unix_srv.unix_path) as c:
        assert repr(c) == f"greenstalk.Client(socket={unix_srv.unix_path!r})"
        ids = [c.put(f"j{i}") for i in range(5)]
        assert ids == [1, 2, 3, 4, 5]
        for i, jid in enumerate(ids):
            job = c.reserve(timeout=0)
            assert (job.id, job.body) == (jid, f"j{i}")
            c.delete(job.id)


def test_already_connected_socket(srv):
    sock = srv.connect()
    with greenstalk.Client(sock) as c:
        assert c.using() == "default"
        jid = c.put("x")
        assert c.reserve(timeout=0).id == jid


def test_put_priority_order(any_srv):
    with greenstalk.Client(any_srv.address) as c:
        c.put("low", priority=4294967295)
        c.put("mid-a", priority=10)
        c.put("high", priority=0)
        c.put("mid-b", priority=10)
        got = []
        for _ in range(4):
            job = c.reserve(timeout=0)
            got.append(job.body)
            c.delete(job)
        assert got == ["high", "mid-a", "mid-b", "low"]


def test_put_delay(any_srv):
    with greenstalk.Client(any_srv.address) as c:
        jid = c.put("later", delay=1)
        assert c.stats_job(jid)["state"] == "delayed"
        with takes(0.9, 2.0):
            job = c.reserve(timeout=5)
        assert job.id == jid
        st = c.stats_job(jid)
        assert st["state"] == "reserved"
        assert st["delay"] == 1


def test_ttr_expiry_hands_job_to_another_client(any_srv):
    with greenstalk.Client(any_srv.address) as a, greenstalk.Client(any_srv.address) as b:
        jid = a.put("slow", ttr=2)
        assert a.reserve(timeout=0).id == jid
        with takes(1.8, 4.0):
            job = b.reserve(timeout=10)
        assert job.id == jid
        st = b.stats_job(jid)
        assert st["timeouts"] == 1
        assert st["reserves"] == 2
        assert b.stats()["job-timeouts"] == 1
        # a lost the reservation; b now holds it
        with pytest.raises(greenstalk.NotFoundError):
            a.delete(jid)
        b.delete(jid)


def test_ttr_zero_is_raised_to_one(c):
    jid = c.put("x", ttr=0)
    assert c.stats_job(jid)["ttr"] == 1


def test_reserve_timeout(any_srv):
    with greenstalk.Client(any_srv.address) as c:
        with takes(0.0, 0.5):
            with pytest.raises(greenstalk.TimedOutError):
                c.reserve(timeout=0)
        with takes(0.9, 2.0):
            with pytest.raises(greenstalk.TimedOutError):
                c.reserve(timeout=1)
        # the connection is still usable afterwards
        jid = c.put("x")
        assert c.reserve(timeout=1).id == jid


def test_blocking_reserve_woken_by_put(srv):
    with greenstalk.Client(srv.address) as a, greenstalk.Client(srv.address) as b:
        import threading

        result = {}

        def worker():
            result["job"] = b.reserve()

        # (a daemon: if the test fails, a reserve still blocked in it must
        # not keep the test process from ending)
        t = threading.Thread(target=worker, daemon=True)
        t.start()
        deadline = time.monotonic() + 10  # the worker's reserve arrives, however loaded the machine
        while a.stats()["current-waiting"] != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert a.stats()["current-waiting"] == 1
        jid = a.put("wake")
        t.join(10)
        assert not t.is_alive()
        assert result["job"].id == jid and result["job"].body == "wake"


def test_close_releases_reserved_jobs(srv):
    a = greenstalk.Client(srv.address)
    jid = a.put("x")
    a.reserve(timeout=0)
    with greenstalk.Client(srv.address) as b:
        with pytest.raises(greenstalk.TimedOutError):
            b.reserve(timeout=0)
        a.close()
        with takes(0.0, 1.0):
            job = b.reserve(timeout=2)
        assert job.id == jid
        assert b.stats_job(jid)["timeouts"] == 0


# --------------------------------------------------------------------------
# DEADLINE_SOON


def test_deadline_soon_immediately_with_ttr_one(c):
    jid = c.put("x", ttr=1)
    assert c.reserve(timeout=0).id == jid
    with takes(0.0, 0.5):
        with pytest.raises(greenstalk.DeadlineSoonError):
            c.reserve(timeout=0)


def test_deadline_soon_while_waiting(c):
    jid = c.put("x", ttr=3)
    job = c.reserve(timeout=0)
    # the safety margin (ttr - 1 s) arrives while the reserve is blocked
    with takes(1.5, 3.0):
        with pytest.raises(greenstalk.DeadlineSoonError):
            c.reserve()
    c.touch(job)
    # after touch the deadline is far enough away again
    with pytest.raises(greenstalk.TimedOutError):
        c.reserve(timeout=0)
    c.delete(jid)


def test_deadline_soon_not_sent_when_a_job_is_ready(c):
    first = c.put("a", ttr=1)
    second = c.put("b", ttr=1)
    assert c.reserve(timeout=0).id == first
    # a ready job exists, so the server hands it out instead of DEADLINE_SOON
    assert c.reserve(timeout=0).id == second


# --------------------------------------------------------------------------
# reserve-job, delete, release, bury, touch, kick


def test_reserve_job(srv):
    with greenstalk.Client(srv.address) as c, greenstalk.Client(srv.address) as other:
        a = c.put("a")
        b = c.put("b", delay=100)
        d = c.put("d")
        # by id, in any state, skipping the priority order
        job = c.reserve_job(d)
        assert (job.id, job.body) == (d, "d")
        assert c.reserve_job(b).body == "b"
        # already reserved, by us or by another connection
        with pytest.raises(greenstalk.NotFoundError):
            c.reserve_job(d)
        with pytest.raises(greenstalk.NotFoundError):
            other.reserve_job(b)
        with pytest.raises(greenstalk.NotFoundError):
            c.reserve_job(9999)
        # a buried job can be reserved by id, and ignores watch lists
        c.bury(c.reserve_job(a))
        other.watch("elsewhere")
        other.ignore("default")
        assert other.reserve_job(a).id == a
        assert other.stats_job(a)["state"] == "reserved"


def test_delete(srv):
    with greenstalk.Client(srv.address) as c, greenstalk.Client(srv.address) as other:
        ready = c.put("r")
        delayed = c.put("d", delay=100)
        c.delete(ready)
        c.delete(delayed)
        mine = c.put("m")
        job = c.reserve(timeout=0)
        assert job.id == mine
        # reserved by another connection: NOT_FOUND
        with pytest.raises(greenstalk.NotFoundError):
            other.delete(mine)
        c.delete(job)
        with pytest.raises(greenstalk.NotFoundError):
            c.delete(job)
        assert c.stats()["cmd-delete"] == 5


def test_job_not_found_for_every_job_command(c):
    ghost = greenstalk.Job(424242, "ghost")
    with pytest.raises(greenstalk.NotFoundError):
        c.delete(ghost)
    with pytest.raises(greenstalk.NotFoundError):
        c.release(ghost)
    with pytest.raises(greenstalk.NotFoundError):
        c.bury(ghost)
    with pytest.raises(greenstalk.NotFoundError):
        c.touch(ghost)
    with pytest.raises(greenstalk.NotFoundError):
        c.kick_job(ghost)
    with pytest.raises(greenstalk.NotFoundError):
        c.peek(ghost.id)
    with pytest.raises(greenstalk.NotFoundError):
        c.stats_job(ghost)
    with pytest.raises(greenstalk.NotFoundError):
        c.reserve_job(ghost.id)


def test_release(c):
    jid = c.put("x", priority=5)
    job = c.reserve(timeout=0)
    c.release(job, priority=7)
    st = c.stats_job(jid)
    assert (st["state"], st["pri"], st["releases"], st["reserves"]) == ("ready", 7, 1, 1)
    job = c.reserve(timeout=0)
    c.release(job, delay=1)
    st = c.stats_job(jid)
    assert (st["state"], st["delay"], st["releases"]) == ("delayed", 1, 2)
    assert st["time-left"] in (0, 1)
    assert c.peek_delayed().id == jid
    with takes(0.5, 2.0):
        job = c.reserve(timeout=5)
    assert job.id == jid
    # only the reserving connection may release
    c.release(job)
    with pytest.raises(greenstalk.NotFoundError):
        c.release(job)


def test_bury_and_kick(c):
    jid = c.put("x")
    job = c.reserve(timeout=0)
    c.bury(job, priority=12)
    st = c.stats_job(jid)
    assert (st["state"], st["pri"], st["buries"]) == ("buried", 12, 1)
    assert c.peek_buried().id == jid
    # a buried job is not reservable
    with pytest.raises(greenstalk.TimedOutError):
        c.reserve(timeout=0)
    # bury requires a reservation
    with pytest.raises(greenstalk.NotFoundError):
        c.bury(job)
    assert c.kick(10) == 1
    st = c.stats_job(jid)
    assert (st["state"], st["kicks"]) == ("ready", 1)
    assert c.kick(10) == 0


def test_kick_prefers_buried_over_delayed(c):
    delayed = [c.put(f"d{i}", delay=100) for i in range(2)]
    buried = []
    for i in range(3):
        jid = c.put(f"b{i}")
        c.bury(c.reserve(timeout=0))
        buried.append(jid)
    assert c.kick(2) == 2  # the two oldest buried jobs
    assert [c.stats_job(j)["state"] for j in buried] == ["ready", "ready", "buried"]
    assert c.kick(100) == 1  # only the last buried one, not the delayed ones
    assert [c.stats_job(j)["state"] for j in delayed] == ["delayed", "delayed"]
    assert c.kick(1) == 1  # now delayed jobs are kicked
    assert c.kick(100) == 1
    assert [c.stats_job(j)["state"] for j in delayed] == ["ready", "ready"]


def test_kick_acts_on_used_tube_only(c):
    c.use("other")
    c.put("x", delay=100)
    c.use("default")
    assert c.kick(10) == 0
    c.use("other")
    assert c.kick(10) == 1


def test_kick_job(c):
    delayed = c.put("d", delay=100)
    buried = c.put("b")
    c.bury(c.reserve(timeout=0))
    ready = c.put("r")
    c.kick_job(delayed)
    c.kick_job(greenstalk.Job(buried, "b"))
    assert c.stats_job(delayed)["state"] == "ready"
    assert c.stats_job(buried)["state"] == "ready"
    assert c.stats_job(buried)["kicks"] == 1
    with pytest.raises(greenstalk.NotFoundError):
        c.kick_job(ready)
    # kick-job works across tubes, regardless of the used tube
    c.use("elsewhere")
    other = c.put("o", delay=100)
    c.use("default")
    c.kick_job(other)
    assert c.stats_job(other)["state"] == "ready"


def test_touch(c):
    jid = c.put("x", ttr=2)
    job = c.reserve(timeout=0)
    time.sleep(1.2)
    assert c.stats_job(jid)["time-left"] == 0
    c.touch(job)
    assert c.stats_job(jid)["time-left"] == 1
    c.delete(job)
    ready = c.put("y")
    with pytest.raises(greenstalk.NotFoundError):
        c.touch(greenstalk.Job(ready, "y"))


# --------------------------------------------------------------------------
# peek


def test_peek(c):
    jid = c.put("body")
    job = c.peek(jid)
    assert (job.id, job.body) == (jid, "body")
    # peek does not reserve
    assert c.reserve(timeout=0).id == jid
    assert c.peek(jid).body == "body"  # and sees reserved jobs too
    with pytest.raises(greenstalk.NotFoundError):
        c.peek(jid + 1)


def test_peek_ready(c):
    with pytest.raises(greenstalk.NotFoundError):
        c.peek_ready()
    c.put("b", priority=20)
    a = c.put("a", priority=10)
    c.put("c", priority=10)
    job = c.peek_ready()
    assert (job.id, job.body) == (a, "a")
    # only the used tube counts
    c.use("empty")
    with pytest.raises(greenstalk.NotFoundError):
        c.peek_ready()


def test_peek_delayed(c):
    with pytest.raises(greenstalk.NotFoundError):
        c.peek_delayed()
    c.put("late", delay=200)
    soon = c.put("soon", delay=100)
    c.put("ready")
    job = c.peek_delayed()
    assert (job.id, job.body) == (soon, "soon")


def test_peek_buried(c):
    with pytest.raises(greenstalk.NotFoundError):
        c.peek_buried()
    first = c.put("1")
    second = c.put("2")
    c.bury(c.reserve(timeout=0), priority=100)
    c.bury(c.reserve(timeout=0), priority=0)
    job = c.peek_buried()  # oldest buried, whatever its priority
    assert (job.id, job.body) == (first, "1")
    c.delete(first)
    assert c.peek_buried().id == second


# --------------------------------------------------------------------------
# tubes: use, watch, ignore, tubes, using, watching, pause


def test_use_and_using(c):
    assert c.using() == "default"
    c.use("foo")
    assert c.using() == "foo"
    jid = c.put("x")
    assert c.stats_job(jid)["tube"] == "foo"
    # the default tube is still watched, so nothing to reserve there
    with pytest.raises(greenstalk.TimedOutError):
        c.reserve(timeout=0)


def test_watch_ignore(c):
    assert c.watching() == ["default"]
    assert c.watch("a") == 2
    assert c.watch("a") == 2  # watching twice changes nothing
    assert c.watch("b") == 3
    assert c.ignore("default") == 2
    assert sorted(c.watching()) == ["a", "b"]
    assert c.ignore("never-watched") == 2
    assert c.ignore("a") == 1
    with pytest.raises(greenstalk.NotIgnoredError):
        c.ignore("b")
    assert c.watching() == ["b"]


def test_reserve_from_watched_tubes(srv):
    with greenstalk.Client(srv.address, use="jobs") as producer, greenstalk.Client(
        srv.address, watch=["jobs", "other"]
    ) as consumer:
        assert sorted(consumer.watching()) == ["jobs", "other"]
        jid = producer.put("for-consumer")
        job = consumer.reserve(timeout=1)
        assert (job.id, job.body) == (jid, "for-consumer")
        producer.use("default")
        producer.put("not-watched")
        with pytest.raises(greenstalk.TimedOutError):
            consumer.reserve(timeout=0)


def test_initialize_with_tubes(srv):
    with greenstalk.Client(srv.address, use="foo", watch="bar") as c:
        assert c.using() == "foo"
        assert c.watching() == ["bar"]
    with greenstalk.Client(srv.address, watch=["a", "default", "b"]) as c:
        assert sorted(c.watching()) == ["a", "b", "default"]


def test_tubes(c):
    assert c.tubes() == ["default"]
    c.use("a")
    assert c.tubes() == ["default", "a"]
    c.watch("b")
    assert c.tubes() == ["default", "a", "b"]
    c.ignore("b")
    c.use("default")
    # tubes without references vanish
    assert c.tubes() == ["default"]


def test_pause_tube(c):
    jid = c.put("x")
    c.pause_tube("default", 1)
    st = c.stats_tube("default")
    assert st["pause"] == 1
    assert st["pause-time-left"] in (0, 1)
    assert st["cmd-pause-tube"] == 1
    with pytest.raises(greenstalk.TimedOutError):
        c.reserve(timeout=0)
    # peek still works on a paused tube
    assert c.peek_ready().id == jid
    with takes(0.8, 2.0):
        job = c.reserve(timeout=5)
    assert job.id == jid
    st = c.stats_tube("default")
    assert (st["pause"], st["pause-time-left"]) == (0, 0)


def test_pause_tube_zero_unpauses(c):
    c.put("x")
    c.pause_tube("default", 3600)
    with pytest.raises(greenstalk.TimedOutError):
        c.reserve(timeout=0)
    c.pause_tube("default", 0)
    with takes(0.0, 1.0):
        c.reserve(timeout=1)


def test_pause_tube_not_found(c):
    with pytest.raises(greenstalk.NotFoundError):
        c.pause_tube("does-not-exist", 1)
    assert "does-not-exist" not in c.tubes()


# --------------------------------------------------------------------------
# stats


def test_stats_job_fresh(c):
    jid = c.put("x")
    assert c.stats_job(jid) == {
        "id": jid,
        "tube": "default",
        "state": "ready",
        "pri": 65536,
        "age": 0,
        "delay": 0,
        "ttr": 60,
        "time-left": 0,
        "file": 0,
        "reserves": 0,
        "timeouts": 0,
        "releases": 0,
        "buries": 0,
        "kicks": 0,
    }


def test_stats_job_reserved(c):
    jid = c.put("x", priority=3, ttr=100)
    c.reserve(timeout=0)
    st = c.stats_job(jid)
    assert st["state"] == "reserved"
    assert st["pri"] == 3
    assert st["reserves"] == 1
    assert 98 <= st["time-left"] <= 100


def test_stats_tube_fresh(c):
    assert c.stats_tube("default") == {
        "name": "default",
        "current-jobs-urgent": 0,
        "current-jobs-ready": 0,
        "current-jobs-reserved": 0,
        "current-jobs-delayed": 0,
        "current-jobs-buried": 0,
        "total-jobs": 0,
        "current-using": 1,
        "current-watching": 1,
        "current-waiting": 0,
        "cmd-delete": 0,
        "cmd-pause-tube": 0,
        "pause": 0,
        "pause-time-left": 0,
    }


def test_stats_tube_counts(c):
    c.use("t1")
    c.put("urgent", priority=1)
    c.put("normal")
    c.put("delayed", delay=100)
    c.put("doomed")
    c.watch("t1")
    c.ignore("default")
    assert c.reserve(timeout=0).body == "urgent"
    doomed = c.reserve_job(4)
    c.delete(doomed)
    assert c.stats_tube("t1") == {
        "name": "t1",
        "current-jobs-urgent": 0,
        "current-jobs-ready": 1,
        "current-jobs-reserved": 1,
        "current-jobs-delayed": 1,
        "current-jobs-buried": 0,
        "total-jobs": 4,
        "current-using": 1,
        "current-watching": 1,
        "current-waiting": 0,
        "cmd-delete": 1,
        "cmd-pause-tube": 0,
        "pause": 0,
        "pause-time-left": 0,
    }
    with pytest.raises(greenstalk.NotFoundError):
        c.stats_tube("no-such-tube")


def test_stats_fresh(c):
    s = c.stats()
    for key, value in s.items():
        if key.startswith("cmd-"):
            assert value == (1 if key == "cmd-stats" else 0), key
    for key in (
        "current-jobs-urgent",
        "current-jobs-ready",
        "current-jobs-reserved",
        "current-jobs-delayed",
        "current-jobs-buried",
        "job-timeouts",
        "total-jobs",
        "current-producers",
        "current-workers",
        "current-waiting",
        "binlog-oldest-index",
        "binlog-current-index",
        "binlog-records-migrated",
        "binlog-records-written",
    ):
        assert s[key] == 0, key
    assert s["uptime"] in (0, 1)
    assert s["max-job-size"] == 65535
    assert s["current-tubes"] == 1
    assert s["current-connections"] == 1
    # the support harness's readiness probe is the first connection
    assert s["total-connections"] == 2
    assert s["draining"] == "false"
    assert s["binlog-max-size"] == 10485760
    for key in ("pid", "version", "rusage-utime", "rusage-stime", "id", "hostname", "os", "platform"):
        assert key in s, key
    assert len(s) == 51
    assert isinstance(s["pid"], int)
    assert isinstance(s["id"], str) and len(s["id"]) == 16


def test_stats_counters(srv):
    with greenstalk.Client(srv.address) as c, greenstalk.Client(srv.address) as w:
        c.put("a", priority=1)
        c.put("b")
        job = w.reserve(timeout=0)
        w.bury(job)
        c.peek_ready()
        c.using()
        c.watching()
        c.tubes()
        s = c.stats()
        assert s["cmd-put"] == 2
        assert s["cmd-reserve-with-timeout"] == 1
        assert s["cmd-bury"] == 1
        assert s["cmd-peek-ready"] == 1
        assert s["cmd-list-tube-used"] == 1
        assert s["cmd-list-tubes-watched"] == 1
        assert s["cmd-list-tubes"] == 1
        assert s["cmd-stats"] == 1
        assert s["total-jobs"] == 2
        assert s["current-jobs-ready"] == 1
        assert s["current-jobs-buried"] == 1
        assert s["current-jobs-urgent"] == 0  # the urgent one is the buried one
        assert s["current-producers"] == 1
        assert s["current-workers"] == 1
        assert s["current-connections"] == 2


# --------------------------------------------------------------------------
# bodies


def test_binary_jobs(srv):
    with greenstalk.Client(srv.address, encoding=None) as c:
        every_byte = bytes(range(256))
        tricky = b"\r\n" + b"put 0 0 0 1\r\nx\r\n" + b"\x00" * 10 + b"\r"
        for body in (every_byte, tricky, b"", b"\r\n\r\n"):
            jid = c.put(body)
            assert c.peek(jid).body == body
            job = c.reserve(timeout=0)
            assert job.body == body and isinstance(job.body, bytes)
            c.delete(job)


def test_binary_body_as_str_is_a_client_error(srv):
    with greenstalk.Client(srv.address, encoding=None) as c:
        with pytest.raises(TypeError):
            c.put("text")  # type: ignore[arg-type]


def test_unicode_body(c):
    body = "héllo wörld ☃ 𝄞"
    jid = c.put(body)
    # the declared size is in bytes, not characters
    job = c.reserve(timeout=0)
    assert (job.id, job.body) == (jid, body)


def test_max_job_size(srv):
    with greenstalk.Client(srv.address, encoding=None) as c:
        with pytest.raises(greenstalk.JobTooBigError):
            c.put(b"x" * 65536)
        # the body was swallowed and the connection stays in sync
        jid = c.put(b"y" * 65535)
        job = c.reserve(timeout=0)
        assert job.id == jid and len(job.body) == 65535
        s = c.stats()
        assert s["cmd-put"] == 2
        assert s["total-jobs"] == 1


# --------------------------------------------------------------------------
# drain mode


def test_drain_mode(any_srv):
    with greenstalk.Client(any_srv.address) as c:
        jid = c.put("before")
        assert c.stats()["draining"] == "false"
        any_srv.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 3
        while c.stats()["draining"] != "true":
            assert time.monotonic() < deadline, "server did not enter drain mode"
            time.sleep(0.02)
        with pytest.raises(greenstalk.DrainingError):
            c.put("after")
        # everything else keeps working; existing jobs can be consumed
        job = c.reserve(timeout=0)
        assert job.id == jid
        c.delete(job)
        # DRAINING uses up an id
        with pytest.raises(greenstalk.NotFoundError):
            c.peek(jid + 1)
        assert c.stats()["draining"] == "true"
        assert any_srv.proc.poll() is None

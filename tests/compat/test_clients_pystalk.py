"""The server driven through pystalk's BeanstalkClient (PyPI 0.9.1).

pystalk parses stats/list replies with PyYAML, so these tests also check that
our YAML is real YAML.  Like pystalk's own integration setup, most tests share
one server started with `-b <dir>` and use random tube names so they don't
interfere with each other.

Target selection: PYBEANSTALKD_TEST_TARGET=ours (default) or =reference.
"""
from __future__ import annotations

import random
import string
import time

import pytest
from pystalk import BeanstalkClient, BeanstalkError, ProductionPool

from support import Server, target_argv





@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One server for the module, started the way pystalk's suite starts it."""
    wal = tmp_path_factory.mktemp("wal")
    srv = Server(target_argv(), extra=["-b", str(wal)])
    yield srv
    srv.stop()


@pytest.fixture
def client(shared):
    c = BeanstalkClient("127.0.0.1", shared.port, socket_timeout=10)
    yield c
    c.close()


@pytest.fixture
def tube():
    return "".join(random.choice(string.ascii_lowercase) for _ in range(8))


def drain(client: BeanstalkClient, tube: str) -> None:
    """Delete every job left in a tube so later assertions start clean."""
    with client.using(tube):
        for state in ("ready", "delayed", "buried"):
            it = getattr(client, f"peek_{state}_iter")
            for job in it():
                client.delete_job(job.job_id)


def inserted(result) -> int:
    """pystalk's put_job returns (status, id); check the status and return the id."""
    status, jid = result
    assert status == b"INSERTED"
    assert isinstance(jid, int)
    return jid


def not_found(exc: BeanstalkError) -> bool:
    return exc.message == "NOT_FOUND"


# --------------------------------------------------------------------------


def test_simple_flow(client, tube):
    client.watch(tube)
    result = client.put_job_into(tube, "foo")
    assert result[0] == b"INSERTED"
    job_id = inserted(result)
    job = client.reserve_job(1)
    assert job.job_id == job_id
    assert job.job_data == b"foo"
    client.delete_job(job.job_id)
    with pytest.raises(BeanstalkError) as ei:
        client.delete_job(job.job_id)
    assert not_found(ei.value)


def test_put_job_into_and_using(client, tube):
    other = tube + "x"
    a = inserted(client.put_job_into(tube, "a"))
    with client.using(other) as inserter:
        b = inserted(inserter.put_job("b"))
    # using() restores the previous tube afterwards
    assert client.current_tube == "default"
    assert client.stats_job(a)["tube"] == tube
    assert client.stats_job(b)["tube"] == other
    client.use(tube)
    c = inserted(client.put_job("c"))
    assert client.stats_job(c)["tube"] == tube
    drain(client, tube)
    drain(client, other)


def test_consume_jobs_fifo_among_equal_priorities(client, tube):
    ids = [inserted(client.put_job_into(tube, str(i))) for i in range(100)]
    client.watch(tube)
    assert client.watchlist == {tube}  # the first watch drops default
    seen = []
    for job in client.reserve_iter():
        seen.append((job.job_id, job.job_data))
        client.delete_job(job)
    assert seen == [(jid, str(i).encode()) for i, jid in enumerate(ids)]


def test_priority_order(client, tube):
    client.put_job_into(tube, "low", pri=4294967295)
    client.put_job_into(tube, "high", pri=0)
    client.put_job_into(tube, "mid", pri=1000)
    client.watch(tube)
    order = []
    for job in client.reserve_iter():
        order.append(job.job_data)
        client.delete_job(job)
    assert order == [b"high", b"mid", b"low"]


def test_reserve_job_timeout(client, tube):
    client.watch(tube)
    t0 = time.monotonic()
    with pytest.raises(BeanstalkError) as ei:
        client.reserve_job(1)
    dt = time.monotonic() - t0
    assert ei.value.message == "TIMED_OUT"
    assert 0.9 <= dt <= 2.0, dt
    with pytest.raises(ValueError):
        client.reserve_job(10)  # not below the socket timeout


def test_reserve_job_longer_timeout_not_cut_short(shared, tube):
    c = BeanstalkClient("127.0.0.1", shared.port, socket_timeout=5)
    try:
        c.watch(tube)
        t0 = time.monotonic()
        with pytest.raises(BeanstalkError) as ei:
            c.reserve_job(3)
        assert ei.value.message == "TIMED_OUT"
        assert 2.9 <= time.monotonic() - t0 <= 4.5
    finally:
        c.close()


def test_release_job(client, tube):
    client.watch(tube)
    jid = inserted(client.put_job_into(tube, "x", pri=5))
    job = client.reserve_job(0)
    assert client.release_job(job.job_id, pri=9) == b"RELEASED"
    st = client.stats_job(jid)
    assert (st["state"], st["pri"], st["releases"]) == ("ready", 9, 1)
    job = client.reserve_job(0)
    client.release_job(job, delay=60)
    st = client.stats_job(jid)
    assert (st["state"], st["delay"]) == ("delayed", 60)
    assert 58 <= st["time-left"] <= 60
    with pytest.raises(BeanstalkError) as ei:
        client.release_job(jid)
    assert not_found(ei.value)
    drain(client, tube)


def test_bury_and_kick_jobs(client, tube):
    client.watch(tube)
    for i in range(10):
        client.put_job_into(tube, str(i))
    for job in client.reserve_iter():
        assert client.bury_job(job.job_id) == b"BURIED"
    assert client.stats_tube(tube)["current-jobs-buried"] == 10
    with client.using(tube):
        assert client.kick_jobs(5) == (b"KICKED", 5)
    st = client.stats_tube(tube)
    assert st["current-jobs-buried"] == 5
    assert st["current-jobs-ready"] == 5
    drain(client, tube)


def test_kick_job(client, tube):
    client.watch(tube)
    ids = [inserted(client.put_job_into(tube, str(i))) for i in range(3)]
    for job in client.reserve_iter():
        client.bury_job(job)
    with client.using(tube):
        oldest = client.peek_buried()
        assert oldest.job_id == ids[0]
        client.kick_job(oldest.job_id)
        assert client.peek_buried().job_id == ids[1]
        assert client.peek_ready().job_id == ids[0]
    assert client.stats_job(ids[0])["kicks"] == 1
    with pytest.raises(BeanstalkError) as ei:
        client.kick_job(ids[0])  # ready jobs cannot be kicked
    assert not_found(ei.value)
    drain(client, tube)


def test_kick_delayed(client, tube):
    jid = inserted(client.put_job_into(tube, "d", delay=100))
    client.kick_job(jid)
    assert client.stats_job(jid)["state"] == "ready"
    jid2 = inserted(client.put_job_into(tube, "d2", delay=100))
    with client.using(tube):
        assert client.kick_jobs(10) == (b"KICKED", 1)
    assert client.stats_job(jid2)["state"] == "ready"
    drain(client, tube)


def test_peek_ready(client, tube):
    with client.using(tube):
        with pytest.raises(BeanstalkError) as ei:
            client.peek_ready()
        assert not_found(ei.value)
    jid = inserted(client.put_job_into(tube, "r"))
    with client.using(tube):
        job = client.peek_ready()
    assert (job.job_id, job.job_data) == (jid, b"r")
    drain(client, tube)


def test_peek_delayed(client, tube):
    with client.using(tube):
        with pytest.raises(BeanstalkError) as ei:
            client.peek_delayed()
        assert not_found(ei.value)
    client.put_job_into(tube, "late", delay=200)
    soon = inserted(client.put_job_into(tube, "soon", delay=100))
    with client.using(tube):
        job = client.peek_delayed()
    assert (job.job_id, job.job_data) == (soon, b"soon")
    drain(client, tube)


def test_peek_buried(client, tube):
    client.watch(tube)
    with client.using(tube):
        with pytest.raises(BeanstalkError) as ei:
            client.peek_buried()
        assert not_found(ei.value)
    jid = inserted(client.put_job_into(tube, "b"))
    client.bury_job(client.reserve_job(0))
    with client.using(tube):
        job = client.peek_buried()
    assert (job.job_id, job.job_data) == (jid, b"b")
    drain(client, tube)


def test_peek_iterators(client, tube):
    ready = [inserted(client.put_job_into(tube, f"r{i}")) for i in range(5)]
    delayed = [inserted(client.put_job_into(tube, f"d{i}", delay=100 + i)) for i in range(4)]
    client.watch(tube)
    buried_ids = []
    for _ in range(3):
        job = client.reserve_job(0)
        client.bury_job(job)
        buried_ids.append(job.job_id)
    with client.using(tube):
        for name, expected in (
            ("ready", ready[3:]),
            ("delayed", delayed),
            ("buried", buried_ids),
        ):
            seen = []
            for job in getattr(client, f"peek_{name}_iter")():
                seen.append(job.job_id)
                client.delete_job(job.job_id)
            assert seen == expected, name
    st = client.stats_tube(tube)
    assert st["current-jobs-ready"] + st["current-jobs-delayed"] + st["current-jobs-buried"] == 0


def test_stats(client):
    s = client.stats()
    assert isinstance(s, dict)
    assert len(s) == 51
    for key in ("cmd-put", "current-connections", "total-jobs", "max-job-size", "pid", "uptime"):
        assert isinstance(s[key], int), key
    assert s["max-job-size"] == 65535
    assert s["current-connections"] >= 1
    assert s["draining"] is False  # YAML boolean
    assert str(s["version"])
    assert isinstance(s["rusage-utime"], float)


def test_stats_job(client, tube):
    jid = inserted(client.put_job_into(tube, "x", pri=7, ttr=30))
    st = client.stats_job(jid)
    assert st == {
        "id": jid,
        "tube": tube,
        "state": "ready",
        "pri": 7,
        "age": st["age"],
        "delay": 0,
        "ttr": 30,
        "time-left": 0,
        "file": st["file"],
        "reserves": 0,
        "timeouts": 0,
        "releases": 0,
        "buries": 0,
        "kicks": 0,
    }
    assert st["age"] in (0, 1)
    with pytest.raises(BeanstalkError) as ei:
        client.stats_job(2**40)
    assert not_found(ei.value)
    drain(client, tube)


def test_stats_tube(client, tube):
    with pytest.raises(BeanstalkError) as ei:
        client.stats_tube(tube)  # stats-tube does not create tubes
    assert not_found(ei.value)
    client.put_job_into(tube, "a", pri=1)
    client.put_job_into(tube, "b", delay=100)
    st = client.stats_tube(tube)
    assert st == {
        "name": tube,
        "current-jobs-urgent": 1,
        "current-jobs-ready": 1,
        "current-jobs-reserved": 0,
        "current-jobs-delayed": 1,
        "current-jobs-buried": 0,
        "total-jobs": 2,
        "current-using": 0,
        "current-watching": 0,
        "current-waiting": 0,
        "cmd-delete": 0,
        "cmd-pause-tube": 0,
        "pause": 0,
        "pause-time-left": 0,
    }
    drain(client, tube)


def test_list_tubes(client, tube):
    assert tube not in client.list_tubes()
    client.use(tube)
    tubes = client.list_tubes()
    assert isinstance(tubes, list)
    assert "default" in tubes and tube in tubes
    client.use("default")
    assert tube not in client.list_tubes()


def test_watch_ignore(client, tube):
    other = tube + "2"
    assert client.watchlist == {"default"}
    client.watch(tube)
    assert client.watchlist == {tube}
    client.watch(other)
    assert client.watchlist == {tube, other}
    client.ignore(tube)
    assert client.watchlist == {other}
    with pytest.raises(KeyError):
        client.ignore(tube)
    client.put_job_into(other, "o")
    client.put_job_into(tube, "t")
    job = client.reserve_job(0)
    assert job.job_data == b"o"
    client.delete_job(job)
    # the server refuses to ignore the last watched tube
    with pytest.raises(BeanstalkError) as ei:
        client.ignore(other)
    assert ei.value.message == "NOT_IGNORED"
    assert client.watchlist == {other}
    drain(client, tube)


def test_watchlist_setter(client, tube):
    tubes = {tube + str(i) for i in range(3)}
    client.watchlist = tubes
    assert client.watchlist == tubes
    client.watchlist = {tube + "0"}
    assert client.watchlist == {tube + "0"}


def test_using_restores_tube_on_error(client, tube):
    client.use(tube)
    with pytest.raises(RuntimeError):
        with client.using(tube + "x"):
            raise RuntimeError
    assert client.current_tube == tube
    jid = inserted(client.put_job("z"))
    assert client.stats_job(jid)["tube"] == tube
    drain(client, tube)


def test_pause_tube_unpause_tube(client, tube):
    client.put_job_into(tube, "p")
    client.watch(tube)
    assert client.pause_tube(tube, 30) == b"PAUSED"
    st = client.stats_tube(tube)
    assert st["pause"] == 30
    assert 28 <= st["pause-time-left"] <= 30
    with pytest.raises(BeanstalkError) as ei:
        client.reserve_job(0)
    assert ei.value.message == "TIMED_OUT"
    assert client.unpause_tube(tube) == b"PAUSED"
    job = client.reserve_job(1)
    assert job.job_data == b"p"
    client.delete_job(job)
    with pytest.raises(BeanstalkError) as ei:
        client.pause_tube(tube + "nope", 5)
    assert not_found(ei.value)


def test_auto_decode(shared, tube):
    c = BeanstalkClient("127.0.0.1", shared.port, auto_decode=True)
    try:
        c.put_job_into(tube, "snowman ☃")
        c.watch(tube)
        job = c.reserve_job(0)
        assert job.job_data == "snowman ☃"
        c.delete_job(job)
    finally:
        c.close()


def test_binary_body(client, tube):
    body = bytes(range(256)) * 4 + b"\r\n"
    client.put_job_into(tube, body)
    client.watch(tube)
    job = client.reserve_job(0)
    assert job.job_data == body
    client.delete_job(job)


def test_restore_after_disconnect(client, tube):
    other = tube + "w"
    client.use(tube)
    client.watch(other)
    client.put_job("before")
    client.close()
    # the next call reconnects and re-establishes use and watch
    jid = inserted(client.put_job("after"))
    assert client.stats_job(jid)["tube"] == tube
    assert client.current_tube == tube
    assert client.watchlist == {other}
    client.put_job_into(other, "for-watch")
    job = client.reserve_job(0)
    assert job.job_data == b"for-watch"
    client.delete_job(job)
    drain(client, tube)


def test_reserved_job_released_when_client_closes(shared, client, tube):
    client.watch(tube)
    jid = inserted(client.put_job_into(tube, "x"))
    assert client.reserve_job(0).job_id == jid
    client.close()  # a reconnect happens on the next call
    # the server sees the old connection's FIN independently of the new one
    deadline = time.monotonic() + 2
    while (state := client.stats_job(jid)["state"]) != "ready":
        assert time.monotonic() < deadline, state
        time.sleep(0.02)
    drain(client, tube)


def test_socket_timeout_none(shared, tube):
    c = BeanstalkClient("127.0.0.1", shared.port, socket_timeout=None)
    try:
        c.watch(tube)
        with pytest.raises(BeanstalkError) as ei:
            c.reserve_job(1)
        assert ei.value.message == "TIMED_OUT"
    finally:
        c.close()


def test_ping_and_from_uri(shared, tube):
    c = BeanstalkClient.from_uri(f"beanstalk://127.0.0.1:{shared.port}", socket_timeout=5)
    try:
        assert c.ping() is True
        jid = inserted(c.put_job_into(tube, "u"))
        assert c.stats_job(jid)["tube"] == tube
        drain(c, tube)
    finally:
        c.close()


def test_production_pool(shared, tube):
    pool = ProductionPool.from_uris(
        [f"beanstalk://127.0.0.1:{shared.port}"], socket_timeout=5
    )
    pool.use(tube)
    pool.put_job("pooled")
    c = BeanstalkClient("127.0.0.1", shared.port, socket_timeout=5)
    try:
        assert c.stats_tube(tube)["current-jobs-ready"] == 1
        drain(c, tube)
    finally:
        c.close()


def test_fresh_server_with_binlog_dir(tmp_path):
    """A private server started with -b, as pystalk's conftest does."""
    wal = tmp_path / "wal"
    wal.mkdir()
    srv = Server(target_argv(), extra=["-b", str(wal)])
    try:
        c = BeanstalkClient("127.0.0.1", srv.port, socket_timeout=5)
        ids = [inserted(c.put_job(f"j{i}")) for i in range(3)]
        assert ids == [1, 2, 3]
        s = c.stats()
        assert s["total-jobs"] == 3
        assert s["current-jobs-ready"] == 3
        assert c.list_tubes() == ["default"]
        seen = []
        for job in c.reserve_iter():
            seen.append(job.job_id)
            c.delete_job(job)
        assert seen == ids
        c.close()
    finally:
        srv.stop()

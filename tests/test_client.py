"""pybeanstalkd.client against a real server with --extensions (and
--max-tries): every call, and its errors."""
import pytest

from pybeanstalkd.client import Client, CommandError, Job
from support import Server, ours_argv


@pytest.fixture(scope="module")
def srv():
    s = Server(ours_argv(), ["--extensions", "--max-tries", "2"])
    yield s
    s.stop()


def connect(srv):
    return Client(*srv.address, timeout=10)


def test_put_reserve_batch_delete_batch(srv):
    with connect(srv) as c:
        c.use("client-a")
        ids = [c.put(b"job %d" % i, pri=i) for i in range(5)]
        assert c.watch("client-a") == 2 and c.ignore("default") == 1
        jobs = c.reserve_batch(3)
        assert jobs == [Job(ids[i], b"job %d" % i) for i in range(3)]
        assert c.delete_batch(j.id for j in jobs) == (3, 0)
        assert c.delete_batch([ids[3], 999999]) == (1, 1)
        assert c.reserve(timeout=0) == Job(ids[4], b"job 4")
        assert c.delete(ids[4]) and not c.delete(ids[4])
        assert c.reserve(timeout=0) is None
        assert c.reserve_batch(10) == []


def test_flush_tube_drain_and_errors(srv):
    with connect(srv) as c:
        c.use("client-b")
        c.put(b"x")
        c.put(b"y", delay=3600)
        assert c.flush_tube("client-b") == 2
        assert c.flush_tube("no-such-tube") is None
        c.drain()
        with pytest.raises(CommandError, match="DRAINING"):
            c.put(b"z")
        c.undrain()
        assert c.put(b"z") > 0
        with pytest.raises(CommandError, match="BAD_FORMAT"):
            c.reserve_batch(0)
        with pytest.raises(ValueError):
            c.reserve_mode("random")  # type: ignore[arg-type]


def test_weights_modes_and_tries(srv):
    with connect(srv) as c:
        assert c.watch("client-c", weight=5) == 2
        c.reserve_mode("weighted-fair")
        c.reserve_mode("fifo")
        c.use("client-c")
        jid = c.put(b"retry me", ttr=60)
        c.ignore("default")
        assert c.reserve(timeout=0).id == jid
        assert c.release(jid) is True  # the first try
        assert c.reserve(timeout=0).id == jid
        assert c.release(jid) is False  # the second: --max-tries 2 buries it
        assert c.reserve(timeout=0) is None


def test_put_tags(srv):
    from pybeanstalkd.client import Inserted
    with connect(srv) as c:
        c.use("client-d")
        first = c.put(b"once", pri=100, idempotency_key="k", idempotency_ttl=60)
        assert c.put_tagged(b"again", pri=200, idempotency_key="k") == Inserted(first, "READY")
        assert c.put_tagged(b"again", pri=5, idempotency_key="k") == Inserted(first, "READY", 5)
        assert c.delete(first)
        assert c.put_tagged(b"x", idempotency_key="k") == Inserted(first, "DELETED")
        member = c.put(b"m", group="g", concurrency_key="api", concurrency_limit=2)
        held = c.put(b"h", after="g", tries=3)
        assert c.stats_group("g") == {"ready": 1, "reserved": 0, "delayed": 0, "buried": 0,
                                      "waiting-jobs": 1}
        assert c.stats_group("nope") is None
        c.watch("client-d")
        c.ignore("default")
        assert c.reserve(timeout=0) == Job(member, b"m")
        assert c.reserve(timeout=0) is None  # the held job waits for the group
        assert c.delete(member)
        assert c.reserve(timeout=0) == Job(held, b"h")
        with pytest.raises(CommandError, match="BAD_FORMAT"):
            c.put(b"x", concurrency_key="bad:key")


def test_the_extensions_page_example_runs(srv):
    import pathlib
    import re

    readme = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "EXTENSIONS.md").read_text()
    code = re.search(r"```python\n(from pybeanstalkd\.client .*?)```", readme, re.S).group(1)
    assert 'Client("127.0.0.1", 11300)' in code
    exec(code.replace('Client("127.0.0.1", 11300)', "Client(*ADDR)"), {"ADDR": srv.address})
    with connect(srv) as c:
        c.use("flaky")  # its job was buried by its second release
        words = c._cmd(b"peek-buried", b"FOUND")
        assert c._data(int(words[2])) == b"flaky"
        # (the example flushed it, and once its connection closed the
        # empty, unused tube was freed)
        assert c.flush_tube("emails") is None

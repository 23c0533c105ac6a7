"""pybeanstalkd.client against a real server with --extensions (and
--max-tries): every call, and its errors; and against servers with TLS,
client certificates and tokens, what each refusal raises."""
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
        assert c.peek_buried().body == b"flaky"
        # (the example flushed it, and once its connection closed the
        # empty, unused tube was freed)
        assert c.flush_tube("emails") is None


# -- an operator's commands


def test_stats_peek_kick_bury_touch_and_pause(srv):
    with connect(srv) as c, connect(srv) as worker:
        c.use("client-e")
        ready, later = c.put(b"r", pri=5, ttr=30), c.put(b"d", delay=3600)
        st = c.stats()
        assert isinstance(st["current-jobs-ready"], int) and st["current-jobs-ready"] >= 1
        assert st["version"] == "1.13" and st["draining"] is False
        assert isinstance(st["rusage-utime"], float) and isinstance(st["id"], str)
        tube = c.stats_tube("client-e")
        assert tube is not None and (tube["name"], tube["current-jobs-ready"],
                                     tube["current-jobs-delayed"]) == ("client-e", 1, 1)
        assert c.stats_tube("no-such-tube") is None
        job = c.stats_job(ready)
        assert job is not None and (job["tube"], job["state"], job["pri"], job["ttr"]) == (
            "client-e", "ready", 5, 30)
        assert c.stats_job(999999) is None
        assert "client-e" in c.list_tubes()

        assert c.peek(ready) == Job(ready, b"r") and c.peek(999999) is None
        assert c.peek_ready() == Job(ready, b"r") and c.peek_delayed() == Job(later, b"d")
        assert c.peek_buried() is None

        worker.watch("client-e")
        assert worker.reserve(timeout=0) == Job(ready, b"r")
        assert worker.touch(ready) and not c.touch(ready)  # only the holder touches it
        assert not c.bury(ready) and worker.bury(ready, pri=7)
        assert c.peek_buried() == Job(ready, b"r") and c.stats_job(ready)["pri"] == 7
        assert c.kick(10) == 1 and c.peek_ready() == Job(ready, b"r")  # buried ones first
        assert c.kick(10) == 1 and c.stats_job(later)["state"] == "ready"  # then delayed ones
        assert c.kick(10) == 0
        assert not c.kick_job(later) and not c.kick_job(999999)  # ready: nothing to kick

        assert c.pause_tube("client-e", 60) and not c.pause_tube("no-such-tube", 1)
        assert c.stats_tube("client-e")["pause"] == 60
        assert c.pause_tube("client-e", 0)


def test_stats_values_that_look_like_numbers_stay_text(srv):
    with connect(srv) as c:
        c.use("123")
        jid = c.put(b"x")
        assert c.stats_tube("123")["name"] == "123"
        assert c.stats_job(jid)["tube"] == "123"
        assert c.delete(jid)


# -- TLS and tokens, against servers that ask for them


@pytest.fixture(scope="module")
def secured(certs, tmp_path_factory):
    """Servers with TLS and tokens, TLS with client certificates, and a
    token file alone."""
    from tlstools import tls_args

    tokens = tmp_path_factory.mktemp("client-tokens") / "tokens"
    tokens.write_text("# the library's tests\nlib-token\n")
    tokens.chmod(0o600)
    made = {}
    try:
        made["tls+auth"] = Server(ours_argv(), tls_args(certs) + ["--auth-tokens", str(tokens)])
        made["mtls"] = Server(ours_argv(), tls_args(certs, mtls=True))
        made["auth"] = Server(ours_argv(), ["--auth-tokens", str(tokens)])
        yield made
    finally:
        for s in made.values():
            s.stop()


def test_tls_and_a_token(secured, certs):
    import ssl

    from pybeanstalkd.client import AuthError

    srv, ca = secured["tls+auth"], str(certs / "ca.pem")
    with Client(*srv.address, timeout=10, tls_ca=ca, token="lib-token") as c:  # 127.0.0.1: its IP checked
        c.use("secured")
        assert c.peek(c.put(b"over tls")) is not None
    with Client("localhost", srv.port, timeout=10, tls=ssl.create_default_context(cafile=ca),
                token="lib-token") as c:
        assert c.stats()["current-jobs-ready"] == 1
    with Client(*srv.address, timeout=10, tls_ca=ca) as c, pytest.raises(
            AuthError, match="^the server wants a token"):
        c.stats()
    with pytest.raises(AuthError, match="^the server refused the token$"):
        Client(*srv.address, timeout=10, tls_ca=ca, token="wrong")
    with pytest.raises(ConnectionError, match="before answering: it may want TLS"):
        Client(*srv.address, timeout=10, token="lib-token")
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        Client(*srv.address, timeout=10, tls=True)
    with pytest.raises(ssl.SSLCertVerificationError, match="not valid for 'queue.example'"):
        Client(*srv.address, timeout=10, tls_ca=ca, server_hostname="queue.example")


def test_client_certificates(secured, certs):
    srv, ca = secured["mtls"], str(certs / "ca.pem")
    with Client(*srv.address, timeout=10, tls_ca=ca, tls_cert=str(certs / "client.pem"),
                tls_key=str(certs / "client.key")) as c:
        assert c.list_tubes() == ["default"]
    with Client(*srv.address, timeout=10, tls_ca=ca) as c, pytest.raises(
            ConnectionError, match="before answering: it may want a client certificate"):
        c.stats()


def test_a_token_over_plaintext_and_to_a_server_without_tokens(secured, srv):
    with Client(*secured["auth"].address, timeout=10, token="lib-token") as c:
        assert c.stats()["current-connections"] == 1
    with Client(*srv.address, timeout=10, token="lib-token") as c:  # no --auth-tokens: served anyway
        assert c.stats_tube("default") is not None


def test_arguments_that_do_not_go_together(srv, certs):
    import ssl

    for kw in ({"token": "two words"}, {"token": "x\r\nflush-tube default"}, {"token": ""},
               {"tls_key": "k.pem"}, {"tls": False, "tls_ca": "ca.pem"},
               {"tls": ssl.create_default_context(), "tls_ca": "ca.pem"}):
        with pytest.raises(ValueError):
            Client(*srv.address, timeout=10, **kw)


def test_ssl_is_imported_only_for_tls(srv):
    import subprocess
    import sys

    code = ("import sys\nfrom pybeanstalkd.client import Client\n"
            f"with Client('127.0.0.1', {srv.port}, timeout=10, token='t') as c:\n"
            "    c.stats()\n"
            "print('ssl' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout == "False\n", p.stderr

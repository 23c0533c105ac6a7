"""The HTTP side (--http) against hostile clients: request heads that never
end, connections beyond the HTTP cap while protocol clients need
descriptors, foreign Host headers (DNS rebinding), and malformed requests
and bodies, which get a 4xx and leave no stack on stderr.

The deadlines are short here (ops/httpguard.Timeouts, given to ops.http.start
on a real socket in this process); the cap, the Host check and the error
handling are also run against a real server process."""
from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from time import monotonic_ns

import pytest

from pybeanstalkd.core.engine import Engine
from pybeanstalkd.ops import httpguard
from pybeanstalkd.ops.http import listen, start
from pybeanstalkd.server.transport import Server
import support

ACT = b"X-Pybeanstalkd: 1\r\nContent-Type: application/json\r\n"
WAIT_S = 15  # the most any reply here may take (a loaded machine); no assertion is this tight


# -- in this process: the deadlines and the cap ---------------------------------------------

@contextlib.asynccontextmanager
async def serving(max_connections=httpguard.MAX_CONNECTIONS, **timeouts):
    """The HTTP side on a real socket, with these deadlines; yields its port
    and the engine."""
    loop = asyncio.get_running_loop()
    engine = Engine(monotonic_ns(), log=lambda m: None)
    sock = listen("127.0.0.1", 0)
    http = await start(Server(loop, engine), sock, max_connections=max_connections,
                       timeouts=httpguard.Timeouts(**timeouts))
    try:
        yield sock.getsockname()[1], engine
    finally:
        await http.cleanup()


async def read_to_eof(reader) -> bytes:
    """Everything the server sends until it closes (a reset counts as a close)."""
    out = b""
    while True:
        try:
            data = await asyncio.wait_for(reader.read(65536), WAIT_S)
        except ConnectionResetError:
            return out
        if not data:
            return out
        out += data


async def read_reply(reader) -> tuple[int, bytes]:
    """One HTTP/1.1 reply with a Content-Length, read off a kept-alive connection."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
    lines = head.decode().split("\r\n")
    size = next(int(x.split(":")[1]) for x in lines if x.lower().startswith("content-length:"))
    return int(lines[0].split()[1]), await reader.readexactly(size)


def run(coro):
    asyncio.run(coro)


def test_a_half_sent_head_is_answered_408_and_closed_after_the_head_timeout():
    async def main():
        async with serving(head=0.3) as (port, _):
            # (the server's clock starts at its accept, which may come
            # before open_connection returns: so this one starts before it)
            t0 = time.monotonic()
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"GET / HTTP/1.1\r\nHost: x")
            got = await read_to_eof(r)
            took = time.monotonic() - t0
            assert got.startswith(b"HTTP/1.1 408 "), got
            assert took >= 0.3
            w.close()
            # a connection that sends nothing at all is closed too, without a reply
            r, w = await asyncio.open_connection("127.0.0.1", port)
            assert await read_to_eof(r) == b""
            w.close()
    run(main())


def test_a_head_sent_one_byte_a_second_is_closed_at_the_deadline():
    """The deadline is for the whole head: bytes that keep coming do not extend it."""
    async def main():
        head = b"GET /api/v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        async with serving(head=2.0) as (port, _):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            reading = asyncio.ensure_future(read_to_eof(r))
            sent = 0
            while not reading.done() and sent < len(head):
                try:
                    w.write(head[sent:sent + 1])
                    await w.drain()
                except ConnectionError:
                    break
                sent += 1
                await asyncio.wait([reading], timeout=1.0)
            got = await reading
            assert got.startswith(b"HTTP/1.1 408 "), got
            assert sent < len(head) // 2  # closed long before the head could end
            w.close()
    run(main())


def test_a_whole_head_in_time_is_served_and_the_connection_outlives_the_head_timeout():
    async def main():
        async with serving(head=0.3, idle=10) as (port, _):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert await read_reply(r) == (200, b"ok\n")
            await asyncio.sleep(0.6)  # past the head deadline: it was met, it no longer applies
            w.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert await read_reply(r) == (200, b"ok\n")
            w.close()
    run(main())


def test_after_a_reply_the_next_head_must_come_within_the_idle_timeout():
    async def main():
        async with serving(head=10, idle=0.3) as (port, _):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert await read_reply(r) == (200, b"ok\n")
            t0 = time.monotonic()
            w.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and no end
            assert await read_to_eof(r) == b""
            assert time.monotonic() - t0 < 10  # well before the first-head deadline
            w.close()
    run(main())


def test_a_body_that_does_not_come_gets_408_and_the_action_is_not_done():
    async def main():
        async with serving(body=0.3) as (port, engine):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"POST /api/v1/drain HTTP/1.1\r\nHost: 127.0.0.1\r\n" + ACT
                    + b"Content-Length: 50\r\n\r\n{}")
            got = await read_to_eof(r)
            assert got.startswith(b"HTTP/1.1 408 "), got
            assert not engine.draining
            w.close()
    run(main())


def test_at_the_cap_a_new_connection_takes_the_place_of_the_one_idle_longest():
    # Connections that sit between requests (here: before their first whole
    # head) cannot keep a new one out: the one idle longest is closed for it.
    async def main():
        async with serving(max_connections=3) as (port, _):
            held = []
            for _ in range(3):
                r, w = await asyncio.open_connection("127.0.0.1", port)
                w.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # (unfinished)
                await asyncio.sleep(0.05)
                held.append((r, w))
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"GET /leader HTTP/1.0\r\n\r\n")  # (as HAProxy's check)
            got = await read_to_eof(r)
            assert got.startswith(b"HTTP/1.0 200 "), got
            assert await read_to_eof(held[0][0]) == b""  # the oldest: closed for it
            for r, _w in held[1:]:
                with contextlib.suppress(asyncio.TimeoutError):
                    assert await asyncio.wait_for(r.read(1), 0.2) != b""  # still open
            for _, w in held:
                w.close()
    run(main())


def test_at_the_cap_with_every_connection_busy_a_new_one_gets_503():
    async def main():
        async with serving(max_connections=3) as (port, _):
            held = []
            for _ in range(3):  # each in a request: an action waiting for its body
                r, w = await asyncio.open_connection("127.0.0.1", port)
                w.write(b"POST /api/v1/drain HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        b"X-Pybeanstalkd: 1\r\nContent-Length: 10\r\n\r\n")
                held.append((r, w))
            await asyncio.sleep(0.2)
            r, w = await asyncio.open_connection("127.0.0.1", port)
            got = await read_to_eof(r)
            assert got.startswith(b"HTTP/1.1 503 ") and got.endswith(b"too many HTTP connections")
            w.close()
            held.pop()[1].close()
            end = time.monotonic() + WAIT_S
            while True:  # served again once the server has seen the close
                r, w = await asyncio.open_connection("127.0.0.1", port)
                w.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                got = await read_to_eof(r)
                w.close()
                if got.startswith(b"HTTP/1.1 200 "):
                    break
                assert got.startswith(b"HTTP/1.1 503 ") and time.monotonic() < end
                await asyncio.sleep(0.02)
            for _, w in held:
                w.close()
    run(main())


class FakeTransport:
    def __init__(self):
        self.aborted = self.closed = False
        self.written = b""

    def write(self, data):
        self.written += data

    def close(self):
        self.closed = True

    def abort(self):
        self.aborted = True

    def is_closing(self):
        return self.closed or self.aborted


class FakeHandler:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *a: self.calls.append(name)


def test_a_peer_that_reads_nothing_of_a_reply_is_cut_off_after_the_send_timeout():
    async def main():
        loop = asyncio.get_running_loop()
        owner = httpguard.Connections(loop, FakeHandler, 4, httpguard.Timeouts(send=0.2))
        conn, t = owner(), FakeTransport()
        conn.connection_made(t)
        conn.head_done()
        conn.pause_writing()  # the transport's buffer is full
        await asyncio.sleep(0.1)
        conn.resume_writing()  # ... and the peer read some: the clock stops
        await asyncio.sleep(0.3)
        assert not t.aborted
        conn.pause_writing()
        end = time.monotonic() + WAIT_S
        while not t.aborted and time.monotonic() < end:
            await asyncio.sleep(0.05)
        assert t.aborted
        conn.connection_lost(None)
        assert owner.open == 0 and conn.inner.calls[-1] == "connection_lost"
    run(main())


# -- a real server process --------------------------------------------------------------------

def spawn(*extra, nofile=None) -> support.Server:
    """A server process with --http (on its http_port), its output kept;
    once its HTTP side answers."""
    srv = support.Server(support.ours_argv(), extra, http=True, nofile=nofile, keep_output=True)
    end = time.monotonic() + WAIT_S
    while http(srv.http_port, b"GET /healthz HTTP/1.0\r\n\r\n")[0] != 200:
        assert srv.proc.poll() is None and time.monotonic() < end, bytes(srv.err)
        time.sleep(0.05)
    return srv


def stopped(srv: support.Server) -> tuple[str, str]:
    """Stop it; (stdout, stderr)."""
    srv.stop()
    return srv.output()


@pytest.fixture
def server():
    """Start a server with these arguments (stopped after the test)."""
    started = []

    def make(*extra):
        started.append(spawn(*extra))
        return started[-1]
    yield make
    for p in started:
        p.stop()


def http(port: int, data: bytes) -> tuple[int | None, bytes]:
    """Send one request, read until the server closes: (status, body);
    status None when the server answered nothing."""
    try:
        s = socket.create_connection(("127.0.0.1", port), WAIT_S)
    except OSError:
        return None, b""
    with s:
        s.settimeout(WAIT_S)
        try:
            s.sendall(data)
        except OSError:
            pass
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except ConnectionResetError:
            pass
    if not out.startswith(b"HTTP/"):
        return None, out
    head, _, body = out.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def get(path: str, host: bytes | None = b"127.0.0.1", extra: bytes = b"") -> bytes:
    """GET path (with this Host, or none: then as HTTP/1.0), closing after."""
    if host is None:
        return b"GET %s HTTP/1.0\r\n%s\r\n" % (path.encode(), extra)
    return (b"GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s\r\n"
            % (path.encode(), host, extra))


def post(path: str, body: bytes, host: bytes = b"127.0.0.1", extra: bytes = b"") -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: %s\r\n" % (path.encode(), host) + ACT + extra
            + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)


def beanstalk(port: int, commands: bytes, replies: int, timeout: float) -> list[bytes]:
    """Send protocol commands; read `replies` reply lines (and any job bodies)."""
    s = socket.create_connection(("127.0.0.1", port), timeout)
    with s:
        s.settimeout(timeout)
        s.sendall(commands)
        buf, lines = b"", []
        while len(lines) < replies:
            while b"\r\n" not in buf:
                chunk = s.recv(65536)
                assert chunk, "the server closed the connection"
                buf += chunk
            line, buf = buf.split(b"\r\n", 1)
            lines.append(line)
            if line.startswith(b"RESERVED"):
                n = int(line.split()[2]) + 2
                while len(buf) < n:
                    buf += s.recv(65536)
                buf = buf[n:]
        return lines


def test_http_connections_beyond_the_cap_leave_descriptors_for_protocol_clients():
    """With 256 descriptors, 300 unfinished HTTP requests: the cap keeps
    them from taking the descriptors a protocol client needs."""
    p = spawn("--http-max-connections", "16", nofile=256)
    held = []
    try:
        for _ in range(300):
            s = socket.create_connection(("127.0.0.1", p.http_port), WAIT_S)
            s.sendall(b"GET /api/v1/stats HTTP/1.1\r\nHost: 127.0.0.1")  # and never the end
            held.append(s)
        # (the server closes them after its 10 s head deadline; this is over well before)
        t0 = time.monotonic()
        replies = beanstalk(p.port, b"put 0 0 60 2\r\nhi\r\nreserve-with-timeout 0\r\n", 2,
                            timeout=5)
        assert replies[0].startswith(b"INSERTED ") and replies[1].startswith(b"RESERVED ")
        assert time.monotonic() - t0 < 5
    finally:
        for s in held:
            s.close()
        _, err = stopped(p)
    assert "Traceback" not in err


def test_foreign_hosts_get_400_everywhere_but_the_health_checks(server):
    port = server("--http-allowed-hosts", "queue.internal,.corp.example").http_port
    evil = b"evil.example:9100"
    for path in ("/api/v1/stats", "/metrics", "/api/v1/tubes", "/", "/readyz", "/no/such"):
        status, body = http(port, get(path, evil))
        assert status == 400, (path, status, body)
    status, body = http(port, post("/api/v1/drain", b"{}", evil))
    assert status == 400 and b"not a name of this server" in json.loads(body)["error"].encode()
    status, body = http(port, get("/readyz"))
    assert status == 200 and json.loads(body)["ready"]  # the drain was not done
    # DNS cannot rebind an IP literal, nor localhost: those, and the names given, pass
    hosts = [b"127.0.0.1:%d" % port, b"127.0.0.1", b"localhost:%d" % port, b"LOCALHOST.",
             b"dash.localhost", b"[::1]:%d" % port, b"[::1]", b"queue.internal",
             b"Queue.Internal.:%d" % port, b"corp.example", b"a.b.corp.example:1",
             socket.gethostname().encode()]
    for host in hosts:
        status, body = http(port, get("/api/v1/stats", host))
        assert status == 200, (host, status, body)
    status, body = http(port, get("/api/v1/stats", None))  # HTTP/1.0 without a Host
    assert status == 200, body
    for host in (b"queue.internal.evil.example", b"xcorp.example", b"corp.example.evil",
                 b"localhost.evil.example", b"[::1", b"::1", b"127.0.0.1:http", b"evil.example"):
        assert http(port, get("/api/v1/stats", host))[0] == 400, host
    # absolute-form targets name a host too
    status, _ = http(port, b"GET http://evil.example/api/v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           b"Connection: close\r\n\r\n")
    assert status == 400
    # health checks answer whatever the Host (HAProxy's httpchk sends none, or its own)
    for path in ("/healthz", "/leader"):
        assert http(port, get(path, evil))[0] == 200
        assert http(port, get(path, None))[0] == 200


def test_a_star_allows_any_host(server):
    port = server("--http-allowed-hosts", "*").http_port
    assert http(port, get("/api/v1/stats", b"evil.example:9100"))[0] == 200


def test_hostile_bodies_get_400_and_no_stack(server):
    p = server()
    cases = [
        ("/api/v1/tubes/t/put", b"[" * 100_000, "nested too deeply"),
        ("/api/v1/tubes/t/kick", b'{"n":' * 50_000, "nested too deeply"),
        ("/api/v1/tubes/t/put", b'{"body": "\\ud800"}', "lone surrogate"),
        ("/api/v1/tubes/t/put", b'{"body": "a\\udfffb", "pri": 1}', "lone surrogate"),
        ("/api/v1/tubes/t/kick", b'{"n": ' + b"9" * 100_000 + b"}", "not JSON"),
        ("/api/v1/tubes/t/kick", b'{"n": 1e999}', "integer"),
        ("/api/v1/tubes/t/put", b"[1, 2]", "JSON object"),
        ("/api/v1/tubes/t/put", b'{"body": 5}', "body"),
        ("/api/v1/tubes/t/put", b'{"body": "x", "pri": "1"}', "pri"),
        ("/api/v1/tubes/t/put", b'{"body_base64": "!!!"}', "base64"),
        ("/api/v1/tubes/t/put", b'{"body_base64": "\\ud800"}', "base64"),
        ("/api/v1/tubes/t/move", b'{"to": "\\udc80"}', "tube name"),
        ("/api/v1/tubes/t/put", b'{"body": "\xff\xfe"}', "not JSON"),
    ]
    for path, body, why in cases:
        status, reply = http(p.http_port, post(path, body))
        assert status == 400, (path, body[:40], status, reply)
        assert why in json.loads(reply)["error"], (body[:40], reply)
    for coding in (b"gzip", b"deflate"):
        status, reply = http(p.http_port, post("/api/v1/undrain", b"junk",
                                               extra=b"Content-Encoding: %s\r\n" % coding))
        assert status == 400, reply  # (from aiohttp's parser or from reading the body)
    _, err = stopped(p)
    assert "Traceback" not in err and err == ""


MALFORMED = [
    b"GET /api/v1/tubes/\xff\xfe HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    get("/api/v1/tubes/%ff%fe"),
    get("/api/v1/tubes/" + "a" * 10_000),
    get("/api/v1/tubes/" + "a" * 7000 + "/jobs"),
    get("/api/v1/jobs/" + "9" * 5000),
    get("/api/v1/tubes/default/jobs?limit=" + "9" * 5000 + "&offset=%ff"),
    b"GARBAGE\r\n\r\n",
    b"G@T / HTTP/1.1\r\n\r\n",
    b"GET / HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n",
    b"\x16\x03\x01" + b"\x00" * 50,
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\x01b\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nnocolon\r\n\r\n",
    get("/healthz", extra=b"X: " + b"a" * 100_000 + b"\r\n"),
    b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n",
    get("/healthz", extra=b"".join(b"X%d: y\r\n" % i for i in range(500))),
    b"POST /api/v1/drain HTTP/1.1\r\nHost: 127.0.0.1\r\n" + ACT + b"Content-Length: abc\r\n\r\n",
    b"POST /api/v1/drain HTTP/1.1\r\nHost: 127.0.0.1\r\n" + ACT + b"Content-Length: -5\r\n\r\n",
    b"POST /api/v1/drain HTTP/1.1\r\nHost: 127.0.0.1\r\n" + ACT
    + b"Content-Length: 99999999999999999999999\r\n\r\n",
    b"POST /api/v1/undrain HTTP/1.1\r\nHost: 127.0.0.1\r\n" + ACT
    + b"Transfer-Encoding: chunked\r\n\r\nzz\r\njunk\r\n",
    b"POST /api/v1/undrain HTTP/1.1\r\nHost: 127.0.0.1\r\n" + ACT
    + b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\nx\r\n",
    get("/api/v1/stats", extra=b"Authorization: Basic !!!!\r\n"),
    get("/api/v1/stats", extra=b"Authorization: Basic \xff\xfe\r\n"),
    get("/api/v1/stats", extra=b"Authorization: Basic " + b"=" * 5000 + b"\r\n"),
    get("/api/v1/stats", b"\xff\xfe"),
    get("/api/v1/stats", b"[::1"),
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
]


def test_a_static_name_too_long_for_the_file_system_is_not_found(server):
    p = server()
    assert http(p.http_port, get("/static/" + "a" * 300 + ".js"))[0] == 404
    out, err = stopped(p)
    assert "Traceback" not in err and err == "", err[:2000]


def test_malformed_requests_get_4xx_and_at_most_one_line_of_log(server):
    p = server("-V", "--http-auth", "ops:secret")
    lines_before = p.out.count(b"\n")
    for data in MALFORMED:
        status, body = http(p.http_port, data)
        assert status is not None and 400 <= status < 500, (data[:60], status, body[:200])
    out, err = stopped(p)
    assert "Traceback" not in err and err == "", err[:2000]
    logged = [line for line in out.splitlines()[lines_before:] if line.startswith("http: ")]
    assert len(logged) <= len(MALFORMED)
    assert all(len(line) < 400 for line in logged)


# -- the Host check's parts -------------------------------------------------------------------

@pytest.mark.parametrize("value, host", [
    ("example.com", ("example.com", False)), ("Example.COM.:80", ("example.com", False)),
    ("127.0.0.1:9100", ("127.0.0.1", False)), ("[::1]:9100", ("::1", True)),
    ("[::1]", ("::1", True)), ("host:", ("host", False)),
    ("::1", None), ("[::1", None), ("host:http", None), (":80", None), ("", None),
    ("[::1]x", None), ("host:٣", None),
])
def test_split_host(value, host):
    assert httpguard.split_host(value) == host


def test_hosts_from_the_listen_address_and_the_machine():
    async def main():
        hosts = httpguard.Hosts(("q.internal",), "Beanstalk.Example.")
        assert await hosts.refused(["beanstalk.example:1"], "/") is None
        assert await hosts.refused([socket.gethostname()], "/") is None
        assert await hosts.refused([socket.getfqdn()], "/") is None
        assert await hosts.refused(["evil.example"], "/") is not None
        assert await hosts.refused(["q.internal", "q.internal"], "/") is not None
        assert await hosts.refused([], "http://q.internal:80/x") is None
        assert await hosts.refused([""], "/") is None  # (a target with no authority)
        assert await httpguard.Hosts((), "::1").refused(["[::1]"], "/") is None
    run(main())


def test_error_log_keeps_stacks_for_our_bugs_only():
    lines, warned = [], []
    log = httpguard.ErrorLog(lines.append, warned.append)
    from aiohttp.http_exceptions import BadHttpMessage
    log.exception("Error handling request from %s", "1.2.3.4",
                  exc_info=BadHttpMessage("bad\n\n  b'x\\x01'\n   ^"))
    assert lines == ["http: Error handling request from 1.2.3.4: bad b'x\\x01'"] and not warned
    try:
        raise KeyError("bug")
    except KeyError as e:
        log.exception("Error handling request from %s", "1.2.3.4", exc_info=e)
    assert len(warned) == 1 and "Traceback" in warned[0] and "KeyError" in warned[0]
    httpguard.ErrorLog(None, warned.append).exception("x", exc_info=BadHttpMessage("bad"))
    assert len(warned) == 1  # without -V a client's fault is not logged at all

"""What the HTTP side (--http) trusts, and how long and how many it serves:

- Hosts: the Host check. A browser page whose name an attacker rebinds to
  this machine's address (DNS rebinding) is same-origin with us, so the
  X-Pybeanstalkd header that keeps cross-site pages from acting does not
  stop it; the Host it sends, though, is the attacker's name. Only names the
  server can legitimately be reached as are accepted.
- Connections: the protocol factory the listening socket serves with. It
  wraps each aiohttp handler with deadlines (a complete request head within
  HEAD_TIMEOUT_S of connecting; a reply left unread, writing blocked, for
  SEND_TIMEOUT_S) and caps the open connections, so that slow or idle HTTP
  clients can never hold the descriptors protocol clients need. At the cap
  a new connection takes the place of the one idle longest (between
  requests, or with its reply stuck for STUCK_S): the connections that
  fill the cap cannot keep a health check (HAProxy's GET /leader) out.
- ErrorLog: aiohttp's server logger. A malformed request is the client's
  fault: one line with -V, never a stack; an exception from our own code
  (a 500) keeps its stack, on stderr.

Imported with ops/http.py only (--http).
"""
from __future__ import annotations

import asyncio
import ipaddress
import socket
import sys
import traceback
from dataclasses import dataclass

from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web import RequestPayloadError

MAX_CONNECTIONS = 64  # the --http-max-connections default (cli.py has the same)
HEAD_TIMEOUT_S = 10.0  # from connecting to a complete request line and headers
BODY_TIMEOUT_S = 30.0  # from the head to the end of an action's body
IDLE_TIMEOUT_S = 10.0  # keep-alive: from a reply to the next complete head
SEND_TIMEOUT_S = 30.0  # a reply left unread (writing blocked) this long: the connection is cut
LINGER_S = 2.0  # a rejected request's body is read this long at most before the close
STUCK_S = 1.0  # at the cap, a reply blocked this long makes its connection the one to close
# At shutdown, an action still waiting for its records to be safe (an
# fsync, a replica's ack) is given this long, twice (aiohttp waits for the
# handler, then for it once cancelled), and its connection is closed: it
# was never answered. (A deposed leader's never will be: aiohttp's 60 s,
# twice, held its exit two minutes.)
SHUTDOWN_S = 1.0

BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
        b"Content-Length: 25\r\nConnection: close\r\n\r\ntoo many HTTP connections")
LATE = (b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain\r\n"
        b"Content-Length: 38\r\nConnection: close\r\n\r\nthe request head took too long to come")


@dataclass(frozen=True)
class Timeouts:
    head: float = HEAD_TIMEOUT_S
    body: float = BODY_TIMEOUT_S
    idle: float = IDLE_TIMEOUT_S
    send: float = SEND_TIMEOUT_S
    linger: float = LINGER_S
    stuck: float = STUCK_S
    shutdown: float = SHUTDOWN_S


# -- the Host check -----------------------------------------------------------------

def split_host(value: str) -> tuple[str, bool] | None:
    """The host of a Host header (or of a URL's authority): lowercased,
    without its port and a trailing dot, and whether it was [bracketed];
    None when it is not host[:port] or [v6][:port]."""
    v = value.strip()
    bracketed = v.startswith("[")
    if bracketed:
        host, sep, rest = v[1:].partition("]")
        if not sep:
            return None
    else:
        host = v.partition(":")[0]  # (a colon more, as in an unbracketed IPv6, is refused below)
        rest = v[len(host):]
    port = rest[1:]
    if rest and not (rest[0] == ":" and (port == "" or port.isascii() and port.isdigit())):
        return None
    host = host.lower()
    if host.endswith(".") and not bracketed:
        host = host[:-1]
    return (host, bracketed) if host else None


def authority(target: str) -> str:
    """The host[:port] of an absolute-form request target (http://host/path),
    or the target itself (CONNECT's host:port)."""
    if "://" not in target:
        return target
    rest = target.partition("://")[2]
    for end in "/?#":
        rest = rest.partition(end)[0]
    return rest.rpartition("@")[2]


def is_ip(host: str, bracketed: bool) -> bool:
    """An IP literal: DNS rebinding cannot produce one (there is no name to rebind)."""
    try:
        if bracketed:
            ipaddress.IPv6Address(host.replace("%25", "%"))  # (a zone: fe80::1%25eth0)
        else:
            ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


class Hosts:
    """The Host values accepted: IP literals, localhost and *.localhost
    (browsers resolve those to loopback themselves), this machine's
    hostname and fully qualified names, the --http address's host, and the
    names given (--http-allowed-hosts: ".example.com" is the domain and
    its subdomains; "*" is any Host). A request without a Host (HTTP/1.0,
    HAProxy's httpchk) passes: browsers always send one."""

    def __init__(self, allowed=(), listen_host: str | None = None):
        self.any = "*" in allowed
        self.names = {n for n in allowed if n != "*" and not n.startswith(".")}
        self.domains = tuple(n for n in allowed if n.startswith("."))
        if listen_host:
            h = split_host(listen_host if ":" not in listen_host else f"[{listen_host}]")
            if h is not None and not is_ip(*h):
                self.names.add(h[0])
        self.names.add(socket.gethostname().lower().rstrip("."))
        # the machine's names from the resolver, looked up once
        self.machine: asyncio.Future[frozenset[str]] | None = None

    async def refused(self, hosts: list[str], target: str) -> str | None:
        """Why a request with these Host headers and this request target may
        not be served, or None."""
        if self.any:
            return None
        if len(hosts) > 1:
            return "more than one Host header"
        values = [h for h in hosts if h.strip()]  # (an empty Host: a target with no authority)
        if not target.startswith("/") and target != "*":
            values.append(authority(target))  # absolute-form, or CONNECT's authority-form
        for value in values:
            h = split_host(value)
            if h is None:
                return "malformed Host header"
            if not await self.allows(*h):
                return ("Host %r is not a name of this server (see --http-allowed-hosts)"
                        % one_line(h[0], 100))
        return None

    async def allows(self, host: str, bracketed: bool = False) -> bool:
        if is_ip(host, bracketed):
            return True
        if bracketed:
            return False
        if host == "localhost" or host.endswith(".localhost") or host in self.names:
            return True
        if any(host.endswith(d) or host == d[1:] for d in self.domains):
            return True
        if self.machine is None:
            self.machine = asyncio.get_running_loop().run_in_executor(None, machine_names)
        return host in await self.machine


def machine_names() -> frozenset[str]:
    """This machine's fully qualified name and aliases, as the resolver
    (/etc/hosts, DNS) gives them for its hostname (which may take a while:
    run in a thread, once)."""
    try:
        name, aliases, _ = socket.gethostbyaddr(socket.gethostname())
    except (OSError, UnicodeError):
        return frozenset()
    return frozenset(n.lower().rstrip(".") for n in [name, *aliases])


# -- connections: deadlines and the cap ------------------------------------------------

class Connections:
    """The protocol factory for the listening socket: each connection is an
    aiohttp handler (made by `make`) inside a Conn. At `max_conns` open
    connections a new one takes the place of the one idle longest (see
    Conn.evictable); if none is, it gets a 503 and is closed at once, before
    any handler is made."""

    def __init__(self, loop, make, max_conns: int = MAX_CONNECTIONS,
                 timeouts: Timeouts = Timeouts(), log=None):
        self.loop = loop
        self.make = make
        self.max_conns = max_conns
        self.timeouts = timeouts
        self.log = log  # None unless -V
        self.conns: dict[Conn, None] = {}  # open and counted, oldest first
        self.full = False  # at the cap (one log line each way)

    @property
    def open(self) -> int:
        return len(self.conns)

    def __call__(self) -> Conn:
        return Conn(self)

    def admit(self, conn: Conn) -> bool:
        if len(self.conns) >= self.max_conns:
            if not self.full and self.log:
                self.log("http: %d connections open (--http-max-connections): a new one takes "
                         "the place of the one idle longest, or gets 503" % len(self.conns))
            self.full = True
            now = self.loop.time()
            idle = [c for c in self.conns if c.evictable(now)]
            if not idle:
                return False
            victim = min(idle, key=lambda c: c.last)
            del self.conns[victim]
            victim.transport.abort()
        self.conns[conn] = None
        return True

    def forget(self, conn: Conn):
        """conn is closed: it counts no more."""
        self.conns.pop(conn, None)
        if self.full and len(self.conns) < self.max_conns:
            self.full = False
            if self.log:
                self.log("http: fewer than %d connections open" % self.max_conns)


class Conn(asyncio.Protocol):
    """One HTTP connection: aiohttp's handler inside, a deadline for the
    first request head (aiohttp's keep-alive timeout bounds the later
    ones: it closes a connection that has not sent a whole head that long
    after a reply), and one for a reply the peer does not read."""

    __slots__ = ("owner", "inner", "transport", "head_timer", "send_timer", "got", "last",
                 "busy", "stuck_since")

    # Set by connection_made, before anything else uses it.
    transport: asyncio.Transport

    def __init__(self, owner: Connections):
        self.owner = owner
        self.inner: asyncio.Protocol | None = None  # None: refused
        self.transport = None  # type: ignore[assignment]  # (see the class annotation)
        self.head_timer: asyncio.TimerHandle | None = None
        self.send_timer: asyncio.TimerHandle | None = None
        self.got = False  # some bytes of a request came
        self.last = owner.loop.time()  # when it last made progress
        self.busy = False  # a request of it is being handled
        self.stuck_since: float | None = None  # when its writing blocked, while it is

    def evictable(self, now: float) -> bool:
        """Idle (between requests, or before its first head), or its reply
        blocked for timeouts.stuck: the one to close for a newer one."""
        if self.stuck_since is not None:
            return now - self.stuck_since >= self.owner.timeouts.stuck
        return not self.busy

    def connection_made(self, transport):
        self.transport = transport
        owner = self.owner
        if not owner.admit(self):
            transport.write(BUSY)
            transport.close()
            return
        self.inner = owner.make()
        self.head_timer = owner.loop.call_later(owner.timeouts.head, self._head_late)
        self.inner.connection_made(transport)

    def head_done(self):
        """A request head was parsed (told by the app's middleware)."""
        self.busy = True
        self.last = self.owner.loop.time()
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def request_done(self):
        """The request's handler returned (its reply is being written)."""
        self.busy = False
        self.last = self.owner.loop.time()

    def _head_late(self):
        self.head_timer = None
        t = self.transport
        if t.is_closing():
            return  # (aiohttp is closing it already)
        if self.got:
            t.write(LATE)
        t.close()

    def data_received(self, data):
        if self.inner is not None:
            self.got = True
            self.last = self.owner.loop.time()
            self.inner.data_received(data)

    def eof_received(self):
        if self.inner is not None:
            return self.inner.eof_received()
        return None

    def pause_writing(self):
        if self.inner is not None:
            loop = self.owner.loop
            self.stuck_since = loop.time()
            if self.send_timer is None:
                self.send_timer = loop.call_later(self.owner.timeouts.send, self.transport.abort)
            self.inner.pause_writing()

    def resume_writing(self):
        if self.inner is not None:
            self.stuck_since = None
            self.last = self.owner.loop.time()
            if self.send_timer is not None:
                self.send_timer.cancel()
                self.send_timer = None
            self.inner.resume_writing()

    def connection_lost(self, exc):
        for timer in (self.head_timer, self.send_timer):
            if timer is not None:
                timer.cancel()
        self.head_timer = self.send_timer = None
        if self.inner is not None:
            self.owner.forget(self)
            self.inner.connection_lost(exc)


def head_done(request) -> Conn | None:
    """For the app's middleware: the request's head has come; its
    connection's head deadline is over, and it is busy until
    conn.request_done(). Returns its Conn (None outside one)."""
    transport = request.transport
    proto = transport.get_protocol() if transport is not None else None
    if isinstance(proto, Conn):
        proto.head_done()
        return proto
    return None


# -- aiohttp's server logger -------------------------------------------------------------

CLIENT_FAULTS = (HttpProcessingError, RequestPayloadError, ConnectionError)


def one_line(text: str, limit: int = 200) -> str:
    """Text a client sent (aiohttp quotes it in its messages), as one short
    printable line."""
    parts = [p.strip() for p in str(text).splitlines()]
    line = " ".join(p for p in parts if p and set(p) != {"^"})
    line = "".join(c if c.isprintable() else "?" for c in line)
    return line if len(line) <= limit else line[:limit] + "..."


class ErrorLog:
    """The logger aiohttp's request handlers report to (RequestHandler's
    `logger`). aiohttp logs a malformed request (a bad request line or
    header, a body that cannot be decoded) with its stack, on every such
    request; here it is one line on stdout with -V (as other events of a
    connection) and nothing without. Anything else reaching it is an
    exception from our own code: its stack goes to stderr."""

    def __init__(self, log=None, warn=None):
        self.log = log  # None unless -V
        self.warn = warn or (lambda text: print(text, file=sys.stderr, flush=True))

    def exception(self, msg, *args, exc_info=True, **kw):
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        text = msg % args if args else str(msg)
        if isinstance(exc, CLIENT_FAULTS):
            if self.log:
                self.log("http: %s: %s" % (text, one_line(getattr(exc, "message", None) or exc)))
            return
        if exc is None:
            self.warn("http: " + one_line(text))
            return
        self.warn("http: %s\n%s" % (text, "".join(traceback.format_exception(exc)).rstrip()))

    def error(self, msg, *args, **kw):
        self.exception(msg, *args, **kw)

    def warning(self, msg, *args, **kw):
        if self.log:
            self.log("http: " + one_line(msg % args if args else msg))

    def debug(self, msg, *args, **kw):
        pass  # (aiohttp's debug lines: early disconnections, TLS on the HTTP port)

    info = debug

    def isEnabledFor(self, level) -> bool:
        return True

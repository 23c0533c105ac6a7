"""asyncio/uvloop transport: feeds the Engine bytes and the monotonic clock.

One write per connection per event, however many replies a read produced.
"""
from __future__ import annotations

import asyncio
import signal
import socket
import sys
from time import monotonic_ns

from .engine import Engine


class Client(asyncio.Protocol):
    __slots__ = ("srv", "transport", "s")

    def __init__(self, srv: Server):
        self.srv = srv

    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info("socket")
        s = self.s = self.srv.engine.connect()
        s.fd = sock.fileno() if sock is not None else -1
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.srv.clients[s] = self
        if self.srv.verbose:
            self.srv.log("accept %d" % s.fd)

    def data_received(self, data):
        srv = self.srv
        now = monotonic_ns()
        if srv.timer_at is not None and now >= srv.timer_at:
            srv.on_timer(now)  # timers first, as the reference's loop does
        srv.engine.data(self.s, data, now)
        srv.flush()
        if self.s.closing:
            self.transport.close()

    def eof_received(self):
        srv = self.srv
        srv.engine.eof(self.s, monotonic_ns())
        srv.flush()
        return False  # the transport closes itself after the writes drain

    def connection_lost(self, exc):
        srv = self.srv
        s = self.s
        del srv.clients[s]
        if srv.verbose:
            srv.log("close %d" % s.fd)
        srv.engine.close(s, monotonic_ns())
        srv.flush()

    # A client that does not read its replies stops being read (as the reference).
    def pause_writing(self):
        self.transport.pause_reading()

    def resume_writing(self):
        self.transport.resume_reading()


class Server:
    def __init__(self, loop, engine: Engine, verbose: int = 0):
        self.loop = loop
        self.engine = engine
        self.verbose = verbose
        self.clients: dict = {}  # Session -> Client
        self.timer = None
        self.timer_at = None

    @staticmethod
    def log(msg: str):
        print(msg, flush=True)

    def flush(self):
        engine = self.engine
        dirty = engine.dirty
        if dirty:
            clients = self.clients
            for s in dirty:
                c = clients.get(s)
                out = s.out
                s.out = []
                if c is not None and not c.transport.is_closing():
                    c.transport.write(out[0] if len(out) == 1 else b"".join(out))
                if s.closing and c is not None:
                    c.transport.close()
            dirty.clear()
        due = engine.q.due
        if due is not None:
            engine.q.due = None
            if self.timer_at is None or due < self.timer_at:
                self.arm(due)

    def arm(self, due: int):
        if self.timer is not None:
            self.timer.cancel()
        self.timer_at = due
        delay = (due - monotonic_ns()) / 1e9
        self.timer = self.loop.call_later(delay if delay > 0 else 0, self.on_timer)

    def on_timer(self, now=None):
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.timer_at = None
        engine = self.engine
        engine.tick(monotonic_ns() if now is None else now)
        engine.q.due = None
        self.flush()
        due = engine.next_due()
        if due is not None and (self.timer_at is None or due < self.timer_at):
            self.arm(due)


def new_loop():
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def serve(sock: socket.socket, opts) -> int:
    loop = new_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(_serve(loop, sock, opts))
    finally:
        sys.stdout.flush()


async def _serve(loop, sock: socket.socket, opts) -> int:
    engine = Engine(monotonic_ns(), max_job_size=opts.max_job_size,
                    verbose=opts.verbose, filesize=opts.filesize,
                    log=Server.log)
    srv = Server(loop, engine, opts.verbose)
    stop = loop.create_future()

    def drain():
        engine.draining = True

    def terminate():
        if not stop.done():
            stop.set_result(0)

    # Handlers go in before the listener serves anyone, and everything runs in
    # one run of the loop: a signal must never arrive while it is not running.
    loop.add_signal_handler(signal.SIGUSR1, drain)
    loop.add_signal_handler(signal.SIGTERM, terminate)
    loop.add_signal_handler(signal.SIGINT, terminate)
    factory = lambda: Client(srv)  # noqa: E731
    if sock.family == socket.AF_UNIX:
        listener = await loop.create_unix_server(factory, sock=sock, backlog=1024)
    else:
        listener = await loop.create_server(factory, sock=sock, backlog=1024)
    try:
        return await stop
    finally:
        listener.close()
        for c in list(srv.clients.values()):
            c.transport.abort()

"""Start-up and the event loop: the Engine, the binlog's recovery and fsync thread,
signals, and serve() until SIGTERM.

Start-up loads what serving a client needs, and no more: what only a flag
needs (binlog/ for -b, random for --extensions, the TLS, auth, HTTP and
cluster sides) is imported where that flag is acted on, so that a server
started without it does not wait for it (tests/server/test_startup.py).
"""
from __future__ import annotations

import asyncio
import gc
import os
import resource  # (not in _rusage: `stats` may run out of descriptors, and an import opens files)
import signal
import socket
import sys
from time import monotonic_ns
from typing import TYPE_CHECKING

from ..core.engine import Engine
from ..core.session import Host
from ..core.tags import ExtState
from ..diag import default_warn as warn
from .accept import Acceptor
from .malloc import pin_mmap_threshold
from .gate import gate_for, hold_for
from .transport import Client, Server

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..binlog.files import Wal
    from ..settings import Settings
    from .runtime import Runtime


def process_host() -> Host:
    """This process and machine, for `stats`."""
    u = os.uname()
    return Host(os.getpid(), os.urandom(8).hex().encode(), u.nodename.encode(),
                u.version.encode(), u.machine.encode(), _rusage)


def _rusage() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def new_loop():
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _draws() -> Callable[[], float]:
    """--extensions: the draws of weighted reserves, seeded from the OS."""
    import random

    return random.Random().random


def _freeze_survivors(phase: str, info: dict):
    if phase == "stop" and info["generation"] == 0:
        gc.freeze()


def serve(sock: socket.socket, settings: Settings, rt: Runtime) -> int:
    # Every stored job is a GC-tracked object. Left to the default policy,
    # older generations are rescanned as the queue grows: 14% of puts, and
    # stalls of a second once a queue passes millions of jobs. Objects that
    # survive a young collection are frozen instead: never scanned again,
    # still freed by reference counting. The server makes no cyclic garbage
    # of its own (167 objects, all from imports, after 3,000 connections),
    # so this keeps nothing that a full collection would have freed.
    gc.callbacks.append(_freeze_survivors)
    pin_mmap_threshold()
    loop = new_loop()
    asyncio.set_event_loop(loop)
    # Start-up ran with the collector off (cli.main): what it made, the
    # modules, classes and functions, lives as long as the process. It is
    # frozen now, as a young collection would freeze it, and collections
    # resume under the policy above.
    gc.freeze()
    gc.enable()
    try:
        return loop.run_until_complete(_serve(loop, sock, settings, rt))
    finally:
        sys.stdout.flush()


def start_accepting(loop, sock: socket.socket, srv: Server, settings: Settings,
                    rt: Runtime) -> Acceptor:
    """Serve clients from ``sock`` through our accept loop, with TLS and the
    auth gate when their flags are given."""
    log = Server.log if settings.verbose else None
    certs = rt.certs
    tokens = rt.tokens
    acceptor = Acceptor(loop, sock, None, settings.max_connections, log,
                        getattr(srv.engine.q.store, "free_read_fds", None))
    srv.acceptor = acceptor
    if tokens is not None:
        from .auth import AuthGate

        def factory():
            return AuthGate(srv, tokens, lambda: Client(srv), acceptor.released)
    else:
        def factory():
            return Client(srv)
    if certs is not None:
        from ..tls import HANDSHAKE_TIMEOUT_S

    async def connect(conn: socket.socket):
        fd = conn.fileno()
        made = []

        def make():
            p = factory()
            made.append(p)
            return p
        try:
            if certs is None:
                await loop.connect_accepted_socket(make, conn)
            else:  # (asked for each time: the files may have changed)
                await loop.connect_accepted_socket(make, conn, ssl=certs.server(),
                                                   ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        except Exception as e:  # a failed TLS handshake, or a client already gone
            if made and made[0].transport is not None:
                return  # its connection_lost does the accounting
            if log:
                if certs is not None:
                    from ..tls import failure_reason
                    log("tls %d: handshake failed: %s" % (fd, failure_reason(e)))
                else:
                    log("accept %d: failed: %s" % (fd, e))
            conn.close()
            acceptor.released()

    def start_conn(conn: socket.socket):
        loop.create_task(connect(conn))

    acceptor.start_conn = start_conn
    if log:
        if settings.max_connections is not None:
            log("max-connections: %d" % settings.max_connections)
        if certs is not None:
            from ..tls import describe
            log(describe(settings))
        if tokens is not None:
            log("auth: %d tokens from %s; only `auth` is served before it"
                % (len(tokens.tokens), settings.auth_tokens_file))
    acceptor.start()
    return acceptor


def lock_binlog(settings: Settings, tag_state: ExtState | None) -> Wal:
    """Lock the binlog directory (exits as the reference does); the Wal
    that writes there (with the tags of tag_state, --extensions')."""
    from ..binlog.files import Wal
    from ..binlog.recovery import RecoveryError, lock_dir

    wal_dir = settings.wal_dir
    assert wal_dir is not None  # (called with -b only)
    try:
        lock_dir(wal_dir)
    except RecoveryError as e:
        for line in e.args:
            warn(line)
        raise SystemExit(10) from None
    from ..binlog.bodies import IN_RAM, DiskBodies
    from ..binlog.codec import codec_for

    codec = codec_for(tag_state)  # (--extensions: the put tags' records too)
    # --bodies-on-disk: the bodies' policy that leaves them in the files (the
    # flag counts a put's bytes; a stored body has its CRLF too)
    bodies = (DiskBodies(wal_dir, settings.body_ram_min + 2, warn) if settings.bodies_on_disk
              else IN_RAM)
    return Wal(wal_dir, settings.filesize, wantsync=settings.wantsync, warn=warn,
               zero_ahead=settings.fsync_each_write, codec=codec, bodies=bodies)


def recover_binlog(engine: Engine, wal: Wal) -> None:
    """Replay the binlog into the engine's queue, whose store it is (exits
    as the reference does)."""
    from ..binlog.recovery import RecoveryError, recover

    try:
        recover(wal, engine.q, engine.max_job_size, monotonic_ns(), warn)
    except RecoveryError as e:
        for line in e.args:
            warn(line)
        raise SystemExit(1) from None


def _start_cluster(loop, srv: Server, engine: Engine, wal: Wal, sock, settings: Settings, rt: Runtime,
                   serve_clients, stop):
    """--cluster: a follower until etcd makes this node the leader, which
    then calls serve_clients() (only now is cluster/ imported, and its etcd
    client)."""
    from ..cluster.node import Node

    node = Node(loop, srv, engine, wal, settings.cluster_settings(), rt.certs, sock, serve_clients,
                stop)

    node.start().add_done_callback(lambda task: node_ended(task, stop))
    return node


def node_ended(task: asyncio.Task, stop: asyncio.Future) -> None:
    """The node's life ends only by stepping down, which sets stop first.
    Any other end (an error, or a cancellation that came from inside its
    etcd client) stops the server too: a node that no longer keeps its
    lease or follows its leader must not go on serving."""
    if stop.done():
        return
    why = "cancelled" if task.cancelled() else repr(task.exception())
    warn(f"cluster: the node's work ended: {why}")
    stop.set_result(1)


async def _start_http(srv: Server, settings: Settings, rt: Runtime):
    from ..ops.http import start  # only with --http: aiohttp is slow to import

    assert rt.http_sock is not None and settings.http is not None  # (called with --http only)
    return await start(srv, rt.http_sock, settings.http_auth,
                       allowed_hosts=settings.http_allowed_hosts, listen_host=settings.http[0],
                       max_connections=settings.http_max_connections)


async def _serve(loop, sock: socket.socket, settings: Settings, rt: Runtime) -> int:
    # --extensions: the put tags' state, which the binlog writes from too
    tag_state = (ExtState(settings.max_tries or 0, _draws()) if settings.extensions else None)
    wal = lock_binlog(settings, tag_state) if settings.wal_dir is not None else None
    engine = Engine(monotonic_ns(), max_job_size=settings.max_job_size,
                    verbose=settings.verbose, filesize=settings.filesize,
                    log=Server.log, host=process_host(), hold=hold_for(settings),
                    max_memory=settings.max_memory, auth=rt.tokens, store=wal,
                    extensions=settings.extensions, max_tries=settings.max_tries or 0,
                    tag_state=tag_state,
                    bodies_on_disk=settings.bodies_on_disk)
    # With --http, the HTTP side answers while a long replay runs (in a
    # thread: nothing else touches the engine until it is done), so that
    # /healthz says the process is alive and /readyz says why it is not
    # ready yet.
    replay_aside = wal is not None and rt.http_sock is not None
    srv = Server(loop, engine, settings.verbose, gate=gate_for(settings, wal), replaying=replay_aside)
    http = None
    if wal is not None:
        if replay_aside:
            http = await _start_http(srv, settings, rt)
            await loop.run_in_executor(None, recover_binlog, engine, wal)
            srv.replayed()
        else:
            recover_binlog(engine, wal)
    if settings.max_memory is not None and settings.verbose:
        Server.log(engine.memory_line("max-memory"))  # (what the binlog's jobs use of it)
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
    listener = None
    if settings.cluster is not None:
        def serve_clients():
            nonlocal listener
            listener = start_accepting(loop, sock, srv, settings, rt)
        assert wal is not None  # (--cluster needs -b: cli.py)
        srv.join(_start_cluster(loop, srv, engine, wal, sock, settings, rt, serve_clients, stop))
    else:
        listener = start_accepting(loop, sock, srv, settings, rt)
    if http is None and rt.http_sock is not None:
        http = await _start_http(srv, settings, rt)
    try:
        return await stop
    finally:
        if listener is not None:
            listener.close()
        sock.close()
        if http is not None:
            await http.cleanup()
        srv.gate.final()
        for c in list(srv.clients.values()):
            c.transport.abort()
        if srv.cluster is not None:
            await srv.cluster.leave()  # a leader lets the next one take over now



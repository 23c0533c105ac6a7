"""Start-up and the event loop: the Engine, the binlog's recovery and fsync thread,
signals, and serve() until SIGTERM."""
from __future__ import annotations

import asyncio
import gc
import os
import resource
import signal
import socket
import sys
from time import monotonic_ns

from ..binlog.files import Wal
from ..binlog.sync import Syncer
from ..core.engine import Engine, Host
from ..diag import default_warn as warn
from .transport import Client, Server


class ProcessHost(Host):
    """This process and machine, for `stats`."""

    def __init__(self):
        self.pid = os.getpid()
        self.instance_id = os.urandom(8).hex().encode()
        u = os.uname()
        self.hostname, self.os, self.platform = (
            x.encode() for x in (u.nodename, u.version, u.machine))

    @staticmethod
    def rusage() -> tuple[float, float]:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime, r.ru_stime


def new_loop():
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _freeze_survivors(phase: str, info: dict):
    if phase == "stop" and info["generation"] == 0:
        gc.freeze()


def serve(sock: socket.socket, opts) -> int:
    # Every stored job is a GC-tracked object. Left to the default policy,
    # older generations are rescanned as the queue grows: 14% of puts, and
    # stalls of a second once a queue passes millions of jobs. Objects that
    # survive a young collection are frozen instead: never scanned again,
    # still freed by reference counting. The server makes no cyclic garbage
    # of its own (167 objects, all from imports, after 3,000 connections),
    # so this keeps nothing that a full collection would have freed.
    gc.callbacks.append(_freeze_survivors)
    loop = new_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(_serve(loop, sock, opts))
    finally:
        sys.stdout.flush()


def open_binlog(engine: Engine, opts) -> Wal:
    """Lock and recover the binlog directory (exits as the reference does)."""
    from ..binlog.recovery import RecoveryError, lock_dir, recover

    try:
        lock_dir(opts.wal_dir)
    except RecoveryError as e:
        for line in e.args:
            warn(line)
        raise SystemExit(10) from None
    wal = Wal(opts.wal_dir, opts.filesize, wantsync=opts.wantsync, warn=warn)
    try:
        recover(wal, engine.q, engine.max_job_size, monotonic_ns(), warn)
    except RecoveryError as e:
        for line in e.args:
            warn(line)
        raise SystemExit(1) from None
    engine.q.store = wal
    engine.hold_writes = opts.wantsync and opts.syncrate_ms == 0
    return wal


async def _serve(loop, sock: socket.socket, opts) -> int:
    engine = Engine(monotonic_ns(), max_job_size=opts.max_job_size,
                    verbose=opts.verbose, filesize=opts.filesize,
                    log=Server.log, host=ProcessHost())
    srv = Server(loop, engine, opts.verbose)
    if opts.wal_dir is not None:
        wal = open_binlog(engine, opts)
        srv.syncer = Syncer(loop, wal, srv, opts.wantsync, opts.syncrate_ms * 1_000_000)
    if opts.max_memory is not None:
        engine.max_memory = opts.max_memory
        if opts.verbose:
            Server.log(engine.memory_line("max-memory"))
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
        if srv.syncer is not None:
            srv.syncer.final()
        for c in list(srv.clients.values()):
            c.transport.abort()



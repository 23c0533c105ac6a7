"""Load processes for pybeanstalkd-bench: a workload becomes groups of
Drivers (drivers.py), each group is driven by one forked process.

A process opens its connections (blocking), runs their setup commands
(use/watch), waits at a barrier so that all processes start together, then
drives every connection from one epoll loop with non-blocking sockets: one
recv per readable socket, one feed to the driver, one send of what it
answered. The parent shows progress from a shared counter array, sets the
shared stop flag when the duration is up, and collects each process's
operation count, start/end times and latency samples.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
import select
import socket
import threading
from array import array
from dataclasses import dataclass, field
from time import monotonic, monotonic_ns

from .drivers import BenchError, Pacer

RECV_SIZE = 65536  # below malloc's mmap threshold: no mmap per recv
SOCK_BUF = 1 << 20
TICK = 0.01  # seconds between progress counter updates / stop checks
IN = select.EPOLLIN | select.EPOLLERR | select.EPOLLHUP
OUT = select.EPOLLOUT


@dataclass
class Group:
    """The drivers one process runs; role is "producer", "consumer" or "load"."""
    role: str
    drivers: list
    pacer: Pacer | None = None
    nice: int = 0  # added to the process's nice value (stalls: the load yields to the probe)


@dataclass
class PhaseResult:
    ops: dict = field(default_factory=dict)  # role -> operations
    seconds: float = 0.0
    lat_ns: array = field(default_factory=lambda: array("q"))


class _Conn:
    __slots__ = ("sock", "fd", "d", "rbuf", "wbuf", "live")

    def __init__(self, sock, d):
        self.sock, self.fd, self.d = sock, sock.fileno(), d
        self.rbuf = self.wbuf = b""
        self.live = True


def connect(addr, timeout=30.0) -> socket.socket:
    sock = socket.create_connection(addr, timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCK_BUF)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCK_BUF)
    return sock


def _open(addr, d) -> _Conn:
    sock = connect(addr)
    if d.setup:
        sock.sendall(d.setup)
        buf = b""
        while buf.count(b"\r\n") < d.setup_replies:
            chunk = sock.recv(RECV_SIZE)
            if not chunk:
                raise BenchError("the server closed the connection during setup")
            buf += chunk
        for line in buf.split(b"\r\n")[:-1]:
            if not line.startswith((b"USING ", b"WATCHING ")):
                raise BenchError(f"setup failed: {line!r}")
    return _Conn(sock, d)


def _result(conns, t0, t1) -> dict:
    lat = array("q")
    for c in conns:
        if hasattr(c.d, "lat"):
            lat.extend(c.d.lat)
    return {"ops": sum(c.d.ops for c in conns), "t0": t0, "t1": t1, "lat": lat.tobytes()}


def _drive_one(idx, c, stop, counts) -> dict:
    """One unpipelined connection: blocking recv and send, no epoll_wait."""
    sock, d, buf = c.sock, c.d, b""
    sock.settimeout(None)  # with a timeout, Python would poll() before each call
    t0 = monotonic()
    out = d.start()
    if out:
        sock.sendall(out)
    while not d.done:
        data = sock.recv(RECV_SIZE)
        if not data:
            raise BenchError("the server closed a connection")
        if buf:
            data = buf + data
        used, out = d.feed(data)
        buf = data[used:] if used < len(data) else b""
        if out:
            sock.sendall(out)
        counts[idx] = d.ops
        if stop.value:
            d.stop()
    counts[idx] = d.ops
    return _result([c], t0, monotonic())


def _drive(idx, conns, pacer, stop, counts) -> dict:
    if len(conns) == 1 and pacer is None and getattr(conns[0].d, "depth", 1) == 1:
        return _drive_one(idx, conns[0], stop, counts)
    ep = select.epoll(len(conns) + 1)
    byfd = {c.fd: c for c in conns}
    live = 0

    def send(c, out):
        if c.wbuf:
            c.wbuf += out
            return
        try:
            n = c.sock.send(out)
        except BlockingIOError:
            n = 0
        if n < len(out):
            c.wbuf = out[n:]
            ep.modify(c.fd, IN | OUT)

    def retire(c):
        nonlocal live
        if c.live:
            c.live = False
            live -= 1
            ep.unregister(c.fd)

    for c in conns:
        c.sock.setblocking(False)
        ep.register(c.fd, IN)
        live += 1
        c.d.conn = c
    t0 = monotonic()
    if pacer is not None:
        pacer.t0 = monotonic_ns()
    for c in conns:
        out = c.d.start()
        if out:
            send(c, out)
        if c.d.done:
            retire(c)
    next_tick, stopping = t0 + TICK, False
    poll, recv_size = ep.poll, RECV_SIZE
    while live:
        for fd, ev in poll(0.0005 if pacer is not None and pacer.waiting else TICK):
            c = byfd[fd]
            if ev & OUT and c.wbuf:
                n = c.sock.send(c.wbuf)
                c.wbuf = c.wbuf[n:]
                if not c.wbuf:
                    ep.modify(fd, IN)
            if ev & IN:
                data = c.sock.recv(recv_size)
                if not data:
                    raise BenchError("the server closed a connection")
                if c.rbuf:
                    data = c.rbuf + data
                used, out = c.d.feed(data)
                c.rbuf = data[used:] if used < len(data) else b""
                if out:
                    send(c, out)
                if c.d.done:
                    retire(c)
        if pacer is not None and pacer.waiting:
            k = pacer.due(monotonic_ns())
            while k > 0 and pacer.waiting:
                d = pacer.waiting.pop()
                if d.budget > 0:
                    send(d.conn, d.put())
                    pacer.sent += 1
                    k -= 1
        now = monotonic()
        if now >= next_tick:
            next_tick = now + TICK
            counts[idx] = sum(c.d.ops for c in conns)
            if stop.value and not stopping:
                stopping = True
                for c in conns:
                    c.d.stop()
                    if c.live and c.d.done:
                        retire(c)
    counts[idx] = sum(c.d.ops for c in conns)
    return _result(conns, t0, monotonic())


def _worker(idx, addr, group, barrier, stop, counts, results):
    conns = []
    started = False
    try:
        if group.nice:
            os.nice(group.nice)
        conns = [_open(addr, d) for d in group.drivers]
        barrier.wait()
        started = True
        results.put((idx, _drive(idx, conns, group.pacer, stop, counts)))
    except BaseException as e:  # reported to the parent, which raises it
        if not started:
            # (after the start, an abort would hit workers still waking
            # from wait(): their BrokenBarrierError could be reported first)
            barrier.abort()
        results.put((idx, {"error": f"{type(e).__name__}: {e}"}))
    finally:
        for c in conns:
            c.sock.close()


def run_phase(addr, groups, duration=None, stop_when=None, progress=None) -> PhaseResult:
    """Run the groups in parallel processes; stop them after `duration`
    seconds or when stop_when(counts) is true, else when all are done."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(len(groups) + 1)
    stop = ctx.RawValue("b", 0)
    counts = ctx.RawArray("q", len(groups))
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, daemon=True,
                         args=(i, addr, g, barrier, stop, counts, results))
             for i, g in enumerate(groups)]
    for p in procs:
        p.start()
    got: dict = {}
    t_stop = None
    try:
        try:
            barrier.wait(timeout=300)
        except threading.BrokenBarrierError:
            pass  # a worker failed: its error is in the queue
        t_go = monotonic()
        while len(got) < len(procs):
            try:
                i, r = results.get(timeout=0.1)
                got[i] = r
                if "error" in r:
                    raise BenchError(r["error"])
                continue
            except queue_mod.Empty:
                pass
            elapsed = monotonic() - t_go
            if t_stop is None and ((duration is not None and elapsed >= duration)
                                   or (stop_when and stop_when(counts))):
                stop.value = 1
                t_stop = monotonic()
            if t_stop is not None and monotonic() - t_stop > 30:
                raise BenchError("load processes did not stop within 30 s of being told to")
            if progress:
                progress(counts, groups, elapsed)
            dead = [i for i, p in enumerate(procs) if p.exitcode is not None and i not in got]
            if dead:
                # Its result may still be on the way: a worker that reports an
                # error exits at once.
                try:
                    i, r = results.get(timeout=2.0)
                except queue_mod.Empty:
                    raise BenchError(f"load process {dead[0]} died (exit {procs[dead[0]].exitcode})") from None
                got[i] = r
                if "error" in r:
                    raise BenchError(r["error"])
    finally:
        stop.value = 1
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
    res = PhaseResult()
    for i, g in enumerate(groups):
        res.ops[g.role] = res.ops.get(g.role, 0) + got[i]["ops"]
        res.lat_ns.frombytes(got[i]["lat"])
    # Stopped by us: the time ends when we said stop (a consumer blocked in a
    # reserve-with-timeout may notice up to a second later, having done nothing).
    end = t_stop if t_stop is not None else max(r["t1"] for r in got.values())
    res.seconds = end - min(r["t0"] for r in got.values())
    return res

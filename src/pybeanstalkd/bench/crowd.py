"""--crowd: one client's round trips while many others pipeline and never read.

N connections each send `list-tube-used` 200 at a time every 5 ms and never
read their replies (a pipelining client stuck on something else), from a
process of their own. A probe connects `lead` seconds later, once the server
is busy with them, and sends one command at a time: its first reply (connect
included) and its round trips' p50, p99 and worst are what a well-behaved
client pays for the crowd. The crowd's own progress (its commands the server
ran while the probe ran, from `stats`) shows that the load was still live,
not stopped by backpressure.

The probe runs in this process, the crowd in another: in one process the
crowd's sends would hold the GIL and the probe's waits would be ours.
"""
from __future__ import annotations

import multiprocessing
import socket
import statistics
import time

from .drivers import BenchError
from .spawn import Spawned, exchange, stats

COMMAND = b"list-tube-used\r\n"
BURST = 200  # commands a connection sends at a time
EVERY = 0.005  # s between bursts


def _crowd(addr, conns: int, ready, stop, sent) -> None:
    """The crowd's process: connect, then a burst on each connection every
    EVERY s (what is left of one that did not fit is sent first), until
    stop; `sent` counts the bytes the kernel took (what the server read,
    and what its socket buffers hold)."""
    socks = [socket.create_connection(addr, timeout=30) for _ in range(conns)]
    for sock in socks:
        sock.setblocking(False)
    burst = COMMAND * BURST
    left = [b""] * conns
    ready.set()
    while not stop.is_set():
        t0 = time.monotonic()
        total = 0
        for i, sock in enumerate(socks):
            data = left[i] or burst
            try:
                n = sock.send(data)
            except BlockingIOError:
                n = 0
            except OSError:
                continue
            left[i] = data[n:]
            total += n
        with sent.get_lock():
            sent.value += total
        pause = EVERY - (time.monotonic() - t0)
        if pause > 0:
            time.sleep(pause)
    for sock in socks:
        sock.close()


def _summary(waits: list[float]) -> dict:
    waits = sorted(waits)
    return {"probes": len(waits), "p50_ms": statistics.median(waits),
            "p99_ms": waits[int(0.99 * (len(waits) - 1))], "max_ms": waits[-1]}


def crowd(spawn, conns: int, seconds: float, lead: float = 2.0) -> dict:
    """The probe's waits on one server while `conns` connections pipeline."""
    ctx = multiprocessing.get_context("fork")
    with spawn() as s:
        ready, stop = ctx.Event(), ctx.Event()
        sent = ctx.Value("q", 0)
        proc = ctx.Process(target=_crowd, args=(s.addr, conns, ready, stop, sent), daemon=True)
        proc.start()
        try:
            if not ready.wait(60):
                raise BenchError(f"{s.name}: the crowd could not connect")
            time.sleep(lead)
            t0 = time.perf_counter()
            probe = socket.create_connection(s.addr, timeout=30)
            with probe:
                if exchange(probe, COMMAND, 1) != b"USING default\r\n":
                    raise BenchError(f"{s.name}: unexpected reply to the probe")
                first = (time.perf_counter() - t0) * 1e3
                ran0 = int(stats(s.addr)["cmd-list-tube-used"])
                sent0, cpu0, w0 = sent.value, s.cpu(), time.monotonic()
                waits = []
                end = w0 + seconds
                while time.monotonic() < end:
                    t = time.perf_counter()
                    exchange(probe, COMMAND, 1)
                    waits.append((time.perf_counter() - t) * 1e3)
                    time.sleep(0.001)
                wall = time.monotonic() - w0
                cpu = (s.cpu() - cpu0) / wall
                sent1 = sent.value
                ran = int(stats(s.addr)["cmd-list-tube-used"]) - ran0 - len(waits)
                rate = ran / wall
        finally:
            stop.set()
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    return {"conns": conns, "first_ms": first, **_summary(waits), "server_cpu": cpu,
            "crowd_cmds_per_s": rate, "crowd_sent_per_s": (sent1 - sent0) / len(COMMAND) / wall}


def run(ref: list[str], ours: list[str], extra: str, conns: int, seconds: float,
        rounds: int, progress=None) -> list[dict]:
    """The reference and ours, alternately, `rounds` times each."""
    rows = []
    for r in range(rounds):
        for name, argv in (("reference", ref), ("ours", ours)):
            if progress:
                progress.line(f"crowd: {conns} pipelining connections, {name}, round {r + 1}")
            rows.append({"server": name, "round": r + 1,
                         **crowd(lambda name=name, argv=argv: Spawned(name, argv, extra),
                                 conns, seconds)})
    return rows


def report(rows: list[dict], conns: int, say, table) -> None:
    say(f"\ncrowd: {conns} connections send `list-tube-used` {BURST} at a time every "
        f"{EVERY * 1e3:g} ms and never read; a probe connecting later sends one command at a "
        "time (1 ms apart): its first reply and round trips (ms), the server's CPU, and the "
        "crowd's commands the server ran meanwhile (stats) and the kernel took (sent)")
    say(table(["server", "round", "first", "probes", "p50", "p99", "max", "server CPU",
               "crowd ran/s", "crowd sent/s"],
              [[r["server"], r["round"], r["first_ms"], r["probes"], r["p50_ms"], r["p99_ms"],
                r["max_ms"], r["server_cpu"], r["crowd_cmds_per_s"], r["crowd_sent_per_s"]]
               for r in rows]))

"""--hostile: what hostile clients cost the others, beside the reference.

junk:     connections stream bytes without a CRLF as fast as they can; a
          probe times put+delete round trips meanwhile (ours also with
          --auth-tokens, where the junk never gets past the auth gate).
noread:   connections pipeline a command (`peek` of a 65,000-byte job, or
          `stats`) and never read; once none can send more, the server's
          RSS growth per connection, and a probe's waits.
inflight: connections each send a put line and most of its body, under
          --max-memory: the RSS it takes, against the cap (ours only).
http:     with --http, a request head left unfinished (and one sent a byte a
          second): the seconds until the server closes the connection
          (ours only: the reference has no HTTP side).
"""
from __future__ import annotations

import os
import socket
import statistics
import tempfile
import threading
import time
from typing import Any

from .drivers import BenchError
from .spawn import Spawned, exchange, free_port

TOKEN = b"bench-token-5f3a9c"


def _connect(addr, auth: bool):
    """The probe's connection, made (and served once) before the load."""
    sock = socket.create_connection(addr, timeout=30)
    if auth:
        exchange(sock, b"auth %s\r\n" % TOKEN, 1)
    exchange(sock, b"list-tube-used\r\n", 1)
    return sock


def _probe(sock, seconds: float) -> list[float]:
    """put+delete round trips for `seconds`: each one's time in ms."""
    waits = []
    with sock:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            reply = exchange(sock, b"put 0 0 60 1\r\nx\r\n", 1)
            jid = int(reply.split()[1])
            exchange(sock, b"delete %d\r\n" % jid, 1)
            waits.append((time.perf_counter() - t0) * 1e3)
            time.sleep(0.002)
    return waits


def _summary(waits: list[float]) -> dict:
    waits = sorted(waits)
    return {"probes": len(waits), "p50_ms": statistics.median(waits),
            "p99_ms": waits[int(0.99 * (len(waits) - 1))], "max_ms": waits[-1]}


def junk(spawn, conns: int, seconds: float, auth: bool) -> dict:
    """The probe's waits while `conns` connections stream junk."""
    with spawn() as s:
        probe = _connect(s.addr, auth)
        stop = threading.Event()
        sent = [0] * conns

        def stream(i):
            data = b"x" * (256 << 10)
            while not stop.is_set():  # (a connection refused, as by an auth gate: another)
                try:
                    with socket.create_connection(s.addr, timeout=5) as sock:
                        while not stop.is_set():
                            sent[i] += sock.send(data)
                except OSError:
                    pass

        threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(conns)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        cpu0, t0 = s.cpu(), time.monotonic()
        waits = _probe(probe, seconds)
        cpu = (s.cpu() - cpu0) / (time.monotonic() - t0)
        stop.set()
        for t in threads:
            t.join(10)
    return {**_summary(waits), "junk_mb": sum(sent) / 1e6, "server_cpu": cpu}


def send_until_unread(hogs: list[socket.socket], command: bytes, limit_s: float,
                      pause: float = 0.001) -> tuple[int, set[socket.socket]]:
    """Each of hogs sends `command`, pipelined, and never reads, until none
    can send more for a second (the server stopped reading it, and the
    kernel's buffers are full) or limit_s pass, pausing `pause` s between
    rounds. Returns (bytes sent, the
    hogs that could still send: none if the server bounds them)."""
    chunk = command * ((64 << 10) // len(command))
    idle: dict[socket.socket, float] = {}  # hog -> since when its sends fail
    active, sent = set(hogs), 0
    t0 = time.monotonic()
    for h in hogs:
        h.setblocking(False)
    while active and time.monotonic() - t0 < limit_s:
        for h in list(active):
            try:
                sent += h.send(chunk)
                idle.pop(h, None)
            except BlockingIOError:
                if time.monotonic() - idle.setdefault(h, time.monotonic()) > 1.0:
                    active.discard(h)
        time.sleep(pause)
    return sent, active


def noread(spawn, conns: int, command: bytes, seconds: float) -> dict:
    """RSS growth per connection that pipelines `command` and never reads."""
    with spawn() as s:
        with socket.create_connection(s.addr, timeout=30) as c:
            body = b"x" * 65000
            exchange(c, b"put 0 0 600 %d\r\n%s\r\n" % (len(body), body), 1)
        probe = _connect(s.addr, False)
        time.sleep(0.3)
        base = s.rss()
        hogs = [socket.create_connection(s.addr, timeout=30) for _ in range(conns)]
        sent, active = send_until_unread(hogs, command, 120)
        if active:
            raise BenchError(f"{s.name} kept reading connections that never read")
        waits = _probe(probe, seconds)
        grown = s.rss() - base
        for h in hogs:
            h.close()
    return {**_summary(waits), "rss_per_conn": grown / conns, "sent_per_conn": sent / conns}


def inflight(spawn, conns: int, size: int, cap: int) -> dict:
    """RSS while `conns` connections each hold a put's body, all but its
    last bytes sent, under --max-memory cap."""
    with spawn() as s:
        time.sleep(0.3)
        base = s.rss()
        socks = []
        head = b"put 0 0 60 %d\r\n" % size
        part = b"y" * (size - 1)
        for _ in range(conns):
            sock = socket.create_connection(s.addr, timeout=30)
            sock.sendall(head + part)
            socks.append(sock)
        time.sleep(1.0)
        grown = s.rss() - base
        for sock in socks:  # the last byte and the CRLF: stored, or refused
            sock.sendall(b"y\r\n")
        replies = [exchange(sock, b"", 1) for sock in socks]
        stored = sum(r.startswith(b"INSERTED") for r in replies)
        for sock in socks:
            sock.close()
    return {"conns": conns, "size": size, "cap": cap, "rss_growth": grown,
            "stored": stored, "stored_bytes": stored * size,
            "refused": sum(r == b"OUT_OF_MEMORY\r\n" for r in replies)}


def http_close(spawn_port, runs: int) -> dict:
    """Seconds from connecting to the close of an unfinished request head
    (half of the runs send a byte a second meanwhile)."""
    took = []
    for i in range(runs):
        port = spawn_port()
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            t0 = time.monotonic()
            sock.sendall(b"GET /api/v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            sock.settimeout(1.0 if i % 2 else 60)
            while True:
                try:
                    if not sock.recv(4096):
                        break
                except TimeoutError:
                    try:
                        sock.sendall(b"X")  # a byte a second
                    except OSError:
                        break
                except OSError:
                    break
            took.append(time.monotonic() - t0)
    took.sort()
    return {"runs": runs, "min_s": took[0], "median_s": statistics.median(took),
            "max_s": took[-1]}


def hostile(ref: list[str], ours: list[str], extra: str, progress=None,
            junk_conns=(1, 4), noread_conns=1000, seconds=3.0) -> dict:
    def say(msg):
        if progress:
            progress.line(msg)
    tokens = tempfile.NamedTemporaryFile("wb", suffix=".tokens", delete=False)
    tokens.write(TOKEN + b"\n")
    tokens.close()
    os.chmod(tokens.name, 0o600)
    servers = {
        "reference": lambda: Spawned("reference", ref, extra),
        "ours": lambda: Spawned("ours", ours, extra),
        "ours --auth-tokens": lambda: Spawned("ours", ours, f"{extra} --auth-tokens {tokens.name}"),
    }
    out: dict[str, Any] = {"junk": [], "noread": [], "inflight": [], "http": None}
    try:
        for n in junk_conns:
            for name, spawn in servers.items():
                say(f"junk: {n} connections, {name}")
                out["junk"].append({"server": name, "conns": n,
                                    **junk(spawn, n, seconds, "auth" in name)})
        for command in (b"peek 1\r\n", b"stats\r\n"):
            for name in ("reference", "ours"):
                say(f"noread: {noread_conns} x {command.strip().decode()}, {name}")
                out["noread"].append({"server": name, "conns": noread_conns,
                                      "command": command.strip().decode(),
                                      **noread(servers[name], noread_conns, command, seconds)})
        say("http: unfinished request heads")
        hport = free_port()
        with Spawned("ours", ours, f"{extra} --http 127.0.0.1:{hport}"):
            out["http"] = http_close(lambda: hport, 6)
        cap = 64 << 20
        say("inflight: 300 bodies of 1 MB under --max-memory 64M")
        out["inflight"].append(inflight(
            lambda: Spawned("ours", ours, f"{extra} -z 1048576 --max-memory {cap}"),
            300, 1 << 20, cap))
    finally:
        os.unlink(tokens.name)
    return out

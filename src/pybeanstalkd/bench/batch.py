"""--batch K: draining a queue in batches (--extensions' reserve-batch K and
one delete-batch of their ids) against one unpipelined reserve and delete
at a time, one connection each, in jobs per second.

Every server drains N jobs (-n) the unpipelined way; a server that knows
reserve-batch (ours started with --extensions) then drains N more in
batches. The reference has no batches: its row is the plain drain only.
"""
from __future__ import annotations

import time

from .client import connect
from .drivers import BenchError
from .modes import alternate
from .spawn import exchange
from .workloads import Options, fill


def _read_batch(c, buf: bytes) -> tuple[list[int], bytes]:
    """Read one RESERVED_BATCH reply: the ids, and what came after it."""
    while b"\r\n" not in buf:
        buf += _recv(c)
    head, _, buf = buf.partition(b"\r\n")
    if not head.startswith(b"RESERVED_BATCH "):
        raise BenchError(f"reserve-batch: {head[:80]!r}")
    ids = []
    for _ in range(int(head.split()[1])):
        while b"\r\n" not in buf:
            buf += _recv(c)
        line, _, buf = buf.partition(b"\r\n")
        _, jid, size = line.split()
        need = int(size) + 2
        while len(buf) < need:
            buf += _recv(c)
        buf = buf[need:]
        ids.append(int(jid))
    return ids, buf


def _recv(c) -> bytes:
    chunk = c.recv(1 << 20)
    if not chunk:
        raise BenchError("connection closed")
    return chunk


def drain_plain(addr, tube: str, n: int) -> float:
    """Seconds to reserve and delete n jobs, one command at a time."""
    with connect(addr) as c:
        exchange(c, b"watch %s\r\nignore default\r\n" % tube.encode(), 2)
        t0 = time.perf_counter()
        for _ in range(n):
            got = exchange(c, b"reserve-with-timeout 0\r\n", 2)
            if not got.startswith(b"RESERVED "):
                raise BenchError(f"reserve: {got[:80]!r}")
            jid = got.split(None, 2)[1]
            if exchange(c, b"delete %s\r\n" % jid, 1) != b"DELETED\r\n":
                raise BenchError("delete failed")
        return time.perf_counter() - t0


def drain_batches(addr, tube: str, n: int, k: int) -> float | None:
    """Jobs per second, draining n jobs with reserve-batch k and
    delete-batch (the first job, which asks whether the server knows
    reserve-batch, untimed); None if it does not."""
    with connect(addr) as c:
        exchange(c, b"watch %s\r\nignore default\r\n" % tube.encode(), 2)
        c.sendall(b"reserve-batch 1\r\n")
        ids: list[int] = []
        buf = b""
        try:
            ids, buf = _read_batch(c, buf)
        except BenchError:
            return None
        if ids:
            exchange(c, b"delete-batch %s\r\n" % b" ".join(b"%d" % i for i in ids), 1)
        left = timed = n - len(ids)
        t0 = time.perf_counter()
        while left > 0:
            c.sendall(b"reserve-batch %d\r\n" % min(k, left))
            ids, buf = _read_batch(c, buf)
            if not ids:
                raise BenchError(f"reserve-batch: none left with {left} to go")
            got = exchange(c, b"delete-batch %s\r\n" % b" ".join(b"%d" % i for i in ids), 1)
            if got != b"DELETED_BATCH %d 0\r\n" % len(ids):
                raise BenchError(f"delete-batch: {got[:80]!r}")
            left -= len(ids)
        return timed / (time.perf_counter() - t0)


def batch(servers, k: int, o: Options, rounds: int = 1, progress=None) -> list[dict]:
    """A row per server and round: plain and batched drain rates (jobs/s)."""
    rows = []
    n = o.jobs
    for r in range(rounds):
        for mk in alternate(servers, r):
            with mk() as s:
                fill(s.addr, o, n, progress=progress and progress.labelled(f"{s.name} fill"))
                plain = drain_plain(s.addr, o.tube, n)
                fill(s.addr, o, n, progress=progress and progress.labelled(f"{s.name} fill"))
                rows.append({"server": s.name, "round": r, "jobs": n, "batch": k,
                             "plain_jobs_s": n / plain,
                             "batch_jobs_s": drain_batches(s.addr, o.tube, n, k)})
                if progress:
                    progress.clear()
    return rows

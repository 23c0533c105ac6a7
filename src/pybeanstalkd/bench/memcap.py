"""--memcap CAP: what --max-memory holds and what it costs (ours only; the
reference has no cap, and its throughput is shown beside ours for scale).

rss:  for each body size, a fresh server with --max-memory CAP takes
      pipelined puts until the first OUT_OF_MEMORY; the rows give the jobs
      stored and the process's RSS growth against the cap.
cost: pipelined and unpipelined puts on the reference, on ours without a
      cap, and on ours with a cap far above what the run stores (so that
      every put is accounted and none refused), rounds alternating.
"""
from __future__ import annotations

import time

from .client import connect
from .drivers import BenchError
from .modes import settle_rss, variant_rows, workloads
from .spawn import Spawned, stats
from .workloads import Options

SIZES = [100, 1024, 65536]
COST_WORKLOADS = ["put-pipelined", "put"]
NEVER_REACHED = 64 << 30  # a cap the cost runs cannot fill


def flood(addr, size: int, batch: int) -> tuple[int, int]:
    """Pipelined puts of `size` bytes until one is refused: (inserted, refused)."""
    cmd = b"put 0 0 60 %d\r\n%s\r\n" % (size, b"x" * size)
    inserted = 0
    with connect(addr) as c:
        while True:
            c.sendall(cmd * batch)
            buf, lines = b"", 0
            while lines < batch:
                chunk = c.recv(1 << 16)
                if not chunk:
                    raise BenchError("closed during the flood")
                buf += chunk
                lines = buf.count(b"\r\n")
            got = buf.split(b"\r\n")[:batch]
            ok = sum(1 for g in got if g.startswith(b"INSERTED "))
            bad = [g for g in got if not g.startswith(b"INSERTED ") and g != b"OUT_OF_MEMORY"]
            if bad:
                raise BenchError(f"flood: unexpected reply {bad[0][:80]!r}")
            inserted += ok
            if ok < batch:
                return inserted, batch - ok


def rss_rows(ours: list[str], extra: str, cap: int, sizes, progress=None) -> list[dict]:
    rows = []
    for size in sizes:
        flags = f"{extra} -z {max(65535, size)} --max-memory {cap}"
        with Spawned("ours", ours, flags) as s:
            if progress:
                progress.line(f"flooding {size}-byte puts to the cap")
            before = settle_rss(s)
            t0 = time.monotonic()
            inserted, _ = flood(s.addr, size, max(1, 200_000 // (size + 30)))
            took = time.monotonic() - t0
            grown = settle_rss(s) - before
            if int(stats(s.addr)["current-jobs-ready"]) != inserted:
                raise BenchError("the server stores a different number of jobs than it acknowledged")
            rows.append({"size": size, "cap": cap, "jobs": inserted, "body_bytes": inserted * size,
                         "rss_growth": grown, "rss_over_cap": grown / cap, "flood_s": took})
    return rows


def cost_rows(ref: list[str], ours: list[str], extra: str, o: Options, rounds: int,
              progress=None) -> list[dict]:
    servers = [lambda: Spawned("reference", ref, extra),
               lambda: Spawned("ours", ours, extra),
               lambda: Spawned("ours capped", ours, f"{extra} --max-memory {NEVER_REACHED}")]
    res = workloads(servers, COST_WORKLOADS, o, rounds, progress)
    return variant_rows(res, rounds, "ours capped", "capped")

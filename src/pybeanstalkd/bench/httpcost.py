"""--http-cost: what the HTTP side costs the protocol while it is used.

Workloads run on the reference, on ours without --http, and on ours with
--http while a scraper fetches /metrics every second and a stand-in for an
open dashboard fetches /api/v1/stats and /api/v1/tubes every second (what
the page polls), rounds alternating. Every HTTP reply is checked.
"""
from __future__ import annotations

import threading
import urllib.request

from .drivers import BenchError
from .modes import variant_rows, workloads
from .spawn import Spawned, free_port
from .workloads import Options

WORKLOADS = ["put-pipelined", "put", "reserve", "cycle"]
PATHS = ["/metrics", "/api/v1/stats", "/api/v1/tubes"]


class WithHttp(Spawned):
    """Ours with --http on a free port, polled every second while it runs."""

    def __enter__(self):
        self.http_port = free_port()
        self.extra = f"{self.extra} --http 127.0.0.1:{self.http_port}"
        super().__enter__()
        self.stop = threading.Event()
        self.fetched, self.error = 0, None
        self.poller = threading.Thread(target=self._poll, daemon=True)
        self.poller.start()
        return self

    def _poll(self):
        base = f"http://127.0.0.1:{self.http_port}"
        while not self.stop.is_set():
            for path in PATHS:
                try:
                    with urllib.request.urlopen(base + path, timeout=10) as r:
                        if r.status != 200 or not r.read():
                            raise BenchError(f"{path}: HTTP {r.status}")
                    self.fetched += 1
                except Exception as e:  # reported when the server stops
                    self.error = f"{path}: {e}"
            self.stop.wait(1.0)

    def __exit__(self, *exc):
        self.stop.set()
        self.poller.join(15)
        super().__exit__(*exc)
        if self.error and not exc[0]:
            raise BenchError(f"the HTTP side failed: {self.error}")


def cost_rows(ref, ours, extra: str, o: Options, rounds: int, progress=None) -> list[dict]:
    servers = [lambda: Spawned("reference", ref, extra),
               lambda: Spawned("ours", ours, extra),
               lambda: WithHttp("ours --http", ours, extra)]
    res = workloads(servers, WORKLOADS, o, rounds, progress)
    return variant_rows(res, rounds, "ours --http", "http")

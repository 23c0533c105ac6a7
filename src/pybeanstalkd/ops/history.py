"""The last minutes of the server's numbers, kept by the HTTP side (--http),
so that a dashboard opened now draws the past minutes at once, and rates are
reckoned from the server's clock rather than from a browser's.

A sample a second, in a ring of fixed size (HISTORY_SAMPLES: 5 minutes). A
sample is a tuple of ten numbers read from the engine's counters (no walk
over tubes or jobs): its cost does not grow with the queue. The timer runs on
the event loop; a sample is skipped while the binlog replays (the engine then
belongs to the replay's thread).
"""
from __future__ import annotations

import asyncio
import time
from collections import deque

INTERVAL_S = 1.0
HISTORY_SAMPLES = 300  # 5 minutes at one a second

# A sample's fields, in its tuple's order: the server's monotonic clock (for
# rates and spacing, in ms), its wall clock (for the axis' labels, Unix ms),
# three cumulative counters, then the jobs held by state.
FIELDS = ("mono", "time", "put", "reserve", "delete",
          "ready", "reserved", "delayed", "buried", "urgent")


class History:
    def __init__(self, srv, maxlen: int = HISTORY_SAMPLES, interval: float = INTERVAL_S):
        self.srv = srv
        self.interval = interval
        self.samples: deque[tuple] = deque(maxlen=maxlen)
        self._timer: asyncio.TimerHandle | None = None

    def sample(self, mono_ns: int, wall_ns: int) -> None:
        """Add one sample, taken at these clocks' readings."""
        e = self.srv.engine
        q = e.q
        c = e.counts
        self.samples.append((
            mono_ns // 1_000_000, wall_ns // 1_000_000,
            c["put"], c["reserve"] + c["reserve-with-timeout"], c["delete"],
            q.ready_ct, q.reserved_ct, q.delayed_ct, q.buried_ct, q.urgent_ct))

    def since(self, after_ms: int | None = None) -> list[dict]:
        """The samples taken after `after_ms` (their "mono"), oldest first;
        every one without it."""
        out = []
        for s in reversed(self.samples):
            if after_ms is not None and s[0] <= after_ms:
                break
            out.append(dict(zip(FIELDS, s)))
        out.reverse()
        return out

    # -- the timer ------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """A sample now, then one every `interval` on the loop's clock (ticks
        at fixed times: a late one does not push the next ones back)."""
        first = loop.time()

        def tick(k: int) -> None:
            if not self.srv.replaying:
                self.sample(time.monotonic_ns(), time.time_ns())
            # the next tick still ahead (after a stall, the missed ones are skipped)
            k = max(k + 1, int((loop.time() - first) / self.interval) + 1)
            self._timer = loop.call_at(first + k * self.interval, tick, k)
        tick(0)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

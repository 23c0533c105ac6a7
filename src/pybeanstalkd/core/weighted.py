"""--extensions: how one connection's reserves choose among the tubes it
watches (tuber's reserve-mode), and the weights it gave them (`watch TUBE
W`). A connection that never used either has the shared FIFO_POLICY and
reserves as the reference does: the best priority among its tubes, then
the oldest job."""
from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .protocol import NS

if TYPE_CHECKING:
    from collections.abc import Callable

# How a reserve picks among its tubes
FIFO: Final = 0
WEIGHTED: Final = 1
WEIGHTED_FAIR: Final = 2

FAIR_MIN_SAMPLES: Final = 10  # weighted-fair uses a tube's moving average from this many deletes
FAIR_FLOOR_S: Final = 0.01  # ... and at least this (tuber's)


class Weighted:
    __slots__ = ("mode", "weights", "rand")

    def __init__(self, rand: Callable[[], float]) -> None:
        self.mode = FIFO  # FIFO (weights kept for later), WEIGHTED or WEIGHTED_FAIR
        self.weights: dict[bytes, int] = {}  # a watched tube's weight, when not 1, by name
        self.rand = rand  # draws uniform in [0, 1): the engine's

    def weigh(self, name: bytes, weight: int) -> None:
        # (by name: a watched tube is never freed, and its weight goes
        # when it is ignored, so a name names one tube while it counts)
        if weight == 1:
            self.weights.pop(name, None)
        else:
            self.weights[name] = weight

    def forget(self, name: bytes) -> None:
        """Tube `name` is no longer watched."""
        self.weights.pop(name, None)

    def draw(self, tubes: list[tuple[bytes, int, int]]) -> int:
        """Which of the tubes, given as (name, processing time's moving
        average, its samples), each with a ready job nobody waits for:
        each as likely as its weight; in weighted-fair, divided by that
        average once it has 10 samples, as tuber's. -1 if there is none."""
        if not tubes:
            return -1
        weights = self.weights
        fair = self.mode == WEIGHTED_FAIR
        ws: list[float] = []
        total = 0.0
        for name, ewma, samples in tubes:
            w = float(weights.get(name, 1))
            if fair and samples >= FAIR_MIN_SAMPLES and ewma > 0:
                w /= max(ewma / NS, FAIR_FLOOR_S)
            ws.append(w)
            total += w
        r = self.rand() * total
        for i, w in enumerate(ws):
            if r < w:
                return i
            r -= w
        return len(tubes) - 1  # (should rounding leave r past the last)


def _never_drawn() -> float:
    return 0.0  # (fifo draws nothing)


# The reserve policy of every connection that never named a mode or a
# weight: fifo, each tube's weight 1. Shared, so never changed: the
# extensions give a connection its own Weighted first (extensions.py).
FIFO_POLICY: Final = Weighted(_never_drawn)


class XorShift:
    """A small uniform source of draws in [0, 1) (xorshift64, the kind
    tuber draws with), for the pure layer, which reads no OS entropy: the
    server passes one seeded from the OS instead."""

    def __init__(self, seed: int = 0x9E3779B97F4A7C15) -> None:
        self.x = seed & _M64 or 1

    def random(self) -> float:
        x = self.x
        x ^= (x << 13) & _M64
        x ^= x >> 7
        x ^= (x << 17) & _M64
        self.x = x
        return x / 18446744073709551616.0


_M64 = (1 << 64) - 1

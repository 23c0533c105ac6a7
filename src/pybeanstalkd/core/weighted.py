"""--extensions: how one connection's reserves choose among the tubes it
watches (tuber's reserve-mode), and the weights it gave them (`watch TUBE
W`). A connection that never used either has none (Conn.weighted is None)
and reserves as the reference does: the best priority among its tubes,
then the oldest job."""
from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .protocol import NS
from .tube import FIFO, WEIGHTED_FAIR

if TYPE_CHECKING:
    from collections.abc import Callable

    from .tube import Tube

FAIR_MIN_SAMPLES: Final = 10  # weighted-fair uses a tube's moving average from this many deletes
FAIR_FLOOR_S: Final = 0.01  # ... and at least this (tuber's)


class Weighted:
    __slots__ = ("mode", "weights", "rand")

    def __init__(self, rand: Callable[[], float]) -> None:
        self.mode = FIFO  # FIFO (weights kept for later), WEIGHTED or WEIGHTED_FAIR
        self.weights: dict[Tube, int] = {}  # a watched tube's weight, when not 1
        self.rand = rand  # draws uniform in [0, 1): the engine's

    def weigh(self, t: Tube, weight: int) -> None:
        if weight == 1:
            self.weights.pop(t, None)
        else:
            self.weights[t] = weight

    def forget(self, t: Tube) -> None:
        """t is no longer watched."""
        self.weights.pop(t, None)

    def draw(self, tubes: list[Tube]) -> Tube | None:
        """One of the tubes (each with a ready job nobody waits for), each
        as likely as its weight; in weighted-fair, divided by its
        processing time's moving average once it has 10 samples, as
        tuber's. None if there is none."""
        if not tubes:
            return None
        weights = self.weights
        fair = self.mode == WEIGHTED_FAIR
        ws: list[float] = []
        total = 0.0
        for t in tubes:
            w = float(weights.get(t, 1))
            if fair and t.ewma_n >= FAIR_MIN_SAMPLES and t.ewma > 0:
                w /= max(t.ewma / NS, FAIR_FLOOR_S)
            ws.append(w)
            total += w
        r = self.rand() * total
        for t, w in zip(tubes, ws):
            if r < w:
                return t
            r -= w
        return tubes[-1]  # (should rounding leave r past the last)

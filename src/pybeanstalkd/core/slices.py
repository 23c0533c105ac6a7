"""Background work in slices: work that moves many jobs at once (a big
kick, a connection closing with many reservations, timers coming due
together, the waiters of an unpaused tube, the HTTP side's moves and
flushes) runs SLICE jobs at a time: the first slice at once, the rest one
slice per `step`, which the I/O layer runs between other events, about
1 ms of slices per pass of its loop (server/transport.py: run_work)."""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Generator

    # Background work (Queue.work): sent the time at each slice; a kick's
    # value is its count.
    Work = Generator[None, int, object]


# Jobs (or heap entries) moved per slice of background work. A job moved by a
# kick or a close costs 1 to 5 us of Python, but up to 100 us on memory left
# idle for minutes: 64 keeps even such a slice near 6 ms. The I/O layer runs
# slices until about 1 ms is spent (server/transport.py: run_work).
SLICE: Final = 64


class Slices:
    """The queue's background work (a part of Queue): primed generators,
    each sent the time at its next slice."""

    def __init__(self) -> None:
        self.work: deque[Work] = deque()

    def spawn(self, gen: Work) -> bool:
        """Run gen's first slice now and queue the rest; True if it finished."""
        try:
            next(gen)
        except StopIteration:
            return True
        self.work.append(gen)
        return False

    def step(self, now: int) -> bool:
        """Run one slice of the oldest background work; True while more remains."""
        work = self.work
        if work:
            gen = work.popleft()
            try:
                gen.send(now)
            except StopIteration:
                pass
            else:
                work.append(gen)
        return bool(work)


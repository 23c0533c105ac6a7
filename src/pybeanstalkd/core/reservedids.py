"""Each tube's reserved jobs by id, for tuber's peek-reserved
(--extensions): the reserved job of a tube with the lowest id, whoever
holds it, without a walk over the server's reservations (which took
119-134 ms at 200,000 of them). The tags' policy (tagged.py) owns one."""
from __future__ import annotations

from heapq import heappush
from typing import TYPE_CHECKING

from .heaps import TUBE_SLACK, StaleHeap
from .job import RESERVED

if TYPE_CHECKING:
    from collections.abc import Callable

    from .job import Job, Tube
    from .queue import Queue


class ReservedIds:
    __slots__ = ("by_tube",)

    def __init__(self) -> None:
        # A tube's heap of its reserved jobs' ids: stale entries allowed
        # (a job released, deleted, or reserved again has one more), swept
        # once they outnumber the live; the heap goes once the tube has no
        # reserved job.
        self.by_tube: dict[Tube, StaleHeap] = {}

    def add(self, q: Queue, j: Job) -> None:
        """j was reserved."""
        t = j.tube
        ids = self.by_tube.get(t)
        if ids is None:
            ids = self.by_tube[t] = StaleHeap(TUBE_SLACK)
        heappush(ids.entries, j.id)
        if ids.over(t.nreserved):
            ids.sweep(q.slices, _live_in(q, t), lambda: t.nreserved)

    def returned(self, t: Tube) -> None:
        """A reservation of t's ended."""
        if not t.nreserved:
            self.by_tube.pop(t, None)

    def lowest(self, q: Queue, t: Tube) -> Job | None:
        """The reserved job of t with the lowest id: the top of t's heap,
        its stale entries dropped on the way (O(log n) each, once)."""
        ids = self.by_tube.get(t)
        if ids is None:
            return None
        id_ = ids.top(_live_in(q, t))
        return None if id_ is None else q.jobs.get(id_)


def _live_in(q: Queue, t: Tube) -> Callable[[int], bool]:
    """Is an entry of t's reserved ids live?"""
    jobs = q.jobs

    def live(id_: int) -> bool:
        j = jobs.get(id_)
        return j is not None and j.state == RESERVED and j.tube is t
    return live

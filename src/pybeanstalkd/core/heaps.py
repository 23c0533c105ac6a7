"""Heaps with stale entries, and how they are kept small.

Heaps hold plain ints, `key << 64 | id`, which heapq compares in C and which
cost one small object per entry. Entries are removed lazily: an entry is
live while the job it names is still in that state with that key (the
*_live checks). A heap is swept when its stale entries outnumber its live
ones: when len(heap) > 2 * live + slack, slack being TUBE_SLACK for a
tube's heaps, SHARED_SLACK for the queue's, CONN_SLACK for a connection's
(the checks are inline in queue.py: they run on every state change). A
small heap is rebuilt at once; a big one is swept in place, SLICE entries
a slice (slices.py), so memory stays O(live) and no rebuild stops the
server.
"""
from __future__ import annotations

from heapq import heapify, heappop
from typing import TYPE_CHECKING

from .job import DELAYED, M32, READY, RESERVED, Job
from .jobmap import BITS, EMPTY
from .slices import SLICE, Slices

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from .tube import Conn

    # heapq's sift helpers are private, so typeshed does not declare them.
    def _siftdown(heap: list[int], startpos: int, pos: int) -> None: ...
    def _siftup(heap: list[int], pos: int) -> None: ...
else:
    from heapq import _siftdown, _siftup

SHIFT = 64
MASK = (1 << SHIFT) - 1
SMALL_HEAP = 2048  # a heap this small is compacted at once (under 1 ms)
TUBE_SLACK = 64  # a tube's ready and delayed heaps, its run, the tube index
SHARED_SLACK = 1024  # the queue's delay and TTR heaps
CONN_SLACK = 16  # a connection's deadlines


class StaleHeaps(Slices):
    """The queue's heap upkeep (a base class of Queue)."""

    # (Queue's, set in its constructor)
    blocks: dict[int, dict[int, Job]]
    sweeping: set[int]  # id() of the heaps and runs being swept
    ttr_heap: list[int]
    reserved_ct: int

    def _owned_live(self, c: Conn) -> Callable[[int], bool]:
        raise NotImplementedError

    def ready_live(self, key: int) -> bool:
        id_ = key & MASK
        j: Job | None = self.blocks.get(id_ >> BITS, EMPTY).get(id_)
        return j is not None and j.state == READY and j.pri == key >> SHIFT

    def run_job(self, id_: int) -> Job | None:
        """The job a run entry names, if the entry is live.

        A job leaves ready only by being reserved (or deleted), which sets
        its deadline and reserves for good: a later return to ready goes to
        the heap, and this entry stays stale."""
        j: Job | None = self.blocks.get(id_ >> BITS, EMPTY).get(id_)
        if j is not None and j.state == READY and j.deadline == 0 and not j.counts & M32:
            return j
        return None

    def delayed_live(self, key: int) -> bool:
        id_ = key & MASK
        j: Job | None = self.blocks.get(id_ >> BITS, EMPTY).get(id_)
        return j is not None and j.state == DELAYED and j.deadline == key >> SHIFT

    def _reserved_live(self, key: int) -> bool:
        id_ = key & MASK
        j: Job | None = self.blocks.get(id_ >> BITS, EMPTY).get(id_)
        return j is not None and j.state == RESERVED and j.deadline == key >> SHIFT

    def _sweep(self, heap: list[int], live: Callable[[int], bool], over: Callable[[], bool]) -> None:
        if len(heap) <= SMALL_HEAP:  # the common case: rebuilding is cheaper
            self._compact(heap, live)
        elif id(heap) not in self.sweeping:
            self.sweeping.add(id(heap))
            self.spawn(self._sweeper(heap, live, over))

    @staticmethod
    def _compact(heap: list[int], live: Callable[[int], bool]) -> None:
        fresh = [k for k in set(heap) if live(k)]
        heapify(fresh)
        heap[:] = fresh

    def _sweep_ttr(self) -> None:
        if id(self.ttr_heap) not in self.sweeping:
            self._sweep(self.ttr_heap, self._reserved_live,
                        lambda: len(self.ttr_heap) > 2 * self.reserved_ct + SHARED_SLACK)

    def _sweep_deadlines(self, c: Conn) -> None:
        if id(c.deadlines) not in self.sweeping:
            self._sweep(c.deadlines, self._owned_live(c),
                        lambda: len(c.deadlines) > 2 * c.nreserved + CONN_SLACK)

    def _sweeper(self, heap: list[int], live: Callable[[int], bool],
                 over: Callable[[], bool]) -> Generator[None, int, None]:
        """Remove heap's stale entries in place, from the end, SLICE a step.

        Any entry may be removed at any time as long as the heap property
        holds, so other work in between does no harm. Removing at i costs
        O(height of i), O(1) on average."""
        yield
        i = len(heap) - 1
        k = SLICE
        while i >= 0:
            if not k:
                yield
                k = SLICE
                i = min(i, len(heap) - 1)
                continue
            k -= 1
            if not live(heap[i]):
                last = heap.pop()
                if i < len(heap):
                    heap[i] = last
                    if i and last < heap[(i - 1) >> 1]:
                        _siftdown(heap, 0, i)
                    else:
                        _siftup(heap, i)
                    continue  # what moved into i is looked at next
            i -= 1
        self.sweeping.discard(id(heap))
        if over():
            # Still too big: the rest are live duplicates (a job back in a
            # state under the same key, e.g. reserve-job and release at one
            # `now`). Only a set finds them; this stays O(n) in one step.
            self._compact(heap, live)

    def _free(self, x: list[int]) -> Generator[None, int, None]:
        """Drop a big list a slice at a time (freeing it at once is O(n))."""
        while len(x) > SLICE:
            yield
            del x[-SLICE:]

    def _top(self, heap: list[int], live: Callable[[int], bool]) -> Job | None:
        """The job named by the smallest live entry; stale entries are dropped."""
        while heap:
            key = heap[0]
            if live(key):
                id_ = key & MASK
                return self.blocks[id_ >> BITS][id_]
            heappop(heap)
        return None

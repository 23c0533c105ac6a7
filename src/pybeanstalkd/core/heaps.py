"""Heaps with stale entries, and how they are kept small: the tubes' ready
and delayed jobs, and the queue's delays (reserved jobs are in heaps
without stale entries: job.py, Deadlines).

Heaps hold plain ints, `key << 64 | id`, which heapq compares in C and which
cost one small object per entry. Entries are removed lazily: an entry is
live while the job it names is still in that state with that key (the
*_live checks). A StaleHeap is swept when its stale entries outnumber its
live ones: when its size > 2 * live + slack (StaleHeap.over). Which
entries are live: the job table's (jobmap.py: JobMap.ready_live...). A
small heap is rebuilt at once; a big one is swept in place, SLICE entries
a slice (slices.py), so memory stays O(live) and no rebuild stops the
server.
"""
from __future__ import annotations

from heapq import heapify, heappop
from typing import TYPE_CHECKING, Final

from .slices import SLICE

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from .slices import Slices

SHIFT: Final = 64
MASK: Final = (1 << SHIFT) - 1
SMALL_HEAP: Final = 2048  # a heap this small is compacted at once (under 1 ms)
TUBE_SLACK: Final = 64  # a tube's ready and delayed heaps, its run, the tube index
SHARED_SLACK: Final = 1024  # the queue's delay heap
CONN_SLACK: Final = 16  # the blocked reserves' timeouts (timers.py)


def _rise(heap: list[int], i: int) -> None:
    """Move heap[i], smaller than its parent, up to its place."""
    item = heap[i]
    while i:
        parent = (i - 1) >> 1
        above = heap[parent]
        if not item < above:
            break
        heap[i] = above
        i = parent
    heap[i] = item


def _sink(heap: list[int], i: int) -> None:
    """Move heap[i] down to its place."""
    n = len(heap)
    item = heap[i]
    child = 2 * i + 1
    while child < n:
        if child + 1 < n and heap[child + 1] < heap[child]:
            child += 1
        below = heap[child]
        if not below < item:
            break
        heap[i] = below
        i = child
        child = 2 * i + 1
    heap[i] = item


class StaleHeap:
    """A heap whose entries go stale where they are. It owns its entries,
    its slack, the rule for when it is swept, and the sweep; the queue,
    which counts the jobs in each state, says how many entries are live
    and which.

    A native class holding its entries in a list, `entries`, which the hot
    paths push, pop and index with heapq's functions: compiled, they and
    the methods here reach that list in C (a list subclass, which a native
    class cannot be, left every call, len() and attribute read of the heap
    to the interpreter). `entries` stays the same list for the heap's
    life (a sweep rewrites it in place), so a caller may hold it across
    work that may sweep. The heap refers to nothing else: tubes and
    connections hold it without a reference cycle (server/loop.py freezes
    what survives a collection, so a cycle would never be freed)."""

    __slots__ = ("entries", "slack", "sweeping")

    def __init__(self, slack: int) -> None:
        self.entries: list[int] = []
        self.slack = slack  # (never negative: over())
        self.sweeping = False  # a sweep is under way in background slices

    def over(self, live: int, more: int = 0) -> bool:
        """Do its stale entries outnumber its `live` ones, past its slack?
        more: its entries kept elsewhere (a tube's ready run's, run.py).

        The slack (never negative) is added only past twice the live
        count: the common answer, no, then makes one int fewer (pure, 100
        instructions a put)."""
        n = len(self.entries) + more
        return n > 2 * live and n > 2 * live + self.slack

    def sweep(self, work: Slices, is_live: Callable[[int], bool],
              count: Callable[[], int]) -> None:
        """Drop its stale entries: at once when it is small, else in slices
        of `work` (`count` tells the live count when that sweep ends)."""
        if self.sweeping:
            return
        if len(self.entries) <= SMALL_HEAP:  # the common case: rebuilding is cheaper
            self.compact(is_live)
        else:
            self.sweeping = True
            work.spawn(self._sweeper(is_live, count))

    def compact(self, is_live: Callable[[int], bool]) -> None:
        fresh = [k for k in set(self.entries) if is_live(k)]
        heapify(fresh)
        self.entries[:] = fresh  # (in place: the list stays the heap's)

    def _sweeper(self, is_live: Callable[[int], bool],
                 count: Callable[[], int]) -> Generator[None, int, None]:
        """Remove stale entries in place, from the end, SLICE a step.

        Any entry may be removed at any time as long as the heap property
        holds, so other work in between does no harm. Removing at i costs
        O(height of i), O(1) on average."""
        yield
        heap = self.entries
        i = len(heap) - 1
        k = SLICE
        while i >= 0:
            if not k:
                yield
                k = SLICE
                i = min(i, len(heap) - 1)
                continue
            k -= 1
            if not is_live(heap[i]):
                last = heap.pop()
                if i < len(heap):
                    heap[i] = last
                    if i and last < heap[(i - 1) >> 1]:
                        _rise(heap, i)
                    else:
                        _sink(heap, i)
                    continue  # what moved into i is looked at next
            i -= 1
        self.sweeping = False
        if self.over(count()):
            # Still too big: the rest are live duplicates (a job back in a
            # state under the same key, e.g. reserve-job and release at one
            # `now`). Only a set finds them; this stays O(n) in one step.
            self.compact(is_live)

    def top(self, is_live: Callable[[int], bool]) -> int | None:
        """The smallest live entry; the stale ones above it are dropped."""
        heap = self.entries
        while heap:
            key = heap[0]
            if is_live(key):
                return key
            heappop(heap)
        return None

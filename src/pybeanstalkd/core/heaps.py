"""Heaps with stale entries, and how they are kept small: the tubes' ready
and delayed jobs, and the queue's delays (reserved jobs are in heaps
without stale entries: job.py, Deadlines).

Heaps hold plain ints, `key << 64 | id`, which heapq compares in C and which
cost one small object per entry. Entries are removed lazily: an entry is
live while the job it names is still in that state with that key (the
*_live checks). A StaleHeap is swept when its stale entries outnumber its
live ones: when len(heap) > 2 * live + slack (over()). Which entries are live: the job table's
(jobmap.py: JobMap.ready_live...). A small heap is rebuilt at once; a big
one is swept in place, SLICE entries a slice (slices.py), so memory stays
O(live) and no rebuild stops the server.
"""
from __future__ import annotations

from heapq import heapify, heappop
from typing import TYPE_CHECKING, Final

from mypy_extensions import mypyc_attr

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


def over(heap: StaleHeap, live: int, more: int = 0) -> bool:
    """Do a heap's stale entries outnumber its `live` ones, past its slack?
    more: its entries kept elsewhere (a tube's ready run's, run.py).

    A function, not a method, the heap's size read as a list's, and its
    slack (never negative) read only past twice the live count:
    StaleHeap is a class mypyc leaves to the interpreter, so compiled, a
    call of its method, len() of it, or a read of its attribute goes
    through the interpreter (len(), 535 instructions a put; the slack,
    163)."""
    entries: list[int] = heap
    n = len(entries) + more
    return n > 2 * live and n > 2 * live + heap.slack


# A list, which heapq's functions and the hot paths index in C: a native
# class cannot subclass one, so compiled it is an ordinary class.
@mypyc_attr(native_class=False)
class StaleHeap(list[int]):
    """A heap whose entries go stale where they are. It owns its slack,
    the rule for when it is swept, and the sweep; the queue, which counts
    the jobs in each state, says how many entries are live and which.

    A list (heapq's functions take it as one), so the hot paths index and
    push it as fast as a plain list. It refers to nothing else: tubes and
    connections hold it without a reference cycle (server/loop.py freezes
    what survives a collection, so a cycle would never be freed)."""

    __slots__ = ("slack", "sweeping")

    def __init__(self, slack: int) -> None:
        super().__init__()
        self.slack = slack
        self.sweeping = False  # a sweep is under way in background slices

    def sweep(self, work: Slices, is_live: Callable[[int], bool],
              count: Callable[[], int]) -> None:
        """Drop its stale entries: at once when it is small, else in slices
        of `work` (`count` tells the live count when that sweep ends)."""
        if self.sweeping:
            return
        if len(self) <= SMALL_HEAP:  # the common case: rebuilding is cheaper
            self.compact(is_live)
        else:
            self.sweeping = True
            work.spawn(self._sweeper(is_live, count))

    def compact(self, is_live: Callable[[int], bool]) -> None:
        fresh = [k for k in set(self) if is_live(k)]
        heapify(fresh)
        self[:] = fresh

    def _sweeper(self, is_live: Callable[[int], bool],
                 count: Callable[[], int]) -> Generator[None, int, None]:
        """Remove stale entries in place, from the end, SLICE a step.

        Any entry may be removed at any time as long as the heap property
        holds, so other work in between does no harm. Removing at i costs
        O(height of i), O(1) on average."""
        yield
        i = len(self) - 1
        k = SLICE
        while i >= 0:
            if not k:
                yield
                k = SLICE
                i = min(i, len(self) - 1)
                continue
            k -= 1
            if not is_live(self[i]):
                last = self.pop()
                if i < len(self):
                    self[i] = last
                    if i and last < self[(i - 1) >> 1]:
                        _rise(self, i)
                    else:
                        _sink(self, i)
                    continue  # what moved into i is looked at next
            i -= 1
        self.sweeping = False
        if over(self, count()):
            # Still too big: the rest are live duplicates (a job back in a
            # state under the same key, e.g. reserve-job and release at one
            # `now`). Only a set finds them; this stays O(n) in one step.
            self.compact(is_live)

    def top(self, is_live: Callable[[int], bool]) -> int | None:
        """The smallest live entry; the stale ones above it are dropped."""
        while self:
            key = self[0]
            if is_live(key):
                return key
            heappop(self)
        return None

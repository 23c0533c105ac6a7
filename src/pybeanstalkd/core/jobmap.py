"""The id-to-job map, in blocks of 4,096 consecutive ids.

One dict of millions of jobs rebuilds its whole table each time it grows:
0.5 to 1.1 s at 2.8M and 5.6M jobs, with every client waiting
(docs/PERFORMANCE.md). Ids are handed out in sequence, so the jobs of one
block are put together and mostly deleted together. Each block holds a list
indexed by `id & LOW`, None where no job is: 8 bytes a job where a dict's
entry and table take about 36, and no table to rebuild (the dict of blocks
stays small: 1,500 entries at 6M jobs). An emptied block is dropped (the
last one kept as a spare), and a block left with THIN jobs or fewer keeps
its jobs in a small dict instead, so that a few survivors do not keep 32 KiB
each: at a delete, once a put has passed the block, or after jobs are
loaded in bulk (recovery, a follower's snapshot).

Every lookup by id is JobMap.get; the methods here also tell which heap
entries (`key << 64 | id`, heaps.py) still name a job in that state with
that key.
"""
from __future__ import annotations

from itertools import compress
from typing import TYPE_CHECKING, Final

from .heaps import MASK, SHIFT
from .job import DELAYED, M32, READY

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .heaps import StaleHeap
    from .job import Job
    from .jobids import JobIds

BITS: Final = 12  # ids per block: 1 << BITS
LOW: Final = (1 << BITS) - 1  # id & LOW: a job's slot in its block
THIN: Final = 16  # a block down to this many jobs keeps them in a small dict


class Block:
    """The jobs of one block of ids, by id & LOW; `live` counts them.

    Full, they are in `table` (None where no job is); thinned, in `few`,
    and `table` is an empty stand-in."""

    __slots__ = ("live", "table", "few")

    def __init__(self) -> None:
        self.live = 0
        self.table: list[Job | None] = list(_NONES)
        self.few: dict[int, Job] | None = None

    def set(self, i: int, j: Job) -> None:
        few = self.few
        if few is None:
            if self.table[i] is None:
                self.live += 1
            self.table[i] = j
        else:
            if i not in few:
                self.live += 1
            few[i] = j

    def thin(self) -> None:
        """Its jobs moved to a small dict, its table dropped."""
        if self.few is None:
            self.few = dict(zip(self.slots(), self.jobs()))  # (both in slot order)
            self.table = _NO_TABLE

    def jobs(self) -> list[Job]:
        few = self.few
        if few is None:
            return list(compress(self.table, self.table))  # type: ignore[arg-type]  # (the Jobs: true)
        return list(few.values())

    def slots(self) -> list[int]:
        """Where its jobs are (id & LOW)."""
        few = self.few
        if few is None:
            return list(compress(_SLOTS, self.table))  # (found in C, as a job is true)
        return list(few)

    def ids(self, k: int) -> list[int]:
        """The ids of its jobs, k being the block's number (id >> BITS)."""
        base = k << BITS
        return [base + i for i in self.slots()]


_NONES: Final[list[Job | None]] = [None] * (1 << BITS)
_SLOTS: Final = range(1 << BITS)
_NO_TABLE: Final[list[Job | None]] = []  # a thinned block's table: never written to


class JobMap:
    __slots__ = ("blocks", "ids", "spare", "newest")

    def __init__(self, ids: JobIds) -> None:
        self.blocks: dict[int, Block] = {}  # id >> BITS -> its block
        self.ids = ids  # the queue's: the block still taking new ids is not thinned
        # The last block emptied, kept for the next new block: a queue that
        # empties and fills again need not make 4,096 slots each time.
        self.spare: Block | None = None
        self.newest = -1  # the block a put last made (insert)

    def get(self, id_: int) -> Job | None:
        b = self.blocks.get(id_ >> BITS)
        if b is None:
            return None
        few = b.few
        if few is None:
            return b.table[id_ & LOW]
        return few.get(id_ & LOW)

    def insert(self, j: Job) -> None:
        """A put's job (its id new). The block the last put made has taken
        its ids: if its jobs went meanwhile, down to THIN or fewer (a
        consumer keeping up, a jump of the next id), it was not thinned
        then, as it took new ids; it is now."""
        id_ = j.id
        k = id_ >> BITS
        b = self.blocks.get(k)
        if b is None:
            last = self.blocks.get(self.newest)
            if last is not None and last.live <= THIN:
                self._thin(self.newest, last)
            self.newest = k
            b = self._new_block(k)
        b.set(id_ & LOW, j)

    def remove(self, id_: int) -> None:
        """Job id_ (there) leaves the map. A block left with THIN jobs or
        fewer is dropped if empty, else thinned; not the block still taking
        new ids: a queue of a dozen jobs would thin it again and again
        (insert thins it once it is passed)."""
        k = id_ >> BITS
        b = self.blocks[k]
        # (its slot emptied here, the one place a job leaves a block: a
        # Block method for it cost 22 instructions a delete compiled, 452
        # pure)
        few = b.few
        if few is None:
            b.table[id_ & LOW] = None
        else:
            del few[id_ & LOW]
        b.live -= 1
        if b.live <= THIN:
            if not b.live:
                del self.blocks[k]
                if b.few is None:
                    self.spare = b
            else:
                self._thin(k, b)

    def _new_block(self, k: int) -> Block:
        """Block k, made (or the spare, empty), for an id it has no block for."""
        b = self.spare
        if b is None:
            b = Block()
        else:
            self.spare = None
        self.blocks[k] = b
        return b

    def _thin(self, k: int, b: Block) -> None:
        """Block k (b, holding THIN jobs or fewer) thinned, unless it still
        takes new ids."""
        if k != self.ids.next >> BITS:
            b.thin()

    def shrink_all(self) -> None:
        """Every block holding THIN jobs or fewer thinned: after jobs are
        loaded in bulk (recovery, a follower's snapshot), in whatever order
        they came."""
        for k, b in list(self.blocks.items()):
            if b.live <= THIN:
                self._thin(k, b)

    def __getitem__(self, id_: int) -> Job:
        j = self.get(id_)
        if j is None:
            raise KeyError(id_)
        return j

    def __contains__(self, id_: int) -> bool:
        return self.get(id_) is not None

    def __setitem__(self, id_: int, j: Job) -> None:
        """Job j at id_, whatever the blocks' order (loading)."""
        b = self.blocks.get(id_ >> BITS)
        if b is None:
            b = self._new_block(id_ >> BITS)
        b.set(id_ & LOW, j)

    def __delitem__(self, id_: int) -> None:
        if self.get(id_) is None:
            raise KeyError(id_)
        self.remove(id_)

    def __len__(self) -> int:
        """The jobs in the map (O(blocks): for reports, not hot paths)."""
        return sum(b.live for b in self.blocks.values())

    def __iter__(self) -> Iterator[int]:
        for k, b in list(self.blocks.items()):
            yield from b.ids(k)

    def values(self) -> Iterator[Job]:
        for b in list(self.blocks.values()):
            yield from b.jobs()

    # -- which heap entries are live (heaps.py) ----------------------------

    def ready_live(self, key: int) -> bool:
        j = self.get(key & MASK)
        return j is not None and j.state == READY and j.pri == key >> SHIFT

    def run_job(self, id_: int) -> Job | None:
        """The job a run entry (Tube.run) names, if the entry is live.

        A job leaves ready only by being reserved (or deleted), which sets
        its deadline and reserves for good: a later return to ready goes to
        the heap, and this entry stays stale."""
        j = self.get(id_)
        if j is not None and j.state == READY and j.deadline == 0 and not j.counts & M32:
            return j
        return None

    def delayed_live(self, key: int) -> bool:
        j = self.get(key & MASK)
        return j is not None and j.state == DELAYED and j.deadline == key >> SHIFT

    def top(self, heap: StaleHeap, live: Callable[[int], bool]) -> Job | None:
        """The job named by the smallest live entry; stale entries are dropped."""
        key = heap.top(live)
        if key is None:
            return None
        return self.get(key & MASK)

"""The id-to-job map, in blocks of 4,096 consecutive ids.

One dict of millions of jobs rebuilds its whole table each time it grows:
0.5 to 1.1 s at 2.8M and 5.6M jobs, with every client waiting
(docs/PERFORMANCE.md). Ids are handed out in sequence, so the jobs of one
block are put together and mostly deleted together. Each block is a list
indexed by `id & LOW`, None where no job is: 8 bytes a job where a dict's
entry and table take about 36, and no table to rebuild (the dict of blocks
stays small: 1,500 entries at 6M jobs). An emptied block is dropped (the
last one kept as a spare), and a block left with THIN jobs or fewer becomes
a small dict answering the same `block[id & LOW]`, so that a few survivors
do not keep 32 KiB each: at a delete, once a put has passed the block, or
after jobs are loaded in bulk (recovery, a follower's snapshot).

Queue's hot paths index `blocks` inline (`blocks.get(id >> BITS,
NO_JOBS)[id & LOW]`, None if there is no such job); the methods here serve
everything else, and tell which heap entries (`key << 64 | id`, heaps.py)
still name a job in that state with that key.
"""
from __future__ import annotations

from itertools import compress
from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import mypyc_attr

from .heaps import MASK, SHIFT
from .job import DELAYED, M32, READY

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .heaps import StaleHeap
    from .job import Job
    from .jobids import JobIds

BITS: Final = 12  # ids per block: 1 << BITS
LOW: Final = (1 << BITS) - 1  # id & LOW: a job's slot in its block
THIN: Final = 16  # a block down to this many jobs is copied to a small one
# The dict that is empty (never written to). It stands in for a freed
# Held's jobs and for a missing dict of the put tags' maps: Any, as one
# object passes for both.
EMPTY: Final[dict[int, Any]] = {}


# Block and Sparse stay a list and a dict, which the queue's hot paths
# index inline (`block[id & LOW]`, in C). A native class cannot subclass
# them: compiled, they are ordinary (non-native) classes.
@mypyc_attr(native_class=False)
class Block(list["Job | None"]):
    """The jobs of one block of ids, by id & LOW; `live` counts them."""

    __slots__ = ("live",)
    live: int

    def __init__(self) -> None:
        super().__init__(_NONES)
        self.live = 0

    def jobs(self) -> list[Job]:
        return list(compress(self, self))  # type: ignore[arg-type]  # (the Jobs: true)

    def slots(self) -> list[int]:
        """Where its jobs are (id & LOW): found in C, as a job is true."""
        return list(compress(_SLOTS, self))

    def ids(self, k: int) -> list[int]:
        """The ids of its jobs, k being the block's number (id >> BITS)."""
        base = k << BITS
        return [base + i for i in self.slots()]


@mypyc_attr(native_class=False)
class Sparse(dict[int, "Job | None"]):
    """A block thinned out: the same `b[id & LOW]` (None where no job is)
    and `live`, in a dict of a few entries."""

    __slots__ = ("live",)
    live: int

    def __missing__(self, i: int) -> None:
        return None

    def jobs(self) -> list[Job]:
        return [j for j in self.values() if j is not None]

    def ids(self, k: int) -> list[int]:
        base = k << BITS
        return [base + i for i, j in self.items() if j is not None]


_NONES: Final[list[None]] = [None] * (1 << BITS)
_SLOTS: Final = range(1 << BITS)
# The block of ids that have no jobs (never written to): what the hot paths
# index for a missing block.
NO_JOBS: Final = Block()


class JobMap:
    __slots__ = ("blocks", "ids", "spare", "newest")

    def __init__(self, ids: JobIds) -> None:
        self.blocks: dict[int, Block | Sparse] = {}  # id >> BITS -> jobs by id & LOW
        self.ids = ids  # the queue's: the block still taking new ids is not copied small
        # The last block emptied, kept for the next new block: a queue that
        # empties and fills again need not make 4,096 slots each time.
        self.spare: Block | None = None
        self.newest = -1  # the block a put last made (Queue.insert)

    def new_block(self, k: int) -> Block:
        """Block k, made (or the spare, empty), for an id it has no block for."""
        b = self.spare
        if b is None:
            b = Block()
        else:
            self.spare = None
        self.blocks[k] = b
        return b

    def put_block(self, k: int) -> Block:
        """new_block for a put (Queue.insert). The block the last put made
        has taken its ids: if its jobs went meanwhile, down to THIN or
        fewer (a consumer keeping up, a jump of the next id), it was not
        copied small then, as it took new ids; it is now."""
        last = self.blocks.get(self.newest)
        if last is not None and last.live <= THIN:
            self.shrink(self.newest, last)
        self.newest = k
        return self.new_block(k)

    def thinned(self, b: Block | Sparse, id_: int) -> None:
        """A delete left id_'s block b with THIN jobs or fewer: drop it if
        empty, or copy it to a Sparse. The block still taking new ids is
        not copied: a queue of a dozen jobs would copy it again and again
        (put_block copies it once it is passed)."""
        k = id_ >> BITS
        if not b.live:
            del self.blocks[k]
            if b.__class__ is Block:
                self.spare = b
        elif b.__class__ is Block and k != self.ids.next >> BITS:
            self.shrink(k, b)

    def shrink(self, k: int, b: Block | Sparse) -> None:
        """Block k (b, holding THIN jobs or fewer) copied to a Sparse, unless
        it is one already or still takes new ids."""
        if b.__class__ is Block and k != self.ids.next >> BITS:
            small = self.blocks[k] = Sparse((i, b[i]) for i in b.slots())
            small.live = b.live

    def shrink_all(self) -> None:
        """Every block holding THIN jobs or fewer copied small: after jobs
        are loaded in bulk (recovery, a follower's snapshot), in whatever
        order they came."""
        for k, b in list(self.blocks.items()):
            if b.live <= THIN:
                self.shrink(k, b)

    def get(self, id_: int, default: Job | None = None) -> Job | None:
        j = self.blocks.get(id_ >> BITS, NO_JOBS)[id_ & LOW]
        return default if j is None else j

    def __getitem__(self, id_: int) -> Job:
        j = self.get(id_)
        if j is None:
            raise KeyError(id_)
        return j

    def __contains__(self, id_: int) -> bool:
        return self.get(id_) is not None

    def __setitem__(self, id_: int, j: Job) -> None:
        b = self.blocks.get(id_ >> BITS)
        if b is None:
            b = self.new_block(id_ >> BITS)
        if b[id_ & LOW] is None:
            b.live += 1
        b[id_ & LOW] = j

    def __delitem__(self, id_: int) -> None:
        b = self.blocks.get(id_ >> BITS, NO_JOBS)
        if b[id_ & LOW] is None:
            raise KeyError(id_)
        b[id_ & LOW] = None
        b.live -= 1
        if b.live <= THIN:
            self.thinned(b, id_)

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
        id_ = key & MASK
        j: Job | None = self.blocks.get(id_ >> BITS, NO_JOBS)[id_ & LOW]
        return j is not None and j.state == READY and j.pri == key >> SHIFT

    def run_job(self, id_: int) -> Job | None:
        """The job a run entry (Tube.run) names, if the entry is live.

        A job leaves ready only by being reserved (or deleted), which sets
        its deadline and reserves for good: a later return to ready goes to
        the heap, and this entry stays stale."""
        j: Job | None = self.blocks.get(id_ >> BITS, NO_JOBS)[id_ & LOW]
        if j is not None and j.state == READY and j.deadline == 0 and not j.counts & M32:
            return j
        return None

    def delayed_live(self, key: int) -> bool:
        id_ = key & MASK
        j: Job | None = self.blocks.get(id_ >> BITS, NO_JOBS)[id_ & LOW]
        return j is not None and j.state == DELAYED and j.deadline == key >> SHIFT

    def top(self, heap: StaleHeap, live: Callable[[int], bool]) -> Job | None:
        """The job named by the smallest live entry; stale entries are dropped."""
        key = heap.top(live)
        if key is None:
            return None
        id_ = key & MASK
        return self.blocks[id_ >> BITS][id_ & LOW]

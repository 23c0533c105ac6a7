"""The id-to-job map, in blocks of 4,096 consecutive ids.

One dict of millions of jobs rebuilds its whole table each time it grows:
0.5 to 1.1 s at 2.8M and 5.6M jobs, with every client waiting
(docs/PERFORMANCE.md). Ids are handed out in sequence, so the jobs of one
block are put together and mostly deleted together: each block is a small
dict whose growth costs about 0.1 ms, and the dict of blocks stays small
(1,500 entries at 6M jobs). An emptied block is dropped, and a block that
thins out is replaced by a small copy, since a dict never shrinks its table.

Queue's hot paths index `blocks` inline (two dict lookups); the methods here
serve everything else.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .job import Job
    from .queue import Queue

BITS = 12  # ids per block: 1 << BITS
THIN = 16  # a block down to this many jobs is copied to a small dict
# The block of ids that have none (never written to). It stands in for a
# missing block of either id-blocked map, Queue.blocks ({id: Job}) and
# Queue.owners ({id: Held}), and for a freed Held's jobs: Any, as one object
# has to pass for all of them.
EMPTY: dict[int, Any] = {}


class JobMap:
    __slots__ = ("blocks", "q")

    def __init__(self, q: Queue) -> None:
        self.blocks: dict[int, dict[int, Job]] = {}  # id >> BITS -> {id: Job}
        self.q = q  # the Queue, whose state counters give the length

    def get(self, id_: int, default: Job | None = None) -> Job | None:
        b = self.blocks.get(id_ >> BITS)
        return default if b is None else b.get(id_, default)

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
            b = self.blocks[id_ >> BITS] = {}
        b[id_] = j

    def __delitem__(self, id_: int) -> None:
        b: dict[int, Job] = self.blocks.get(id_ >> BITS, EMPTY)
        del b[id_]  # (KeyError if absent; EMPTY is never written to)
        if len(b) <= THIN:
            drop(self.blocks, b, id_, self.q.next_id)

    def __len__(self) -> int:
        # Every stored job is in exactly one state; counting them here keeps
        # the hot paths free of a counter of their own.
        q = self.q
        return q.ready_ct + q.reserved_ct + q.delayed_ct + q.buried_ct

    def __iter__(self) -> Iterator[int]:
        for b in list(self.blocks.values()):
            yield from list(b)

    def values(self) -> Iterator[Job]:
        for b in list(self.blocks.values()):
            yield from list(b.values())


def drop(blocks: dict[int, dict[int, Job]], b: dict[int, Job], id_: int, next_id: int) -> None:
    """After a delete from block b (id_'s) left it with THIN jobs or fewer:
    drop it if empty, or copy it to a small dict once at THIN. The block
    still taking new ids is never copied: a queue of a dozen jobs would
    copy it on every delete."""
    k = id_ >> BITS
    if not b:
        del blocks[k]
    elif len(b) == THIN and k != next_id >> BITS:
        blocks[k] = b.copy()

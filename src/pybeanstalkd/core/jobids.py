"""Job ids: the one place they are handed out, and the only owner of where
the next one comes from.

Ids go up from 1 and are never used twice: a put uses one up even if its
job is then dropped, as the reference's does. An id read back from a
record (the binlog at start-up, a leader's records on a follower) is used
already, and the next is past it. A binlog holds ids up to 2**64 - 1; a
cluster's leader hands out only the blocks etcd gave it (cluster/ids.py).

No id past `top` is ever handed out, and the next never passes top + 1,
whatever a record or a block says: with --extensions the ids from 2**63 on
name the tags' records (core/tags.py: EXT_ID), and a flush-tube's record
holds the next id in 64 bits.
"""
from __future__ import annotations

from typing import Final

from .protocol import U64_MAX

# The biggest int the compiled build keeps unboxed (a 63-bit tagged word).
# `last` is 2**64 - 1 (2**63 - 1 with --extensions) unless a cluster's
# blocks bound it: a boxed int, each comparison with it a generic call
# (524 instructions a put, two of them). `near` is last where last is
# below this, else this: an id past it may be past last, and only then is
# last compared.
SHORT_MAX: Final = (1 << 62) - 1


class JobIds:
    __slots__ = ("top", "next", "last", "near")

    def __init__(self, top: int = U64_MAX) -> None:
        self.top = top  # the last id a job may have
        self.next = 1  # the id the next put gets
        # The last id this queue may hand out now, and near (SHORT_MAX):
        # set together, here and in bound() only.
        self.last = top
        self.near = min(top, SHORT_MAX)

    def used_up(self) -> bool:
        n = self.next
        return n > self.near and n > self.last

    def left(self) -> int:
        return max(0, self.last - self.next + 1)

    def take(self) -> int:
        """The next id, used up; 0 if none is left."""
        id_ = self.next
        if id_ > self.near and id_ > self.last:
            return 0
        self.next = id_ + 1
        return id_

    def seen(self, id_: int) -> None:
        """id_ is in use already (a record's): never handed out again."""
        if id_ >= self.next:
            self.next = min(id_, self.top) + 1

    def skip_to(self, first: int) -> None:
        """Hand out no id below first (a block etcd gave that does not
        follow the last)."""
        if self.next < first:
            self.next = min(first, self.top + 1)

    def bound(self, last: int) -> None:
        """Hand out no id past last (the end of the blocks owned; 0: none),
        nor past top."""
        self.last = min(last, self.top)
        self.near = min(self.last, SHORT_MAX)

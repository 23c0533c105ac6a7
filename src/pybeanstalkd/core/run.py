"""A tube's run: its fresh jobs of one priority, in id order, which is
their ready order, so they need no heap (queue.py, place_ready).

The ids are kept unboxed in an array, 8 bytes a job: a deque of ints
holds a pointer to an int object for each, and compiled, where a job's
id is a plain machine word in its Job, each of those is an object of its
own, 32 bytes more a job. Entries leave from the front (the head moves
on; the array is cut once the head has passed half of it) and go stale
where they are (queue.py says which are live). `n` counts the entries
(the ids past the head): the queue reads it on each put and reserve, and
a class with __len__ would be read through a call of it: 41 instructions a
put and 12 a reserve and its delete compiled, 2,494 and 832 pure."""
from __future__ import annotations

from array import array
from typing import Final

CUT: Final = 1024  # the head may pass this many entries before the array is cut


class Run:
    __slots__ = ("ids", "head", "n", "front", "last", "pri", "draining")

    def __init__(self, pri: int) -> None:
        self.ids = array("Q")
        self.head = 0  # the first entry's index in ids
        self.n = 0  # its entries: len(ids) - head
        # The first entry's id (while n), and the id last appended: kept
        # apart, as reading ids makes an int (114 instructions compiled; a
        # reserve reads the first twice: to find it and to take it). Read
        # as attributes: a method that gave `front` cost 30 instructions a
        # reserve compiled, 334 pure.
        self.front = 0
        self.last = 0
        self.pri = pri  # the priority of every job in it
        self.draining = False  # its stale entries are being dropped in slices

    def append(self, id_: int) -> None:
        self.ids.append(id_)
        if not self.n:
            self.front = id_
        self.n += 1
        self.last = id_

    def popleft(self) -> None:
        """Drop the first entry (there is one)."""
        self.take(self.front)

    def take(self, id_: int) -> bool:
        """Drop the first entry if it is id_'s (True). (The dropping is
        here, not in popleft(): a reserve takes its job this way, and a
        call of popleft() from here cost 14 instructions a reserve
        compiled, 408 pure.)"""
        if not self.n or self.front != id_:
            return False
        head = self.head + 1
        n = self.n - 1
        if not n:
            self.ids = array("Q")  # (empty: its memory goes)
            head = 0
        else:
            if head > CUT and head > n:  # (the head past half of the array)
                del self.ids[:head]
                head = 0
            self.front = self.ids[head]
        self.head = head
        self.n = n
        return True

    def entries(self) -> list[int]:
        """Its ids, first to last (a copy)."""
        return self.ids[self.head:].tolist()

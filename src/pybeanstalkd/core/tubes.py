"""The tubes: by name, in the order they were made (list-tubes shows that
order, as the reference's), and the index of those with ready jobs that a
reserve watching many tubes searches. The queue owns one (Queue.tubes)
and decides when a tube may go (Queue.maybe_free); this part keeps the
three views of the tubes in step."""
from __future__ import annotations

from heapq import heapify, heappush

from .heaps import TUBE_SLACK
from .job import SwapList, Tube


class Tubes:
    __slots__ = ("named", "made", "index", "seq")

    def __init__(self) -> None:
        self.named: dict[bytes, Tube] = {}
        self.made = SwapList()  # in the order made, a freed one's place taken by the last
        # Tubes with ready jobs, by a lower bound of their best job's key:
        # (key, seq, tube). An entry is current while key == tube.ikey.
        self.index: list[tuple[int, int, Tube]] = []
        self.seq = 0  # tubes in the order made (the index's tie-break)

    def __len__(self) -> int:
        return len(self.named)

    def get(self, name: bytes) -> Tube | None:
        return self.named.get(name)

    def tube(self, name: bytes) -> Tube:
        """The tube named, made if it is new."""
        t = self.named.get(name)
        if t is None:
            t = self.named[name] = Tube(name)
            self.seq += 1
            t.seq = self.seq
            self.made.append(t)
        return t

    def drop(self, t: Tube) -> None:
        """t is freed (its index entries go stale: t.alive is False)."""
        del self.named[t.name]
        self.made.remove(t)
        t.alive = False

    def index_push(self, t: Tube, key: int) -> None:
        """t's best ready job's key is now `key` (an entry for it before
        is stale); the index is swept when stale entries pass its live."""
        t.ikey = key
        heappush(self.index, (key, t.seq, t))
        if len(self.index) > 2 * len(self.named) + TUBE_SLACK:
            live = [e for e in self.index if e[2].alive and e[0] == e[2].ikey]
            heapify(live)
            self.index = live

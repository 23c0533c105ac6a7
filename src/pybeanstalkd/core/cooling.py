"""idp: keys in their cooldown (--extensions): a deleted job's key kept
TTL seconds, so that a put of it meanwhile is answered with the deleted
job's id (tuber's). Each cooldown is a record of its own in the binlog
(binlog/ext.py), until it ends: by the clock, at a put of its key once
past its end, or at a flush-tube of its tube. The tags' policy (tagged.py)
owns one, in its idp: keys' part (keys.py); their state is the tags'
state's (ExtState: cools, cool_ids, cool_heap), which the binlog's codec
and the HTTP side read."""
from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING

from .slices import SLICE
from .tags import EXT_ID, Cooldown, ExtState

if TYPE_CHECKING:
    from collections.abc import Generator

    from .job import Job
    from .queue import Queue


class Cooldowns:
    __slots__ = ("ext", "unlisted")

    def __init__(self, ext: ExtState) -> None:
        self.ext = ext
        # While a follower's snapshot comes in, until its first part is
        # applied: this node's cooldowns that part has not brought again
        # (their binlog ids).
        self.unlisted: set[int] = set()

    def start(self, q: Queue, tube: bytes, key: bytes, orig: int, expires: int) -> None:
        """Key `key` of `tube` cools until `expires` (job orig was deleted):
        kept, and its record written."""
        old = self.ext.cooldown(tube, key)
        if old is not None:
            self.end(q, old)
        cd = Cooldown(self.ext.ext_id(), tube, key, orig, expires)
        self.keep(q, cd)
        q.store.note(cd)  # (no room: kept in memory only, until a restart)

    def keep(self, q: Queue, cd: Cooldown) -> None:
        """Keep cd as its key's cooldown until it ends (recovery's too)."""
        ext = self.ext
        cools = ext.cools.get(cd.tube)
        if cools is None:
            cools = ext.cools[cd.tube] = {}
        cools[cd.key] = ext.cool_ids[cd.id] = cd
        ext.ncools += 1
        heappush(ext.cool_heap, (cd.expires, cd.id))
        q.timers.timer(cd.expires)

    def end(self, q: Queue, cd: Cooldown) -> None:
        """cd is over: its record is let go, and its tube may go."""
        ext = self.ext
        if ext.cool_ids.pop(cd.id, None) is None:
            return  # (gone already: a flush-tube's slices)
        q.store.forget(cd)
        cools = ext.cools.get(cd.tube)
        if cools is not None and cools.get(cd.key) is cd:
            del cools[cd.key]
            ext.ncools -= 1
            if not cools:
                del ext.cools[cd.tube]
                q.maybe_free_name(cd.tube)

    def flushed(self, q: Queue, name: bytes) -> None:
        """A flush-tube of tube `name` ended: its cooldowns go, their
        records let go in slices."""
        ext = self.ext
        cools = ext.cools.pop(name, None)
        if cools:
            ext.ncools -= len(cools)
            q.slices.spawn(self._end_all(q, list(cools.values())))

    def _end_all(self, q: Queue, cools: list[Cooldown]) -> Generator[None, int, None]:
        yield
        ids = self.ext.cool_ids
        for i in range(0, len(cools), SLICE):
            for cd in cools[i:i + SLICE]:
                if ids.pop(cd.id, None) is cd:
                    q.store.forget(cd)
            yield

    def expire(self, q: Queue, now: int) -> bool:
        """Let those that have ended go, SLICE at most; True if more are due."""
        ext = self.ext
        heap = ext.cool_heap
        k = SLICE
        while heap and heap[0][0] <= now and k:
            k -= 1
            cd = ext.cool_ids.get(heappop(heap)[1])
            if cd is not None and cd.expires <= now:
                self.end(q, cd)
        return bool(k == 0 and heap and heap[0][0] <= now)

    def next_due(self, due: int | None) -> int | None:
        """The sooner of `due` and the next cooldown's end."""
        heap = self.ext.cool_heap
        if heap and (due is None or heap[0][0] < due):
            return heap[0][0]
        return due

    # -- a follower's snapshot ----------------------------------------------

    def restoring(self) -> None:
        """A snapshot starts coming in: its first part brings the leader's
        cooldowns in place of these (its own may have ended, or a
        flush-tube cleared them)."""
        self.unlisted = set(self.ext.cool_ids)

    def listed(self, q: Queue) -> None:
        """The first part is applied: this node's cooldowns it did not
        bring go (not all of them ended and made again: each would leave an
        entry in cool_heap until its end, and two records in this node's
        binlog, at every snapshot)."""
        unlisted, self.unlisted = self.unlisted, set()
        ids = self.ext.cool_ids
        for id_ in unlisted:
            cd = ids.get(id_)
            if cd is not None:
                self.end(q, cd)

    def apply(self, q: Queue, tube: bytes, key: bytes, orig: int, expires: int) -> None:
        """A follower: the leader's cooldown record (its own delete may
        have made the same one)."""
        cd = self.ext.cooldown(tube, key)
        if cd is None or (cd.orig, cd.expires) != (orig, expires):
            self.start(q, tube, key, orig, expires)
        else:
            self.unlisted.discard(cd.id)  # (a snapshot's first part: the leader has it)

    def find_record(self, q: Queue, id_: int) -> Job | Cooldown | None:
        """The binlog's lookup (compaction): a cooldown by its binlog id,
        or a job."""
        if id_ >= EXT_ID:
            return self.ext.cool_ids.get(id_)
        return q.jobs.get(id_)

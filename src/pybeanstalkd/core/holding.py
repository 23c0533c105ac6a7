"""aft: jobs held by their group (--extensions), a part of the tags'
policy (tagged.py): a held job is in state delayed with deadline HELD, in
no heap (not counted as delayed, as in tuber), listed in its group's
`waiting`; the group's last delete releases every job it holds, SLICE a
step.

While a follower's snapshot comes in (between restoring() and settled()),
no hold or release is derived from this node's groups, which may lack
members the leader has: the groups that complete meanwhile are kept with
what they held (`settling`), and settled() decides once the snapshot is
whole.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, final

from .job import DELAYED
from .slices import SLICE
from .tags import HELD

if TYPE_CHECKING:
    from collections.abc import Generator

    from .job import Job
    from .queue import Queue
    from .tags import ExtState, Group


@final
class Holding:
    __slots__ = ("ext", "settling")

    def __init__(self, ext: ExtState) -> None:
        self.ext = ext
        # While a follower's snapshot comes in: the groups that completed
        # meanwhile, each with the held jobs it did not release.
        self.settling: dict[bytes, dict[int, None]] | None = None

    def holds_now(self, g: Group) -> bool:
        """Would g hold an aft: job placed now? Not once complete, nor
        while a snapshot comes in (the leader's record says then)."""
        return self.settling is None and not g.complete()

    def hold(self, q: Queue, j: Job, g: Group, log: bool) -> None:
        """Hold aft: job j until g, its group, completes."""
        ext = self.ext
        j.state = DELAYED
        j.deadline = HELD
        g.waiting[j.id] = None
        ext.bump(ext.held, j.tube.name, 1)
        ext.nheld += 1
        if log:
            q.store.write(j)

    def dropped(self, id_: int, aft: bytes, g: Group | None) -> None:
        """aft: job id_, of group aft (g: its entry, if it has one), is
        deleted: no group holds it any more."""
        settling = self.settling
        if settling is not None:
            w = settling.get(aft)
            if w is not None:
                w.pop(id_, None)
                if not w:
                    del settling[aft]
        if g is not None:
            g.waiting.pop(id_, None)

    def group_done(self, q: Queue, name: bytes, now: int) -> None:
        """A member of group name was deleted: if none is left, release
        what it holds (in slices past SLICE jobs) and forget the group."""
        g = self.ext.groups.get(name)
        if g is None or not g.complete():
            return
        self.ext.forget_group(name)
        if self.settling is not None:
            # A snapshot comes in: a member the leader put before it deleted
            # this one may be yet to come here (settled() releases these).
            self.settling.setdefault(name, {}).update(g.waiting)
        else:  # (nothing adds to g.waiting now: a later aft:name put finds no group)
            self._release(q, g.waiting, now)

    def release_complete(self, q: Queue, now: int) -> None:
        """Every complete group's held jobs are released, now (recovery:
        a release the binlog had no room for)."""
        ext = self.ext
        for name in [n for n, g in ext.groups.items() if g.complete() and g.waiting]:
            self._release_held(q, ext.forget_group(name).waiting, now)

    # -- a follower's snapshot (core/replica.py) ------------------------------

    def restoring(self) -> None:
        if self.settling is None:
            self.settling = {}

    def restoring_now(self) -> bool:
        return self.settling is not None

    def settled(self, q: Queue, now: int) -> None:
        """What a group that completed meanwhile held stays held if it has
        a member now (put on the leader before its last one here was
        deleted), and is released if not; so is what a complete group
        holds (a held job's record came before its members' deletes)."""
        settling = self.settling
        if settling is None:
            return
        self.settling = None
        groups, jobs = self.ext.groups, q.jobs
        for name, waiting in settling.items():
            g = groups.get(name)
            if g is None or g.complete():
                self._release(q, waiting, now)
                continue
            for id_ in waiting:
                j = jobs.get(id_)
                if j is not None and j.state == DELAYED and j.deadline == HELD:
                    g.waiting[id_] = None
        for name in [n for n, g in groups.items() if g.waiting and g.complete()]:
            self.group_done(q, name, now)

    # -- releases -------------------------------------------------------------

    def _release(self, q: Queue, waiting: dict[int, None], now: int) -> None:
        if len(waiting) <= SLICE:
            self._release_held(q, waiting, now)
        else:
            q.slices.spawn(self._release_later(q, waiting))

    def _release_held(self, q: Queue, waiting: dict[int, None], now: int, n: int = -1) -> None:
        """Release n (-1: all) of the jobs `waiting` lists, taking them out
        of it one at a time: no copy, and a big one is freed as it goes."""
        jobs = q.jobs
        while waiting and n:
            n -= 1
            id_, _ = waiting.popitem()
            j = jobs.get(id_)
            if j is not None and j.state == DELAYED and j.deadline == HELD:
                q.remove(j)  # (Queue.changing is told there)
                q.place_ready(j, now, log=q.store.reserve_update(j))

    def _release_later(self, q: Queue, waiting: dict[int, None]) -> Generator[None, int, None]:
        now = yield
        while waiting:
            self._release_held(q, waiting, now, SLICE)
            now = yield

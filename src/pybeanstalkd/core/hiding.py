"""The ready jobs a con: key hides (--extensions; tagged.py's policy asks):
a ready job whose key has no room is hidden when it reaches the top of
its tube, moved out of the ready heap (or run) into its key's heap of
them (ConKey.parked, by tube) and its tube's (ExtState.hidden, for
peek-ready and flush-tube without a walk over every key). It is still
ready, and counted so. When its key has room again it goes back to its
tube's ready heap. So a reserve never walks past hidden jobs, however
many there are; entries left behind by jobs that moved since are stale,
and dropped when met.
"""
from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING

from .heaps import MASK, SHIFT, TUBE_SLACK, StaleHeap
from .job import READY

if TYPE_CHECKING:
    from collections.abc import Callable

    from .job import Job, Tube
    from .queue import Queue
    from .tags import ConKey, ExtState


def park(ext: ExtState, q: Queue, t: Tube, j: Job, key: bytes) -> None:
    """t's best ready job j is hidden: its key has no room."""
    run = t.run
    if run is None or not run.take(j.id):
        heappop(t.ready.entries)
    # Counted hidden first: a sweep of either heap below keeps only the
    # entries of jobs counted so (hidden_live), this one's included.
    if j.id not in ext.parked_ids:
        ext.parked_ids.add(j.id)
        ext.bump(ext.blocked, t.name, 1)
    entry = (j.pri << SHIFT) | j.id
    k = ext.con(key)
    assert k is not None  # (a key with no room has a job: this one)
    push_parked(ext, q, k, t, entry)
    hide(ext, q, t, entry)


def push_parked(ext: ExtState, q: Queue, k: ConKey, t: Tube, entry: int) -> None:
    """entry's job is hidden for want of room in k: into k's heap of its
    hidden jobs of t. Those that leave ready meanwhile leave their entries
    stale, which only a key with room pops: a key kept full while its
    hidden jobs are deleted would grow its heap by one a delete, so it is
    swept as t's heap of hidden jobs is (its live entries are fewer)."""
    _push_hidden(ext, q, k.parked, t, entry, 0)


def hide(ext: ExtState, q: Queue, t: Tube, entry: int) -> None:
    """entry's job is hidden: it goes into t's heap of hidden jobs."""
    _push_hidden(ext, q, ext.hidden, t, entry, 1)


def _push_hidden(ext: ExtState, q: Queue, heaps: dict[Tube, StaleHeap], t: Tube,
                 entry: int, spare: int) -> None:
    """entry into t's heap in heaps (made if t has none), swept once its
    stale entries outnumber t's hidden jobs (and spare more)."""
    heap = heaps.get(t)
    if heap is None:
        heap = heaps[t] = StaleHeap(TUBE_SLACK)
    heappush(heap.entries, entry)
    if heap.over(ext.blocked.get(t.name, 0) + spare):
        heap.sweep(q.slices, hidden_live(ext, q, t), lambda: ext.blocked.get(t.name, 0))


def hidden_live(ext: ExtState, q: Queue, t: Tube) -> Callable[[int], bool]:
    """Is an entry of t's hidden jobs live?"""
    jobs, ids = q.jobs, ext.parked_ids

    def live(entry: int) -> bool:
        id_ = entry & MASK
        j = jobs.get(id_)
        return (j is not None and id_ in ids and j.tube is t and j.state == READY
                and j.pri == entry >> SHIFT)
    return live


def best_hidden(ext: ExtState, q: Queue, t: Tube) -> Job | None:
    """t's best hidden job (by priority, then id), if it has one."""
    hidden = ext.hidden.get(t)
    if hidden is None:
        return None
    entry = hidden.top(hidden_live(ext, q, t))
    return None if entry is None else q.jobs[entry & MASK]


def unpark_id(ext: ExtState, j: Job) -> None:
    """A hidden job leaves ready (deleted, reserved by id): its entries go
    stale."""
    ext.parked_ids.discard(j.id)
    ext.bump(ext.blocked, j.tube.name, -1)
    if j.tube.name not in ext.blocked:
        ext.hidden.pop(j.tube, None)  # (none hidden: its entries are all stale)


def unpark(ext: ExtState, q: Queue, key: ConKey) -> None:
    """key has room: bring back as many of its hidden jobs, from each tube."""
    tubes = key.parked
    if not tubes:
        return
    room = key.room()
    jobs, ids = q.jobs, ext.parked_ids
    for t, parked in list(tubes.items()):
        heap = parked.entries
        n = room
        while n > 0 and heap:
            entry = heappop(heap)
            id_ = entry & MASK
            j = jobs.get(id_)
            if j is None or j.state != READY or j.pri != entry >> SHIFT or id_ not in ids:
                continue  # stale
            unpark_id(ext, j)
            heappush(t.ready.entries, entry)
            if t.ikey is None or entry < t.ikey:
                q.tubes.index_push(t, entry)
            n -= 1
        if not heap:
            del tubes[t]
        if n < room and t.waiting and not t.matching:
            t.matching = True  # its waiters get them at the next step
            q.slices.spawn(q.match_later(t))

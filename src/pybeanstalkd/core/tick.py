"""What comes due: the queue's timers run in the reference's order (the
entries are the queue's Timers part, timers.py; what each does is the
queue's state machine, queue.py). The engine calls it when the I/O layer's
clock reaches the time the timers gave.
"""
from __future__ import annotations

from heapq import heappop
from typing import TYPE_CHECKING

from .heaps import MASK, SHIFT
from .jobmoves import bury_held, logs_tries, tries_used_up
from .reserving import wait_expired
from .job import TIMEOUTS, bump
from .slices import SLICE

if TYPE_CHECKING:
    from .queue import Queue


def tick(q: Queue, now: int, n: int = SLICE) -> bool:
    """Run the timers that are due, in the reference's order: delays,
    pauses, then reservations' TTRs and blocked reserves' timeouts.

    At most n entries a call (the I/O layer, which has a clock, ticks a
    few at a time up to a time budget: transport.run_timers): True if
    it stopped there with more due (next_due() <= now: the caller ticks
    again soon)."""
    jobs = q.jobs
    timers = q.timers
    heap = timers.delay_heap.entries  # (the same list across a sweep)
    while heap and heap[0] >> SHIFT <= now:
        if not n:
            return True
        n -= 1
        key = heappop(heap)
        if jobs.delayed_live(key):
            id_ = key & MASK
            j = jobs.get(id_)
            assert j is not None  # (live: its job is there)
            q._leave_delayed(j)
            q.delayed_top(j.tube)  # drop the tube's now-stale top entries
            if not q.tags.holds_due(q, j):  # (the tags may hold it instead)
                q.place_ready(j, now)
    pauses = timers.pause_heap
    while pauses and pauses[0][0] <= now:
        if not n:
            return True
        n -= 1
        _, _, t = heappop(pauses)
        if t.alive and t.pause and t.unpause_at <= now:
            t.pause = t.unpause_at = 0
        if t.alive and t.unpause_at <= now:
            n = q.match(t, now, n)
    ttrs = timers.ttr_heap
    while ttrs.due(now):
        if not n:
            return True
        n -= 1
        j = ttrs.expiring()
        if j is None:
            continue  # (the entry was stale, or moved to its holder's soonest)
        # (a closed connection's reservations are not here: its slices
        # return them, reserving.py)
        used_up = (q.checks_tries and tries_used_up(q, j)
                   and q.store.reserve_update(j))  # (a full disk: back to ready)
        j.counts = bump(j.counts, TIMEOUTS)
        q.timeouts_ct += 1
        j.tube.timeouts += 1
        if used_up:
            j.tube.tries_used_up += 1
            bury_held(q, j, j.pri)
            continue
        q._unreserve(j)
        # (--max-tries: the expiry is logged, so that the tries
        # outlive a restart; the reference logs none)
        q.place_ready(j, now, log=q.checks_tries and logs_tries(q, j)
                         and q.store.reserve_update(j))
    waits = timers.wait_heap
    while waits and waits[0][0] <= now:
        if not n:
            return True
        n -= 1
        entry = heappop(waits)
        c = entry[2]
        # (equal, not the same object: compiled, a tuple is copied as a value)
        if c.waiting and c.wait_key == entry:
            wait_expired(q, c, now)
    return False

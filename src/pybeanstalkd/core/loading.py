"""Recovery's placing of the jobs a binlog held: in bulk, one heapify per
heap (a function of the queue, queue.py, whose state it sets up as its
methods would, one job at a time)."""
from __future__ import annotations

from heapq import heapify
from typing import TYPE_CHECKING

from .heaps import SHIFT
from .job import BURIED, DELAYED, READY
from .queue import URGENT_PRI

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .job import Job, Tube
    from .queue import Queue


def load(q: Queue, jobs: Iterable[Job], now: int, wall_offset: int) -> None:
    """Place jobs recovered from the binlog (their tags' state first, if
    the queue has tags: TagPolicy.loading).

    Delayed jobs keep their wall-clock deadline; buried ones their bury
    order, and their `buries` count is not incremented (beanstalkd #668)."""
    buried: list[Job] = []
    touched: set[Tube] = set()
    timers = q.timers
    for j in q.tags.loading(q, jobs, wall_offset):
        q.jobs[j.id] = j
        q.body_bytes += len(j.body)
        t = j.tube
        touched.add(t)
        if j.state == BURIED:
            buried.append(j)
            continue
        deadline = j.deadline - wall_offset
        if j.state == DELAYED and deadline > now:
            j.deadline = deadline
            key = (deadline << SHIFT) | j.id
            t.delayed.entries.append(key)
            timers.delay_heap.entries.append(key)
            t.ndelayed += 1
            timers.timer(deadline)
        else:
            j.state = READY
            j.deadline = now  # ready since (for the wait histogram)
            t.ready.entries.append((j.pri << SHIFT) | j.id)
            t.nready += 1
            if j.pri < URGENT_PRI:
                t.urgent += 1
    for t in touched:
        ready = t.ready.entries
        heapify(ready)
        heapify(t.delayed.entries)
        if ready:
            q.tubes.index_push(t, ready[0])
        q.ready_ct += t.nready
        q.urgent_ct += t.urgent
        q.delayed_ct += t.ndelayed
    heapify(timers.delay_heap.entries)
    buried.sort(key=lambda j: j.deadline)  # the bury position
    for j in buried:
        q.place_buried(j)
    q.tags.loaded(q, now)
    q.jobs.shrink_all()  # (blocks the binlog's compaction left with a few jobs)

"""Reserved jobs by their TTR deadline: the queue's heap (the soonest
expires first: tick.py) and each connection's (its soonest, for
DEADLINE_SOON: reserving.py).

An indexed binary heap, as beanstalkd's heap.c: each job keeps its place
in the heap (Job.ttr_at in the queue's, Job.conn_at in its connection's;
-1 out of it), so a reservation that ends leaves at once and the heap
holds exactly the reservations it orders. Nothing in it goes stale, so
nothing is swept, and a reservation makes no key object: the jobs'
deadlines and ids are compared where they are. Order: (deadline, id).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .job import Job


def before(a: Job, b: Job) -> bool:
    """Does a's reservation expire before b's? (deadline, then id)"""
    return a.deadline < b.deadline or (a.deadline == b.deadline and a.id < b.id)


class Deadlines:
    """One heap of reserved jobs by deadline (see the module)."""

    __slots__ = ("jobs", "conn")

    def __init__(self, conn: bool) -> None:
        self.jobs: list[Job] = []
        # Whose heap: a connection's keeps its places in Job.conn_at, the
        # queue's in Job.ttr_at (a reserved job is in both).
        self.conn = conn

    def __len__(self) -> int:
        return len(self.jobs)

    def first(self) -> Job | None:
        """The reservation that expires first (None: none)."""
        jobs = self.jobs
        return jobs[0] if len(jobs) else None

    def push(self, j: Job) -> None:
        jobs = self.jobs
        jobs.append(j)
        self._rise(j, len(jobs) - 1)

    def remove(self, j: Job) -> None:
        """Take j out (nothing if it is not in this heap)."""
        jobs = self.jobs
        i = j.conn_at if self.conn else j.ttr_at
        if i < 0 or i >= len(jobs) or jobs[i] is not j:
            return
        self._place(j, -1)
        last = jobs.pop()
        if last is not j:  # last fills j's place, and moves to where it belongs
            if i and before(last, jobs[(i - 1) >> 1]):
                self._rise(last, i)
            else:
                self._sink(last, i)

    def moved(self, j: Job) -> None:
        """j's deadline changed (touch): its place follows."""
        i = j.conn_at if self.conn else j.ttr_at
        if i < 0 or i >= len(self.jobs) or self.jobs[i] is not j:
            return
        if i and before(j, self.jobs[(i - 1) >> 1]):
            self._rise(j, i)
        else:
            self._sink(j, i)

    def clear(self) -> None:
        """Forget every job at once (their places are not reset: a job's
        place is set again when it is pushed, and remove() checks it)."""
        self.jobs = []

    def _place(self, j: Job, i: int) -> None:
        if self.conn:
            j.conn_at = i
        else:
            j.ttr_at = i

    def _rise(self, j: Job, i: int) -> None:
        """Put j at i, or above while it expires before its parent."""
        jobs = self.jobs
        while i:
            parent = (i - 1) >> 1
            above = jobs[parent]
            if not before(j, above):
                break
            jobs[i] = above
            self._place(above, i)
            i = parent
        jobs[i] = j
        self._place(j, i)

    def _sink(self, j: Job, i: int) -> None:
        """Put j at i, or below while a child expires before it."""
        jobs = self.jobs
        n = len(jobs)
        child = 2 * i + 1
        while child < n:
            if child + 1 < n and before(jobs[child + 1], jobs[child]):
                child += 1
            below = jobs[child]
            if not before(below, j):
                break
            jobs[i] = below
            self._place(below, i)
            i = child
            child = 2 * i + 1
        jobs[i] = j
        self._place(j, i)

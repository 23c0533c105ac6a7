"""The queue's timers: its heaps of delays, reservations' TTRs, blocked
reserves' timeouts and pauses, and the earliest time a change has given it (a part
of the queue; what comes due runs in tick.py).

The queue records each new time here (timer); the I/O layer, which has the
clock, takes it after each event (take_due) and calls the engine's tick
when that time comes.
"""
from __future__ import annotations

from heapq import heapify, heappush
from typing import TYPE_CHECKING

from .heaps import CONN_SLACK, SHARED_SLACK, SHIFT, TUBE_SLACK, StaleHeap
from .job import JobHeap

if TYPE_CHECKING:
    from .job import Conn, Job, Tube


def paused(t: Tube, now: int) -> bool:
    # The pause timer, not this check, ends a pause, so that ending it
    # always runs the matcher for the tube's waiters.
    return t.pause != 0 and t.unpause_at > now


class Soonest(JobHeap):
    """Each holder's soonest reservation, its place kept in the holder
    (Conn.ttr_at; -1 out of it)."""

    __slots__ = ()

    def placed(self, j: Job, i: int) -> None:
        held = j.holder
        assert held is not None  # (an entry is a holder's soonest: reserved)
        held.conn.ttr_at = i


class Expiries:
    """Every reservation by its TTR deadline, the soonest first: a heap of
    each holder's soonest reservation (its Conn.deadlines' first), as the
    reference's heap of connections. A reservation is added, moved and
    taken out here, with its holder's heap, so that the holder's entry
    follows its soonest.

    A connection that holds nothing leaves at once. A reserve-delete
    cycle changes a heap of one connection per worker: the cost of a
    reservation grows with the log of its holder's reservations and of
    the holders, not of every reservation."""

    __slots__ = ("soonest",)

    def __init__(self) -> None:
        self.soonest = Soonest()

    def __len__(self) -> int:
        """The connections holding reservations."""
        return len(self.soonest)

    def first(self) -> Job | None:
        """The reservation that expires first (None: none)."""
        return self.soonest.first()

    def holders(self) -> list[Conn]:
        """The connections holding reservations (open ones: a closed one
        leaves at once)."""
        return [j.holder.conn for j in self.soonest.entries()]  # type: ignore[union-attr]  # (reserved)

    def push(self, c: Conn, j: Job) -> None:
        """j is reserved by c."""
        if not c.deadlines.push(j):  # (j is c's soonest now)
            self._follow(c, j)

    def remove(self, c: Conn, j: Job) -> None:
        """j's reservation by c ended (nothing if c no longer holds it in
        its heap: it closed). j's holder may be cleared already."""
        d = c.deadlines
        if d.remove(j) == 0:
            self._follow(c, d.first())

    def moved(self, c: Conn, j: Job) -> None:
        """j's deadline changed (touch)."""
        d = c.deadlines
        d.moved(j)
        self._follow(c, d.first())

    def drop(self, c: Conn) -> list[Job]:
        """c closed: its reservations no longer expire (their return to
        ready is under way). Returns the list its heap held them in, for
        the caller to free."""
        jobs = c.deadlines.clear()
        self._follow(c, None)
        return jobs

    def _follow(self, c: Conn, soonest: Job | None) -> None:
        """c's soonest reservation changed (to `soonest`, its heap's first,
        which the caller has at hand; None: it holds none): its entry is
        replaced by it and moves to its place, or leaves. (The entry
        replaced is not read: it may be a reservation just ended, its
        holder cleared.)"""
        i = c.ttr_at
        if soonest is None:
            if i >= 0:
                c.ttr_at = -1
                self.soonest.take(i)
        elif i < 0:
            self.soonest.push(soonest)
        else:
            self.soonest.settle(soonest, i)


class Timers:
    """What comes due, and when. Entries go stale in place: the queue,
    which knows the jobs' states, drops them as it pops them."""

    __slots__ = ("delay_heap", "ttr_heap", "wait_heap", "pause_heap", "due", "seq")

    def __init__(self) -> None:
        self.delay_heap = StaleHeap(SHARED_SLACK)  # every tube's delayed jobs
        self.ttr_heap = Expiries()  # every reservation, the soonest expiry first
        self.wait_heap: list[tuple[int, int, Conn]] = []  # (due, seq, conn): blocked reserves
        self.pause_heap: list[tuple[int, int, Tube]] = []  # (unpause_at, seq, tube)
        self.due: int | None = None  # the earliest time given since the I/O layer last took it
        self.seq = 0  # orders entries of one time (a Conn or a Tube is not comparable)

    def timer(self, at: int) -> None:
        due = self.due
        if due is None or at < due:
            self.due = at

    def take_due(self) -> int | None:
        """The earliest time given since the last call (None: no new one)."""
        due, self.due = self.due, None
        return due

    def next_due(self) -> int | None:
        """The earliest time the queue's tick may have work (stale entries
        may wake it early)."""
        cands = []
        if self.delay_heap:
            cands.append(self.delay_heap[0] >> SHIFT)
        first = self.ttr_heap.first()
        if first is not None:
            cands.append(first.deadline + 1)  # (expiry is "deadline < now")
        if self.wait_heap:
            cands.append(self.wait_heap[0][0])
        if self.pause_heap:
            cands.append(self.pause_heap[0][0])
        return min(cands) if cands else None

    def pause(self, t: Tube) -> None:
        """t's pause, set to end at t.unpause_at, comes due then."""
        self.seq += 1
        heappush(self.pause_heap, (t.unpause_at, self.seq, t))
        self.timer(t.unpause_at)

    def wait(self, c: Conn, due: int) -> tuple[int, int, Conn]:
        """The entry of c's blocked reserve that times out at due (pushed
        by push_wait once it is known not to be due already)."""
        self.seq += 1
        return (due, self.seq, c)

    def push_wait(self, key: tuple[int, int, Conn]) -> None:
        heappush(self.wait_heap, key)
        self.timer(key[0])

    def tidy_pauses(self, ntubes: int) -> None:
        """Drop the pause entries no tube needs (a pause given again, a
        tube freed while paused) once they outnumber the tubes: else a
        client pausing tubes for 2**32 s and leaving them would keep each
        one's Tube until then."""
        heap = self.pause_heap
        if len(heap) > 2 * ntubes + TUBE_SLACK:
            # (one entry a tube: a pause given twice at one time makes two alike)
            live = list({e[2]: e for e in heap
                         if e[2].alive and e[2].pause and e[0] == e[2].unpause_at}.values())
            heapify(live)
            self.pause_heap = live

    def tidy_waits(self, nwaiting: int) -> None:
        """Drop the wait entries of reserves no longer waiting (answered,
        or their connection closed) once they outnumber those waiting:
        else each would keep its connection until its timeout, up to
        2**31 s."""
        heap = self.wait_heap
        if len(heap) > 2 * nwaiting + CONN_SLACK:
            live = [e for e in heap if e[2].waiting and e[2].wait_key == e]  # (see tick.py)
            heapify(live)
            self.wait_heap = live

"""The queue's timers: its heaps of delays, reservations' TTRs, blocked
reserves' timeouts and pauses, and the earliest time a change has given it (a part
of the queue; what comes due runs in tick.py).

The queue records each new time here (timer); the I/O layer, which has the
clock, takes it after each event (take_due) and calls the engine's tick
when that time comes.
"""
from __future__ import annotations

from heapq import heapify, heappop, heappush, heapreplace
from typing import TYPE_CHECKING

from .heaps import CONN_SLACK, SHARED_SLACK, SHIFT, TUBE_SLACK, StaleHeap
from .job import NO_ENTRY, NO_ENTRY_AT

if TYPE_CHECKING:
    from .job import Conn, Deadlines, Job, Tube


def ttr_key(j: Job) -> int:
    """A reservation's key in the expiries: (deadline, id) as one int."""
    return (j.deadline << SHIFT) | j.id


class Expiries:
    """Every reservation by its TTR deadline, the soonest first, as the
    reference's heap of connections: the holders (open connections that
    hold reservations), each by a lower bound of its soonest reservation's
    key, deadline << SHIFT | id, in a heap of (key, seq, its Deadlines)
    that heapq keeps in C. A holder's Deadlines gives its soonest exactly.

    A holder's entry is current while its key is its Deadlines' bound.
    It moves (a new entry, the old one left stale) only when the holder
    gets a reservation that expires before the entry says; a reservation
    that ends changes nothing here. An entry that comes due early (its
    reservation ended) moves then to its holder's soonest, or leaves with
    the last of them (expiring). So a worker that reserves and deletes a
    job at a time enters here at its first reserve and comes back once a
    TTR, not at every reserve and delete.

    Stale entries (a holder's earlier ones, a closed connection's, which
    keep its emptied Deadlines, not the connection) are dropped when they
    come first, and swept once they outnumber the current ones past
    CONN_SLACK: a connection has one current entry, so the heap is
    bounded by the connections, not by the reservations."""

    __slots__ = ("heap", "seq", "current")

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, Deadlines]] = []
        self.seq = 0  # orders entries of one key (a Deadlines is not comparable)
        self.current = 0  # holders with a current entry

    def __len__(self) -> int:
        """Its entries, stale ones included."""
        return len(self.heap)

    def next_due(self) -> int | None:
        """When the first entry comes due (None: none); its reservation may
        have ended: then nothing expires then."""
        heap = self.heap
        return (heap[0][0] >> SHIFT) + 1 if heap else None  # (expiry is "deadline < now")

    def holders(self) -> list[Conn]:
        """The connections holding reservations (open ones: a closed one
        leaves at once)."""
        firsts = [d.first() for d in {e[2]: None for e in self.heap if e[0] == e[2].bound}]
        return [j.holder.conn for j in firsts if j is not None]  # type: ignore[union-attr]  # (reserved)

    def lower(self, d: Deadlines, j: Job) -> bool:
        """j is the first of d, a holder's, now, no later than its entry's
        deadline (d.push said so): if it expires before the entry says,
        or there is none, the entry moves to it. True then: the caller
        gives the timers j's time."""
        key = ttr_key(j)
        bound = d.bound
        if key >= bound:
            return False
        if bound == NO_ENTRY:
            self.current += 1
        d.bound = key
        d.bound_at = j.deadline
        self.seq += 1
        heappush(self.heap, (key, self.seq, d))
        if len(self.heap) > 2 * self.current + CONN_SLACK:
            self._sweep()
        return True

    def due(self, now: int) -> bool:
        """Has the first entry's time come (its key's deadline < now)?"""
        heap = self.heap
        return bool(heap) and heap[0][0] >> SHIFT < now

    def expiring(self) -> Job | None:
        """The first entry, due: its holder's soonest reservation if the
        entry is its, which has expired (the caller ends it; the entry
        stays, a lower bound of the holder's next). Else None: the entry
        was stale and is dropped, or it moves to its holder's soonest, or
        leaves, the holder holding none."""
        heap = self.heap
        key, _, d = heap[0]
        if key != d.bound:
            heappop(heap)
            return None
        j = d.first()
        if j is None:
            heappop(heap)
            self._leave(d)
            return None
        soonest = ttr_key(j)
        if soonest == key:
            return j
        d.bound = soonest
        d.bound_at = j.deadline
        self.seq += 1
        heapreplace(heap, (soonest, self.seq, d))
        return None

    def drop(self, c: Conn) -> list[Job]:
        """c closed: its reservations no longer expire (their return to
        ready is under way) and its entry is stale. Returns the list its
        heap held them in, for the caller to free."""
        d = c.deadlines
        if d.bound != NO_ENTRY:
            self._leave(d)
        return d.clear()

    def _leave(self, d: Deadlines) -> None:
        """d's holder has no current entry any more."""
        d.bound = NO_ENTRY
        d.bound_at = NO_ENTRY_AT
        self.current -= 1

    def _sweep(self) -> None:
        """Keep the current entries only (one a holder: a holder's entry
        may have been made twice with one key)."""
        live = list({e[2]: e for e in self.heap if e[0] == e[2].bound}.values())
        heapify(live)
        self.heap = live


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
        delays = self.delay_heap.entries
        if delays:
            cands.append(delays[0] >> SHIFT)
        ttr = self.ttr_heap.next_due()
        if ttr is not None:
            cands.append(ttr)
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

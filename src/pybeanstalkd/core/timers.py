"""The queue's timers: delays coming due, pauses ending, reservations'
TTRs expiring and blocked reserves timing out, run in the reference's order
(a base class of Queue: queue.py).

The queue records the earliest time a change gave it (`due`); the engine
reads it after each event, and the I/O layer, which has the clock, calls
tick() when that time comes. A tick runs a bounded number of entries.
"""
from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING

from .heaps import CONN_SLACK, MASK, SHIFT, TUBE_SLACK, StaleHeap, StaleHeaps
from .job import TIMEOUTS, bump
from .jobmap import BITS, LOW
from .slices import SLICE

if TYPE_CHECKING:
    from .held import Held
    from .job import Job
    from .store import Store
    from .tube import Conn, Tube


class Timers(StaleHeaps):
    """Pauses and the timer heaps (a base class of Queue)."""

    # Queue's, set in its constructor (declared only).
    delay_heap: StaleHeap
    ttr_heap: StaleHeap
    wait_heap: list[tuple[int, int, Conn]]
    pause_heap: list[tuple[int, int, Tube]]
    owners: dict[int, dict[int, Held]]
    due: int | None
    seq: int
    timeouts_ct: int
    waiting_ct: int
    max_tries: int
    store: Store
    tubes: dict[bytes, Tube]

    if TYPE_CHECKING:
        # Queue's and Reserving's methods that the timers call.
        def place_ready(self, j: Job, now: int, log: bool = False,
                        fresh: bool = False) -> None: ...
        def delayed_top(self, t: Tube) -> Job | None: ...
        def _leave_delayed(self, j: Job) -> None: ...
        def _unreserve(self, j: Job) -> None: ...
        def _match(self, t: Tube, now: int, n: int = ...) -> int: ...
        def _wait_expired(self, c: Conn, now: int) -> None: ...
        def tries_used_up(self, j: Job) -> bool: ...
        def logs_tries(self, j: Job) -> bool: ...
        def come_due(self, j: Job, now: int) -> None: ...
        def bury_held(self, j: Job, pri: int) -> None: ...

    @staticmethod
    def paused(t: Tube, now: int) -> bool:
        # The pause timer, not this check, ends a pause, so that ending it
        # always runs the matcher for the tube's waiters.
        return t.pause != 0 and t.unpause_at > now

    def pause_tube(self, t: Tube, delay: int, now: int, count: bool = True) -> None:
        """count: False for a pause that is not a pause-tube command (ops/)."""
        # The reference pauses for 1 ns when told 0 (0 would mean "not
        # paused"), so the pause is over by the next look at its clock: even
        # for the next command of the same read. Here a zero pause ends at
        # once (paused() is False from here on), whatever time the next
        # command is given; stats-tube still shows pause 0.
        t.pause = delay or 1
        t.unpause_at = now + delay
        t.cmd_pause += count
        self.seq += 1
        heappush(self.pause_heap, (t.unpause_at, self.seq, t))
        self._timer(t.unpause_at)
        self.tidy_pauses()

    def tidy_pauses(self) -> None:
        """Drop the pause entries no tube needs (a pause given again, a
        tube freed while paused) once they outnumber the tubes: else a
        client pausing tubes for 2**32 s and leaving them would keep each
        one's Tube until then."""
        heap = self.pause_heap
        if len(heap) > 2 * len(self.tubes) + TUBE_SLACK:
            # (one entry a tube: a pause given twice at one time makes two alike)
            live = list({e[2]: e for e in heap
                         if e[2].alive and e[2].pause and e[0] == e[2].unpause_at}.values())
            heapify(live)
            self.pause_heap = live

    def tidy_waits(self) -> None:
        """Drop the wait entries of reserves no longer waiting (answered,
        or their connection closed) once they outnumber those waiting:
        else each would keep its connection until its timeout, up to
        2**31 s."""
        heap = self.wait_heap
        if len(heap) > 2 * self.waiting_ct + CONN_SLACK:
            live = [e for e in heap if e[2].waiting and e[2].wait_key is e]
            heapify(live)
            self.wait_heap = live

    def _timer(self, at: int) -> None:
        if self.due is None or at < self.due:
            self.due = at

    def next_due(self) -> int | None:
        """The earliest time tick() may have work (stale entries may wake early)."""
        cands = []
        if self.delay_heap:
            cands.append(self.delay_heap[0] >> SHIFT)
        if self.ttr_heap:
            cands.append((self.ttr_heap[0] >> SHIFT) + 1)
        if self.wait_heap:
            cands.append(self.wait_heap[0][0])
        if self.pause_heap:
            cands.append(self.pause_heap[0][0])
        return min(cands) if cands else None

    def tick(self, now: int, n: int = SLICE) -> bool:
        """Run the timers that are due, in the reference's order: delays,
        pauses, then reservations' TTRs and blocked reserves' timeouts.

        At most n entries a call (the I/O layer, which has a clock, ticks a
        few at a time up to a time budget: transport.run_timers): True if
        it stopped there with
        more due (next_due() <= now: the caller ticks again soon)."""
        blocks = self.blocks
        heap = self.delay_heap
        while heap and heap[0] >> SHIFT <= now:
            if not n:
                return True
            n -= 1
            key = heappop(heap)
            if self.delayed_live(key):
                id_ = key & MASK
                j = blocks[id_ >> BITS][id_ & LOW]
                assert j is not None  # (live: its job is there)
                self._leave_delayed(j)
                self.delayed_top(j.tube)  # drop the tube's now-stale top entries
                self.come_due(j, now)
        pauses = self.pause_heap
        while pauses and pauses[0][0] <= now:
            if not n:
                return True
            n -= 1
            _, _, t = heappop(pauses)
            if t.alive and t.pause and t.unpause_at <= now:
                t.pause = t.unpause_at = 0
            if t.alive and not self.paused(t, now):
                n = self._match(t, now, n)
        heap = self.ttr_heap
        owners = self.owners
        while heap and heap[0] >> SHIFT < now:
            if not n:
                return True
            n -= 1
            key = heappop(heap)
            if self.reserved_live(key):
                id_ = key & MASK
                j = blocks[id_ >> BITS][id_ & LOW]
                assert j is not None  # (live: its job is there)
                if owners[id_ >> BITS][id_].conn.gone:
                    continue  # closed: detach's slices return it, as at close
                used_up = (self.max_tries and self.tries_used_up(j)
                           and self.store.reserve_update(j))  # (a full disk: back to ready)
                j.counts = bump(j.counts, TIMEOUTS)
                self.timeouts_ct += 1
                j.tube.timeouts += 1
                if used_up:
                    j.tube.tries_used_up += 1
                    self.bury_held(j, j.pri)
                    continue
                self._unreserve(j)
                # (--max-tries: the expiry is logged, so that the tries
                # outlive a restart; the reference logs none)
                self.place_ready(j, now, log=self.max_tries > 0 and self.logs_tries(j)
                                 and self.store.reserve_update(j))
        waits = self.wait_heap
        while waits and waits[0][0] <= now:
            if not n:
                return True
            n -= 1
            entry = heappop(waits)
            c = entry[2]
            if c.waiting and c.wait_key is entry:
                self._wait_expired(c, now)
        return False

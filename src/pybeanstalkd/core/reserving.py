"""What the queue does for connections: their tubes (use, watch, ignore),
their reserves (the best ready job among the tubes they watch, or a wait,
served first come first served as jobs become ready) and their close
(a base class of Queue: queue.py).

A reserve's answer goes to the connection itself (Conn.reserved, Conn.no_job),
at once or when a job comes or the wait ends.
"""
from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING

from .heaps import CONN_SLACK, MASK, SHIFT, TUBE_SLACK, StaleHeap
from .held import drop_owners
from .job import INVALID, RESERVED, Job
from .jobmap import BITS, EMPTY, LOW, NO_JOBS, THIN
from .outcome import DEADLINE_SOON, TIMED_OUT
from .protocol import NS
from .slices import SLICE
from .timers import Timers
from .tube import DEFAULT_TUBE

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from .tube import Conn, Tube
    from .weighted import Weighted

URGENT_PRI = 1024
SAFETY_MARGIN = NS  # DEADLINE_SOON one second before a reservation expires
WIDE_WATCH = 16  # a reserve watching more tubes than this walks the tube index


class Reserving(Timers):
    """Connections and their reserves (a base class of Queue)."""

    # Queue's, set in its constructor (declared only).
    tubes: dict[bytes, Tube]
    index: list[tuple[int, int, Tube]]
    owners_new: int
    reserved_ct: int
    ready_ct: int
    urgent_ct: int
    waiting_ct: int

    if TYPE_CHECKING:
        # Queue's methods that these call.
        def tube(self, name: bytes) -> Tube: ...
        def maybe_free(self, t: Tube) -> None: ...
        def ready_top(self, t: Tube) -> Job | None: ...
        def _pop_ready(self, t: Tube) -> Job | None: ...
        def _returned(self, j: Job) -> None: ...
        def _reserve(self, c: Conn, j: Job, now: int) -> None: ...

    # -- connections -------------------------------------------------------

    def attach(self, c: Conn) -> None:
        default = self.tubes[DEFAULT_TUBE]
        c.use = default
        default.using += 1
        c.watch.append(default)
        default.watching += 1

    def use(self, c: Conn, name: bytes) -> None:
        t = self.tube(name)  # create first, then release: list order depends on it
        old, c.use = c.use, t
        t.using += 1
        old.using -= 1
        self.maybe_free(old)

    def watch(self, c: Conn, name: bytes) -> int:
        t = self.tube(name)
        if t not in c.watch:
            c.watch.append(t)
            t.watching += 1
        return len(c.watch)

    def ignore(self, c: Conn, name: bytes) -> int | None:
        """The new watch count, or None for NOT_IGNORED."""
        t = self.tubes.get(name)
        if t is not None and t in c.watch:
            if len(c.watch) < 2:
                return None
            c.watch.remove(t)
            if c.weighted is not None:
                c.weighted.forget(t)
            t.watching -= 1
            self.maybe_free(t)
        return len(c.watch)

    def detach(self, c: Conn, now: int) -> None:
        """The connection closed: its reserved jobs go back to ready, in
        reservation order, SLICE a step."""
        if c.waiting:
            self._unwait(c)
        if c.nreserved:
            c.gone = True
            self.spawn(self._return_reserved(c, now))
        else:
            c.deadlines = StaleHeap(CONN_SLACK)
            # Its open block refers back to it: a cycle, which the garbage
            # collector never sees once frozen (server/loop.py), so every
            # connection that ever reserved would stay in memory.
            c.held.clear()
            c.open_held = None
        t = c.use
        t.using -= 1
        self.maybe_free(t)
        for t in list(c.watch):
            t.watching -= 1
            self.maybe_free(t)

    def _return_reserved(self, c: Conn, now: int) -> Generator[None, int, None]:
        # Tick leaves a gone connection's jobs to this; only a flush-tube
        # may delete one between slices (then it is no longer RESERVED).
        owners = self.owners
        left = SLICE
        for h in list(c.held.values()):
            for j in list(h.jobs.values()):
                if not left:
                    now = yield
                    left = SLICE
                left -= 1
                if j.state != RESERVED:
                    continue  # deleted meanwhile
                id_ = j.id
                k = id_ >> BITS
                b = owners[k]
                del b[id_]
                if len(b) <= THIN and k != self.owners_new:
                    drop_owners(owners, b, k)
                j.tube.nreserved -= 1
                self.reserved_ct -= 1
                j.state = INVALID
                self._returned(j)
                self.place_ready(j, now)
            c.held.pop(h.key, None)  # (gone already if a flush emptied it)
            h.jobs = EMPTY  # freed block by block: all at the end is O(n) in one go
        c.nreserved = 0
        c.open_held = None
        deadlines, c.deadlines = c.deadlines, StaleHeap(CONN_SLACK)
        # Freeing a big list is O(n) in one go too: shrink it first.
        while len(deadlines) > SLICE:
            yield
            del deadlines[-SLICE:]

    # -- matching jobs with reservers --------------------------------------

    def _match(self, t: Tube, now: int, n: int = SLICE) -> int:
        """Hand t's ready jobs to its waiting connections, first come first
        served, at most n of them; the rest go on in background slices.
        Returns what is left of n.

        Invariant: no unpaused tube has both ready jobs and waiters, except
        while t.matching; so the best job in t is the best job for
        each of its waiters."""
        while t.waiting and t.nready:
            if not n:
                if not t.matching:
                    t.matching = True
                    self.spawn(self._match_later(t))
                return 0
            j = self._pop_ready(t)
            if j is None:
                break  # (hidden by their concurrency keys: extqueue.py)
            n -= 1
            c = next(iter(t.waiting))
            self._reserve(c, j, now)
        return n

    def _match_later(self, t: Tube) -> Generator[None, int, None]:
        now = yield
        t.matching = False
        if t.alive and not self.paused(t, now):
            self._match(t, now)  # queues another slice if needed

    def _index_push(self, t: Tube, key: int) -> None:
        t.ikey = key
        heappush(self.index, (key, t.seq, t))
        if len(self.index) > 2 * len(self.tubes) + TUBE_SLACK:
            live = [e for e in self.index if e[2].alive and e[0] == e[2].ikey]
            heapify(live)
            self.index = live

    def _best_ready_wide(self, c: Conn, now: int) -> Job | None:
        """The best ready job among c's many watched tubes, walking the index
        in key order: O(log T) when c watches the tubes that have jobs."""
        index, watch, aside, best = self.index, c.watch, [], None
        while index:
            key, _, t = entry = heappop(index)
            if not t.alive or key != t.ikey:
                continue  # superseded
            j = self.ready_top(t)
            if j is None:
                t.ikey = None
                continue
            top = (j.pri << SHIFT) | j.id
            if top != key:  # the bound was low: refresh it
                t.ikey = top
                heappush(index, (top, t.seq, t))
                continue
            aside.append(entry)
            if t in watch and not self.paused(t, now):
                best = j
                break
        for entry in aside:
            heappush(index, entry)
        return best

    def _best_ready(self, c: Conn, now: int) -> Job | None:
        if len(c.watch) > WIDE_WATCH:
            return self._best_ready_wide(c, now)
        best = None
        for t in c.watch:
            if t.nready and not self.paused(t, now):
                j = self.ready_top(t)  # (None only if extqueue.py hides them all)
                if j is not None and (best is None or (j.pri, j.id) < (best.pri, best.id)):
                    best = j
        return best

    def _best_ready_unclaimed(self, c: Conn, now: int) -> Job | None:
        """The best ready job in c's tubes that have no waiters: the others'
        jobs go to their earlier waiters first (their slices are pending)."""
        best = None
        for t in c.watch:
            if t.nready and not t.waiting and not self.paused(t, now):
                j = self.ready_top(t)
                if j is not None and (best is None or (j.pri, j.id) < (best.pri, best.id)):
                    best = j
        return best

    def _deadline_soon(self, c: Conn, now: int) -> bool:
        soonest = self._top(c.deadlines, self._owned_live(c)) if c.nreserved else None
        return soonest is not None and now >= soonest.deadline - SAFETY_MARGIN

    def _owned_live(self, c: Conn) -> Callable[[int], bool]:
        def live(key: int) -> bool:
            id_ = key & MASK
            j: Job | None = self.blocks.get(id_ >> BITS, NO_JOBS)[id_ & LOW]
            return (j is not None and j.state == RESERVED and j.deadline == key >> SHIFT
                    and self.owners[id_ >> BITS][id_].conn is c)
        return live

    def reserve(self, c: Conn, timeout: int | None, now: int) -> None:
        """reserve / reserve-with-timeout (timeout in ns)."""
        # (the heap's first entry, stale or not, is no later than the soonest
        # live deadline: when it is not soon, no reservation is)
        if (c.nreserved and (c.deadlines[0] >> SHIFT) - SAFETY_MARGIN <= now
                and self._deadline_soon(c, now) and not any(t.nready for t in c.watch)):
            c.no_job(DEADLINE_SOON)
            return
        watch = c.watch.items
        if len(watch) == 1:  # the common case, inline (_ready_for)
            t = watch[0]
            j = (self.ready_top(t) if t.nready and not t.waiting
                 and not (t.pause and t.unpause_at > now) else None)
        else:
            j = self._ready_for(c, now)
        if j is not None:
            t = j.tube
            run = t.run
            if run and run[0] == j.id:
                run.popleft()  # (else ready_top would look it up again to drop it)
            # _leave_ready(j), inline
            t.nready -= 1
            self.ready_ct -= 1
            if j.pri < URGENT_PRI:
                t.urgent -= 1
                self.urgent_ct -= 1
            self._reserve(c, j, now)
            return
        c.waiting = True
        c.timeout = timeout
        self.waiting_ct += 1
        for t in c.watch:
            t.waiting[c] = None
        due = None if timeout is None else now + timeout
        if c.nreserved:
            # (not None: each of c's reservations has a live entry in c.deadlines)
            soonest: Job = self._top(c.deadlines, self._owned_live(c))  # type: ignore[assignment]
            soon = soonest.deadline - SAFETY_MARGIN
            due = soon if due is None else min(due, soon)
        if due is not None:
            self.seq += 1
            c.wait_key = (due, self.seq, c)
            if due <= now:
                self._wait_expired(c, now)
            else:
                heappush(self.wait_heap, c.wait_key)
                self._timer(due)

    def _ready_for(self, c: Conn, now: int) -> Job | None:
        """The job a reserve of c's would get at once: the best ready one in
        the tubes it watches, unpaused, past the other reservers that wait
        for those tubes (they come first)."""
        watch = c.watch.items
        if len(watch) == 1:
            t = watch[0]
            return self.ready_top(t) if t.nready and not t.waiting and not self.paused(t, now) else None
        if c.weighted is not None and c.weighted.mode:
            return self._weighted(c, c.weighted, now)
        j = self._best_ready(c, now)
        if j is not None and j.tube.waiting:
            j = self._best_ready_unclaimed(c, now)
        return j

    def _weighted(self, c: Conn, policy: Weighted, now: int) -> Job | None:
        """reserve-mode weighted (weighted-fair): a tube drawn among c's
        watched tubes with a ready job, unpaused and with no reserver
        waiting for it (weighted.py); then that tube's best job.
        Priorities across tubes do not count, as in tuber."""
        t = policy.draw([t for t in c.watch if t.nready and not t.waiting
                         and not self.paused(t, now) and self.ready_top(t) is not None])
        return None if t is None else self.ready_top(t)

    def reserve_now(self, c: Conn, now: int) -> bool:
        """Reserve what a reserve would get at once, if anything (True);
        never waits (reserve-batch)."""
        j = self._ready_for(c, now)
        if j is None:
            return False
        self._reserve(c, self._pop_ready(j.tube), now)  # type: ignore[arg-type]  # (j: its top)
        return True

    def _unwait(self, c: Conn) -> None:
        c.waiting = False
        timed = c.wait_key is not None
        c.wait_key = None
        self.waiting_ct -= 1
        for t in c.watch:
            del t.waiting[c]
        if timed:
            self.tidy_waits()

    def _wait_expired(self, c: Conn, now: int) -> None:
        soon = self._deadline_soon(c, now)
        self._unwait(c)
        c.no_job(DEADLINE_SOON if soon else TIMED_OUT)
        c.woken()

    def hangup(self, c: Conn) -> None:
        """The peer half-closed while blocked in reserve: TIMED_OUT."""
        if c.waiting:
            self._unwait(c)
            c.no_job(TIMED_OUT)

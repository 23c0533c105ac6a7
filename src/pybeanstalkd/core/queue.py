"""Tubes, reservations and timers (a job itself: job.py). Pure: every call
is given `now`.

`now` is a monotonic clock in nanoseconds, so a wall-clock jump cannot time
out every reserved job (beanstalkd issue #166).

Heaps hold plain ints, `key << 64 | id`, with entries removed lazily and
swept when stale ones outnumber the live (heaps.py).

Work that moves many jobs at once runs in slices of at most SLICE jobs
(slices.py: Queue.spawn and step). Below one slice nothing changes. A tube
and a connection's fields are in tube.py; where records go, store.py.

A tube's freshly put jobs of one priority arrive in id order, which is ready
order: they queue in a deque of ids (`Tube.run`, 8 bytes a job) instead of
the heap (56). A run entry is live while its job has never been reserved.
"""
from __future__ import annotations

from collections import deque
from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING

from .job import (
    BURIED,
    BURIES,
    DELAYED,
    INVALID,
    JOB_OVERHEAD,
    KICKS,
    M32,
    READY,
    RELEASES,
    RESERVED,
    RESERVED_OVERHEAD,
    TIMEOUTS,
    UNPLACED,
    Job,
    bump,
    times,
)
from .protocol import (
    BURIED as BURIED_REPLY,
    DEADLINE_SOON,
    DELETED,
    INTERNAL_ERROR,
    NOT_FOUND,
    NS,
    OUT_OF_MEMORY,
    RELEASED,
    TIMED_OUT,
)
from .jobmap import BITS, EMPTY, THIN, JobMap, drop
from .held import SIZE as HELD_SIZE, Held, drop_owners, new_owners, open_block, thinned
from .hist import SUM, new as new_hist
from .heaps import (  # noqa: F401 (SMALL_HEAP: the tests' name for it)
    CONN_SLACK, MASK, SHARED_SLACK, SHIFT, SMALL_HEAP, TUBE_SLACK, StaleHeaps)
from .slices import SLICE
from .store import NullStore
from .tube import Conn, SwapList, Tube

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterable

    from .store import Store

URGENT_PRI = 1024
SAFETY_MARGIN = NS  # DEADLINE_SOON one second before a reservation expires
WIDE_WATCH = 16  # a reserve watching more tubes than this walks the tube index
WORK_DELETE, WORK_RELEASE, WORK_BURY = 0, 1, 2  # Tube.work_hist's outcomes


class Queue(StaleHeaps):
    def __init__(self, now: int) -> None:
        super().__init__()
        self.jobs = JobMap(self)
        self.blocks = self.jobs.blocks  # what the hot paths index
        self.tubes: dict[bytes, Tube] = {}
        self.tube_list = SwapList()
        self.next_id = 1
        self.delay_heap: list[int] = []  # every tube's delayed jobs
        self.ttr_heap: list[int] = []  # every reserved job
        self.owners: dict[int, dict[int, Held]] = {}  # id >> BITS -> {id: Held}
        self.owners_new = -1  # the last block of owners made (kept when empty)
        self.wait_heap: list[tuple[int, int, Conn]] = []  # (due, seq, conn) for blocked reserves
        self.pause_heap: list[tuple[int, int, Tube]] = []  # (unpause_at, seq, tube)
        # Tubes with ready jobs, by a lower bound of their best job's key:
        # (key, seq, tube). An entry is current while key == tube.ikey.
        self.index: list[tuple[int, int, Tube]] = []
        self.seq = 0
        self.ready_ct = self.urgent_ct = self.reserved_ct = 0
        self.delayed_ct = self.buried_ct = self.waiting_ct = 0
        self.timeouts_ct = self.total_jobs = 0
        self.body_bytes = 0  # the bodies of stored jobs, CRLF included
        self.due: int | None = None  # earliest timer pushed since the engine last looked
        # Timer entries a tick may run. The I/O layer, which has a clock,
        # ticks a few at a time up to a time budget (transport.run_timers).
        self.tick_slice = SLICE
        self.store: Store = NullStore()
        self.loading: dict[Tube, int] | None = None  # jobs per tube during recovery
        self.sweeping: set[int] = set()  # id() of the heaps and runs being swept
        self.matching: set[Tube] = set()  # tubes whose waiters are served in slices
        self.default = self.tube(b"default")

    # -- tubes -------------------------------------------------------------

    def tube(self, name: bytes) -> Tube:
        t = self.tubes.get(name)
        if t is None:
            t = self.tubes[name] = Tube(name)
            self.seq += 1
            t.seq = self.seq
            self.tube_list.append(t)
        return t

    def maybe_free(self, t: Tube) -> None:
        if (t.using or t.watching or t.nready or t.ndelayed or t.nreserved
                or t.buried or t is self.default or (self.loading and self.loading.get(t))):
            return
        del self.tubes[t.name]
        self.tube_list.remove(t)
        t.alive = False

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

    # -- connections -------------------------------------------------------

    def attach(self, c: Conn) -> None:
        c.use = self.default
        self.default.using += 1
        c.watch.append(self.default)
        self.default.watching += 1

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
            c.deadlines = []
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
        # Nothing else changes c's blocks meanwhile (tick leaves a gone
        # connection's jobs to this), so one iterator serves every slice.
        owners = self.owners
        left = SLICE
        for h in list(c.held.values()):
            for j in h.jobs.values():
                if not left:
                    now = yield
                    left = SLICE
                left -= 1
                id_ = j.id
                k = id_ >> BITS
                b = owners[k]
                del b[id_]
                if len(b) <= THIN and k != self.owners_new:
                    drop_owners(owners, b, k)
                j.tube.nreserved -= 1
                self.reserved_ct -= 1
                j.state = INVALID
                self.place_ready(j, now)
            del c.held[h.key]
            h.jobs = EMPTY  # freed block by block: all at the end is O(n) in one go
        c.nreserved = 0
        c.open_held = None
        deadlines, c.deadlines = c.deadlines, []
        # Freeing a big list is O(n) in one go too: shrink it first.
        while len(deadlines) > SLICE:
            yield
            del deadlines[-SLICE:]

    def memory_used(self) -> int:
        """What stored jobs cost, as --max-memory counts it."""
        return (self.body_bytes + len(self.jobs) * JOB_OVERHEAD
                + self.reserved_ct * RESERVED_OVERHEAD)

    # -- job state changes -------------------------------------------------

    def new_job(self, t: Tube, pri: int, delay: int, ttr: int, now: int) -> Job:
        """Allocate a job id (put uses one up even if the job is then dropped)."""
        j = Job(self.next_id, t, pri, delay, ttr, b"", now)
        self.next_id += 1
        return j

    def insert(self, j: Job, now: int, log: bool = True) -> None:
        """A put's job, body received and binlog space reserved. log=False:
        the caller stores its record (a follower has the leader's bytes)."""
        id_ = j.id
        b = self.blocks.get(id_ >> BITS)
        if b is None:
            b = self.blocks[id_ >> BITS] = {}
        b[id_] = j
        self.body_bytes += len(j.body)
        t = j.tube
        t.total_jobs += 1
        self.total_jobs += 1
        delay = j.times[0]
        if delay:
            self.place_delayed(j, delay, now, log=log)
        else:
            self.place_ready(j, now, log=log, fresh=True)

    def load(self, jobs: Iterable[Job], now: int, wall_offset: int) -> None:
        """Place jobs recovered from the binlog, in bulk: one heapify per heap.

        Delayed jobs keep their wall-clock deadline; buried ones their bury
        order, and their `buries` count is not incremented (beanstalkd #668)."""
        buried: list[Job] = []
        touched: set[Tube] = set()
        for j in jobs:
            self.jobs[j.id] = j
            self.body_bytes += len(j.body)
            t = j.tube
            touched.add(t)
            if j.state == BURIED:
                buried.append(j)
                continue
            deadline = j.deadline - wall_offset
            if j.state == DELAYED and deadline > now:
                j.deadline = deadline
                key = (deadline << SHIFT) | j.id
                t.delayed.append(key)
                self.delay_heap.append(key)
                t.ndelayed += 1
                self._timer(deadline)
            else:
                j.state = READY
                j.deadline = now  # ready since (for the wait histogram)
                t.ready.append((j.pri << SHIFT) | j.id)
                t.nready += 1
                if j.pri < URGENT_PRI:
                    t.urgent += 1
        for t in touched:
            heapify(t.ready)
            heapify(t.delayed)
            if t.ready:
                self._index_push(t, t.ready[0])
            self.ready_ct += t.nready
            self.urgent_ct += t.urgent
            self.delayed_ct += t.ndelayed
        heapify(self.delay_heap)
        buried.sort(key=lambda j: j.deadline)  # the bury position
        for j in buried:
            self.place_buried(j)

    def place_ready(self, j: Job, now: int, log: bool = False, fresh: bool = False) -> None:
        j.state = READY
        t = j.tube
        key = (j.pri << SHIFT) | j.id
        run = t.run
        if fresh and (not run or (j.pri == t.run_pri and j.id > run[-1])):
            # (a put whose body came late has a lower id than the run's last)
            if run is None:
                run = t.run = deque()
            if not run:
                t.run_pri = j.pri
            run.append(j.id)
        else:
            # Not in a run: the deadline, unused while ready, says since when
            # (a run's job has 0 there and is ready since it was created).
            j.deadline = now
            heappush(t.ready, key)
        if t.ikey is None or key < t.ikey:
            self._index_push(t, key)
        t.nready += 1
        self.ready_ct += 1
        if j.pri < URGENT_PRI:
            t.urgent += 1
            self.urgent_ct += 1
        if log:  # logged as ready, before a waiting reserver may take it
            self.store.write(j)
        if t.waiting and not self.paused(t, now):
            self._match(t, now)
        elif len(t.ready) + (len(run) if run else 0) > 2 * t.nready + TUBE_SLACK:
            self._tidy_ready(t)

    def _tidy_ready(self, t: Tube) -> None:
        # One of the two holds more than its share of stale entries.
        if len(t.ready) > t.nready + 32:
            self._sweep(t.ready, self.ready_live,
                        lambda: len(t.ready) > 2 * t.nready + TUBE_SLACK)
        run = t.run
        if run and len(run) > t.nready + 32 and id(run) not in self.sweeping:
            self.sweeping.add(id(run))
            self.spawn(self._drain_run(t, run))

    def _drain_run(self, t: Tube, run: deque[int]) -> Generator[None, int, None]:
        """Drop a stale-ridden run's stale entries, from the front (so the
        run stays in id order while new puts append to it); while it still
        holds too many, its live entries move to the heap."""
        yield
        last = run[-1] if run else 0
        k = SLICE
        while run and run[0] <= last:
            if not k:
                yield
                k = SLICE
            k -= 1
            i = run[0]
            if self.run_job(i) is None:
                run.popleft()
            elif len(run) > t.nready + 32:
                run.popleft()
                heappush(t.ready, (t.run_pri << SHIFT) | i)
            else:
                break
        self.sweeping.discard(id(run))

    def _leave_ready(self, j: Job) -> None:
        t = j.tube
        t.nready -= 1
        self.ready_ct -= 1
        if j.pri < URGENT_PRI:
            t.urgent -= 1
            self.urgent_ct -= 1
        j.state = INVALID

    def place_delayed(self, j: Job, delay: int, now: int, log: bool = False) -> None:
        j.state = DELAYED
        j.deadline = now + delay
        if log:
            self.store.write(j)
        key = (j.deadline << SHIFT) | j.id
        t = j.tube
        heappush(t.delayed, key)
        heappush(self.delay_heap, key)
        t.ndelayed += 1
        self.delayed_ct += 1
        self._tidy_delayed(t)
        self._timer(j.deadline)

    def _tidy_delayed(self, t: Tube) -> None:
        """Sweep t's delayed heap, and the queue's, once stale entries
        outnumber the live."""
        if len(t.delayed) > 2 * t.ndelayed + TUBE_SLACK:
            self._sweep(t.delayed, self.delayed_live,
                        lambda: len(t.delayed) > 2 * t.ndelayed + TUBE_SLACK)
        if len(self.delay_heap) > 2 * self.delayed_ct + SHARED_SLACK:
            self._sweep(self.delay_heap, self.delayed_live,
                        lambda: len(self.delay_heap) > 2 * self.delayed_ct + SHARED_SLACK)

    def _tidy_after_delete(self, t: Tube, was: int) -> None:
        """A delete by id leaves a stale entry that no push may come to sweep."""
        if was == READY:
            run = t.run
            if len(t.ready) + (len(run) if run else 0) > 2 * t.nready + TUBE_SLACK:
                self._tidy_ready(t)
        else:
            self._tidy_delayed(t)

    def _leave_delayed(self, j: Job) -> None:
        j.tube.ndelayed -= 1
        self.delayed_ct -= 1
        j.state = INVALID

    def place_buried(self, j: Job) -> None:
        j.state = BURIED
        j.tube.buried[j.id] = j
        self.buried_ct += 1

    def _leave_buried(self, j: Job) -> None:
        del j.tube.buried[j.id]
        self.buried_ct -= 1
        j.state = INVALID

    def _reserve(self, c: Conn, j: Job, now: int) -> None:
        # The wait from ready to reserved (ready since: see _make_ready).
        t = j.tube
        d = now - (j.deadline or j.created)
        h = t.wait_hist
        if h is None:
            h = t.wait_hist = new_hist()
        h[d.bit_length()] += 1
        h[SUM] += d
        j.state = RESERVED
        id_ = j.id
        held = c.open_held
        if held is None or len(held.jobs) >= HELD_SIZE:
            held = open_block(c)
        held.jobs[id_] = j
        b = self.owners.get(id_ >> BITS)
        if b is None:
            b = new_owners(self, id_ >> BITS)
        b[id_] = held
        c.nreserved += 1
        n = j.counts  # bump(j.counts, RESERVES), inline
        j.counts = n + 1 if n & M32 != M32 else n & ~M32
        deadline = j.deadline = now + j.times[1]
        t.nreserved += 1
        self.reserved_ct += 1
        key = (deadline << SHIFT) | id_
        heappush(c.deadlines, key)
        heappush(self.ttr_heap, key)
        if len(self.ttr_heap) > 2 * self.reserved_ct + SHARED_SLACK:
            self._sweep_ttr()
        due = self.due  # _timer(deadline + 1), inline: expiry is "deadline < now"
        if due is None or deadline < due:
            self.due = deadline + 1
        if c.waiting:
            self._unwait(c)
            c.woken()
        c.send_job(b"RESERVED", j)

    def _unreserve(self, j: Job) -> None:
        j.state = INVALID  # first: the sweep below must see the entry as stale
        id_ = j.id
        k = id_ >> BITS
        b = self.owners[k]
        held = b.pop(id_)
        if len(b) <= THIN and k != self.owners_new:
            drop_owners(self.owners, b, k)
        c = held.conn
        jobs = held.jobs
        del jobs[id_]
        if held is not c.open_held and len(jobs) <= THIN:
            thinned(held)
        c.nreserved -= 1
        if not c.nreserved:
            if len(c.deadlines) > SLICE:
                self.spawn(self._free(c.deadlines))
            c.deadlines = []
        elif len(c.deadlines) > 2 * c.nreserved + CONN_SLACK:
            self._sweep_deadlines(c)
        j.tube.nreserved -= 1
        self.reserved_ct -= 1

    def remove(self, j: Job) -> None:
        """Take a job out of whatever set holds it (not reserved)."""
        if j.state == READY:
            self._leave_ready(j)
        elif j.state == DELAYED:
            self._leave_delayed(j)
        elif j.state == BURIED:
            self._leave_buried(j)

    def ready_top(self, t: Tube) -> Job | None:
        # _run_job and _top(t.ready, _ready_live), inline: every reserve's path
        blocks = self.blocks
        run = t.run
        j: Job | None = None
        while run:
            id_ = run[0]
            j = blocks.get(id_ >> BITS, EMPTY).get(id_)
            if j is not None and j.state == READY and j.deadline == 0 and not j.counts & M32:
                break
            j = None
            run.popleft()
        ready = t.ready
        while ready:
            key = ready[0]
            id_ = key & MASK
            h: Job | None = blocks.get(id_ >> BITS, EMPTY).get(id_)
            if h is not None and h.state == READY and h.pri == key >> SHIFT:
                if j is None or key < ((j.pri << SHIFT) | j.id):
                    return h
                break
            heappop(ready)
        return j

    def _pop_ready(self, t: Tube) -> Job:
        """Take the tube's best ready job (it has one) out of its run or heap."""
        j: Job = self.ready_top(t)  # type: ignore[assignment]  # (not None: t has one)
        run = t.run
        if run and run[0] == j.id:
            run.popleft()
        else:
            heappop(t.ready)
        self._leave_ready(j)
        return j

    def delayed_top(self, t: Tube) -> Job | None:
        return self._top(t.delayed, self.delayed_live)

    def buried_top(self, t: Tube) -> Job | None:
        return next(iter(t.buried.values()), None)

    # -- matching jobs with reservers --------------------------------------

    def _match(self, t: Tube, now: int, n: int = SLICE) -> int:
        """Hand t's ready jobs to its waiting connections, first come first
        served, at most n of them; the rest go on in background slices.
        Returns what is left of n.

        Invariant: no unpaused tube has both ready jobs and waiters, except
        while t is in self.matching; so the best job in t is the best job for
        each of its waiters."""
        while t.waiting and t.nready:
            if not n:
                if t not in self.matching:
                    self.matching.add(t)
                    self.spawn(self._match_later(t))
                return 0
            n -= 1
            j = self._pop_ready(t)
            c = next(iter(t.waiting))
            self._reserve(c, j, now)
        return n

    def _match_later(self, t: Tube) -> Generator[None, int, None]:
        now = yield
        self.matching.discard(t)
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
                j: Job = self.ready_top(t)  # type: ignore[assignment]  # (not None: t.nready)
                if best is None or (j.pri, j.id) < (best.pri, best.id):
                    best = j
        return best

    def _best_ready_unclaimed(self, c: Conn, now: int) -> Job | None:
        """The best ready job in c's tubes that have no waiters: the others'
        jobs go to their earlier waiters first (their slices are pending)."""
        best = None
        for t in c.watch:
            if t.nready and not t.waiting and not self.paused(t, now):
                j: Job = self.ready_top(t)  # type: ignore[assignment]  # (not None: t.nready)
                if best is None or (j.pri, j.id) < (best.pri, best.id):
                    best = j
        return best

    def _deadline_soon(self, c: Conn, now: int) -> bool:
        soonest = self._top(c.deadlines, self._owned_live(c)) if c.nreserved else None
        return soonest is not None and now >= soonest.deadline - SAFETY_MARGIN

    def _owned_live(self, c: Conn) -> Callable[[int], bool]:
        def live(key: int) -> bool:
            id_ = key & MASK
            j: Job | None = self.blocks.get(id_ >> BITS, EMPTY).get(id_)
            return (j is not None and j.state == RESERVED and j.deadline == key >> SHIFT
                    and self.owners[id_ >> BITS][id_].conn is c)
        return live

    def reserve(self, c: Conn, timeout: int | None, now: int) -> None:
        """reserve / reserve-with-timeout (timeout in ns)."""
        # (the heap's first entry, stale or not, is no later than the soonest
        # live deadline: when it is not soon, no reservation is)
        if (c.nreserved and (c.deadlines[0] >> SHIFT) - SAFETY_MARGIN <= now
                and self._deadline_soon(c, now) and not any(t.nready for t in c.watch)):
            c.send(DEADLINE_SOON)
            return
        watch = c.watch.items
        if len(watch) == 1:  # the common case, inline
            t = watch[0]
            j = (self.ready_top(t) if t.nready and not t.waiting
                 and not (t.pause and t.unpause_at > now) else None)
        else:
            j = self._best_ready(c, now)
            if j is not None and j.tube.waiting:
                j = self._best_ready_unclaimed(c, now)
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

    def _unwait(self, c: Conn) -> None:
        c.waiting = False
        c.wait_key = None
        self.waiting_ct -= 1
        for t in c.watch:
            del t.waiting[c]

    def _wait_expired(self, c: Conn, now: int) -> None:
        soon = self._deadline_soon(c, now)
        self._unwait(c)
        c.send(DEADLINE_SOON if soon else TIMED_OUT)
        c.woken()

    def hangup(self, c: Conn) -> None:
        """The peer half-closed while blocked in reserve: TIMED_OUT."""
        if c.waiting:
            self._unwait(c)
            c.send(TIMED_OUT)

    # -- commands on jobs --------------------------------------------------

    def reserve_job(self, c: Conn, id_: int, now: int) -> bool:
        j: Job | None = self.blocks.get(id_ >> BITS, EMPTY).get(id_)
        if j is None or j.state == RESERVED:
            return False
        ready = j.state == READY
        self.remove(j)
        if not ready:
            j.deadline = now  # no wait from ready: counted as 0 by _reserve, taken back
        self._reserve(c, j, now)
        if not ready:
            j.tube.wait_hist[0] -= 1  # type: ignore[index]  # (not None: _reserve made it)
        return True

    @staticmethod
    def _worked(j: Job, outcome: int, now: int) -> None:
        """Count the time since j was reserved (or last touched): its
        deadline less its ttr."""
        d = now - j.deadline + j.times[1]
        t = j.tube
        if t.work_hist is None:
            t.work_hist = (new_hist(), new_hist(), new_hist())
        h = t.work_hist[outcome]
        h[d.bit_length()] += 1
        h[SUM] += d

    def delete(self, c: Conn | None, id_: int, now: int, count: bool = True) -> bytes:
        """count: False for a delete that is not a delete command (ops/; the
        job is not reserved, so c is not consulted)."""
        b: dict[int, Job] = self.blocks.get(id_ >> BITS, EMPTY)
        j = b.get(id_)
        if j is None:
            return NOT_FOUND
        if j.state == RESERVED:
            if self.owners[id_ >> BITS][id_].conn is not c:
                return NOT_FOUND
            # _worked(j, WORK_DELETE, now), inline: this is every job's path
            d = now - j.deadline + j.times[1]
            w = j.tube.work_hist
            if w is None:
                w = j.tube.work_hist = (new_hist(), new_hist(), new_hist())
            h = w[WORK_DELETE]
            h[d.bit_length()] += 1
            h[SUM] += d
            self._unreserve(j)
        else:
            was = j.state
            self.remove(j)
            if was != BURIED:
                self._tidy_after_delete(j.tube, was)
        del b[id_]
        if len(b) <= THIN:
            drop(self.blocks, b, id_, self.next_id)
        self.body_bytes -= len(j.body)
        t = j.tube
        t.cmd_delete += count
        ok = self.store.write(j)  # state INVALID: a delete record
        if not (t.using or t.watching):
            self.maybe_free(t)
        return DELETED if ok else INTERNAL_ERROR

    def _held_by(self, c: Conn, id_: int) -> Job | None:
        """The job id_ if c has it reserved."""
        held: Held | None = self.owners.get(id_ >> BITS, EMPTY).get(id_)
        if held is None or held.conn is not c:
            return None
        return held.jobs[id_]

    def release(self, c: Conn, id_: int, pri: int, delay: int, now: int) -> bytes:
        j = self._held_by(c, id_)
        if j is None:
            return NOT_FOUND
        if delay and not self.store.reserve_update(j):
            return OUT_OF_MEMORY  # the job stays reserved: nothing is lost
        self._worked(j, WORK_RELEASE, now)
        self._unreserve(j)
        j.pri = pri
        j.times = times(delay, j.times[1])
        j.counts = bump(j.counts, RELEASES)
        if delay:
            self.place_delayed(j, delay, now, log=True)
        else:
            self.place_ready(j, now)
        return RELEASED

    def bury(self, c: Conn, id_: int, pri: int, now: int) -> bytes:
        j = self._held_by(c, id_)
        if j is None:
            return NOT_FOUND
        if not self.store.reserve_update(j):
            return INTERNAL_ERROR  # the job stays reserved: nothing is lost
        self._worked(j, WORK_BURY, now)
        j.tube.buries += 1
        self._unreserve(j)
        j.pri = pri
        j.counts = bump(j.counts, BURIES)
        j.deadline = UNPLACED  # the binlog records where, for the buried order
        self.place_buried(j)
        self.store.write(j)
        return BURIED_REPLY

    def touch(self, c: Conn, id_: int, now: int) -> bool:
        j = self._held_by(c, id_)
        if j is None:
            return False
        j.deadline = now + j.times[1]
        key = (j.deadline << SHIFT) | j.id
        heappush(c.deadlines, key)
        heappush(self.ttr_heap, key)
        if len(c.deadlines) > 2 * c.nreserved + CONN_SLACK:
            self._sweep_deadlines(c)
        if len(self.ttr_heap) > 2 * self.reserved_ct + SHARED_SLACK:
            self._sweep_ttr()
        self._timer(j.deadline + 1)
        return True

    def kick(self, t: Tube, bound: int, now: int) -> Generator[None, int, int]:
        """Kick buried jobs if the tube has any, else delayed ones: a generator
        of slices of SLICE jobs (send it the time), whose value is the count.

        It kicks at most what the tube held when it started, so jobs buried
        or delayed between slices do not make it run on."""
        n = 0
        buried = bool(t.buried)
        bound = min(bound, len(t.buried) if buried else t.ndelayed)
        k = SLICE
        while n < bound:
            if not k:
                now = yield
                k = SLICE
            k -= 1
            j = next(iter(t.buried.values()), None) if buried else self.delayed_top(t)
            if j is None or not self.store.reserve_update(j):
                break  # on a full disk the job stays where it is
            self.remove(j)
            j.counts = bump(j.counts, KICKS)
            self.place_ready(j, now, log=True)
            n += 1
        return n

    def kick_job(self, id_: int, now: int) -> bool:
        j: Job | None = self.blocks.get(id_ >> BITS, EMPTY).get(id_)
        if j is None or j.state not in (BURIED, DELAYED) or not self.store.reserve_update(j):
            return False
        self.remove(j)
        j.counts = bump(j.counts, KICKS)
        self.place_ready(j, now, log=True)
        return True

    # -- time --------------------------------------------------------------

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

    def tick(self, now: int) -> bool:
        """Run the timers that are due, in the reference's order: delays,
        pauses, then reservations' TTRs and blocked reserves' timeouts.

        At most tick_slice entries a call: True if it stopped there with
        more due (next_due() <= now: the caller ticks again soon)."""
        n = self.tick_slice
        blocks = self.blocks
        heap = self.delay_heap
        while heap and heap[0] >> SHIFT <= now:
            if not n:
                return True
            n -= 1
            key = heappop(heap)
            if self.delayed_live(key):
                id_ = key & MASK
                j = blocks[id_ >> BITS][id_]
                self._leave_delayed(j)
                self.delayed_top(j.tube)  # drop the tube's now-stale top entries
                self.place_ready(j, now)
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
            if self._reserved_live(key):
                id_ = key & MASK
                j = blocks[id_ >> BITS][id_]
                if owners[id_ >> BITS][id_].conn.gone:
                    continue  # closed: detach's slices return it, as at close
                j.counts = bump(j.counts, TIMEOUTS)
                self.timeouts_ct += 1
                j.tube.timeouts += 1
                self._unreserve(j)
                self.place_ready(j, now)
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

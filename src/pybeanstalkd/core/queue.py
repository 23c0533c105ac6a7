"""Tubes, reservations and timers (a job itself: job.py). Pure: every call
is given `now`.

`now` is a monotonic clock in nanoseconds, so a wall-clock jump cannot time
out every reserved job (beanstalkd issue #166).

Heaps hold plain ints, `key << 64 | id`, which heapq compares in C and which
cost one small object per entry. Entries are removed lazily: an entry is live
while the job it names is still in that state with that key. Heaps are
rebuilt when stale entries outnumber live ones, so memory stays O(live).

A tube's freshly put jobs of one priority arrive in id order, which is ready
order: they queue in a deque of ids (`Tube.run`, 8 bytes a job) instead of
the heap (56). A run entry is live while its job has never been reserved.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from heapq import heapify, heappop, heappush

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
    RESERVES,
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
    job_header,
)

URGENT_PRI = 1024
SAFETY_MARGIN = NS  # DEADLINE_SOON one second before a reservation expires
SHIFT = 64
MASK = (1 << SHIFT) - 1
WIDE_WATCH = 16  # a reserve watching more tubes than this walks the tube index


class NullStore:
    """No binlog: every reservation succeeds and nothing is written."""

    lsn = 0
    filesize = 10485760  # the -s value, for stats

    def stats(self) -> tuple:
        """(oldest index, current index, migrations, records written, max size)"""
        return (0, 0, 0, 0, self.filesize)

    def reserve_put(self, j) -> bool:
        return True

    def reserve_update(self, j) -> bool:
        return True

    def write(self, j) -> bool:
        return True


class Tube:
    __slots__ = ("name", "ready", "run", "run_pri", "delayed", "buried", "waiting",
                 "using", "watching",
                 "nready", "ndelayed", "nreserved", "urgent", "total_jobs",
                 "cmd_delete", "cmd_pause", "pause", "unpause_at", "alive", "ikey", "seq")

    def __init__(self, name: bytes):
        self.name = name
        self.ready: list[int] = []  # pri << 64 | id
        self.run: deque[int] | None = None  # ids of fresh jobs of priority run_pri
        self.run_pri = 0
        self.delayed: list[int] = []  # deadline << 64 | id
        self.buried: OrderedDict[int, Job] = OrderedDict()  # FIFO, O(1) removal by id
        self.waiting: OrderedDict[Conn, None] = OrderedDict()  # FIFO of reservers
        self.using = self.watching = 0
        self.nready = self.ndelayed = self.nreserved = self.urgent = 0
        self.total_jobs = self.cmd_delete = self.cmd_pause = 0
        self.pause = 0  # ns; 0 when not paused
        self.unpause_at = 0
        self.alive = True
        self.ikey = None  # key of this tube's entry in Queue.index, if it has one
        self.seq = 0

    def njobs(self) -> int:
        return self.nready + self.ndelayed + self.nreserved + len(self.buried)


class SwapList:
    """An array whose removal moves the last item into the hole.

    The reference keeps tubes and watch lists this way, and list-tubes shows
    the resulting order, so we keep it too; membership is O(1) here."""

    __slots__ = ("items", "index")

    def __init__(self):
        self.items = []
        self.index = {}

    def append(self, x):
        self.index[x] = len(self.items)
        self.items.append(x)

    def remove(self, x):
        i = self.index.pop(x)
        last = self.items.pop()
        if last is not x:
            self.items[i] = last
            self.index[last] = i

    def __contains__(self, x):
        return x in self.index

    def __len__(self):
        return len(self.items)

    def __iter__(self):
        return iter(self.items)


class Conn:
    """What the queue knows about a client connection."""

    __slots__ = ("use", "watch", "reserved", "deadlines", "waiting", "timeout",
                 "wait_key", "producer", "worker", "out", "sink")

    def __init__(self, sink: list):
        self.use: Tube | None = None
        self.watch = SwapList()
        self.reserved: dict[int, Job] = {}
        self.deadlines: list[int] = []  # deadline << 64 | id of reserved jobs
        self.waiting = False
        self.timeout: int | None = None  # ns, for reserve-with-timeout
        self.wait_key = None
        self.producer = self.worker = False
        self.out: list[bytes] = []
        self.sink = sink  # the engine's list of connections with output

    def send(self, data: bytes):
        if not self.out:
            self.sink.append(self)
        self.out.append(data)

    def send_job(self, word: bytes, job: Job):
        if not self.out:
            self.sink.append(self)
        self.out.append(job_header(word, job.id, len(job.body) - 2))
        self.out.append(job.body)

    def woken(self):
        """Called when a blocked reserve has been answered."""


class Queue:
    def __init__(self, now: int):
        self.jobs: dict[int, Job] = {}
        self.tubes: dict[bytes, Tube] = {}
        self.tube_list = SwapList()
        self.next_id = 1
        self.delay_heap: list[int] = []  # every tube's delayed jobs
        self.ttr_heap: list[int] = []  # every reserved job
        self.owner_of: dict[int, Conn] = {}  # reserved job id -> its connection
        self.wait_heap: list[tuple] = []  # (due, seq, conn) for blocked reserves
        self.pause_heap: list[tuple] = []  # (unpause_at, seq, tube)
        # Tubes with ready jobs, by a lower bound of their best job's key:
        # (key, seq, tube). An entry is current while key == tube.ikey.
        self.index: list[tuple] = []
        self.seq = 0
        self.ready_ct = self.urgent_ct = self.reserved_ct = 0
        self.delayed_ct = self.buried_ct = self.waiting_ct = 0
        self.timeouts_ct = self.total_jobs = 0
        self.body_bytes = 0  # the bodies of stored jobs, CRLF included
        self.due = None  # earliest timer pushed since the engine last looked
        self.store = NullStore()
        self.loading: dict[Tube, int] | None = None  # jobs per tube during recovery
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

    def maybe_free(self, t: Tube):
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

    def pause_tube(self, t: Tube, delay: int, now: int):
        t.pause = delay or 1  # 0 would mean "not paused"; 1 ns wakes reservers at once
        t.unpause_at = now + t.pause
        t.cmd_pause += 1
        self.seq += 1
        heappush(self.pause_heap, (t.unpause_at, self.seq, t))
        self._timer(t.unpause_at)

    # -- connections -------------------------------------------------------

    def attach(self, c: Conn):
        c.use = self.default
        self.default.using += 1
        c.watch.append(self.default)
        self.default.watching += 1

    def use(self, c: Conn, name: bytes):
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

    def detach(self, c: Conn, now: int):
        """The connection closed: its reserved jobs go back to ready."""
        if c.waiting:
            self._unwait(c)
        for j in list(c.reserved.values()):
            self._unreserve(j)
            self._make_ready(j, now)
        c.deadlines = []
        t = c.use
        t.using -= 1
        self.maybe_free(t)
        for t in list(c.watch):
            t.watching -= 1
            self.maybe_free(t)

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

    def insert(self, j: Job, now: int):
        """A put's job, body received and binlog space reserved."""
        self.jobs[j.id] = j
        self.body_bytes += len(j.body)
        t = j.tube
        t.total_jobs += 1
        self.total_jobs += 1
        delay = j.times[0]
        if delay:
            self._make_delayed(j, delay, now, log=True)
        else:
            self._make_ready(j, now, log=True, fresh=True)

    def load(self, jobs, now: int, wall_offset: int):
        """Place jobs recovered from the binlog, in bulk: one heapify per heap.

        Delayed jobs keep their wall-clock deadline; buried ones their bury
        order, and their `buries` count is not incremented (beanstalkd #668)."""
        buried = []
        touched = set()
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
            self._bury(j)

    def _make_ready(self, j: Job, now: int, log=False, fresh=False):
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
        elif len(t.ready) + (len(run) if run else 0) > 2 * t.nready + 64:
            t.ready = self._compact(t.ready, self._ready_live)
            if run:
                t.run = deque(i for i in run if self._run_job(i) is not None)

    def _leave_ready(self, j: Job):
        t = j.tube
        t.nready -= 1
        self.ready_ct -= 1
        if j.pri < URGENT_PRI:
            t.urgent -= 1
            self.urgent_ct -= 1
        j.state = INVALID

    def _make_delayed(self, j: Job, delay: int, now: int, log=False):
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
        if len(t.delayed) > 2 * t.ndelayed + 64:
            t.delayed = self._compact(t.delayed, self._delayed_live)
        if len(self.delay_heap) > 2 * self.delayed_ct + 1024:
            self.delay_heap = self._compact(self.delay_heap, self._delayed_live)
        self._timer(j.deadline)

    def _leave_delayed(self, j: Job):
        j.tube.ndelayed -= 1
        self.delayed_ct -= 1
        j.state = INVALID

    def _bury(self, j: Job):
        j.state = BURIED
        j.tube.buried[j.id] = j
        self.buried_ct += 1

    def _leave_buried(self, j: Job):
        del j.tube.buried[j.id]
        self.buried_ct -= 1
        j.state = INVALID

    def _reserve(self, c: Conn, j: Job, now: int):
        j.state = RESERVED
        self.owner_of[j.id] = c
        j.counts = bump(j.counts, RESERVES)
        j.deadline = now + j.times[1]
        j.tube.nreserved += 1
        self.reserved_ct += 1
        c.reserved[j.id] = j
        key = (j.deadline << SHIFT) | j.id
        heappush(c.deadlines, key)
        heappush(self.ttr_heap, key)
        if len(self.ttr_heap) > 2 * self.reserved_ct + 1024:
            self.ttr_heap = self._compact(self.ttr_heap, self._reserved_live)
        self._timer(j.deadline + 1)  # expiry is "deadline < now"
        if c.waiting:
            self._unwait(c)
            c.woken()
        c.send_job(b"RESERVED", j)

    def _unreserve(self, j: Job):
        c = self.owner_of.pop(j.id)
        del c.reserved[j.id]
        if not c.reserved:
            c.deadlines = []
        elif len(c.deadlines) > 2 * len(c.reserved) + 16:
            c.deadlines = self._compact(c.deadlines, self._reserved_live)
        j.tube.nreserved -= 1
        self.reserved_ct -= 1
        j.state = INVALID

    def _remove(self, j: Job):
        """Take a job out of whatever set holds it (not reserved)."""
        if j.state == READY:
            self._leave_ready(j)
        elif j.state == DELAYED:
            self._leave_delayed(j)
        elif j.state == BURIED:
            self._leave_buried(j)

    # -- heap entries ------------------------------------------------------

    def _ready_live(self, key: int) -> bool:
        j = self.jobs.get(key & MASK)
        return j is not None and j.state == READY and j.pri == key >> SHIFT

    def _run_job(self, id_: int) -> Job | None:
        """The job a run entry names, if the entry is live.

        A job leaves ready only by being reserved (or deleted), which sets
        its deadline and reserves for good: a later return to ready goes to
        the heap, and this entry stays stale."""
        j = self.jobs.get(id_)
        if j is not None and j.state == READY and j.deadline == 0 and not j.counts & M32:
            return j
        return None

    def _delayed_live(self, key: int) -> bool:
        j = self.jobs.get(key & MASK)
        return j is not None and j.state == DELAYED and j.deadline == key >> SHIFT

    def _reserved_live(self, key: int) -> bool:
        j = self.jobs.get(key & MASK)
        return j is not None and j.state == RESERVED and j.deadline == key >> SHIFT

    @staticmethod
    def _compact(heap: list[int], live) -> list[int]:
        fresh = [k for k in set(heap) if live(k)]
        heapify(fresh)
        return fresh

    def _top(self, heap: list[int], live) -> Job | None:
        """The job named by the smallest live entry; stale entries are dropped."""
        while heap:
            key = heap[0]
            if live(key):
                return self.jobs[key & MASK]
            heappop(heap)
        return None

    def ready_top(self, t: Tube) -> Job | None:
        run = t.run
        j = None
        while run:
            j = self._run_job(run[0])
            if j is not None:
                break
            run.popleft()
        if t.ready:
            h = self._top(t.ready, self._ready_live)
            if h is not None and (j is None or h.pri < j.pri or (h.pri == j.pri and h.id < j.id)):
                return h
        return j

    def _pop_ready(self, t: Tube) -> Job:
        """Take the tube's best ready job (it has one) out of its run or heap."""
        j = self.ready_top(t)
        run = t.run
        if run and run[0] == j.id:
            run.popleft()
        else:
            heappop(t.ready)
        self._leave_ready(j)
        return j

    def delayed_top(self, t: Tube) -> Job | None:
        return self._top(t.delayed, self._delayed_live)

    def buried_top(self, t: Tube) -> Job | None:
        return next(iter(t.buried.values()), None)

    # -- matching jobs with reservers --------------------------------------

    def _match(self, t: Tube, now: int):
        """Hand t's ready jobs to its waiting connections, first come first served.

        Invariant: no unpaused tube has both ready jobs and waiters, so the
        best job in t is the best job for each of its waiters."""
        while t.waiting and t.nready:
            j = self._pop_ready(t)
            c = next(iter(t.waiting))
            self._reserve(c, j, now)

    def _index_push(self, t: Tube, key: int):
        t.ikey = key
        heappush(self.index, (key, t.seq, t))
        if len(self.index) > 2 * len(self.tubes) + 64:
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
                j = self.ready_top(t)
                if best is None or (j.pri, j.id) < (best.pri, best.id):
                    best = j
        return best

    def _deadline_soon(self, c: Conn, now: int) -> bool:
        soonest = self._top(c.deadlines, self._owned_live(c)) if c.reserved else None
        return soonest is not None and now >= soonest.deadline - SAFETY_MARGIN

    def _owned_live(self, c: Conn):
        def live(key: int) -> bool:
            j = self.jobs.get(key & MASK)
            return (j is not None and j.state == RESERVED and c.reserved.get(j.id) is j
                    and j.deadline == key >> SHIFT)
        return live

    def reserve(self, c: Conn, timeout: int | None, now: int):
        """reserve / reserve-with-timeout (timeout in ns)."""
        if self._deadline_soon(c, now) and not any(t.nready for t in c.watch):
            c.send(DEADLINE_SOON)
            return
        j = self._best_ready(c, now)
        if j is not None:
            self._leave_ready(j)
            self._reserve(c, j, now)
            return
        c.waiting = True
        c.timeout = timeout
        self.waiting_ct += 1
        for t in c.watch:
            t.waiting[c] = None
        due = None if timeout is None else now + timeout
        if c.reserved:
            soonest = self._top(c.deadlines, self._owned_live(c))
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

    def _unwait(self, c: Conn):
        c.waiting = False
        c.wait_key = None
        self.waiting_ct -= 1
        for t in c.watch:
            del t.waiting[c]

    def _wait_expired(self, c: Conn, now: int):
        soon = self._deadline_soon(c, now)
        self._unwait(c)
        c.send(DEADLINE_SOON if soon else TIMED_OUT)
        c.woken()

    def hangup(self, c: Conn):
        """The peer half-closed while blocked in reserve: TIMED_OUT."""
        if c.waiting:
            self._unwait(c)
            c.send(TIMED_OUT)

    # -- commands on jobs --------------------------------------------------

    def reserve_job(self, c: Conn, id_: int, now: int) -> bool:
        j = self.jobs.get(id_)
        if j is None or j.state == RESERVED:
            return False
        self._remove(j)
        self._reserve(c, j, now)
        return True

    def delete(self, c: Conn, id_: int) -> bytes:
        j = self.jobs.get(id_)
        if j is None:
            return NOT_FOUND
        if j.state == RESERVED:
            if c.reserved.get(id_) is not j:
                return NOT_FOUND
            self._unreserve(j)
        else:
            self._remove(j)
        del self.jobs[id_]
        self.body_bytes -= len(j.body)
        j.tube.cmd_delete += 1
        ok = self.store.write(j)  # state INVALID: a delete record
        self.maybe_free(j.tube)
        return DELETED if ok else INTERNAL_ERROR

    def release(self, c: Conn, id_: int, pri: int, delay: int, now: int) -> bytes:
        j = c.reserved.get(id_)
        if j is None:
            return NOT_FOUND
        if delay and not self.store.reserve_update(j):
            return OUT_OF_MEMORY  # the job stays reserved: nothing is lost
        self._unreserve(j)
        j.pri = pri
        j.times = times(delay, j.times[1])
        j.counts = bump(j.counts, RELEASES)
        if delay:
            self._make_delayed(j, delay, now, log=True)
        else:
            self._make_ready(j, now)
        return RELEASED

    def bury(self, c: Conn, id_: int, pri: int) -> bytes:
        j = c.reserved.get(id_)
        if j is None:
            return NOT_FOUND
        if not self.store.reserve_update(j):
            return INTERNAL_ERROR  # the job stays reserved: nothing is lost
        self._unreserve(j)
        j.pri = pri
        j.counts = bump(j.counts, BURIES)
        j.deadline = UNPLACED  # the binlog records where, for the buried order
        self._bury(j)
        self.store.write(j)
        return BURIED_REPLY

    def touch(self, c: Conn, id_: int, now: int) -> bool:
        j = c.reserved.get(id_)
        if j is None:
            return False
        j.deadline = now + j.times[1]
        key = (j.deadline << SHIFT) | j.id
        heappush(c.deadlines, key)
        heappush(self.ttr_heap, key)
        if len(c.deadlines) > 2 * len(c.reserved) + 16:
            c.deadlines = self._compact(c.deadlines, self._owned_live(c))
        if len(self.ttr_heap) > 2 * self.reserved_ct + 1024:
            self.ttr_heap = self._compact(self.ttr_heap, self._reserved_live)
        self._timer(j.deadline + 1)
        return True

    def kick(self, t: Tube, bound: int, now: int) -> int:
        """Kick buried jobs if the tube has any, else delayed ones."""
        n = 0
        buried = bool(t.buried)
        while n < bound:
            j = next(iter(t.buried.values()), None) if buried else self.delayed_top(t)
            if j is None or not self.store.reserve_update(j):
                break  # on a full disk the job stays where it is
            self._remove(j)
            j.counts = bump(j.counts, KICKS)
            self._make_ready(j, now, log=True)
            n += 1
        return n

    def kick_job(self, id_: int, now: int) -> bool:
        j = self.jobs.get(id_)
        if j is None or j.state not in (BURIED, DELAYED) or not self.store.reserve_update(j):
            return False
        self._remove(j)
        j.counts = bump(j.counts, KICKS)
        self._make_ready(j, now, log=True)
        return True

    # -- time --------------------------------------------------------------

    def _timer(self, at: int):
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

    def tick(self, now: int):
        """Run every timer that is due, in the reference's order: delays,
        pauses, then reservations' TTRs and blocked reserves' timeouts."""
        heap = self.delay_heap
        while heap and heap[0] >> SHIFT <= now:
            key = heappop(heap)
            if self._delayed_live(key):
                j = self.jobs[key & MASK]
                self._leave_delayed(j)
                self.delayed_top(j.tube)  # drop the tube's now-stale top entries
                self._make_ready(j, now)
        heap = self.pause_heap
        while heap and heap[0][0] <= now:
            _, _, t = heappop(heap)
            if t.alive and t.pause and t.unpause_at <= now:
                t.pause = t.unpause_at = 0
            if t.alive and not self.paused(t, now):
                self._match(t, now)
        heap = self.ttr_heap
        while heap and heap[0] >> SHIFT < now:
            key = heappop(heap)
            if self._reserved_live(key):
                j = self.jobs[key & MASK]
                j.counts = bump(j.counts, TIMEOUTS)
                self.timeouts_ct += 1
                self._unreserve(j)
                self._make_ready(j, now)
        heap = self.wait_heap
        while heap and heap[0][0] <= now:
            entry = heappop(heap)
            c = entry[2]
            if c.waiting and c.wait_key is entry:
                self._wait_expired(c, now)

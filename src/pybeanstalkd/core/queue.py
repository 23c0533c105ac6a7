"""The queue's state machine: jobs moving between ready, delayed, reserved
and buried, and the commands on jobs. Pure: every call is given `now`, and
every answer is an outcome (outcome.py), never reply bytes.

It owns its parts, each with its own state: the job table and which heap
entries are live (jobmap.py), the ids (jobids.py), the tubes and the index
of those with ready jobs (tubes.py), the timers' heaps (timers.py), the
background slices (slices.py) and the put tags' policy
(TagPolicy below: none, or tagged.py's with --extensions). What it does
for connections and their reserves are functions of it (reserving.py). A
job itself, its tube and a connection's fields: job.py.

`now` is a monotonic clock in nanoseconds, so a wall-clock jump cannot time
out every reserved job (beanstalkd issue #166).

Heaps hold plain ints, `key << 64 | id`, with entries removed lazily and
swept when stale ones outnumber the live (heaps.py).

Work that moves many jobs at once runs in slices of at most SLICE jobs
(slices.py: Queue.slices). Below one slice nothing changes. Where
records go: store.py. A record is written next to the change it records
(store.write, store.reserve_update), as the reference's prot.c does.

A tube's freshly put jobs of one priority arrive in id order, which is ready
order: they queue in a run of ids (`Tube.run`, run.py: 8 bytes a job)
instead of the heap (56). A run entry is live while its job has never been
reserved.
"""
from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING, Final

from .job import (
    BURIED,
    DELAYED,
    INVALID,
    JOB_OVERHEAD,
    M32,
    READY,
    RESERVED,
    RESERVED_OVERHEAD,
    RESERVES,
    Job,
    bump,
    put_ttr,
)
from .outcome import DONE, NOT_FOUND, NOT_LOGGED, Outcome
from .jobids import JobIds
from .jobmap import THIN, JobMap
from .held import SIZE as HELD_SIZE, open_block, thinned
from .job import DEFAULT_TUBE, Conn, Tube
from .hist import Hist
from .heaps import (  # noqa: F401 (SMALL_HEAP: the tests' name for it)
    CONN_SLACK, MASK, SHIFT, SMALL_HEAP, TUBE_SLACK, StaleHeap)
from .run import Run
from .slices import SLICE, Slices
from .timers import Timers
from .tubes import Tubes
from .store import NullStore, Store
from .protocol import U64_MAX
from .tags import HELD_MIN

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterable

    from .puttags import Tags
    from .tags import ExtState

# Tube.work_hist's outcomes
WORK_DELETE: Final = 0
WORK_RELEASE: Final = 1
WORK_BURY: Final = 2
URGENT_PRI: Final = 1024
# TagPolicy.deleted's `worked` for a delete not by the job's holder. (Not
# -1: a holder's own may be a few ns below 0, its delete stamped before its
# reservation, which a later command of a read is: still a sample.)
NOT_WORKED: Final = -(1 << 61)


class TagPolicy:
    """What the put tags (--extensions) add to the queue's steps; this one,
    the null policy, adds nothing: a queue without tags. tagged.py's Tagged
    is the other. The queue asks it at each step a tag can change (each
    hook is given the queue), and the steps stay the queue's.

    The hooks of a reserve and a delete (parks, reserved, returned,
    deleted: four a worker's job) the queue asks through `Queue.steps`,
    the policy or None for the null one, so that without tags it makes
    no call there: the calls cost 50 instructions a reserve and its
    delete compiled, 1,848 pure (past the pure build's budget)."""

    def state(self) -> ExtState | None:  # the tags' state (Queue.ext)
        return None

    def last_id(self) -> int:  # the last job id the queue may hand out
        return U64_MAX

    def checks_tries(self, max_tries: int) -> bool:  # may a job have a limit of tries?
        return max_tries > 0

    def tries_limit(self, q: Queue, j: Job) -> int:  # j's limit of tries (0: none)
        return q.max_tries

    def holds(self, q: Queue, j: Job, tags: Tags, log: bool) -> bool:
        """A put's tagged job (its tags on it already, its idp: key its
        own: a put's tags' stage, or brought()): held, not placed?"""
        return False

    def attach(self, j: Job) -> None:
        """A new job a record brings (a follower's), before its binlog's
        room is asked: it takes the tags their record brought first."""

    def brought(self, q: Queue, j: Job) -> Tags | None:
        """A new job a record brings (a follower's; not inserted yet): its
        tags (attach()), its idp: key held for it from now on."""
        return None

    def holds_due(self, q: Queue, j: Job) -> bool:  # is a job come due held, not made ready?
        return False

    def place_held(self, q: Queue, j: Job, now: int, log: bool) -> bool:
        """A record delayed past HELD_MIN (a held job's, on a follower):
        placed by the policy? (False: delayed as it says.)"""
        return False

    def removing(self, q: Queue, j: Job) -> bool:  # j leaves its state: was it held?
        return False

    def buried(self, q: Queue, j: Job) -> None:
        pass

    def parks(self, q: Queue, t: Tube, j: Job) -> bool:
        """j tops t's ready jobs: is it hidden instead (taken out of t's
        run or heap, still ready)?"""
        return False

    def reserved(self, q: Queue, j: Job) -> None:
        pass

    def returned(self, q: Queue, j: Job) -> None:  # j's reservation ended
        pass

    def deleted(self, q: Queue, j: Job, worked: int, now: int, flushed: bool) -> None:
        """worked: the ns its holder worked on it (a delete by its holder),
        else NOT_WORKED. flushed: by a flush-tube."""

    def may_reserve(self, j: Job) -> bool:  # by id (reserve-job)
        return True

    def peek_ready(self, q: Queue, t: Tube, best: Job | None) -> Job | None:
        return best  # (best: t's best ready job not hidden)

    def hidden(self, t: Tube) -> list[int]:  # the heap keys of t's hidden jobs, stale or not
        return []

    def keeps(self, name: bytes) -> bool:  # must an unused, empty tube stay?
        return False

    def freed(self, name: bytes) -> None:
        pass

    def memory(self) -> int:  # what the tags hold, as --max-memory counts
        return 0

    def job_extra(self, q: Queue, j: Job) -> list[tuple[bytes, object]]:
        """stats-job's fields past the reference's: with --max-tries, the
        tries used (releases and TTR expiries) and the most it may use."""
        if not q.max_tries:
            return []
        c = j.counts
        return [(b"tries", (c >> 32 & M32) + (c >> 64 & M32)), (b"max-tries", q.max_tries)]

    def loading(self, q: Queue, jobs: Iterable[Job], wall_offset: int) -> Iterable[Job]:
        return jobs  # recovery: the jobs to place (loaded() places what it kept)

    def loaded(self, q: Queue, now: int) -> None:
        pass

    def next_due(self, due: int | None) -> int | None:  # given the timers'
        return due

    def flushed(self, q: Queue, name: bytes, last: int) -> None:
        """A flush-tube of tube `name` ended (`last`: the next id when it began)."""

    def recorded(self, q: Queue, id_: int, tags: Tags) -> None:
        """Job id_'s tags record, on a follower (its full record follows)."""

    def cooled(self, q: Queue, tube: bytes, key: bytes, orig: int, expires: int) -> None:
        """A cooldown's record, on a follower: key of tube cools until
        expires (job orig was deleted)."""

    def restoring(self, q: Queue) -> None:
        """A follower's snapshot starts coming in (core/replica.py): until
        settled(), its view of the leader lags."""

    def listed(self, q: Queue) -> None:
        """... and its first part (with the leader's cooldowns) is applied."""

    def settled(self, q: Queue, now: int) -> None:
        """... and is the leader's again: the snapshot and the records
        written while it went out are applied."""

    def tick(self, q: Queue, now: int, more: bool) -> bool:  # after the timers' tick
        return more


NO_TAGS_POLICY: Final[TagPolicy] = TagPolicy()


class Queue:
    __slots__ = ("ids", "jobs", "tubes", "max_tries", "timers", "slices",
                 "gone", "ready_ct", "urgent_ct", "reserved_ct",
                 "delayed_ct", "buried_ct", "waiting_ct", "timeouts_ct", "total_jobs",
                 "body_bytes", "tags", "steps", "checks_tries", "store", "loading", "changing")

    def __init__(self, now: int, store: Store | None = None, max_tries: int = 0,
                 tags: TagPolicy = NO_TAGS_POLICY) -> None:
        """store: where records go (the binlog with -b; written to only
        once recovery has loaded the queue, which writes nothing).
        max_tries: --max-tries (0: none), see tries_used_up. tags: the put
        tags' policy (tagged.py's with --extensions)."""
        self.ids = JobIds(tags.last_id())
        self.jobs = JobMap(self.ids)
        self.tubes = Tubes()
        self.max_tries = max_tries
        self.timers = Timers()
        self.slices = Slices()
        # Connections closed while holding reservations, until the slices
        # that return them end (reserving.py); those still open that hold
        # some are in timers.ttr_heap.
        self.gone: dict[Conn, None] = {}
        self.ready_ct = self.urgent_ct = self.reserved_ct = 0
        self.delayed_ct = self.buried_ct = self.waiting_ct = 0
        self.timeouts_ct = self.total_jobs = 0
        self.body_bytes = 0  # the bodies of stored jobs, CRLF included
        self.tags = tags
        # The policy whose reserve and delete hooks are asked: None for the
        # null one, which does nothing there (see TagPolicy)
        self.steps = None if tags is NO_TAGS_POLICY else tags
        # Do releases and expiries ask tries_used_up?
        self.checks_tries = tags.checks_tries(max_tries)
        self.store = NullStore() if store is None else store
        self.loading: dict[Tube, int] | None = None  # jobs per tube during recovery
        # Called with each job about to be deleted, to leave its hold
        # (tagged.py's removing: a release, a kick-job, a reserve-job), or
        # to lose its idp: key (a flush-tube's end: keys.py's flushed),
        # before anything of it changes: a leader's snapshot going out in
        # parts keeps the record of a job it listed and has not sent yet
        # (cluster/apply.py).
        self.changing: list[Callable[[Job], None]] = []
        self.tubes.tube(DEFAULT_TUBE)  # (never freed)

    @property
    def ext(self) -> ExtState | None:
        """The put tags' state, with --extensions (its policy's)."""
        return self.tags.state()

    # -- tubes -------------------------------------------------------------

    def maybe_free(self, t: Tube) -> None:
        if (t.using or t.watching or t.nready or t.ndelayed or t.nreserved
                or t.buried or t.name == DEFAULT_TUBE or (self.loading and self.loading.get(t))
                or self.tags.keeps(t.name)):
            return
        self.tubes.drop(t)
        if t.pause:
            self.timers.tidy_pauses(len(self.tubes))
        self.tags.freed(t.name)

    def maybe_free_name(self, name: bytes) -> None:
        """Tube `name`, if it exists, may go (it lost what the tags kept)."""
        t = self.tubes.get(name)
        if t is not None:
            self.maybe_free(t)

    def job_count(self) -> int:
        """The jobs stored: each is in exactly one state (a held aft: job of
        tagged.py's is in none), so the counters give it, and the hot paths
        keep no counter of their own."""
        return self.ready_ct + self.reserved_ct + self.delayed_ct + self.buried_ct

    def memory_used(self) -> int:
        """What stored jobs cost, as --max-memory counts it (the one formula:
        commands.admit asks it for every put). The job count is
        job_count(), summed here to save a call."""
        reserved = self.reserved_ct
        return (self.body_bytes - self.store.on_disk  # (bodies left in the binlog: not in RAM)
                + (self.ready_ct + self.delayed_ct + self.buried_ct + reserved) * JOB_OVERHEAD
                + reserved * RESERVED_OVERHEAD + self.tags.memory())

    # -- job state changes -------------------------------------------------

    def new_job(self, t: Tube, pri: int, delay: int, ttr: int, now: int) -> Job:
        """Allocate a job id (put uses one up even if the job is then dropped)."""
        return Job(self.ids.take(), t, pri, delay, put_ttr(ttr), b"", now)

    def insert(self, j: Job, now: int, log: bool = True, tags: Tags | None = None) -> None:
        """A put's job, body received and binlog space reserved. log=False:
        the caller stores its record (a follower has the leader's bytes).
        tags: its tags (--extensions), handed on rather than looked up."""
        self.jobs.insert(j)
        self.body_bytes += len(j.body)
        t = j.tube
        t.total_jobs += 1
        self.total_jobs += 1
        if tags is not None and self.tags.holds(self, j, tags, log):
            return
        delay = j.times.delay
        if delay:
            self.place_delayed(j, delay, now, log=log)
        else:
            # (log and fresh passed in place, not by name: interpreted, a
            # call by keyword has each name matched, 218 instructions a put)
            self.place_ready(j, now, log, True)

    def place_ready(self, j: Job, now: int, log: bool = False, fresh: bool = False) -> None:
        j.state = READY
        t = j.tube
        key = (j.pri << SHIFT) | j.id
        run = t.run
        if fresh and (run is None or not run.n or (j.pri == run.pri and j.id > run.last)):
            # (a put whose body came late has a lower id than the run's last)
            if run is None:
                run = t.run = Run(j.pri)
            elif not run.n:
                run.pri = j.pri
            run.append(j.id)
        else:
            # Not in a run: the deadline, unused while ready, says since when
            # (a run's job has 0 there and is ready since it was created).
            j.deadline = now
            heappush(t.ready.entries, key)
        if t.ikey is None or key < t.ikey:
            self.tubes.index_push(t, key)
        t.nready += 1
        self.ready_ct += 1
        if j.pri < URGENT_PRI:
            t.urgent += 1
            self.urgent_ct += 1
        if log and self.store.keeps:  # logged as ready, before a waiting reserver may take it
            self.store.write(j)
        if t.waiting and t.unpause_at <= now:
            self.match(t, now)
        elif t.ready.over(t.nready, 0 if run is None else run.n):
            self._tidy_ready(t)

    def _tidy_ready(self, t: Tube) -> None:
        # One of the two holds more than its share of stale entries.
        if len(t.ready.entries) > t.nready + 32:
            t.ready.sweep(self.slices, self.jobs.ready_live, lambda: t.nready)
        run = t.run
        if run is not None and run.n > t.nready + 32 and not run.draining:
            run.draining = True
            self.slices.spawn(self._drain_run(t, run))

    def _drain_run(self, t: Tube, run: Run) -> Generator[None, int, None]:
        """Drop a stale-ridden run's stale entries, from the front (so the
        run stays in id order while new puts append to it); while it still
        holds too many, its live entries move to the heap."""
        yield
        last = run.last if run.n else 0
        k = SLICE
        while run.n and run.front <= last:
            if not k:
                yield
                k = SLICE
                continue  # (a reserve may have emptied the run meanwhile)
            k -= 1
            i = run.front
            if self.jobs.run_job(i) is None:
                run.popleft()
            elif run.n > t.nready + 32:
                run.popleft()
                heappush(t.ready.entries, (run.pri << SHIFT) | i)
            else:
                break
        run.draining = False

    def _leave_ready(self, j: Job) -> None:
        t = j.tube
        t.nready -= 1
        self.ready_ct -= 1
        if j.pri < URGENT_PRI:
            t.urgent -= 1
            self.urgent_ct -= 1
        j.state = INVALID

    def place_delayed(self, j: Job, delay: int, now: int, log: bool = False) -> None:
        if now + delay >= HELD_MIN and self.tags.place_held(self, j, now, log):
            return
        j.state = DELAYED
        j.deadline = now + delay
        if log:
            self.store.write(j)
        key = (j.deadline << SHIFT) | j.id
        t = j.tube
        heappush(t.delayed.entries, key)
        heappush(self.timers.delay_heap.entries, key)
        t.ndelayed += 1
        self.delayed_ct += 1
        self._tidy_delayed(t)
        self.timers.timer(j.deadline)

    def _tidy_delayed(self, t: Tube) -> None:
        """Sweep t's delayed heap, and the queue's, once stale entries
        outnumber the live."""
        if t.delayed.over(t.ndelayed):
            t.delayed.sweep(self.slices, self.jobs.delayed_live, lambda: t.ndelayed)
        delay_heap = self.timers.delay_heap
        if delay_heap.over(self.delayed_ct):
            delay_heap.sweep(self.slices, self.jobs.delayed_live, lambda: self.delayed_ct)

    def _tidy_after_delete(self, t: Tube, was: int) -> None:
        """A delete by id leaves a stale entry that no push may come to sweep."""
        if was == READY:
            run = t.run
            if t.ready.over(t.nready, 0 if run is None else run.n):
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
        self.tags.buried(self, j)

    def _leave_buried(self, j: Job) -> None:
        del j.tube.buried[j.id]
        self.buried_ct -= 1
        j.state = INVALID

    def _reserve(self, c: Conn, j: Job, now: int) -> None:
        # The wait from ready to reserved (ready since: see _make_ready).
        t = j.tube
        # Its wait counted in the tube's histogram, made at its first
        # reservation (a server may hold many tubes that never serve a
        # job). (Here, the one place a wait is counted: a Tube method for
        # it cost 20 instructions a reserve compiled, 416 pure.)
        wait_hist = t.wait_hist
        if wait_hist is None:
            wait_hist = t.wait_hist = Hist()
        wait_hist.observe(now - (j.deadline or j.created))
        j.state = RESERVED
        id_ = j.id
        held = c.open_held
        if held is None or len(held.jobs) >= HELD_SIZE:
            held = open_block(c)
        held.jobs[id_] = j
        j.holder = held
        c.nreserved += 1
        j.counts = bump(j.counts, RESERVES)
        deadline = j.deadline = now + j.times.ttr
        t.nreserved += 1
        self.reserved_ct += 1
        # (j, if c's soonest now, may be sooner than c's entry in the
        # expiries says; else that entry is no later than c's soonest)
        timers = self.timers
        d = c.deadlines
        if d.push(j) and timers.ttr_heap.lower(d, j):
            timers.timer(deadline + 1)  # (expiry is "deadline < now")
        steps = self.steps
        if steps is not None:
            steps.reserved(self, j)
        if c.waiting:
            self.unwait(c)
            c.woken()
        c.reserved(j)

    def _unreserve(self, j: Job) -> None:
        j.state = INVALID
        held = j.holder
        assert held is not None  # (reserved)
        j.holder = None
        c = held.conn
        jobs = held.jobs
        del jobs[j.id]
        if held is not c.open_held and len(jobs) <= THIN:
            thinned(held)
        c.nreserved -= 1
        c.deadlines.remove(j)  # (c's entry in the expiries stays: a lower bound)
        j.tube.nreserved -= 1
        self.reserved_ct -= 1
        steps = self.steps
        if steps is not None:
            steps.returned(self, j)

    def remove(self, j: Job) -> None:
        """Take a job out of whatever set holds it (not reserved)."""
        if self.tags.removing(self, j):
            return
        if j.state == READY:
            self._leave_ready(j)
        elif j.state == DELAYED:
            self._leave_delayed(j)
        elif j.state == BURIED:
            self._leave_buried(j)

    def ready_top(self, t: Tube) -> Job | None:
        """The best ready job of t (None: none, or the tags hide them all:
        those whose concurrency keys have no room are hidden on the way)."""
        jobs = self.jobs
        while True:
            # (jobs.top(t.ready, jobs.ready_live), written out: StaleHeap.top
            # calls a callable for each entry, a bound method made at each
            # call; through them, reserve and delete cost 268 instructions
            # more a command compiled, 674 pure, measured)
            run = t.run
            j: Job | None = None
            while run is not None and run.n:
                j = jobs.run_job(run.front)
                if j is not None:
                    break
                run.popleft()
            ready = t.ready.entries
            while ready:
                key = ready[0]
                id_ = key & MASK
                h = jobs.get(id_)
                if h is not None and h.state == READY and h.pri == key >> SHIFT:
                    if j is None or key < ((j.pri << SHIFT) | j.id):
                        j = h
                    break
                heappop(ready)
            steps = self.steps
            if j is None or steps is None or not steps.parks(self, t, j):
                return j

    def _pop_ready(self, t: Tube) -> Job | None:
        """Take the tube's best ready job out of its run or heap (None: all
        of its ready jobs are hidden by their concurrency keys)."""
        j = self.ready_top(t)
        if j is None:
            return None
        run = t.run
        if run is None or not run.take(j.id):
            heappop(t.ready.entries)
        self._leave_ready(j)
        return j

    def delayed_top(self, t: Tube) -> Job | None:
        return self.jobs.top(t.delayed, self.jobs.delayed_live)

    def buried_top(self, t: Tube) -> Job | None:
        return next(iter(t.buried.values()), None)

    # -- matching jobs with waiting reserves --------------------------------

    def match(self, t: Tube, now: int, n: int = SLICE) -> int:
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
                    self.slices.spawn(self.match_later(t))
                return 0
            j = self._pop_ready(t)
            if j is None:
                break  # (hidden by their concurrency keys: tagged.py)
            n -= 1
            c = next(iter(t.waiting))
            self._reserve(c, j, now)
        return n

    def match_later(self, t: Tube) -> Generator[None, int, None]:
        now = yield
        t.matching = False
        if t.alive and t.unpause_at <= now:
            self.match(t, now)  # queues another slice if needed

    def unwait(self, c: Conn) -> None:
        c.waiting = False
        timed = c.wait_key is not None
        c.wait_key = None
        self.waiting_ct -= 1
        for t in c.watch:
            del t.waiting[c]
        if timed:
            self.timers.tidy_waits(self.waiting_ct)

    # -- timers ------------------------------------------------------------

    def next_due(self) -> int | None:
        """The earliest time tick() may have work (stale entries may wake early)."""
        return self.tags.next_due(self.timers.next_due())

    # -- commands on jobs --------------------------------------------------

    def delete(self, c: Conn | None, id_: int, now: int, count: bool = True,
               any_holder: bool = False) -> Outcome:
        """DONE; NOT_FOUND (no such job, or reserved by another); or
        NOT_LOGGED: deleted, as the reference does, but the binlog has no
        record of it, so a restart brings the job back.

        count: False for a delete that is not a delete command (ops/; the
        job is not reserved, so c is not consulted). any_holder: a reserved
        job is deleted whoever holds it (flush-tube)."""
        j = self.jobs.get(id_)
        if j is None:
            return NOT_FOUND
        if self.changing:
            h = j.holder  # (None unless reserved)
            if h is None or h.conn is c or any_holder:
                for see in self.changing:
                    see(j)
        worked = NOT_WORKED
        if j.state == RESERVED:
            held = j.holder
            assert held is not None  # (reserved)
            if held.conn is not c:
                if not any_holder:
                    return NOT_FOUND
                self._unreserve(j)  # (flushed: no work was done, nothing is sampled)
            else:
                worked = now - j.deadline + j.times.ttr
                j.tube.worked(WORK_DELETE, worked)
                self._unreserve(j)
        else:
            was = j.state
            self.remove(j)
            if was != BURIED:
                self._tidy_after_delete(j.tube, was)
        self.jobs.remove(id_)
        self.body_bytes -= len(j.body)
        t = j.tube
        t.cmd_delete += count
        store = self.store
        ok = not store.keeps or store.write(j)  # state INVALID: a delete record
        if not (t.using or t.watching):
            self.maybe_free(t)
        steps = self.steps
        if steps is not None:
            steps.deleted(self, j, worked, now, any_holder)
        return DONE if ok else NOT_LOGGED

"""A job: its fields, its packed counters, and the shared (delay, ttr)
pairs; and what refers to jobs as the queue sees them: a tube, a client
connection, a block of a connection's reservations (held.py), and heaps
of a connection's reserved jobs by deadline (Deadlines).
These refer to each other (a job to its tube and its holder's block, a
tube to its buried jobs and waiting connections, a connection to its
blocks and its heap, a block to its connection, a heap to its jobs),
so they are one module: the queue (queue.py) moves jobs between their
lists and heaps.

A job is kept small because a server may hold millions: 13 slots,
counters packed into one int, the (delay, ttr) pair shared between jobs,
and the bury position stored where a buried job has no deadline (a
stored 100-byte job: 310 bytes of RSS, the reference's 301).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import mypyc_attr

from .heaps import TUBE_SLACK, StaleHeap
from .hist import Hist
from .protocol import NS
from .weighted import FIFO_POLICY

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .outcome import Outcome
    from .puttags import Tags
    from .run import Run
    from .weighted import Weighted

DEFAULT_TUBE: Final = b"default"  # every connection's tube at first; never freed

# A job's states: the binlog's values
INVALID: Final = 0
READY: Final = 1
RESERVED: Final = 2
BURIED: Final = 3
DELAYED: Final = 4
STATE_NAMES: Final = {READY: b"ready", RESERVED: b"reserved", BURIED: b"buried",
               DELAYED: b"delayed", INVALID: b"invalid"}
M32: Final = 0xFFFFFFFF
# Job.counts packs the five per-job counters as uint32 fields (they wrap, as
# the reference's do). A job never reserved has counts 0: a shared small int.
RESERVES: Final = 0
TIMEOUTS: Final = 32
RELEASES: Final = 64
BURIES: Final = 96
KICKS: Final = 128
# Deadlines.bound of a connection with no entry in the queue's heap of
# holders (timers.py): past any key (deadline << 64 | id, both under 2**64)
NO_ENTRY: Final = 1 << 128
NO_ENTRY_AT: Final = 1 << 64  # its deadline: past any
UNPLACED: Final = -1  # Job.deadline of a buried job the binlog has not positioned
SAFETY_MARGIN: Final = NS  # DEADLINE_SOON one second before a reservation expires


def put_ttr(ttr: int) -> int:
    """A put's ttr (ns): under a second is a second, as the reference's
    put makes it (a put's, an HTTP put's, a move-job's new job)."""
    return ttr if ttr > NS else NS
# What a stored job costs beyond its body's bytes, for --max-memory: the Job,
# its id map and heap or run entries, the body's bytes-object header and
# allocator rounding; a reservation adds its heap slot and its block's dict
# entry (72 bytes of RSS a reservation, 200,000 held by one connection,
# compiled; counted as 96 for the tables' doubling). Measured as RSS growth
# per job (docs/PERFORMANCE.md, memory cap).
JOB_OVERHEAD: Final = 400
RESERVED_OVERHEAD: Final = 96


def bump(counts: int, field: int) -> int:
    """counts with the uint32 counter at bit `field` incremented, wrapping."""
    if (counts >> field) & M32 == M32:
        return counts & ~(M32 << field)
    return counts + (1 << field)


def counters(j: Job) -> tuple[int, int, int, int, int]:
    """(reserves, timeouts, releases, buries, kicks)"""
    c = j.counts
    return c & M32, c >> 32 & M32, c >> 64 & M32, c >> 96 & M32, c >> 128


def pack_counters(reserves: int, timeouts: int, releases: int, buries: int, kicks: int) -> int:
    return reserves | timeouts << 32 | releases << 64 | buries << 96 | kicks << 128


@mypyc_attr(acyclic=True)
class Pair:
    """A job's (delay, ttr), ns: its last put or release delay, and its
    ttr. Never changed once made: jobs share one (Times)."""

    __slots__ = ("delay", "ttr")

    def __init__(self, delay: int, ttr: int) -> None:
        self.delay = delay
        self.ttr = ttr


class Times:
    """(delay, ttr) pairs, one shared Pair each: most jobs use a few
    pairs. A job holds a reference to its pair, 8 bytes, where the two
    ints in place took 16 and a compiled job's struct past 128 bytes
    (pymalloc's next class is 144: 16 bytes a job more). The pair asked
    last is compared first: puts mostly repeat it, and that costs about
    30 instructions where a tuple made, hashed and looked up cost about
    1,000."""

    __slots__ = ("shared", "last")

    def __init__(self) -> None:
        self.shared: dict[tuple[int, int], Pair] = {}
        self.last = Pair(0, 0)  # the pair asked last

    def pair(self, delay: int, ttr: int) -> Pair:
        last = self.last
        if delay == last.delay and ttr == last.ttr:
            return last
        key = (delay, ttr)
        shared = self.shared.get(key)
        if shared is None:
            shared = Pair(delay, ttr)
            if len(self.shared) < 4096:
                self.shared[key] = shared
        self.last = shared
        return shared


# The shared pairs: TIMES.pair(delay, ttr) is a job's `times`. (Asked
# directly, not through a function of the module, for the pure build's
# budget: that function cost 356 instructions a put pure, none measurable
# compiled.)
TIMES: Final = Times()


# An int, so that it costs no more than one (a native class would hold one
# as well): compiled, an ordinary (non-native) class.
@mypyc_attr(native_class=False)
class OnDisk(int):
    """A body left in the binlog (--bodies-on-disk): the CRC-32 of its
    bytes << 64 | where it starts in its job's file (Job.file, under 2**31:
    -s is a C int) << 32 | its size, CRLF included. len() is that size, as
    a body's is, so that what counts bytes works on either; what needs the
    bytes asks the store (Store.body), which checks them against the CRC.
    64 bytes, where the body's own bytes object costs 33 more than its
    size."""

    __slots__ = ()

    def __len__(self) -> int:
        return self & M32

    @property
    def offset(self) -> int:
        return self >> 32 & M32

    @property
    def crc(self) -> int:
        return self >> 64


def on_disk(crc: int, offset: int, size: int) -> OnDisk:
    """Where a body is in its file, and its bytes' CRC-32 (zlib.crc32)."""
    return OnDisk(crc << 64 | offset << 32 | size)


# Not tracked by the collector (compiled): a job's references (its tube,
# its holder's block while reserved, its binlog file) form no cycle that
# the queue does not break when the job leaves that state, and what
# survives a young collection is frozen anyway (server/loop.py), never
# collected. Tracked, each job took a GC header (16 bytes) and was
# traversed in its young collection: 178 instructions a put.
@mypyc_attr(acyclic=True)
class Job:
    __slots__ = ("id", "tube", "pri", "times", "body", "state", "created",
                 "deadline", "counts", "file", "holder", "conn_at", "tags")

    def __init__(self, id_: int, tube: Tube, pri: int, delay: int, ttr: int, body: bytes | OnDisk,
                 created: int) -> None:
        self.id = id_
        self.tube = tube
        self.pri = pri
        # ns: the last put or release delay, and ttr (a put's raised to a
        # second: put_ttr; one read back from a record keeps the record's,
        # as the reference's recovery does)
        self.times = TIMES.pair(delay, ttr)
        # bytes, with the trailing CRLF. With --bodies-on-disk, an OnDisk
        # once the binlog holds it (binlog/bodies.py). len() is the body's
        # size either way; what needs the bytes asks the store (Store.body).
        self.body: bytes | OnDisk = body
        self.state = INVALID
        self.created = created
        # ns: when reserved, TTR expiry; when delayed, ready time. When buried:
        # the binlog position of the record that buried it (or UNPLACED).
        # 0 only until the job is first reserved (see Queue.run_job).
        self.deadline = 0
        self.counts = 0  # see pack_counters
        # The binlog file holding the job's latest full record (binlog/files.py:
        # File). Any: core/ may not import binlog/, not even for its types.
        self.file: Any = None
        # Reserved: the block of its holder's reservations it is in, and its
        # place in its holder's heap of deadlines (Deadlines, below; -1 out
        # of it). None when not reserved.
        self.holder: Held | None = None
        self.conn_at = -1
        # --extensions: what its put's tags said (puttags.py), for as long
        # as it lives; None for a job without tags.
        self.tags: Tags | None = None

    @property
    def delay(self) -> int:
        return self.times.delay

    @property
    def ttr(self) -> int:
        return self.times.ttr


class Tube:
    __slots__ = ("name", "ready", "run", "matching", "delayed", "buried", "waiting",
                 "using", "watching",
                 "nready", "ndelayed", "nreserved", "urgent", "total_jobs",
                 "cmd_delete", "cmd_pause", "pause", "unpause_at", "alive", "ikey", "seq",
                 "wait_hist", "work_hist", "timeouts", "buries", "tries_used_up", "ewma",
                 "ewma_n")

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.ready = StaleHeap(TUBE_SLACK)  # pri << 64 | id
        self.run: Run | None = None  # its fresh jobs of one priority (run.py)
        self.matching = False  # its waiters are being served in slices (Queue._match)
        self.delayed = StaleHeap(TUBE_SLACK)  # deadline << 64 | id
        self.buried: OrderedDict[int, Job] = OrderedDict()  # FIFO, O(1) removal by id
        self.waiting: OrderedDict[Conn, None] = OrderedDict()  # FIFO of reservers
        self.using = self.watching = 0
        self.nready = self.ndelayed = self.nreserved = self.urgent = 0
        self.total_jobs = self.cmd_delete = self.cmd_pause = 0
        self.pause = 0  # ns; 0 when not paused
        # When its pause ends, 0 when not paused: it is paused while
        # unpause_at > now, read as it is (no method, for the pure build's
        # budget: one cost 386 instructions a reserve pure, none measurable
        # compiled). The
        # pause timer, not that check, ends a pause (setting both to 0),
        # so that ending it always runs the matcher for its waiters.
        self.unpause_at = 0
        self.alive = True
        self.ikey: int | None = None  # key of this tube's entry in Tubes.index, if it has one
        self.seq = 0
        # For the metrics (hist.py): ready -> reserved, and reserved -> delete,
        # release, bury (a tuple indexed by WORK_DELETE...), made at first use
        # (a server may hold many tubes that never serve a job); TTR expiries
        # and buries.
        self.wait_hist: Hist | None = None
        self.work_hist: tuple[Hist, ...] | None = None
        self.timeouts = self.buries = 0
        self.tries_used_up = 0  # jobs buried by --max-tries (of buries)
        # Reserved to deleted, ns: a moving average (tagged.py, for the
        # weighted-fair reserves), -1 before the first, and how many deletes
        # it has seen.
        self.ewma = -1
        self.ewma_n = 0

    def njobs(self) -> int:
        return self.nready + self.ndelayed + self.nreserved + len(self.buried)

    def worked(self, outcome: int, ns: int) -> None:
        """A job of the tube was reserved ns before its delete, release or
        bury (outcome: queue.py's WORK_DELETE...)."""
        w = self.work_hist
        if w is None:
            w = self.work_hist = (Hist(), Hist(), Hist())
        w[outcome].observe(ns)


class SwapList:
    """An array whose removal moves the last item into the hole.

    The reference keeps tubes and watch lists this way, and list-tubes shows
    the resulting order, so we keep it too; membership is O(1) here."""

    __slots__ = ("items", "index")

    def __init__(self) -> None:
        self.items: list[Tube] = []
        self.index: dict[Tube, int] = {}

    def append(self, x: Tube) -> None:
        self.index[x] = len(self.items)
        self.items.append(x)

    def remove(self, x: Tube) -> None:
        i = self.index.pop(x)
        last = self.items.pop()
        if last is not x:
            self.items[i] = last
            self.index[last] = i

    def __contains__(self, x: object) -> bool:
        return x in self.index

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Tube]:
        return iter(self.items)


class Conn:
    """What the queue knows about a client connection. The queue tells it of
    a blocked reserve's end through reserved() and no_job(); what that means
    on the wire is the subclass's (session.py)."""

    __slots__ = ("use", "watch", "nreserved", "held", "open_held", "deadlines",
                 "waiting", "timeout", "wait_key", "producer", "worker", "gone", "weighted")

    def __init__(self) -> None:
        # A Tube from Queue.attach on, which the engine calls as it makes the
        # connection: None only before that, so it is typed as a Tube.
        self.use: Tube = None  # type: ignore[assignment]
        self.watch = SwapList()
        self.nreserved = 0
        self.held: dict[int, Held] = {}  # its reservations, in blocks (held.py)
        self.open_held: Held | None = None  # the block its next reservation goes to
        self.deadlines = Deadlines()  # its reserved jobs, the soonest expiry first
        self.waiting = False
        self.timeout: int | None = None  # ns, for reserve-with-timeout
        self.wait_key: tuple[int, int, Conn] | None = None  # its wait_heap entry
        self.producer = self.worker = False
        self.gone = False  # closed; its reservations are being returned in slices
        # --extensions: its reserve-mode and its tubes' weights; until it
        # gives either, the shared fifo one (reserves as the reference's)
        self.weighted: Weighted = FIFO_POLICY

    def reserved(self, job: Job) -> None:
        """A reserve of this connection's got `job` (at once, or after waiting)."""
        raise NotImplementedError

    def no_job(self, outcome: Outcome) -> None:
        """A reserve of this connection's ended without a job: TIMED_OUT or
        DEADLINE_SOON (at once, or after waiting)."""
        raise NotImplementedError

    def woken(self) -> None:
        """Called when a blocked reserve has been answered."""


class Held:
    """A block of one connection's reservations."""

    __slots__ = ("conn", "jobs", "key")

    def __init__(self, conn: Conn, key: int) -> None:
        self.conn = conn
        self.jobs: dict[int, Job] = {}  # id -> Job, in reservation order
        self.key = key  # its place in conn.held


# -- reserved jobs by deadline ----------------------------------------
#
# A connection's reserved jobs by their TTR deadline, the soonest first
# (Deadlines): for DEADLINE_SOON (reserving.py), and for the queue's heap
# of holders (timers.py: Expiries; tick.py expires what is due), which
# keeps each holder by a lower bound of its soonest, as the reference
# keeps a heap of connections.
#
# An indexed binary heap, as beanstalkd's heap.c: each job keeps its
# place in it (Job.conn_at), so a reservation that ends leaves at once
# and the heap holds exactly what it orders: its first is exact at any
# time, in O(1) (a lazy heap's first may hide a run of stale entries,
# which one call would pop: a stall). An entry makes no key object: the
# jobs' deadlines and ids are compared where they are. Order: (deadline,
# id).


SPARE: Final = 16  # slots a heap's list keeps, however few entries it holds


def before(a: Job, b: Job) -> bool:
    """Does a's reservation expire before b's? (deadline, then id)"""
    return a.deadline < b.deadline or (a.deadline == b.deadline and a.id < b.id)


class Deadlines:
    """A connection's reserved jobs by deadline (see above): each job
    keeps its place (Job.conn_at; -1 out of it). The key of its entry in
    the queue's heap of holders (timers.py: Expiries) is kept here, not in
    the connection: an entry left there once it has closed keeps this,
    not it, until swept.

    Its entries are jobs[base:base + n], the p-th at jobs[base + p], and
    the p-th's conn_at is origin + p. As heap.c's array, the list has
    room past them (NO_JOB there, so that it keeps no job alive), and
    shrinks only once half of it is room, never below SPARE slots: a
    worker's heap, of one reservation at a time, does not reallocate its
    list at each reserve and delete (about 200 instructions each,
    compiled).

    While its entries are in order (in_order: each pushed no sooner than
    the last, none taken out but the first or the last), they are a
    sorted run, and any part of a sorted run is a heap: the first is
    taken by moving base and origin on one, and nothing sinks.
    Reservations of one TTR come in that order, and deletes in the order
    of reservation take the first: 64 pipelined reserves and their
    deletes sink nothing. Room in front of the entries is dropped once it
    passes their count plus SPARE (a C move of them; their places,
    counted from origin, stay)."""

    __slots__ = ("jobs", "n", "base", "origin", "in_order", "bound", "bound_at")

    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self.n = 0
        self.base = 0  # where its first is in jobs
        self.origin = 0  # its first's conn_at
        self.in_order = True  # its entries are a sorted run (see above)
        # Its entry's key in the expiries, no later than its first's
        # (deadline << 64 | id; NO_ENTRY: it has none), and that key's
        # deadline (NO_ENTRY_AT: none), which push() compares: most
        # reserves have a later deadline, and make no key then
        self.bound = NO_ENTRY
        self.bound_at = NO_ENTRY_AT

    def __len__(self) -> int:
        return self.n

    def first(self) -> Job | None:
        """The reservation that expires first (None: none)."""
        return self.jobs[self.base] if self.n else None

    def soon(self, now: int) -> bool:
        """Is its soonest reservation within its last second
        (SAFETY_MARGIN)?"""
        first = self.first()
        return first is not None and now >= first.deadline - SAFETY_MARGIN

    def entries(self) -> list[Job]:
        """Its jobs, in heap order (a copy)."""
        return self.jobs[self.base:self.base + self.n]

    def push(self, j: Job) -> bool:
        """Add j. True if it is the first now and expires no later than
        the deadline of its holder's entry in the expiries (bound_at):
        then it may be sooner than that entry, and the caller asks the
        expiries (Expiries.lower). A worker's reserve, whose deadline is
        later, makes no call there."""
        jobs = self.jobs
        n = self.n
        end = self.base + n
        if end == len(jobs):
            jobs.append(j)
        self.n = n + 1
        if not n or (self.in_order and not before(j, jobs[end - 1])):
            # (in order, it is the sorted run's next: its last place is a
            # heap's too, nothing to compare with its parents)
            self.in_order = True
            jobs[end] = j
            j.conn_at = self.origin + n
            p = n
        else:
            self.in_order = False
            p = self._rise(j, n)
        return not p and j.deadline <= self.bound_at

    def remove(self, j: Job) -> int:
        """Take j out: where it was (0: it was the first), or -1 if it is
        not in this heap (nothing is done then). The first of a sorted run
        leaves its slot empty; else the last entry fills j's place, and
        moves to where it belongs."""
        # (j's recorded place may be from another heap, or from before a
        # clear: it is j's here only if j is there)
        p = j.conn_at - self.origin
        n = self.n - 1
        b = self.base
        jobs = self.jobs
        if not (0 <= p <= n and jobs[b + p] is j):
            return -1
        j.conn_at = -1
        self.n = n
        if not n:
            # The last (a worker's, of one reservation at a time, ends
            # each here): its slot emptied, and all the room is behind
            # the start again, kept up to SPARE slots.
            jobs[b] = NO_JOB
            self.base = 0
            if len(jobs) > SPARE:
                del jobs[SPARE:]
            return 0
        if not p and self.in_order:
            jobs[b] = NO_JOB
            b += 1
            self.base = b
            self.origin += 1
        else:
            last = jobs[b + n]
            jobs[b + n] = NO_JOB
            if p < n:
                self.in_order = False
                self._settle(last, p)
        if b > n + SPARE:
            del jobs[:b]
            self.base = b = 0
        # (the list's size first: a worker's, of a reservation or a few,
        # never passes SPARE, and this is the one test it takes)
        end = b + n
        if len(jobs) > SPARE and end <= len(jobs) >> 1:
            del jobs[max(end + (n >> 3), SPARE):]
        return p

    def clear(self) -> list[Job]:
        """Forget every job at once (their places are not reset: a job's
        place is set again when it is pushed, and remove() checks it).
        Returns the list that held them, the room around them dropped,
        for the caller to free (in slices, if it is big)."""
        jobs = self.jobs
        del jobs[self.base + self.n:]
        del jobs[:self.base]
        self.jobs = []
        self.n = self.base = 0
        return jobs

    def _settle(self, j: Job, p: int) -> None:
        """Put j, which is to be p-th (in place of the entry there, which
        is not read), above or below it where it belongs."""
        if p and before(j, self.jobs[self.base + ((p - 1) >> 1)]):
            self._rise(j, p)
        else:
            self._sink(j, p)

    def _rise(self, j: Job, p: int) -> int:
        """Put j p-th, or above while it expires before its parent;
        returns where it went."""
        jobs = self.jobs
        b = self.base
        o = self.origin
        while p:
            parent = (p - 1) >> 1
            above = jobs[b + parent]
            if not before(j, above):
                break
            jobs[b + p] = above
            above.conn_at = o + p
            p = parent
        jobs[b + p] = j
        j.conn_at = o + p
        return p

    def _sink(self, j: Job, p: int) -> None:
        """Put j p-th, or below while a child expires before it."""
        jobs = self.jobs
        n = self.n
        b = self.base
        o = self.origin
        child = 2 * p + 1
        while child < n:
            if child + 1 < n and before(jobs[b + child + 1], jobs[b + child]):
                child += 1
            below = jobs[b + child]
            if not before(below, j):
                break
            jobs[b + p] = below
            below.conn_at = o + p
            p = child
            child = 2 * p + 1
        jobs[b + p] = j
        j.conn_at = o + p


# What fills a heap's room past its entries (Deadlines): no job of a queue.
NO_JOB: Final = Job(0, Tube(b""), 0, 0, 0, b"", 0)

"""What the queue does for connections: their tubes (use, watch, ignore),
their reserves (the best ready job among the tubes they watch, or a wait,
served first come first served as jobs become ready) and their close:
functions of the queue (queue.py), whose state they change as its methods
do; the engine calls them directly.

A reserve's answer goes to the connection itself (Conn.reserved, Conn.no_job),
at once or when a job comes or the wait ends.
"""
from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING, Final

from .heaps import SHIFT
from .held import FREED
from .job import DEFAULT_TUBE, INVALID, READY, RESERVED, SAFETY_MARGIN, Job
from .outcome import DEADLINE_SOON, DONE, NOT_FOUND, TIMED_OUT, Outcome
from .slices import SLICE
from .queue import Queue

if TYPE_CHECKING:
    from collections.abc import Generator, Iterator

    from .job import Conn, Tube
    from .weighted import Weighted

WIDE_WATCH: Final = 16  # a reserve watching more tubes than this walks the tube index

# -- connections -------------------------------------------------------


def attach(q: Queue, c: Conn) -> None:
    default = q.tubes.named[DEFAULT_TUBE]
    c.use = default
    default.using += 1
    c.watch.append(default)
    default.watching += 1


def use(q: Queue, c: Conn, name: bytes) -> None:
    t = q.tubes.tube(name)  # create first, then release: list order depends on it
    old, c.use = c.use, t
    t.using += 1
    old.using -= 1
    q.maybe_free(old)


def watch(q: Queue, c: Conn, name: bytes) -> int:
    t = q.tubes.tube(name)
    if t not in c.watch:
        c.watch.append(t)
        t.watching += 1
    return len(c.watch)


def ignore(q: Queue, c: Conn, name: bytes) -> int | None:
    """The new watch count, or None for NOT_IGNORED."""
    t = q.tubes.get(name)
    if t is not None and t in c.watch:
        if len(c.watch) < 2:
            return None
        c.watch.remove(t)
        c.weighted.forget(t.name)
        t.watching -= 1
        q.maybe_free(t)
    return len(c.watch)


def detach(q: Queue, c: Conn, now: int) -> None:
    """The connection closed: its reserved jobs go back to ready, in
    reservation order, SLICE a step."""
    if c.waiting:
        q.unwait(c)
    # Its heap is emptied now, not when the slices end: a job its first
    # slices return may be reserved again elsewhere, and a remove from
    # this heap (flush-tube's _unreserve of a job still held here) would
    # sift it and overwrite its conn_at in its new holder's heap. Its
    # entry in the expiries goes stale even if it holds nothing (it may
    # be a worker's, between two jobs), so as not to keep it in memory
    # until that entry's time.
    old = q.timers.ttr_heap.drop(c)
    if c.nreserved:
        c.gone = True
        q.gone[c] = None
        q.slices.spawn(_return_reserved(q, c, now, old))
    else:
        # Its open block refers back to it: a cycle, which the garbage
        # collector never sees once frozen (server/loop.py), so every
        # connection that ever reserved would stay in memory.
        c.held.clear()
        c.open_held = None
    # The tubes it alone kept go in the reference's order, which decides
    # the order of the tubes left in list-tubes (a tube that goes leaves
    # the last one in its place): the watched ones as beanstalkd clears a
    # connection's watch set (deleting item 0, the last taking its place:
    # item 0, then from the last back to item 1), then the used one.
    watched = list(c.watch)
    for t in watched[:1] + watched[:0:-1]:
        t.watching -= 1
        q.maybe_free(t)
    t = c.use
    t.using -= 1
    q.maybe_free(t)


def holders(q: Queue) -> list[Conn]:
    """The connections holding reservations: those open, then those
    closed whose reservations are still being returned."""
    return q.timers.ttr_heap.holders() + list(q.gone)


def reservations(q: Queue) -> Iterator[Job]:
    """Every reserved job, holder by holder, in holders() order. Lazy,
    over a copy of each block as the walk comes to it: the queue may
    change between two jobs (one released meanwhile is passed over;
    one reserved again by a holder walked later comes twice)."""
    for c in holders(q):
        for h in list(c.held.values()):
            for j in list(h.jobs.values()):
                if j.holder is h:
                    yield j


def pause_tube(q: Queue, t: Tube, delay: int, now: int, count: bool = True) -> None:
    """count: False for a pause that is not a pause-tube command (ops/)."""
    # The reference pauses for 1 ns when told 0 (0 would mean "not
    # paused"), so the pause is over by the next look at its clock: even
    # for the next command of the same read. Here a zero pause ends at
    # once (unpause_at > now is False from here on), whatever time the
    # next command is given; stats-tube still shows pause 0.
    t.pause = delay or 1
    t.unpause_at = now + delay
    t.cmd_pause += count
    q.timers.pause(t)
    q.timers.tidy_pauses(len(q.tubes))


def _return_reserved(q: Queue, c: Conn, now: int,
                     deadlines: list[Job]) -> Generator[None, int, None]:
    # No TTR expires a gone connection's jobs (its heap left the queue's);
    # only a flush-tube may delete one between slices (then it is no longer
    # RESERVED).
    left = SLICE
    for h in list(c.held.values()):
        for j in list(h.jobs.values()):
            if not left:
                now = yield
                left = SLICE
            left -= 1
            if j.state != RESERVED:
                continue  # deleted meanwhile
            j.holder = None
            j.tube.nreserved -= 1
            q.reserved_ct -= 1
            j.state = INVALID
            q.tags.returned(q, j)
            q.place_ready(j, now)
        c.held.pop(h.key, None)  # (gone already if a flush emptied it)
        h.jobs = FREED  # freed block by block: all at the end is O(n) in one go
    c.nreserved = 0
    c.open_held = None
    del q.gone[c]
    # Freeing a big list is O(n) in one go too: shrink it first.
    while len(deadlines) > SLICE:
        yield
        del deadlines[-SLICE:]


# -- matching jobs with reservers --------------------------------------


def _best_ready_wide(q: Queue, c: Conn, now: int) -> Job | None:
    """The best ready job among c's many watched tubes, walking the index
    in key order: O(log T) when c watches the tubes that have jobs."""
    index, watch, aside, best = q.tubes.index, c.watch, [], None
    while index:
        key, _, t = entry = heappop(index)
        if not t.alive or key != t.ikey:
            continue  # superseded
        j = q.ready_top(t)
        if j is None:
            t.ikey = None
            continue
        top = (j.pri << SHIFT) | j.id
        if top != key:  # the bound was low: refresh it
            t.ikey = top
            heappush(index, (top, t.seq, t))
            continue
        aside.append(entry)
        if t in watch and t.unpause_at <= now:
            best = j
            break
    for entry in aside:
        heappush(index, entry)
    return best


def _best_ready(q: Queue, c: Conn, now: int) -> Job | None:
    if len(c.watch) > WIDE_WATCH:
        return _best_ready_wide(q, c, now)
    best = None
    for t in c.watch:
        if t.nready and t.unpause_at <= now:
            j = q.ready_top(t)  # (None only if the tags hide them all)
            if j is not None and (best is None or (j.pri, j.id) < (best.pri, best.id)):
                best = j
    return best


def _best_ready_unclaimed(q: Queue, c: Conn, now: int) -> Job | None:
    """The best ready job in c's tubes that have no waiters: the others'
    jobs go to their earlier waiters first (their slices are pending)."""
    best = None
    for t in c.watch:
        if t.nready and not t.waiting and t.unpause_at <= now:
            j = q.ready_top(t)
            if j is not None and (best is None or (j.pri, j.id) < (best.pri, best.id)):
                best = j
    return best


def wait_expired(q: Queue, c: Conn, now: int) -> None:
    """c's blocked reserve ends with no job: its timeout came, or a job it
    holds is within its last second."""
    soon = c.deadlines.soon(now)
    q.unwait(c)
    c.no_job(DEADLINE_SOON if soon else TIMED_OUT)
    c.woken()


def reserve(q: Queue, c: Conn, timeout: int | None, now: int) -> None:
    """reserve / reserve-with-timeout (timeout in ns)."""
    # (c.nreserved first: a worker's reserve, which holds nothing then,
    # asks its heap of deadlines nothing)
    if c.nreserved and c.deadlines.soon(now) and not any(t.nready for t in c.watch):
        c.no_job(DEADLINE_SOON)
        return
    j = _ready_for(q, c, now)
    if j is not None:
        run = j.tube.run
        if run is not None:
            run.take(j.id)  # (else ready_top would look it up again to drop it)
        q._leave_ready(j)
        q._reserve(c, j, now)
        return
    c.waiting = True
    c.timeout = timeout
    q.waiting_ct += 1
    for t in c.watch:
        t.waiting[c] = None
    due = None if timeout is None else now + timeout
    soonest = c.deadlines.first()
    if soonest is not None:
        soon = soonest.deadline - SAFETY_MARGIN
        due = soon if due is None else min(due, soon)
    if due is not None:
        c.wait_key = q.timers.wait(c, due)
        if due <= now:
            wait_expired(q, c, now)
        else:
            q.timers.push_wait(c.wait_key)


def _ready_for(q: Queue, c: Conn, now: int) -> Job | None:
    """The job a reserve of c's would get at once: the best ready one in
    the tubes it watches, unpaused, past the other reservers that wait
    for those tubes (they come first)."""
    watch = c.watch.items
    if len(watch) == 1:
        t = watch[0]
        return q.ready_top(t) if t.nready and not t.waiting and t.unpause_at <= now else None
    policy = c.weighted
    if policy.mode:
        return _weighted(q, c, policy, now)
    j = _best_ready(q, c, now)
    if j is not None and j.tube.waiting:
        j = _best_ready_unclaimed(q, c, now)
    return j


def _weighted(q: Queue, c: Conn, policy: Weighted, now: int) -> Job | None:
    """reserve-mode weighted (weighted-fair): a tube drawn among c's
    watched tubes with a ready job, unpaused and with no reserver
    waiting for it (weighted.py); then that tube's best job.
    Priorities across tubes do not count, as in tuber."""
    tubes = [t for t in c.watch if t.nready and not t.waiting
             and t.unpause_at <= now and q.ready_top(t) is not None]
    i = policy.draw([(t.name, t.ewma, t.ewma_n) for t in tubes])
    return None if i < 0 else q.ready_top(tubes[i])


def reserve_now(q: Queue, c: Conn, now: int) -> bool:
    """Reserve what a reserve would get at once, if anything (True);
    never waits (reserve-batch)."""
    j = _ready_for(q, c, now)
    if j is None:
        return False
    q._reserve(c, q._pop_ready(j.tube), now)  # type: ignore[arg-type]  # (j: its top)
    return True


def reserve_job(q: Queue, c: Conn, id_: int, now: int) -> Outcome:
    """Reserve job id_ whatever its state (not reserved by anyone):
    DONE, and c.reserved(job); or NOT_FOUND (also a job the tags keep
    from it: a concurrency key with no room, an open aft: group)."""
    j = q.jobs.get(id_)
    if j is None or j.state == RESERVED or not q.tags.may_reserve(j):
        return NOT_FOUND
    ready = j.state == READY
    q.remove(j)
    if not ready:
        j.deadline = now  # no wait from ready: counted as 0 by _reserve, taken back
    q._reserve(c, j, now)
    if not ready:
        j.tube.wait_hist.take_back(0)  # type: ignore[union-attr]  # (not None: _reserve made it)
    return DONE


def hangup(q: Queue, c: Conn) -> None:
    """The peer half-closed while blocked in reserve: TIMED_OUT."""
    if c.waiting:
        q.unwait(c)
        c.no_job(TIMED_OUT)

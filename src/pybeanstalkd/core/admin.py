"""What the HTTP side (ops/) does to the queue: list a tube's jobs in the
order the server would serve them, and the admin actions (delete or kick any
job, move, flush, put, pause). Pure: `now` is passed in.

None of this is a protocol command, so no cmd-* counter moves (a tube's
cmd-delete and cmd-pause-tube included); the job counters move as the jobs do,
and every change goes to the binlog through the queue's own operations.

Work over many jobs (flush, move, deep pages) is a generator of slices of
SLICE jobs, run like a big `kick` (Queue.slices: spawn, step): its value is the
result once the last slice has run.
"""
from __future__ import annotations

from heapq import heappop, heappush
from itertools import islice
from typing import TYPE_CHECKING

from . import commands, reserving
from .job import BURIED, DELAYED, READY, RESERVED, Tube
from .jobmap import BITS
from .outcome import DONE, IDS_USED_UP, NO_ROOM, NOT_LOGGED, UNREADABLE, Outcome
from .protocol import NS
from .heaps import MASK, SHIFT
from .queue import Queue
from .slices import SLICE

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterable, Iterator

    from .session import EngineState
    from .job import Job

STATES = {"ready": READY, "delayed": DELAYED, "buried": BURIED, "reserved": RESERVED}


def count(t: Tube, state: int) -> int:
    if state == READY:
        return t.nready
    if state == DELAYED:
        return t.ndelayed
    if state == BURIED:
        return len(t.buried)
    return t.nreserved


# -- serve order ------------------------------------------------------------

def _heap_in_order(h: list[int]) -> Iterator[int]:
    """A heap's keys in ascending order, without changing it: each step
    pops the smallest node of the explored frontier and adds its children."""
    n = len(h)
    if not n:
        return
    frontier = [(h[0], 0)]
    while frontier:
        key, i = heappop(frontier)
        yield key
        c = 2 * i + 1
        if c < n:
            heappush(frontier, (h[c], c))
            if c + 1 < n:
                heappush(frontier, (h[c + 1], c + 1))


def _live_keys(keys: Iterable[int], live: Callable[[int], bool]) -> Iterator[int]:
    """Live keys only, each once (a heap may hold one key twice)."""
    last = None
    for key in keys:
        if key != last and live(key):
            last = key
            yield key


def _run_ids(t: Tube) -> list[int]:
    """The ids in t's run (a copy)."""
    return [] if t.run is None else t.run.entries()


def _run_keys(q: Queue, t: Tube, run: Iterable[int]) -> Iterator[int]:
    pri = (0 if t.run is None else t.run.pri) << SHIFT
    for id_ in run:
        if q.jobs.run_job(id_) is not None:
            yield pri | id_


def _merge(a: Iterable[int], b: Iterable[int]) -> Iterator[int]:
    """Two ascending key streams, merged."""
    a, b = iter(a), iter(b)
    x, y = next(a, None), next(b, None)
    while x is not None:
        if y is None or x <= y:
            yield x
            x = next(a, None)
        else:
            yield y
            y = next(b, None)
    while y is not None:  # a is done: the rest of b
        yield y
        y = next(b, None)


def in_order(q: Queue, t: Tube, state: int, heap: list[int] | None = None,
             run: Iterable[int] | None = None) -> Iterator[Job]:
    """t's jobs in `state`, in the order the server would serve them:
    ready by priority then id; delayed by the time they become ready; buried
    oldest bury first (kick order); reserved by TTR deadline.

    Lazy for ready and delayed (O(log n) a job, from the heaps as they are,
    or from the copies given); the queue must not change while it is read."""
    if state == READY:
        keys = _merge(_run_keys(q, t, _run_ids(t) if run is None else run),
                      _live_keys(_heap_in_order(t.ready.entries if heap is None else heap),
                                 q.jobs.ready_live))
    elif state == DELAYED:
        keys = _live_keys(_heap_in_order(t.delayed.entries if heap is None else heap),
                          q.jobs.delayed_live)
    elif state == BURIED:
        yield from t.buried.values()
        return
    else:
        mine = [j for j in reserving.reservations(q) if j.tube is t]
        mine.sort(key=lambda j: (j.deadline, j.id))
        yield from mine
        return
    mask = (1 << SHIFT) - 1
    for key in keys:
        id_ = key & mask
        job = q.jobs.get(id_)
        assert job is not None  # (live keys only)
        yield job


def page(q: Queue, t: Tube, state: int, offset: int,
         limit: int) -> Generator[None, int, tuple[int, list[Job]]]:
    """A generator of slices whose value is (total, [jobs]): the jobs at
    offset..offset+limit in serve order. A page deeper than a slice reads
    copies of the heaps, SLICE entries a step; jobs that leave the state
    meanwhile are left out."""
    total = count(t, state)
    if offset + limit <= SLICE or state not in (READY, DELAYED):
        if state == BURIED:
            return total, list(islice(t.buried.values(), offset, offset + limit))
        return total, list(islice(in_order(q, t, state), offset, offset + limit))
    heap = list((t.ready if state == READY else t.delayed).entries)  # a copy in C: fast
    run = _run_ids(t) if state == READY else None
    it = in_order(q, t, state, heap, run)
    skip = offset
    while skip > 0:
        yield
        got = sum(1 for _ in islice(it, min(skip, SLICE)))
        if not got:
            return total, []
        skip -= got
    jobs: list[Job] = []
    while len(jobs) < limit:
        yield
        more = list(islice(it, min(limit - len(jobs), SLICE)))
        if not more:
            break
        jobs += more
    # Between slices jobs may have moved on: keep those still in the state.
    return total, [j for j in jobs if j.state == state and j.tube is t and q.jobs.get(j.id) is j]


def top(q: Queue, t: Tube, state: int) -> Job | None:
    """The job t would serve first from `state` (ready, delayed or buried)."""
    if state == READY:
        return q.ready_top(t)
    if state == DELAYED:
        return q.delayed_top(t)
    return q.buried_top(t)


# -- actions ----------------------------------------------------------------

def delete(q: Queue, j: Job, now: int) -> Outcome:
    """Delete a job that is not reserved, as `delete` would but counting no
    command: Queue.delete's outcome."""
    return q.delete(None, j.id, now, count=False)


def _each(q: Queue, t: Tube, state: int, bound: int, act: Callable[[Job, int], Outcome],
          now: int) -> Generator[None, int, tuple[int, Outcome]]:
    """Slices applying act(j, now) to t's jobs in `state`, in serve order, to
    at most `bound` jobs, stopping at the first that is not DONE. As kick,
    the bound is set when it starts, so a steady producer cannot keep it
    going. The value is (how many were DONE, DONE or the outcome it
    stopped at)."""
    n, k = 0, SLICE
    while n < bound:
        if not k:
            now = yield
            k = SLICE
        k -= 1
        j = top(q, t, state) if t.alive else None
        if j is None:
            break
        outcome = act(j, now)
        if outcome is not DONE:
            return n, outcome
        n += 1
    return n, DONE


# Past this many, a tube's jobs (flush-tube) are not copied in one step to
# be gone through in slices (a million take 10 to 30 ms here, every client
# waiting), but found in the job map, block by block (each_block).
COPY_MAX = 32768


def each_block(q: Queue, last: int) -> Iterator[list[Job]]:
    """The jobs of each block of the job map below id `last`, one block at
    a time, in id order: each as it is when it is reached (a job deleted
    before is not in it; one put since has an id from last on)."""
    blocks = q.jobs.blocks
    for k in sorted(blocks):
        if k << BITS >= last:
            return
        b = blocks.get(k)
        if b is not None:
            yield b.jobs()


def state_keys(q: Queue, t: Tube, states: Iterable[int] = (READY, DELAYED, BURIED)) -> list[int]:
    """The heap keys (or ids: `key & MASK` is the id either way) of t's
    jobs in `states` (ready, delayed, buried): copies made in C, so a
    million cost milliseconds. Ready: the heap, the run and the jobs a
    concurrency key hides (Queue.hidden). Stale heap entries are included
    (a job found twice is deleted once): each is checked when it is used."""
    keys: list[int] = []
    if READY in states:
        keys += t.ready.entries
        keys += _run_ids(t)
    if DELAYED in states:
        keys += t.delayed.entries
    if BURIED in states:
        keys += t.buried
    if READY in states:
        keys += q.tags.hidden(t)
    return keys


def flush(q: Queue, t: Tube, state: int, now: int) -> Generator[None, int, tuple[int, Outcome]]:
    """Slices deleting the jobs t holds in `state` (ready, delayed, buried)
    when it starts, found as flush-tube finds them (extensions.flush_every):
    the keys of that state (state_keys: ready ones hidden by a concurrency
    key too) are copied at the start and gone through SLICE a slice. Each
    job is deleted if it is still there, in t and in that state since
    before the start: a job put meanwhile stays, and so does one that came
    to the state meanwhile (a ready job's deadline says since when it is
    ready; a delayed one's must be its key's), even where a stale heap
    entry of its past names it (so `now` must be the clock's, not behind
    the times the queue was given). The value is (how many were deleted
    and logged, DONE); or it stops at the first delete the binlog could
    not record (NOT_LOGGED: that job is gone from memory, but a restart
    brings it back)."""
    start = now

    def stays(j: Job, key: int) -> bool:
        return (j.tube is not t or j.state != state
                or (state == READY and j.deadline > start)
                or (state == DELAYED and j.deadline != key >> SHIFT))

    return (yield from delete_each(q, state_keys(q, t, (state,)), q.ids.next, stays, now))


def delete_each(q: Queue, keys: Iterable[int], last: int, stays: Callable[[Job, int], bool],
                now: int, count: bool = False,
                k: int = SLICE) -> Generator[None, int, tuple[int, Outcome]]:
    """Slices deleting the jobs that keys name (heap keys or ids: `key &
    MASK` is the id either way), SLICE a pass (k left in the first): each
    that is still in the queue, has an id below `last` (a job put since
    the start stays) and that stays(job, key) does not keep, whoever holds
    it (count: as its tube's cmd-delete). The value is (how many were
    deleted, DONE), or it stops at the first delete the binlog could not
    record: (how many before it, NOT_LOGGED; that job is gone from memory,
    but a restart brings it back)."""
    jobs = q.jobs
    n = 0
    for key in keys:
        if not k:
            now = yield
            k = SLICE
        k -= 1
        id_ = key & MASK
        if id_ >= last:
            continue
        j = jobs.get(id_)
        if j is None or stays(j, key):
            continue  # gone (or a stale entry of a deleted job), or not the caller's
        outcome = q.delete(None, id_, now, count=count, any_holder=True)
        if outcome is NOT_LOGGED:
            return n, outcome
        n += outcome is DONE
    return n, DONE


def move(e: EngineState, t: Tube, to: bytes, state: int, bound: int,
         now: int) -> Generator[None, int, tuple[int, Outcome]]:
    """Slices moving up to `bound` of t's jobs in `state` into tube `to`, in
    serve order: each is put there (same priority, delay left, ttr and
    body; a new id) and deleted here. The value is (how many, DONE), or
    it stops where one could not be: IDS_USED_UP, NO_ROOM or UNREADABLE
    (the job stays where it is), or NOT_LOGGED (its delete here was not
    recorded: after a restart it is in both tubes).

    Not a put's admission: a move adds no job (the memory cap is not
    passed) and is not new work (draining does not stop it)."""
    q = e.q

    def act(j: Job, now: int) -> Outcome:
        if q.ids.used_up():
            return IDS_USED_UP
        dest = q.tubes.tube(to)  # looked up each time: it may be freed between slices
        delay = max(j.deadline - now, 0) if state == DELAYED else 0
        body = q.store.body(j)  # (--bodies-on-disk: read back)
        if body is None:
            return UNREADABLE
        new = q.new_job(dest, j.pri, delay, j.times.ttr, now)
        new.body = body
        if not q.store.reserve_put(new):
            q.maybe_free(dest)
            return NO_ROOM
        q.insert(new, now)
        return delete(q, j, now)
    return _each(q, t, state, min(bound, count(t, state)), act, now)


def put(e: EngineState, name: bytes, body: bytes, pri: int, delay: int, ttr: int,
        now: int) -> tuple[Outcome, int]:
    """Put a job into tube `name` as `put` would (delay and ttr in ns), with
    the same admission (commands.admit, commands.store_put). Returns (DONE,
    the new id), or (why not, 0)."""
    outcome = commands.admit(e, len(body), whole=True)
    if outcome is not DONE:
        return outcome, 0
    q = e.q
    t = q.tubes.tube(name)
    j = q.new_job(t, pri, delay, ttr, now)
    outcome = commands.store_put(e, j, body + b"\r\n", now)
    if outcome is not DONE:
        q.maybe_free(t)
        return outcome, 0
    return DONE, j.id


def pause(q: Queue, t: Tube, seconds: int, now: int) -> None:
    """pause-tube without counting a command (0 unpauses)."""
    reserving.pause_tube(q, t, seconds * NS, now, count=False)

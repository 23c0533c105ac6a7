"""The commands that move a job a connection holds, or one at rest:
release, bury, touch, kick (functions of the queue, queue.py, whose state
they change as its methods do; the engine calls them directly).

A record is written next to the change it records (store.write,
store.reserve_update, and place_ready's or place_delayed's log=True).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .job import BURIED, BURIES, DELAYED, KICKS, M32, RELEASES, TIMES, UNPLACED, bump
from .outcome import DONE, NO_ROOM, NOT_FOUND, TRIES_USED_UP, WRONG_STATE, Outcome
from .queue import WORK_BURY, WORK_RELEASE
from .slices import SLICE

if TYPE_CHECKING:
    from collections.abc import Generator

    from .job import Conn, Job, Tube
    from .queue import Queue


def worked(j: Job, outcome: int, now: int) -> None:
    """Count the time since j was reserved (or last touched): its
    deadline less its ttr."""
    j.tube.worked(outcome, now - j.deadline + j.times.ttr)


def tries_used_up(q: Queue, j: Job) -> bool:
    """--max-tries N (or a job's try:N): a job's tries are its releases and
    TTR expiries; the one that makes N buries it instead of putting it back,
    so that a job that keeps failing waits in the buried list (where every
    beanstalkd tool looks) instead of coming back for ever. A kick gives it
    one more try. Asked only when q.checks_tries."""
    limit = q.tags.tries_limit(q, j)
    c = j.counts
    return limit > 0 and (c >> 32 & M32) + (c >> 64 & M32) + 1 >= limit


def logs_tries(q: Queue, j: Job) -> bool:
    """Must j's releases and expiries be logged (its tries counted, so
    that they outlive a restart)? Asked only when q.checks_tries."""
    return q.tags.tries_limit(q, j) > 0


def bury_held(q: Queue, j: Job, pri: int) -> None:
    """Bury a reserved job whose record the binlog has room for."""
    j.tube.buries += 1
    q._unreserve(j)
    j.pri = pri
    j.counts = bump(j.counts, BURIES)
    j.deadline = UNPLACED  # the binlog records where, for the buried order
    q.place_buried(j)
    q.store.write(j)


def held_by(q: Queue, c: Conn, id_: int) -> Job | None:
    """The job id_ if c has it reserved."""
    j = q.jobs.get(id_)
    if j is None:
        return None
    held = j.holder  # (None unless reserved)
    return j if held is not None and held.conn is c else None


def release(q: Queue, c: Conn, id_: int, pri: int, delay: int, now: int) -> Outcome:
    """DONE, NOT_FOUND (not c's), NO_ROOM (a delayed release that the
    binlog has no room for: the job stays reserved), or TRIES_USED_UP
    (--max-tries: buried instead)."""
    j = held_by(q, c, id_)
    if j is None:
        return NOT_FOUND
    if q.checks_tries and tries_used_up(q, j) and q.store.reserve_update(j):
        worked(j, WORK_RELEASE, now)
        j.counts = bump(j.counts, RELEASES)
        j.tube.tries_used_up += 1
        bury_held(q, j, pri)
        return TRIES_USED_UP
    if delay and not q.store.reserve_update(j):
        return NO_ROOM
    worked(j, WORK_RELEASE, now)
    q._unreserve(j)
    j.pri = pri
    j.times = TIMES.pair(delay, j.times.ttr)
    j.counts = bump(j.counts, RELEASES)
    if delay:
        q.place_delayed(j, delay, now, log=True)
    else:
        # With --max-tries the tries must outlive a restart, so a release
        # is logged (the reference logs only a delayed one); with no room
        # in the binlog the count may go back at a restart.
        q.place_ready(j, now, log=q.checks_tries and logs_tries(q, j)
                         and q.store.reserve_update(j))
    return DONE


def bury(q: Queue, c: Conn, id_: int, pri: int, now: int) -> Outcome:
    """DONE, NOT_FOUND (not c's), or NO_ROOM (the job stays reserved)."""
    j = held_by(q, c, id_)
    if j is None:
        return NOT_FOUND
    if not q.store.reserve_update(j):
        return NO_ROOM
    worked(j, WORK_BURY, now)
    bury_held(q, j, pri)
    return DONE


def give_back(q: Queue, c: Conn, id_: int, now: int) -> None:
    """Undo c's reserve of job id_, whose body could not be read for a
    reason not its own (--bodies-on-disk, out of descriptors): ready
    again, its reserve not counted, nothing logged (a reserve never is)."""
    j = held_by(q, c, id_)
    if j is None:
        return
    q._unreserve(j)
    n = j.counts  # (reserves - 1: the low 32 bits, wrapping as bump's)
    j.counts = n - 1 if n & M32 else n | M32
    q.place_ready(j, now)


def touch(q: Queue, c: Conn, id_: int, now: int) -> Outcome:
    j = held_by(q, c, id_)
    if j is None:
        return NOT_FOUND
    j.deadline = now + j.times.ttr
    # (out of c's heap and back in at its new deadline: a touch is rare,
    # and a delete finds its place in one call. Taking j out makes c's
    # soonest no sooner, so c's entry in the expiries holds unless j,
    # back in, is first)
    d = c.deadlines
    d.remove(j)
    timers = q.timers
    if d.push(j) and timers.ttr_heap.lower(d, j):
        timers.timer(j.deadline + 1)
    return DONE


def kick(q: Queue, t: Tube, bound: int, now: int) -> Generator[None, int, int]:
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
        j = next(iter(t.buried.values()), None) if buried else q.delayed_top(t)
        if j is None or not q.store.reserve_update(j):
            break  # on a full disk the job stays where it is
        q.remove(j)
        j.counts = bump(j.counts, KICKS)
        q.place_ready(j, now, log=True)
        n += 1
    return n


def kick_job(q: Queue, id_: int, now: int) -> Outcome:
    """DONE, NOT_FOUND, WRONG_STATE (not buried or delayed) or NO_ROOM
    (the job stays where it is)."""
    j = q.jobs.get(id_)
    if j is None:
        return NOT_FOUND
    if j.state not in (BURIED, DELAYED):
        return WRONG_STATE
    if not q.store.reserve_update(j):
        return NO_ROOM
    q.remove(j)
    j.counts = bump(j.counts, KICKS)
    q.place_ready(j, now, log=True)
    return DONE

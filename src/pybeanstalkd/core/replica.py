"""A follower's queue follows its leader's binlog records.

Each record is a job's state after a change the leader journaled: a put, a
delayed release, a bury, a kick, a delete (or compaction's copy of a live
job). They are applied through the queue's own operations, so the
follower's binlog gets its own records of the same changes and stays a
binlog beanstalkd can read.

What the leader does not journal does not reach the follower, as it would
not survive a restart of beanstalkd either: a job the leader has reserved
is ready here, a release without delay or a touch changes nothing, and
delayed jobs come due by the follower's own clock. No client is served
here, so nothing here is reserved.

Which record is which is binlog/apply.py's (the one reading of a record,
recovery's too); cluster/apply.py calls these for it. Pure: times are
monotonic ns (the caller converts the records' wall clock) and `now` is
passed in.
"""
from __future__ import annotations

from .job import BURIED, DELAYED, TIMES, UNPLACED, Job
from .queue import Queue


def update(q: Queue, j: Job, pri: int, delay: int, ttr: int, deadline: int, counts: int,
           state: int, now: int, snapshot: bool = False) -> bool:
    """A record of job j, held here, that is not its delete. False if the
    follower's own binlog has no room for it. snapshot: of a snapshot's
    part, or of a batch written while its parts went out (cluster/apply.py:
    a buried job's record then takes it to the end of the bury order)."""
    if not q.store.reserve_update(j):
        return False
    if j.state == BURIED and state == BURIED and not snapshot:
        # Buried and left so (a duplicate put lowered its priority, or
        # compaction copied it): it keeps its place in the bury order, as
        # on the leader, where only a bury from another state moves a job.
        refresh(j, pri, delay, ttr, counts)
        q.store.write(j)
        return True
    q.remove(j)
    refresh(j, pri, delay, ttr, counts)
    _place(q, j, state, deadline, now)
    return True


def refresh(j: Job, pri: int, delay: int, ttr: int, counts: int) -> None:
    """The fields a later record of job j gives it, here and at recovery
    (binlog/recovery.py). j is where they order nothing: out of its
    state, buried, or not loaded yet."""
    j.pri, j.counts, j.times = pri, counts, TIMES.pair(delay, ttr)


def delete(q: Queue, j: Job, now: int) -> None:
    """Job j's delete record."""
    q.delete(None, j.id, now, count=False)  # (not reserved: nothing is, here)


def restoring(q: Queue) -> None:
    """A snapshot starts coming in (at each one's first part). Until
    settled(), this node's view lags the leader's: the jobs come in the
    order they were listed (an aft: job before members of its group put
    since), each as it was when its part was read, and the records the
    leader wrote meanwhile come after the last part. So the tags derive
    nothing from it meanwhile (Tagged.restoring): a held job is held as
    its record says, and a group left complete is not released."""
    q.tags.restoring(q)


def listed(q: Queue) -> None:
    """A snapshot's first part is applied: it has all the leader's
    cooldowns, so this node's others go (Tagged.listed)."""
    q.tags.listed(q)


def drop(q: Queue, id_: int, now: int) -> None:
    """A job no part of a snapshot named: the leader deleted it. Deleted
    here as a flush-tube's delete is, which starts no cooldown: the
    leader's, if it still has one, is in the snapshot's first part or in
    the records after it. A group it leaves complete completes once
    settled() (a member the leader put meanwhile may be yet to come)."""
    q.delete(None, id_, now, count=False, any_holder=True)


def settled(q: Queue, now: int) -> None:
    """The snapshot and the records the leader wrote while it went out
    are applied (or this node leads now): the tags derive again from
    this node's state, which is the leader's, and the groups left
    complete meanwhile complete now."""
    q.tags.settled(q, now)


def put_ready(q: Queue, id_: int, name: bytes, pri: int, delay: int, ttr: int, body: bytes,
              created: int, now: int) -> Job | None:
    """A put's usual record: a new job, ready, never reserved. Placed
    without a record of its own: the caller stores the leader's, which has
    the bytes this node would write (Wal.write(j, rec)). None if the
    follower's binlog has no room for it."""
    j = _new(q, id_, name, pri, 0, ttr, body, created)
    if j is None:
        return None
    q.insert(j, now, False, q.tags.brought(q, j))
    if delay:  # (a job put with a delay, since come due: ready, as inserted)
        j.times = TIMES.pair(delay, ttr)
    return j


def put(q: Queue, id_: int, name: bytes, pri: int, delay: int, ttr: int, body: bytes,
        created: int, deadline: int, counts: int, state: int, now: int) -> bool:
    """The full record of a job this follower lacks, in any state: a put
    whose record is not the usual one (put_ready), or compaction's copy of
    a job put before this follower followed. False if its binlog has no
    room for it."""
    # insert() places a job by its delay: the time left, not the original.
    left = deadline - now if state == DELAYED and deadline > now else 0
    j = _new(q, id_, name, pri, left, ttr, body, created)
    if j is None:
        return False
    j.counts = counts
    q.insert(j, now, True, q.tags.brought(q, j))
    j.times = TIMES.pair(delay, ttr)
    if state == BURIED:  # (a copy of a buried job this follower lacked)
        if not q.store.reserve_update(j):
            return False
        q.remove(j)
        _place(q, j, state, deadline, now)
    return True


def _new(q: Queue, id_: int, name: bytes, pri: int, delay: int, ttr: int, body: bytes,
         created: int) -> Job | None:
    """The job of a record this follower lacks, its binlog space reserved;
    None if there is no room."""
    t = q.tubes.tube(name)
    j = Job(id_, t, pri, delay, ttr, body, created)
    q.ids.seen(id_)
    q.tags.attach(j)
    if not q.store.reserve_put(j):
        q.maybe_free(t)
        return None
    return j


def _place(q: Queue, j: Job, state: int, deadline: int, now: int) -> None:
    if state == BURIED:
        j.deadline = UNPLACED  # the follower's binlog records its own position
        q.place_buried(j)
        q.store.write(j)
    elif state == DELAYED and deadline > now:
        q.place_delayed(j, deadline - now, now, log=True)
    else:  # ready, reserved on the leader, or delayed and due by now
        q.place_ready(j, now, log=True)

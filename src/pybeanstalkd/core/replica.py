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

Pure: times are monotonic ns (the caller converts the records' wall clock)
and `now` is passed in.
"""
from __future__ import annotations

from .job import BURIED, DELAYED, INVALID, UNPLACED, Job, times
from .queue import Queue


def apply(q: Queue, id_: int, name: bytes | None, pri: int, delay: int, ttr: int,
          body: bytes | None, created: int, deadline: int, counts: int, state: int,
          now: int) -> bool:
    """Apply one record; name and body are None for a short record.
    False if the follower's own binlog has no room for it."""
    j = q.jobs.get(id_)
    if j is None:
        if body is None or state == INVALID:
            return True  # a short record of a job deleted meanwhile
        # A record with a body is a full one, which always has the tube's name.
        return _put(q, id_, name, pri, delay, ttr, body, created,  # type: ignore[arg-type]
                    deadline, counts, state, now)
    if state == INVALID:
        q.delete(None, id_, now, count=False)  # (not reserved: nothing is, here)
        return True
    if not q.store.reserve_update(j):
        return False
    q.remove(j)
    j.pri, j.counts, j.times = pri, counts, times(delay, ttr)
    _place(q, j, state, deadline, now)
    return True


def put_ready(q: Queue, id_: int, name: bytes, pri: int, delay: int, ttr: int, body: bytes,
              created: int, now: int) -> Job | None:
    """A put's usual record: a new job, ready, never reserved. Placed
    without a record of its own: the caller stores the leader's, which has
    the bytes this node would write (Wal.write(j, rec)). None if the
    follower's binlog has no room for it."""
    j = _new(q, id_, name, pri, 0, ttr, body, created)
    if j is None:
        return None
    q.insert(j, now, log=False)
    if delay:  # (a job put with a delay, since come due: ready, as inserted)
        j.times = times(delay, ttr)
    return j


def _put(q: Queue, id_: int, name: bytes, pri: int, delay: int, ttr: int, body: bytes,
         created: int, deadline: int, counts: int, state: int, now: int) -> bool:
    # insert() places a job by its delay: the time left, not the original.
    left = deadline - now if state == DELAYED and deadline > now else 0
    j = _new(q, id_, name, pri, left, ttr, body, created)
    if j is None:
        return False
    j.counts = counts
    q.insert(j, now)
    j.times = times(delay, ttr)
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
    t = q.tube(name)
    j = Job(id_, t, pri, delay, ttr, body, created)
    q.ids.seen(id_)
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

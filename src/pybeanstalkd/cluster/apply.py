"""A follower applies the records of a frame to its queue (binlog/apply.py says
what each record means; core/replica.py does it to the queue).

The records are the leader's binlog v7 bytes; their times are wall clock,
turned into the follower's monotonic clock with its own wall offset.
"""
from __future__ import annotations

import errno

from ..binlog import ext as X, format as F
from ..binlog.apply import apply
from ..binlog.codec import TaggedCodec
from ..core import replica
from ..core.job import BURIED, READY
from ..core.tagged import policy

_HEAD = F.FULL_HEAD.pack(F.VERSION)


class ApplyError(Exception):
    """The records are bad, or the follower cannot store them: it must
    not ack the frame, and must catch up from a snapshot."""


def apply_records(q, records: bytes, wall_offset: int, now: int, max_job_size: int,
                  seen: set | None = None, snapshot: bool = False) -> int:
    """Apply every record of a frame to queue q; the number read. The ids
    of the records go into seen, if given (a snapshot's part). snapshot:
    the frame is a snapshot's part, or a batch written while its parts went
    out (a record of a buried job then takes it to the end of its tube's
    bury order, the one its parts and those batches bury jobs in)."""
    problems: list[str] = []
    st = [0, True]
    n = 0
    to = Follower(q, _HEAD + records, wall_offset, now, seen, snapshot or seen is not None)
    for r in F.read_records(to.data, F.VERSION, max_job_size, "frame", problems.append, st):
        if not apply(to, r):
            raise ApplyError(f"job {r.id}: no room in this node's binlog")
        n += 1
    if problems or not st[1]:
        raise ApplyError("; ".join(problems) or "a torn record")
    return n


class Follower:
    """The follower's queue as the leader's records are applied to it
    (binlog/apply.py's Applier), through the queue's own operations
    (core/replica.py). data: the frame's records, after a version."""

    def __init__(self, q, data: bytes, wall_offset: int, now: int, seen: set | None,
                 snapshot: bool = False) -> None:
        self.q, self.data, self.wall_offset, self.now = q, data, wall_offset, now
        self.seen = seen
        self.snapshot = snapshot
        # The put tags' records: a job's tags come just before its full
        # record, and a message is never split across frames.
        self.chunks = X.Reader() if q.ext is not None else None
        self.job = q.jobs.get if seen is None else self._seen

    def _seen(self, id_: int):
        self.seen.add(id_)  # type: ignore[union-attr]  # (the job lookup when seen is given)
        return self.q.jobs.get(id_)

    def put(self, r: F.JobRecord) -> bool:
        q, name, created = self.q, r.name, r.created - self.wall_offset
        if (r.state == READY and not r.deadline and not r.counts and not r.pad2
                and (r.mark == F.MARK and not r.pad1 or r.mark == F.MARK_CRC)):
            # A put, the usual record: its bytes are the ones this node would
            # write (F.encode), so they are stored as they came.
            j = replica.put_ready(q, r.id, name, r.pri, r.delay, r.ttr,
                                  r.body, created, self.now)  # type: ignore[arg-type]
            if j is None:
                return False
            start = r.offset
            q.store.write(j, self.data[start:start + F.full_size(name, r.size)])
            return True
        # (a frame's body: bytes, read without ram_min)
        return replica.put(q, r.id, name, r.pri, r.delay, r.ttr, r.body,  # type: ignore[arg-type]
                           created, self._deadline(r), r.counts, r.state, self.now)

    def update(self, j, r: F.JobRecord) -> bool:
        return replica.update(self.q, j, r.pri, r.delay, r.ttr, self._deadline(r), r.counts,
                              r.state, self.now, self.snapshot)

    def delete(self, j) -> None:
        replica.delete(self.q, j, self.now)

    def _deadline(self, r: F.JobRecord) -> int:
        return r.deadline - self.wall_offset if r.deadline else 0

    def tags(self, id_: int, tags, size: int) -> None:
        policy(self.q).keys.record(self.q, id_, tags)  # (the job's full record follows)

    def cool(self, orig: int, end: int, tube: bytes, key: bytes) -> None:
        policy(self.q).keys.cooling.apply(self.q, tube, key, orig, end - self.wall_offset)

    def clear(self, last: int, tube: bytes) -> None:
        self.q.tags.flushed(self.q, tube, last)

    def bad(self, why: str) -> bool:
        raise ApplyError(why)


PART_BYTES = 1 << 18  # a snapshot goes out in parts of about this size


def snapshot_parts(q, wall_offset: int, part_bytes: int = PART_BYTES):
    """A full record of every job q holds, in parts of about part_bytes:
    buried ones last, in each tube's bury order (the order a follower
    buries them in). The jobs and the cooldowns are listed now, when this
    is called (the caller fixes the snapshot's seq at the same time: no
    batch it ships after that is older than the listing); each part reads
    its jobs as they are when it is made, so the leader may go on between
    parts (what changes meanwhile is in the batches shipped after the
    snapshot, and applying a job's record again is harmless). Returns an
    iterator that always yields at least one part, the last possibly
    empty."""
    ids = [j.id for j in q.jobs.values() if j.state != BURIED]
    ids += [j.id for t in q.tubes.values() for j in t.buried.values()]
    codec = None
    notes: list[bytes] = []
    if q.ext is not None:  # the put tags: cooldowns first, tags before each job
        codec = TaggedCodec(q.ext)
        # The live ones: a flush-tube ends a tube's cooldowns in ext.cools at
        # once, and lets their records go from ext.cool_ids in slices.
        notes = [codec.note(cd, wall_offset) for m in q.ext.cools.values() for cd in m.values()]
    return _parts(q, ids, codec, notes, wall_offset, part_bytes)


def _parts(q, ids, codec, out, wall_offset: int, part_bytes: int):
    jobs = q.jobs
    size = 0
    for id_ in ids:
        j = jobs.get(id_)
        if j is None:
            continue  # deleted meanwhile
        body = q.store.body(j)  # (--bodies-on-disk: read back)
        if body is None and q.store.transient:
            # Out of descriptors: the job is fine, the snapshot is not sent
            # without it (the link fails, and the follower asks again).
            raise OSError(errno.EMFILE, f"job {j.id}'s body cannot be read back for now")
        if body is None:
            # (the store said where it failed) A short record: a follower
            # that has the job keeps it, as a snapshot's end deletes any
            # job no record named; one that lacks it cannot make it.
            rec = F.encode(j, False, wall_offset)
        else:
            rec = F.encode(j, True, wall_offset, body)
            if codec is not None:
                rec = codec.prefix(j) + rec
        out.append(rec)
        size += len(rec)
        if size >= part_bytes:
            yield b"".join(out)
            out, size = [], 0
    yield b"".join(out)


class Restore:
    """A follower's side of a snapshot in parts: each part is applied as it
    comes (the follower holds a superset of the leader's jobs meanwhile,
    never less); the last part deletes every job no part named. From the
    first part until core/replica.py's settled(), once the records the
    leader wrote while the parts went out are applied too (link.py), the
    tags derive nothing from the follower's lagging view (replica.restoring)."""

    def __init__(self, key) -> None:
        self.key = key  # which snapshot: (epoch, seq, the connection it comes on)
        self.seen: set[int] = set()
        self.started = False

    def part(self, q, records: bytes, wall_offset: int, now: int, max_job_size: int) -> int:
        first = not self.started
        if first:
            self.started = True
            replica.restoring(q)
        n = apply_records(q, records, wall_offset, now, max_job_size, self.seen)
        if first:
            replica.listed(q)
        return n

    def end(self, q, now: int):
        seen = self.seen
        for id_ in [i for i in q.jobs if i not in seen]:
            replica.drop(q, id_, now)
        q.jobs.shrink_all()  # (the parts came in the leader's order, buried jobs last)


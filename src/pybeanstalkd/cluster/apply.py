"""A follower applies the records of a frame to its queue (core/replica.py).

The records are the leader's binlog v7 bytes; their times are wall clock,
turned into the follower's monotonic clock with its own wall offset.
"""
from __future__ import annotations

import errno

from ..binlog import ext as X, format as F
from ..core import replica
from ..core.job import BURIED, READY

_HEAD = F.FULL_HEAD.pack(F.VERSION)


class ApplyError(Exception):
    """The records are bad, or the follower cannot store them: it must
    not ack the frame, and must catch up from a snapshot."""


def apply_records(q, records: bytes, wall_offset: int, now: int, max_job_size: int,
                  seen: set | None = None) -> int:
    """Apply every record of a frame to queue q; the number applied. The
    ids of the records go into seen, if given."""
    problems: list[str] = []
    st = [0, True]
    n = 0
    data = _HEAD + records
    jobs, store, mark = q.jobs, q.store, F.MARK
    reader = None
    for r in F.read_records(data, F.VERSION, max_job_size, "frame", problems.append, st):
        name, body = r.name, r.body
        if r.id >= X.EXT_ID and q.ext is not None and X.is_ours(r):
            # The put tags' records (binlog/ext.py): a job's tags come just
            # before its full record; a message is never split across frames.
            reader = reader or X.Reader()
            msg = reader.chunk(r)
            if msg is not None:
                _ours(q, msg, wall_offset)
            continue
        if seen is not None:
            seen.add(r.id)
        if (r.state == READY and not r.deadline and not r.counts and name and not r.pad2
                and r.id not in jobs and (r.mark == mark and not r.pad1 or r.mark == F.MARK_CRC)):
            # A put, the usual record: its bytes are the ones this node would
            # write (F.encode), so they are stored as they came. (A record
            # with a name is a full one: its body is not None.)
            j = replica.put_ready(q, r.id, name, r.pri, r.delay, r.ttr, body,  # type: ignore[arg-type]
                                  r.created - wall_offset, now)
            if j is None:
                raise ApplyError(f"job {r.id}: no room in this node's binlog")
            start = r.offset
            store.write(j, data[start:start + F.full_size(name, r.size)])
            n += 1
            continue
        deadline = r.deadline - wall_offset if r.deadline else 0
        if not replica.apply(q, r.id, name or None, r.pri, r.delay, r.ttr,
                             body,  # type: ignore[arg-type]  # (a frame's: bytes, no ram_min)
                             r.created - wall_offset, deadline, r.counts, r.state, now):
            raise ApplyError(f"job {r.id}: no room in this node's binlog")
        n += 1
    if problems or not st[1]:
        raise ApplyError("; ".join(problems) or "a torn record")
    return n


def _ours(q, msg: bytes, wall_offset: int) -> None:
    try:
        kind, fields = X.decode(msg)
    except ValueError as e:
        raise ApplyError(str(e)) from None
    if kind == X.TAGS:
        id_, tags = fields
        q.ext.jobs[id_] = tags  # (the job's full record follows)
    elif kind == X.COOL:
        orig, end, tube, key = fields
        q.apply_cool(tube, key, orig, end - wall_offset)
    else:
        last, tube = fields
        q.clear_tube(tube, last)


PART_BYTES = 1 << 18  # a snapshot goes out in parts of about this size


def snapshot_parts(q, wall_offset: int, part_bytes: int = PART_BYTES):
    """A full record of every job q holds, in parts of about part_bytes:
    buried ones last, in each tube's bury order (the order a follower
    buries them in). The jobs are listed when the first part is made; each
    part reads them as they are then, so the leader may go on between parts
    (what changes meanwhile is in the batches shipped after the snapshot,
    and applying a job's record again is harmless). Always yields at least
    one part, the last possibly empty."""
    ids = [j.id for j in q.jobs.values() if j.state != BURIED]
    ids += [j.id for t in q.tubes.values() for j in t.buried.values()]
    jobs = q.jobs
    out, size = [], 0
    codec = None
    if q.ext is not None:  # the put tags: cooldowns first, tags before each job
        codec = X.Codec(q.ext)
        out = [codec.note(cd, wall_offset) for cd in list(q.ext.cool_ids.values())]
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
    never less); the last part deletes every job no part named."""

    def __init__(self, key) -> None:
        self.key = key  # which snapshot: (epoch, seq, the connection it comes on)
        self.seen: set[int] = set()

    def part(self, q, records: bytes, wall_offset: int, now: int, max_job_size: int) -> int:
        return apply_records(q, records, wall_offset, now, max_job_size, self.seen)

    def end(self, q, now: int):
        seen = self.seen
        for id_ in [i for i in q.jobs if i not in seen]:
            q.delete(None, id_, now, count=False)
        q.jobs.shrink_all()  # (the parts came in the leader's order, buried jobs last)

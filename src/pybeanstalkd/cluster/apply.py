"""A follower applies the records of a frame to its queue (core/replica.py).

The records are the leader's binlog v7 bytes; their times are wall clock,
turned into the follower's monotonic clock with its own wall offset.
"""
from __future__ import annotations

from ..binlog import format as F
from ..core import replica
from ..core.job import BURIED, pack_counters

_HEAD = F.FULL_HEAD.pack(F.VERSION)


class ApplyError(Exception):
    """The records are bad, or the follower cannot store them: it must
    not ack the frame, and must catch up from a snapshot."""


def apply_records(q, records: bytes, wall_offset: int, now: int, max_job_size: int) -> int:
    """Apply every record of a frame to queue q; the number applied."""
    problems: list[str] = []
    st = [0, True]
    n = 0
    for rec in F.read_records(_HEAD + records, F.VERSION, max_job_size, "frame",
                              problems.append, st):
        if rec is None:
            break
        _, name, r, body = rec
        deadline = r[8] - wall_offset if r[8] else 0
        if not replica.apply(q, r[0], name or None, r[1], r[3], r[4], body,
                             r[7] - wall_offset, deadline, pack_counters(*r[9:14]), r[14], now):
            raise ApplyError(f"job {r[0]}: no room in this node's binlog")
        n += 1
    if problems or not st[1]:
        raise ApplyError("; ".join(problems) or "a torn record")
    return n


def snapshot(q, wall_offset: int) -> bytes:
    """A full record of every job q holds; buried ones last, in each tube's
    bury order, which is the order a follower buries them in."""
    out = [F.encode(j, True, wall_offset) for b in q.blocks.values() for j in b.values()
           if j.state != BURIED]
    out += [F.encode(j, True, wall_offset) for t in q.tubes.values() for j in t.buried.values()]
    return b"".join(out)


def restart(q, records: bytes, wall_offset: int, now: int, max_job_size: int) -> int:
    """Replace every job q holds with a snapshot's (deleting the others
    through the queue, so the follower's binlog drops them too)."""
    keep = set()
    head = _HEAD + records
    for rec in F.read_records(head, F.VERSION, max_job_size, "snapshot", lambda m: None, [0, True]):
        if rec is None:
            break
        keep.add(rec[2][0])
    for id_ in [i for b in q.blocks.values() for i in b if i not in keep]:
        q.delete(None, id_, now, count=False)
    return apply_records(q, records, wall_offset, now, max_job_size)

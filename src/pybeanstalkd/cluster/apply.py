"""A follower applies the records of a frame to its queue (core/replica.py).

The records are the leader's binlog v7 bytes; their times are wall clock,
turned into the follower's monotonic clock with its own wall offset.
"""
from __future__ import annotations

from ..binlog import format as F
from ..core import replica
from ..core.job import pack_counters

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

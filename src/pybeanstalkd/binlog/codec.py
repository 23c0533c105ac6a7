"""What the Wal writes for a job's full record, and for the records of ours.

The Wal (files.py) is given one codec when it is made, from the settings
(codec_for): PlainCodec writes jobs' records alone, beanstalkd's binlog;
TaggedCodec (--extensions) writes each job's tags just before its full
record, and the cooldowns' and flush-tubes' records (ext.py). The Wal asks
it every size and every full record's bytes, and so never asks which
binlog it writes.

TaggedCodec is given the tags' state when it is made, as the engine's
queue is (the Wal is made before the engine, as its store). Recovery
checks that the two agree (finder) before it reads the first record.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from . import ext as X, format as F
from ..core.tagged import policy

if TYPE_CHECKING:
    from typing import TypeAlias

    from ..core.job import Job
    from ..core.queue import Queue
    from ..core.store import Record
    from ..core.tags import Cooldown, ExtState

    # What compaction finds by id: a job, or (--extensions) a cooldown.
    Found: TypeAlias = "Job | Cooldown | None"


class PlainCodec:
    """Jobs' records alone: a binlog beanstalkd reads as its own. The base
    of the codecs: the Wal calls its codec through this class's methods
    (compiled, direct calls)."""

    def finder(self, q: Queue) -> Callable[[int], Found]:
        """How compaction finds a record's job (or cooldown) by its id in
        q, the queue the Wal stores for. ValueError if q's tags' state is
        not the one this codec writes from (none here)."""
        if q.ext is not None:
            raise ValueError("a queue with --extensions' tags needs a binlog that writes them"
                             " (TaggedCodec)")
        return q.jobs.get

    def size(self, j: Job) -> int:
        """The bytes of j's full record, with what goes before it."""
        return F.full_size(j.tube.name, len(j.body))

    def full(self, j: Job, rec: bytes) -> bytes:
        """What is written for j's full record rec."""
        return rec

    def cooldown_size(self, c: Cooldown) -> int:
        """The bytes of cooldown c's record."""
        raise ValueError("records of ours are written with --extensions only (TaggedCodec)")

    def note(self, rec: Record, wall_offset: int) -> bytes:
        """The bytes of a record of ours (a cooldown, a flush-tube's end)."""
        raise ValueError("records of ours are written with --extensions only (TaggedCodec)")


class TaggedCodec(PlainCodec):
    """--extensions: each job's tags, in records of ours (ext.py), just
    before its every full record, so that they move with it through
    compaction and leave with its file; and the cooldowns' and
    flush-tubes' records."""

    def __init__(self, state: ExtState) -> None:
        self.state = state  # the queue's (Engine's tag_state)

    def finder(self, q: Queue) -> Callable[[int], Found]:
        if q.ext is not self.state:
            raise ValueError("a binlog that writes --extensions' tags needs the queue whose"
                             " tags they are")
        cooling = policy(q).keys.cooling
        return lambda id_: cooling.find_record(q, id_)

    def prefix(self, j: Job) -> bytes:
        """The records that go before job j's full record (its tags)."""
        t = j.tags
        return b"" if t is None else X.chunks(X.tags_msg(j.id, t))

    def size(self, j: Job) -> int:
        t = j.tags
        extra = 0 if t is None else X.chunked_size(len(X.tags_msg(j.id, t)))
        return F.full_size(j.tube.name, len(j.body)) + extra

    def full(self, j: Job, rec: bytes) -> bytes:
        t = j.tags
        return rec if t is None else X.chunks(X.tags_msg(j.id, t)) + rec

    def cooldown_size(self, c: Cooldown) -> int:
        return len(X.note_msg(c, 0))

    def note(self, rec: Record, wall_offset: int) -> bytes:
        return X.note_msg(rec, wall_offset)


def codec_for(tag_state: ExtState | None) -> PlainCodec:
    """The codec of a binlog: --extensions' tags (from this state) or not."""
    return PlainCodec() if tag_state is None else TaggedCodec(tag_state)

"""What a binlog record means to a queue: the one place that says so.

Recovery (recovery.py: it loads the jobs of every file, then hands them to
the queue at once) and a cluster's follower (cluster/apply.py: it changes
its live queue through the queue's own operations, which write its own
binlog) read the same records and give them the same meaning:

* a full record of a job not held: the job, new (Applier.put);
* a record of a job held: its new fields (core/replica.py's refresh:
  priority, counts, delay and ttr), and with a full record its body and
  file (Applier.update); state INVALID: the job is deleted
  (Applier.delete);
* either way, the job is placed by its record's state: buried, delayed
  if its deadline is to come, else ready (a reserved one too: no client
  holds it after a restart, nor on a follower), by recovery's bulk load
  (core/loading.py) or one at a time (core/replica.py);
* a short record of a job not held: nothing (its job was deleted or
  moved on: its full record was in a file since let go, or before the
  follower's snapshot);
* with --extensions, a record of ours (ext.py): a chunk of a message that
  sets a job's tags, makes a cooldown or ends a tube's (Applier.tags,
  .cool, .clear).

How each is done, and what a failure means (a file read no further, a
frame refused), is the applier's.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ..core.job import INVALID
from ..core.tags import EXT_ID
from . import ext as X

if TYPE_CHECKING:
    from ..core.job import Job
    from ..core.puttags import Tags
    from .format import JobRecord


class Applier(Protocol):
    """A queue, as the records are applied to it."""

    # The job of an id, if held (an attribute: recovery's is a dict's get,
    # called for every record).
    job: Callable[[int], Job | None]
    # With --extensions, the reader that puts the chunks of records of ours
    # back into messages; None: they are short records of no job, passed over.
    chunks: X.Reader | None

    def put(self, r: JobRecord) -> bool:
        """A new job from its full record (r.body is not None); False if it
        cannot be had (the applier has said why)."""

    def update(self, j: Job, r: JobRecord) -> bool:
        """Job j's record, not a delete; False if it cannot be applied."""

    def delete(self, j: Job) -> None:
        """Job j's delete record."""

    def tags(self, id_: int, tags: Tags, size: int) -> None:
        """Job id_'s tags (its full record follows); size: their records' bytes."""

    def cool(self, orig: int, end: int, tube: bytes, key: bytes) -> None:
        """A cooldown of key in tube, from the delete of job orig until end (wall ns)."""

    def clear(self, last: int, tube: bytes) -> None:
        """A flush-tube's end: tube's cooldowns, and its jobs' keys below last, are gone."""

    def bad(self, why: str) -> bool:
        """A record that is not what its id says (one of ours that does not
        parse, a job's with an id of ours); False: stop here."""


def apply(to: Applier, r: JobRecord) -> bool:
    """Apply one record; False if it could not be (the applier said why)."""
    j = to.job(r.id)
    if j is None:
        chunks = to.chunks
        if r.body is not None and r.state != INVALID:
            if chunks is not None and r.id >= EXT_ID:
                # (a job's record with an id of ours: forged, or its top bit
                # changed on disk; a job of that id would be read back as
                # ours, and no put could follow it: core/jobids.py)
                return to.bad(f"job {r.id}: an id of the extensions' records")
            return to.put(r)
        if chunks is not None and X.is_ours(r):
            return _ours(to, chunks, r)
        return True  # a short record of a job deleted or moved meanwhile
    if r.state == INVALID:
        to.delete(j)
        return True
    return to.update(j, r)


def _ours(to: Applier, chunks: X.Reader, r: JobRecord) -> bool:
    msg = chunks.chunk(r)
    if msg is None:
        return True  # (more chunks to come, or a torn message: dropped)
    try:
        kind, fields = X.decode(msg)
    except ValueError as e:
        return to.bad(str(e))
    if kind == X.TAGS:
        id_, tags = fields
        if id_ >= EXT_ID:  # (no job has one: its record is refused too)
            return to.bad(f"the tags of job {id_}: an id of the extensions' records")
        to.tags(id_, tags, X.chunked_size(len(msg)))
    elif kind == X.COOL:
        orig, end, tube, key = fields
        to.cool(orig, end, tube, key)
    else:
        last, tube = fields
        to.clear(last, tube)
    return True

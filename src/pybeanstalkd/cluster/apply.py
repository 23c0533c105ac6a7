"""A follower applies the records of a frame to its queue (binlog/apply.py says
what each record means; core/replica.py does it to the queue).

The records are the leader's binlog v7 bytes; their times are wall clock,
turned into the follower's monotonic clock with its own wall offset.
"""
from __future__ import annotations

import errno
import weakref

from ..binlog import ext as X, format as F
from ..binlog.apply import apply
from ..binlog.codec import TaggedCodec
from ..core import replica
from ..core.job import BURIED, DELAYED, READY
from ..core.puttags import is_void
from ..core.tags import HELD

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
    (core/replica.py; for records of ours, its tags' policy's hooks).
    data: the frame's records, after a version."""

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
        self.q.tags.recorded(self.q, id_, tags)  # (the job's full record follows)

    def cool(self, orig: int, end: int, tube: bytes, key: bytes) -> None:
        self.q.tags.cooled(self.q, tube, key, orig, end - self.wall_offset)

    def clear(self, last: int, tube: bytes) -> None:
        self.q.tags.flushed(self.q, tube, last)

    def bad(self, why: str) -> bool:
        raise ApplyError(why)


PART_BYTES = 1 << 18  # a snapshot goes out in parts of about this size


def snapshot_parts(q, wall_offset: int, part_bytes: int = PART_BYTES) -> Parts:
    """A full record of every job q holds, in parts of about part_bytes:
    buried ones last, in each tube's bury order (the order a follower
    buries them in). The jobs and the cooldowns are listed now, when this
    is called (the caller fixes the snapshot's seq at the same time: no
    batch it ships after that is older than the listing); each part reads
    its jobs as they are when it is made, so the leader may go on between
    parts (what changes meanwhile is in the batches shipped after the
    snapshot, and applying a job's record again is harmless). But what
    decides whether an aft: job is held, and what holds an idp: key with
    a TTL, goes out as listed (Parts): a node that leads before those
    batches came holds the jobs, and the keys, the leader held then.
    Returns an iterator that always yields at least one part, the last
    possibly empty; close() it if it is not read to its end."""
    ids = [j.id for j in q.jobs.values() if j.state != BURIED]
    ids += [j.id for t in q.tubes.named.values() for j in t.buried.values()]
    codec = None
    notes: list[bytes] = []
    if q.ext is not None:  # the put tags: cooldowns first, tags before each job
        codec = TaggedCodec(q.ext)
        # The live ones: a flush-tube ends a tube's cooldowns in ext.cools at
        # once, and lets their records go from ext.cool_ids in slices.
        notes = [codec.note(cd, wall_offset) for m in q.ext.cools.values() for cd in m.values()]
    return Parts(q, ids, codec, notes, wall_offset, part_bytes)


class Parts:
    """A snapshot's parts (snapshot_parts), consistent with its listing
    for the groups that hold aft: jobs, and for the idp: keys whose
    delete leaves a cooldown. A part read after the listing has each job
    as it is then, so without this a follower would lack a group's member
    the leader deleted meanwhile (dropped at the snapshot's end),
    and have the jobs put meanwhile only with the batches that follow the
    snapshot: had it to lead before they came, its groups could be
    complete where the leader's never were, and it would release jobs the
    leader held. So a grp: member deleted, or a held job deleted or taken
    out of its hold (released, kicked, reserved by id), after the listing
    and before its part is read has its record kept as it is just before
    (Queue.changing), and its part carries that record; the batches that
    follow bring the change. Until they are in, every group has the
    members it had when listed, and holds what it held then (or since: a
    delayed aft: job that came due while its group was open). So is a job
    holding an idp: key with a TTL: deleted after the listing, it would be
    in no part, and its key's cooldown, which its delete starts, in no
    listing either (the cooldowns are listed with the jobs): a node that
    leads before the batches came would take a put with that key for a
    new job where the leader answers that it is a duplicate; and so is
    a held job whose key a flush-tube voids after the listing (its part,
    read after that, would have it keyless). A node that
    leads meanwhile acts, for these jobs, as if the leader had stopped at
    the listing.

    Nothing is looked at when listing: a job is known as listed by its id
    (below the next id then), and the ids of the tagged jobs read into a
    part are kept until the end, so that a change after that keeps
    nothing."""

    def __init__(self, q, ids: list[int], codec, notes: list[bytes], wall_offset: int,
                 part_bytes: int) -> None:
        self.watching = False
        self.q, self.codec, self.wall_offset = q, codec, wall_offset
        self.next = q.ids.next  # a job with a lower id was listed
        self.sent: set[int] = set()  # the jobs read into a part that _watched(), or kept
        self.kept: dict[int, bytes] = {}  # the records kept, of those not read yet
        self.error: OSError | None = None  # a record that could not be kept
        ext = q.ext
        if ext is not None and (ext.groups or ext.nkeys):  # (else none is _watched())
            self.watching = True
            # (through a weak reference: a Parts dropped unclosed, its link
            # gone, stops watching as it is freed)
            me = weakref.ref(self)

            def changing(j) -> None:
                p = me()
                if p is not None:
                    p._changing(j)
            self._see = changing
            q.changing.append(changing)
        self._gen = self._parts(ids, notes, part_bytes)

    def __iter__(self):
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._gen)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """The snapshot ends (read to its end, or its link failed): the
        leader's changes are not watched any more."""
        self._unwatch()
        self.kept.clear()
        self.sent.clear()
        self._gen.close()

    def _unwatch(self) -> None:
        if self.watching:
            self.watching = False
            self.q.changing.remove(self._see)

    def __del__(self) -> None:
        self._unwatch()

    def _changing(self, j) -> None:
        """Job j is about to be deleted, to leave its hold, or to lose its
        idp: key (a flush-tube voids the keys of the jobs it leaves)."""
        id_ = j.id
        if id_ >= self.next or id_ in self.sent or id_ in self.kept:
            return  # put after the listing, read into a part already, or kept
        if not (j.state == DELAYED and j.deadline == HELD):
            tags = j.tags
            if tags is None or tags.grp is None and not _cools(tags):
                return  # (neither held, a member, nor a key's: its delete may show)
        try:
            self.kept[id_] = self._record(j)
        except Exception as e:  # (never the leader's: this link fails instead)
            self.error = e if isinstance(e, OSError) else OSError(
                f"job {id_}'s record could not be kept: {e!r}")

    def _record(self, j) -> bytes:
        """Job j's record as it is now."""
        q = self.q
        body = q.store.body(j)  # (--bodies-on-disk: read back)
        if body is None and q.store.transient:
            # Out of descriptors: the job is fine, the snapshot is not sent
            # without it (the link fails, and the follower asks again).
            raise OSError(errno.EMFILE, f"job {j.id}'s body cannot be read back for now")
        if body is None:
            # (the store said where it failed) A short record: a follower
            # that has the job keeps it, as a snapshot's end deletes any
            # job no record named; one that lacks it cannot make it.
            return F.encode(j, False, self.wall_offset)
        rec = F.encode(j, True, self.wall_offset, body)
        return rec if self.codec is None else self.codec.prefix(j) + rec

    def _parts(self, ids: list[int], out: list[bytes], part_bytes: int):
        jobs = self.q.jobs
        sent, kept = self.sent, self.kept
        watching = self.watching
        size = 0
        for id_ in ids:
            if self.error is not None:
                raise self.error
            rec = kept.pop(id_, None)
            if rec is not None:
                # (a job a kick or a release kept lives on: a later delete
                # must not keep it again, after its part)
                sent.add(id_)
            else:
                j = jobs.get(id_)
                if j is None:
                    continue  # deleted meanwhile
                rec = self._record(j)
                if watching and _watched(j.tags):
                    sent.add(id_)
            out.append(rec)
            size += len(rec)
            if size >= part_bytes:
                yield b"".join(out)
                out, size = [], 0
        if self.error is not None:
            raise self.error
        yield b"".join(out)


def _cools(tags) -> bool:
    """Does a job with these tags hold an idp: key its delete lets cool?
    (Not one a flush-tube voided: it is no longer held.)"""
    idp = tags.idp
    return idp is not None and tags.ttl > 0 and not is_void(idp)


def _watched(tags) -> bool:
    """Might a job with these tags have its record kept (Parts._changing):
    a grp: member, an aft: job (held, or not any more), a key's holder?"""
    return tags is not None and (tags.grp is not None or tags.aft is not None or _cools(tags))


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


"""idp: keys (--extensions), a part of the tags' policy (tagged.py): a
put's key claimed at its tags' stage, a duplicate put answered (the
holder's priority lowered to the duplicate's), a job's key let go at its
delete or kept TTL seconds past it (its cooldown: cooling.py, a part of
this one), a flush-tube's voiding of the keys it left, and a follower's
tags records. The live keys are the tags' state's (ExtState.keys, by
tube name: key -> the job holding it), which the binlog's codec and the
HTTP side read; the commands reach this part as `policy(q).keys`."""
from __future__ import annotations

from heapq import heappush
from typing import TYPE_CHECKING, final

from . import hiding
from .cooling import Cooldowns
from .heaps import SHIFT
from .job import READY, STATE_NAMES
from .protocol import NS
from .puttags import is_void, void_idp
from .queue import URGENT_PRI
from .tags import Clear

if TYPE_CHECKING:
    from .job import Job
    from .puttags import Tags
    from .queue import Queue
    from .tags import ExtState

STATE_WORDS = {k: v.upper() for k, v in STATE_NAMES.items()}


@final
class Keys:
    __slots__ = ("ext", "cooling")

    def __init__(self, ext: ExtState) -> None:
        self.ext = ext
        self.cooling = Cooldowns(ext)  # keys kept past their job's delete

    def claim(self, q: Queue, j: Job, idp: bytes, now: int) -> tuple[int, bytes, int | None] | None:
        """A put's idp: key, held for its job j (no id yet: its tags' stage)
        if it is free: None. If it is taken, the answer to the duplicate
        put: (the job's id, its state's word, the priority it was lowered
        to or None), and j holds nothing; a deleted job's key in its
        cooldown answers (its id, DELETED, None). One setdefault finds the
        key or takes its place, where a lookup here and an insert at the
        put's end looked the tube's map up twice and the key's place twice,
        and the map holds the job, not its id boxed: a new-key put 12,620
        -> 12,077 instructions, compiled. A put dropped after this lets the
        key go (dropped())."""
        ext = self.ext
        name = j.tube.name
        keys = ext.tube_keys(name)
        held = keys.setdefault(idp, j)
        if held is j:
            ext.nkeys += 1
        else:
            live = q.jobs.get(held.id)
            if live is not None:
                ext.bump(ext.dedup, name, 1)
                if j.pri < live.pri:
                    self._lower(q, live, j.pri)
                    return live.id, STATE_WORDS[live.state], j.pri
                return live.id, STATE_WORDS[live.state], None
            keys[idp] = j  # (its holder is gone)
        if ext.cools:
            cd = ext.cooldown(name, idp)
            if cd is not None:
                if now < cd.expires:
                    ext.let_key_go(name, idp, j.id)
                    ext.bump(ext.dedup, name, 1)
                    return cd.orig, b"DELETED", None
                self.cooling.end(q, cd)
        return None

    def dropped(self, q: Queue, j: Job, tags: Tags) -> None:
        """A put whose tags' stage passed (j's key claimed, its tags kept
        if it has its id) is dropped: what that stage kept goes."""
        ext = self.ext
        if j.tags is not None:
            j.tags = None
            ext.tagged -= 1
        if tags.idp is not None:
            ext.let_key_go(j.tube.name, tags.idp, j.id)

    def _lower(self, q: Queue, j: Job, pri: int) -> None:
        """A duplicate put's lower priority, for the job holding the key."""
        old, j.pri = j.pri, pri
        t = j.tube
        if j.state == READY:
            key = (pri << SHIFT) | j.id
            ext = self.ext
            tags = j.tags
            if j.id in ext.parked_ids and tags is not None and tags.con is not None:
                k = ext.con(tags.con)
                assert k is not None  # (its job is live)
                hiding.push_parked(ext, q, k, t, key)  # (the old entry is stale now)
                hiding.hide(ext, q, t, key)
                if k.room() > 0:
                    # Now better than jobs brought back before it: its turn
                    # comes first among them (those come back after it).
                    hiding.unpark(ext, q, k)
            else:
                # A run entry goes stale (run_job wants deadline 0); ready since then.
                j.deadline = j.deadline or j.created or 1
                heappush(t.ready.entries, key)
                if t.ikey is None or key < t.ikey:
                    q.tubes.index_push(t, key)
            if old >= URGENT_PRI > pri:
                t.urgent += 1
                q.urgent_ct += 1
        if q.store.reserve_update(j):
            q.store.write(j)

    def keep(self, j: Job, idp: bytes | None) -> None:
        """A job's idp: key, if it has one, held for it (a job a record
        brings: a put's claims its own)."""
        if idp is not None and not is_void(idp):
            ext = self.ext
            keys = ext.tube_keys(j.tube.name)
            n = len(keys)
            keys[idp] = j
            ext.nkeys += len(keys) - n  # (a key set again is counted once)

    def deleted(self, q: Queue, j: Job, idp: bytes, ttl: int, now: int, flushed: bool) -> None:
        """Job j, whose tags have idp: key idp (and idempotency-ttl ttl), is
        deleted: its key goes, or cools ttl seconds (not at a flush-tube's
        delete: tuber's)."""
        name = j.tube.name
        if self.ext.let_key_go(name, idp, j.id):
            if ttl and not flushed:
                self.cooling.start(q, name, idp, j.id, now + ttl * NS)
            elif name not in self.ext.keys:
                q.maybe_free_name(name)

    def flushed(self, q: Queue, name: bytes, last: int) -> None:
        """A flush-tube that started when `last` was the next id has
        ended: the tube's cooldowns go, and the keys of its jobs below
        `last` that it left (held ones), as in tuber. (A follower applies
        the leader's record of it the same way.) The cooldowns' records
        are let go in slices."""
        ext = self.ext
        self.cooling.flushed(q, name)
        keys = ext.keys.get(name)
        if keys:
            for key, j in list(keys.items()):  # (after a flush: held jobs' only)
                if j.id < last:
                    # A snapshot going out keeps the record of a job it
                    # listed as it is before its key goes (Queue.changing).
                    for see in q.changing:
                        see(j)
                    del keys[key]
                    ext.nkeys -= 1
                    if j.tags is not None:
                        j.tags = void_idp(j.tags)
            if not keys:
                ext.forget_keys(name)
        q.store.note(Clear(ext.ext_id(), name, last))
        q.maybe_free_name(name)

    def record(self, q: Queue, id_: int, tags: Tags) -> None:
        """Job id_'s tags record, on a follower (its full record follows).
        A job held here already keeps its keys and groups, but for an idp:
        key a flush-tube voided since (tags.void_idp: the flush's own record
        came while this node did not follow, and the snapshot carries the
        job's tags as they are now): its key is let go here too. A key,
        once voided, never comes back: a record older than the one that
        voided it (a put shipped after a snapshot's part read the job after
        a flush-tube, or a compaction copy) keeps it void."""
        ext = self.ext
        j = q.jobs.get(id_)
        old = ext.pending.get(id_) if j is None else j.tags
        void = (old is not None and old.idp is not None and is_void(old.idp)
                and tags.idp is not None and not is_void(tags.idp) and tags.idp[1:] == old.idp[1:])
        if void:
            tags = void_idp(tags)
        if j is None:
            ext.pending[id_] = tags  # (until its full record: Tagged.attach)
            return
        if old is None:
            ext.tagged += 1
        j.tags = tags
        if void or old is None or old.idp is None or old.idp == tags.idp:
            return
        name = j.tube.name
        if ext.let_key_go(name, old.idp, id_) and name not in ext.keys:
            q.maybe_free_name(name)

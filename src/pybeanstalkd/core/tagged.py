"""The put tags' policy (--extensions): the tags (tags.py) applied to the
queue's steps as tuber 0.6.4 applies them (src/server.rs there). The queue
(queue.py) owns it and asks it at each step a tag can change (TagPolicy's
hooks); without --extensions it has the null policy, TagPolicy itself.

- idp: a duplicate put is answered from `claim()`; a delete frees the
  key, or keeps it TTL seconds as a Cooldown (a record in the binlog).
- con: a ready job whose key is at its limit is hidden when it reaches the
  top of its tube (still ready, still counted), and moved back when a slot
  frees (hiding.py). So a reserve never walks past hidden jobs, however
  many there are.
- grp:/aft: a held job is in state delayed with deadline HELD, in no heap
  (not counted as delayed, as in tuber); its group's last delete releases
  every job it holds, SLICE a step (holding.py).
- try:N: tries_used_up with the job's own limit.

Durable: a tagged job's full binlog record is preceded by its tags'
record, a cooldown and a flush-tube's clearing are records of their own
(binlog/ext.py), and a held job's record says delayed until HELD, so the
reference keeps it delayed (until a kick) and serves the plain jobs.
"""
from __future__ import annotations

from heapq import heappush
from typing import TYPE_CHECKING

from . import hiding
from .cooling import Cooldowns
from .holding import Holding
from .reservedids import ReservedIds
from .heaps import SHIFT
from .job import BURIED, DELAYED, INVALID, JOB_OVERHEAD, M32, READY, STATE_NAMES, Job
from .protocol import NS
from .queue import NOT_WORKED, URGENT_PRI, TagPolicy
from .puttags import NO_TAGS, Tags, void_idp
from .tags import COOL_OVERHEAD, EXT_ID, HELD, TAGS_OVERHEAD, Clear, Cooldown, ExtState, Group, held

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .job import Tube
    from .queue import Queue

STATE_WORDS = {k: v.upper() for k, v in STATE_NAMES.items()}


def policy(q: Queue) -> Tagged:
    """q's tags' policy, where --extensions made one (what the commands
    of tags ask for)."""
    p = q.tags
    assert isinstance(p, Tagged)
    return p


class Tagged(TagPolicy):
    def __init__(self, ext: ExtState) -> None:
        """ext: the tags' state, which the binlog's codec reads too."""
        self.ext = ext
        self.holding = Holding(ext)  # aft: jobs held by their group
        self.cooling = Cooldowns(ext)  # idp: keys kept past their job's delete
        self.reserved_ids = ReservedIds()  # by tube, for peek-reserved

    def state(self) -> ExtState | None:
        return self.ext

    def last_id(self) -> int:
        return EXT_ID - 1  # (higher binlog ids name records of ours)

    # -- tries ------------------------------------------------------------

    def checks_tries(self, max_tries: int) -> bool:
        return True  # (a try:N tag)

    def tries_limit(self, q: Queue, j: Job) -> int:
        tags = j.tags
        return tags.tries if tags is not None and tags.tries else self.ext.max_tries

    def job_extra(self, q: Queue, j: Job) -> list[tuple[bytes, object]]:
        """tuber's stats-job fields, then the tries (with a limit)."""
        tags = j.tags or NO_TAGS
        idp = tags.idp if tags.idp is None or tags.idp[:1] != b":" else None  # (void_idp)
        out: list[tuple[bytes, object]] = [
            (b"idempotency-key", idp or b""),
            (b"idempotency-ttl", tags.ttl),
            (b"group", tags.grp or b""),
            (b"after-group", tags.aft or b""),
            (b"concurrency-key", tags.con or b""),
            (b"concurrency-limit", tags.limit if tags.con else 0),
        ]
        limit = tags.tries or self.ext.max_tries
        if limit:
            c = j.counts
            out += [(b"tries", (c >> 32 & M32) + (c >> 64 & M32)), (b"max-tries", limit)]
        return out

    # -- puts ---------------------------------------------------------------

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
        keys = ext.keys.get(name)
        if keys is None:
            keys = ext.keys[name] = {}
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
                    q.index_push(t, key)
            if old >= URGENT_PRI > pri:
                t.urgent += 1
                q.urgent_ct += 1
        if q.store.reserve_update(j):
            q.store.write(j)

    def holds(self, q: Queue, j: Job, tags: Tags, log: bool) -> bool:
        """A put's job (its tags on it already, its idp: key its own:
        claim(), brought()): its limit and groups; held if it is an aft:
        job, not delayed, whose group is open (while a snapshot comes in,
        the leader's record says: place_held)."""
        g = self._register(q, j, tags)
        if g is None or j.times.delay or not self.holding.holds_now(g):
            return False
        self.holding.hold(q, j, g, log)
        return True

    def _keep_key(self, j: Job, tags: Tags) -> None:
        """A job's idp: key, if it has one, held for it (a job a record
        brings: a put's claims its own)."""
        ext = self.ext
        idp = tags.idp
        if idp is not None and idp[0] != 58:  # (58, ':': void_idp's)
            keys = ext.keys.get(j.tube.name)
            if keys is None:
                keys = ext.keys[j.tube.name] = {}
            n = len(keys)
            keys[idp] = j
            ext.nkeys += len(keys) - n  # (a key set again is counted once)

    def _register(self, q: Queue, j: Job, tags: Tags) -> Group | None:
        """A tagged job's limit and groups (at its put or at recovery); the
        group its aft: names, if it names one."""
        ext = self.ext
        con = tags.con
        if con is not None:
            k = ext.con_key(con)
            k.jobs += 1
            if k.limit < tags.limit:
                k.limit = tags.limit
                if k.parked:
                    hiding.unpark(ext, q, k)  # (more room now)
        if tags.grp is not None:
            ext.group(tags.grp).members[j.id] = True
        if tags.aft is None:
            return None
        g = ext.group(tags.aft)
        g.afts += 1
        return g

    # -- held aft: jobs (holding.py) ------------------------------------------

    def attach(self, j: Job) -> None:
        """j, a record's job not yet in the queue, takes the tags their
        record brought before it (tags_record), if it did: the binlog's
        room for it counts them."""
        pending = self.ext.pending
        if pending:
            j.tags = pending.pop(j.id, None)

    def brought(self, q: Queue, j: Job) -> Tags | None:
        tags = j.tags
        if tags is not None:
            self.ext.tagged += 1
            self._keep_key(j, tags)
        return tags

    def holds_due(self, q: Queue, j: Job) -> bool:
        """A delayed aft: job whose group is open is held again, as in tuber.
        Not while a snapshot comes in: the group may be open here only for
        a member the leader deleted (the leader's hold is in a record)."""
        tags = j.tags
        g = None if tags is None or tags.aft is None else self.ext.groups.get(tags.aft)
        if g is None or not self.holding.holds_now(g):
            return False
        # (no room to log it: the binlog has it delayed and due, and a
        # restart holds it again the same way)
        self.holding.hold(q, j, g, q.store.reserve_update(j))
        return True

    def place_held(self, q: Queue, j: Job, now: int, log: bool) -> bool:
        """A held job's record (a follower's copy): held, or ready if its
        group has completed meanwhile. While a snapshot comes in it is held
        as the record says: this node may not have the group's members yet
        (settled() releases it if the group is complete then)."""
        tags = j.tags
        if tags is not None and tags.aft is not None and (
                self.holding.restoring_now() or self.ext.group_open(tags.aft)):
            # (a snapshot's held job may come before its group's members:
            # its group is made then)
            self.holding.hold(q, j, self.ext.group(tags.aft), log)
        else:
            q.place_ready(j, now, log=log)
        return True

    def removing(self, q: Queue, j: Job) -> bool:
        ext = self.ext
        state = j.state
        if state == DELAYED and j.deadline == HELD:
            j.state = INVALID
            ext.bump(ext.held, j.tube.name, -1)
            ext.nheld -= 1
            return True
        if state == READY:
            if j.id in ext.parked_ids:
                hiding.unpark_id(ext, j)
            else:
                tags = j.tags
                k = None if tags is None or tags.con is None else ext.con(tags.con)
                if k is not None and k.parked:
                    # One brought back for the room its key had leaves ready
                    # without taking it (deleted, reserved by id): the next
                    # hidden one comes back instead.
                    hiding.unpark(ext, q, k)
        elif state == BURIED:
            tags = j.tags
            g = None if tags is None or tags.grp is None else ext.groups.get(tags.grp)
            if g is not None:
                g.buried -= 1
        return False

    def buried(self, q: Queue, j: Job) -> None:
        tags = j.tags
        g = None if tags is None or tags.grp is None else self.ext.groups.get(tags.grp)
        if g is not None:
            g.buried += 1

    # -- deletes, cooldowns -------------------------------------------------

    def deleted(self, q: Queue, j: Job, worked: int, now: int, flushed: bool) -> None:
        """The processing time's moving average (weighted-fair reserves);
        then the job's tags are let go. A flush-tube's delete starts no
        cooldown (tuber's)."""
        if worked != NOT_WORKED:
            # alpha 1/10, as tuber's; -1 until the first sample
            t = j.tube
            e = t.ewma
            t.ewma = worked if e < 0 else e + (worked - e) // 10
            t.ewma_n += 1
        tags = j.tags
        if tags is not None:
            self._forget(q, j, tags, now, flushed)

    def _forget(self, q: Queue, j: Job, tags: Tags, now: int, flushed: bool) -> None:
        ext = self.ext
        j.tags = None
        ext.tagged -= 1
        if tags.idp is not None:
            name = j.tube.name
            if ext.let_key_go(name, tags.idp, j.id):
                if tags.ttl and not flushed:
                    self.cooling.start(q, name, tags.idp, j.id, now + tags.ttl * NS)
                elif name not in ext.keys:
                    q.maybe_free_name(name)
        con = tags.con
        if con is not None:
            k = ext.con(con)
            assert k is not None  # (its job is live)
            k.jobs -= 1
            if not k.jobs:
                # Its last job: what the key kept goes with it (tuber keeps
                # the limit until a reservation of the key ends, which a
                # key whose jobs are never reserved never sees).
                k.parked.clear()  # (stale entries only, by now)
                if not k.held:
                    ext.forget_con(con)
        aft = tags.aft
        if aft is not None:
            g = ext.groups.get(aft)
            self.holding.dropped(j.id, aft, g)
            if g is None:
                ext.bump(ext.aft_left, aft, -1)
            else:
                g.afts -= 1
                if not g.afts and g.complete() and not g.waiting:
                    # Named by no job now, and no member left: tuber's empty
                    # entry would stay for ever (COMPATIBILITY.md).
                    ext.forget_group(aft)
        if tags.grp is not None:
            g = ext.groups.get(tags.grp)
            if g is not None:
                g.members.pop(j.id)
                self.holding.group_done(q, tags.grp, now)

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
                    del keys[key]
                    ext.nkeys -= 1
                    if j.tags is not None:
                        j.tags = void_idp(j.tags)
            if not keys:
                del ext.keys[name]
        q.store.note(Clear(ext.ext_id(), name, last))
        q.maybe_free_name(name)

    # -- a follower's snapshot (core/replica.py) ------------------------------

    def tags_record(self, q: Queue, id_: int, tags: Tags) -> None:
        """Job id_'s tags record (its full record follows). A job held here
        already keeps its keys and groups, but for an idp: key a flush-tube
        voided since (tags.void_idp: the flush's own record came while this
        node did not follow, and the snapshot carries the job's tags as they
        are now): its key is let go here too. A key, once voided, never
        comes back: a record older than the one that voided it (a put
        shipped after a snapshot's part read the job after a flush-tube, or
        a compaction copy) keeps it void."""
        ext = self.ext
        j = q.jobs.get(id_)
        old = ext.pending.get(id_) if j is None else j.tags
        void = (old is not None and old.idp is not None and old.idp[:1] == b":"
                and tags.idp is not None and tags.idp[:1] != b":" and tags.idp[1:] == old.idp[1:])
        if void:
            tags = void_idp(tags)
        if j is None:
            ext.pending[id_] = tags  # (until its full record: attach)
            return
        if old is None:
            ext.tagged += 1
        j.tags = tags
        if void or old is None or old.idp is None or old.idp == tags.idp:
            return
        name = j.tube.name
        if ext.let_key_go(name, old.idp, id_) and name not in ext.keys:
            q.maybe_free_name(name)

    def restoring(self, q: Queue) -> None:
        """Until settled(), no hold or release is derived from this node's
        groups. The first part brings the leader's cooldowns in place of
        these (its own may have ended, or a flush-tube cleared them): the
        ones it does not bring again go once it is applied (listed())."""
        self.holding.restoring()
        self.cooling.restoring()

    def listed(self, q: Queue) -> None:
        """A snapshot's first part, which has all the leader's cooldowns,
        is applied: this node's others go (Cooldowns.listed)."""
        self.cooling.listed(q)

    def settled(self, q: Queue, now: int) -> None:
        self.holding.settled(q, now)

    def tick(self, q: Queue, now: int, more: bool) -> bool:
        """Let the cooldowns that have ended go (after the timers' tick:
        `more` is what it said); True if more of either is due."""
        due = self.cooling.expire(q, now)
        return more or due

    def next_due(self, due: int | None) -> int | None:
        return self.cooling.next_due(due)

    # -- concurrency keys ---------------------------------------------------

    def parks(self, q: Queue, t: Tube, j: Job) -> bool:
        """The best ready job of t is hidden if its concurrency key has no
        room: out of t's run or heap, into parked."""
        ext = self.ext
        tags = j.tags
        if tags is None or tags.con is None or not ext.blocked_key(tags.con):
            return False
        hiding.park(ext, q, t, j, tags.con)
        return True

    def reserved(self, q: Queue, j: Job) -> None:
        """Its tube's reserved ids (peek-reserved's); the key's slot is taken."""
        self.reserved_ids.add(q, j)
        ext = self.ext
        tags = j.tags
        if tags is not None and tags.con is not None:
            k = ext.con(tags.con)
            assert k is not None  # (its job is live)
            if not k.held:
                ext.con_keys += 1
            k.held += 1
            k.limit = max(k.limit, tags.limit)
            if k.parked and k.room() > 0:
                hiding.unpark(ext, q, k)

    def returned(self, q: Queue, j: Job) -> None:
        """j's reservation ended: its concurrency slot frees, and its tube's
        reserved ids go once it has none."""
        self.reserved_ids.returned(j.tube)
        ext = self.ext
        tags = j.tags
        if tags is None or tags.con is None:
            return
        k = ext.con(tags.con)
        if k is None:
            return
        if k.held > 1:
            k.held -= 1
        else:
            if k.held:
                ext.con_keys -= 1
                k.held = 0
            k.limit = 0
            if not k.jobs:
                ext.forget_con(tags.con)
                return
        if k.parked:
            hiding.unpark(ext, q, k)

    def may_reserve(self, j: Job) -> bool:
        """tuber's: not a job whose key has no room, or whose aft: group
        has members left."""
        tags = j.tags
        return tags is None or not (
            (tags.con is not None and self.ext.blocked_key(tags.con))
            or self.ext.group_open(tags.aft))

    def peek_ready(self, q: Queue, t: Tube, best: Job | None) -> Job | None:
        """The best ready job, hidden ones included (tuber's peek-ready)."""
        j = hiding.best_hidden(self.ext, q, t)
        if j is not None and (best is None or (j.pri, j.id) < (best.pri, best.id)):
            best = j
        return best

    def hidden(self, t: Tube) -> list[int]:
        """t's hidden jobs' entries (flush-tube deletes them too): a copy,
        made in C, stale entries included."""
        heap = self.ext.hidden.get(t)
        return [] if heap is None else list(heap.entries)

    def keeps(self, name: bytes) -> bool:
        # Held jobs are counted in no state; and a tube keeps its keys and
        # cooldowns (flush-tube finds it), as in tuber.
        ext = self.ext
        return name in ext.held or name in ext.keys or name in ext.cools

    def freed(self, name: bytes) -> None:
        self.ext.dedup.pop(name, None)  # (its counter goes with it, as stats-tube's do)

    def memory(self) -> int:
        """Held jobs (in no state's count), each tagged job's tags and keys,
        each cooldown."""
        ext = self.ext
        tags = ext.tagged + len(ext.pending)
        return ext.nheld * JOB_OVERHEAD + tags * TAGS_OVERHEAD + len(ext.cool_ids) * COOL_OVERHEAD

    # -- recovery -----------------------------------------------------------

    def loading(self, q: Queue, jobs: Iterable[Job], wall_offset: int) -> Iterable[Job]:
        """The tags recovery found (each job's, Job.tags): keys, limits and
        groups first (a buried member counts as it is placed); held jobs
        are held here, the rest the queue places."""
        ext = self.ext
        rest: list[Job] = []
        for j in jobs:
            tags = j.tags
            if tags is not None:
                ext.tagged += 1
                self._keep_key(j, tags)
                g = self._register(q, j, tags)
                if g is not None and j.state == DELAYED and held(j.deadline, wall_offset):
                    q.jobs[j.id] = j
                    q.body_bytes += len(j.body)
                    self.holding.hold(q, j, g, log=False)
                    continue
            rest.append(j)
        return rest

    def loaded(self, q: Queue, now: int) -> None:
        """A group with no member left releases its held jobs (a release
        the binlog had no room for)."""
        self.holding.release_complete(q, now)

    def find_record(self, q: Queue, id_: int) -> Job | Cooldown | None:
        """The binlog's lookup (compaction): a job, or a cooldown."""
        if id_ >= EXT_ID:
            return self.ext.cool_ids.get(id_)
        return q.jobs.get(id_)

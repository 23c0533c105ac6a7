"""The put tags' policy (--extensions): the tags (tags.py) applied to the
queue's steps as tuber 0.6.4 applies them (src/server.rs there). The queue
(queue.py) owns it and asks it at each step a tag can change (TagPolicy's
hooks); without --extensions it has the null policy, TagPolicy itself.

- idp: a duplicate put is answered from its claim of the key (keys.py, a
  part it owns, which the put's tags' stage calls); a delete frees the
  key, or keeps it TTL seconds as a Cooldown (a record in the binlog:
  cooling.py, a part of that part).
- con: a ready job whose key is at its limit is hidden when it reaches the
  top of its tube (still ready, still counted), and moved back when a slot
  frees (hiding.py). So a reserve never walks past hidden jobs, however
  many there are.
- grp:/aft: a held job is in state delayed with deadline HELD, in no heap
  (not counted as delayed, as in tuber); its group's last delete releases
  every job it holds, SLICE a step (holding.py). A tagged job's counts in
  its key and groups are kept by another part (members.py).
- try:N: tries_used_up with the job's own limit.

Durable: a tagged job's full binlog record is preceded by its tags'
record, a cooldown and a flush-tube's clearing are records of their own
(binlog/ext.py), and a held job's record says delayed until HELD, so the
reference keeps it delayed (until a kick) and serves the plain jobs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import hiding
from .holding import Holding
from .job import BURIED, DELAYED, INVALID, JOB_OVERHEAD, M32, READY, Job
from .keys import Keys
from .members import Members
from .puttags import NO_TAGS, Tags, is_void
from .queue import NOT_WORKED, TagPolicy
from .reservedids import ReservedIds
from .tags import COOL_OVERHEAD, EXT_ID, HELD, TAGS_OVERHEAD, ExtState, held

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .job import Tube
    from .queue import Queue


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
        self.keys = Keys(ext)  # idp: keys, and those kept past their job's delete
        self.holding = Holding(ext)  # aft: jobs held by their group
        self.members = Members(ext, self.holding)  # what a tagged job counts in
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
        idp = tags.idp if tags.idp is None or not is_void(tags.idp) else None
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

    def holds(self, q: Queue, j: Job, tags: Tags, log: bool) -> bool:
        """A put's job (its tags on it already, its idp: key its own:
        claim(), brought()): its limit and groups; held if it is an aft:
        job, not delayed, whose group is open (while a snapshot comes in,
        the leader's record says: place_held)."""
        g = self.members.register(q, j, tags)
        if g is None or j.times.delay or not self.holding.holds_now(g):
            return False
        self.holding.hold(q, j, g, log)
        return True

    # -- held aft: jobs (holding.py) ------------------------------------------

    def attach(self, j: Job) -> None:
        """j, a record's job not yet in the queue, takes the tags their
        record brought before it (Keys.record), if it did: the binlog's
        room for it counts them."""
        pending = self.ext.pending
        if pending:
            j.tags = pending.pop(j.id, None)

    def brought(self, q: Queue, j: Job) -> Tags | None:
        tags = j.tags
        if tags is not None:
            self.ext.tagged += 1
            self.keys.keep(j, tags.idp)
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
            # Out of its hold, whatever takes it (a release, a kick-job, a
            # reserve-job while its complete group's release goes in
            # slices, a delete): a snapshot going out keeps its record as
            # it is now (Queue.changing).
            for see in q.changing:
                see(j)
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
            j.tags = None
            self.ext.tagged -= 1
            if tags.idp is not None:
                self.keys.deleted(q, j, tags.idp, tags.ttl, now, flushed)
            self.members.forget(q, j, tags, now)

    def flushed(self, q: Queue, name: bytes, last: int) -> None:
        self.keys.flushed(q, name, last)

    def recorded(self, q: Queue, id_: int, tags: Tags) -> None:
        self.keys.record(q, id_, tags)

    def cooled(self, q: Queue, tube: bytes, key: bytes, orig: int, expires: int) -> None:
        self.keys.cooling.apply(q, tube, key, orig, expires)

    # -- a follower's snapshot (core/replica.py) ------------------------------

    def restoring(self, q: Queue) -> None:
        """Until settled(), no hold or release is derived from this node's
        groups. The first part brings the leader's cooldowns in place of
        these (its own may have ended, or a flush-tube cleared them): the
        ones it does not bring again go once it is applied (listed())."""
        self.holding.restoring()
        self.keys.cooling.restoring()

    def listed(self, q: Queue) -> None:
        """A snapshot's first part, which has all the leader's cooldowns,
        is applied: this node's others go (Cooldowns.listed)."""
        self.keys.cooling.listed(q)

    def settled(self, q: Queue, now: int) -> None:
        self.holding.settled(q, now)

    def tick(self, q: Queue, now: int, more: bool) -> bool:
        """Let the cooldowns that have ended go (after the timers' tick:
        `more` is what it said); True if more of either is due."""
        due = self.keys.cooling.expire(q, now)
        return more or due

    def next_due(self, due: int | None) -> int | None:
        return self.keys.cooling.next_due(due)

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
                self.keys.keep(j, tags.idp)
                g = self.members.register(q, j, tags)
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

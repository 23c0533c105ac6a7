"""The queue with --extensions: put tags (tags.py) applied as tuber 0.6.4
applies them (src/server.rs there), on top of the plain queue (queue.py).
Without --extensions the server makes a plain Queue, so none of this costs
a plain server anything.

- idp: a duplicate put is answered from `duplicate()`; a delete frees the
  key, or keeps it TTL seconds as a Cooldown (a record in the binlog).
- con: a ready job whose key is at its limit is hidden when it reaches the
  top of its tube: moved out of the ready heap into `ExtState.parked`
  (still ready, still counted), and moved back when a slot frees. So a
  reserve never walks past hidden jobs, however many there are.
- grp:/aft: a held job is in state delayed with deadline HELD, in no heap
  (not counted as delayed, as in tuber); its group's last delete releases
  every job it holds, SLICE a step.
- try:N: tries_used_up with the job's own limit.

Durable: a tagged job's full binlog record is preceded by its tags'
record, a cooldown and a flush-tube's clearing are records of their own
(binlog/ext.py), and a held job's record says delayed until HELD, so the
reference keeps it delayed (until a kick) and serves the plain jobs.
"""
from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING, Final

from .heaps import MASK, SHIFT, TUBE_SLACK, StaleHeap
from .job import BURIED, DELAYED, INVALID, JOB_OVERHEAD, M32, READY, RESERVED, STATE_NAMES, Job
from .jobmap import BITS, LOW, NO_JOBS
from .outcome import NOT_FOUND, Outcome
from .protocol import NS
from .queue import URGENT_PRI, Queue
from .slices import SLICE
from .tags import (
    COOL_OVERHEAD, EXT_ID, HELD, HELD_MIN, NO_TAGS, TAGS_OVERHEAD, Clear, Cooldown, ExtState, Group, Tags,
    held, void_idp)

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterable

    from .store import Store
    from .job import Conn, Tube

NEVER: Final = 1 << 62  # max_tries when only some jobs have a limit (try:N)
STATE_WORDS = {k: v.upper() for k, v in STATE_NAMES.items()}


class ExtQueue(Queue):
    def __init__(self, now: int, store: Store | None = None, max_tries: int = 0,
                 rand: Callable[[], float] | None = None) -> None:
        # (max_tries is set for the plain queue's checks to ask tries_used_up)
        super().__init__(now, store, max_tries or NEVER, ExtState(max_tries, rand))
        self.ids.bound(EXT_ID - 1)  # (higher binlog ids name records of ours)

    @property
    def tagged(self) -> ExtState:
        """The tags' state: Queue.ext, which an ExtQueue always has."""
        ext = self.ext
        assert ext is not None
        return ext

    # -- tries ------------------------------------------------------------

    def tries_used_up(self, j: Job) -> bool:
        tags = self.tagged.jobs.get(j.id)
        limit = tags.tries if tags is not None and tags.tries else self.tagged.max_tries
        if not limit:
            return False
        c = j.counts
        return (c >> 32 & M32) + (c >> 64 & M32) + 1 >= limit

    def logs_tries(self, j: Job) -> bool:
        if self.tagged.max_tries:
            return True
        tags = self.tagged.jobs.get(j.id)
        return tags is not None and tags.tries > 0

    def job_extra(self, j: Job) -> list[tuple[bytes, object]]:
        """tuber's stats-job fields, then the tries (with a limit)."""
        tags = self.tagged.jobs.get(j.id) or NO_TAGS
        idp = tags.idp if tags.idp is None or tags.idp[:1] != b":" else None  # (void_idp)
        out: list[tuple[bytes, object]] = [
            (b"idempotency-key", idp or b""),
            (b"idempotency-ttl", tags.ttl),
            (b"group", tags.grp or b""),
            (b"after-group", tags.aft or b""),
            (b"concurrency-key", tags.con or b""),
            (b"concurrency-limit", tags.limit if tags.con else 0),
        ]
        limit = tags.tries or self.tagged.max_tries
        if limit:
            c = j.counts
            out += [(b"tries", (c >> 32 & M32) + (c >> 64 & M32)), (b"max-tries", limit)]
        return out

    # -- puts ---------------------------------------------------------------

    def duplicate(self, t: Tube, idp: bytes, pri: int,
                  now: int) -> tuple[int, bytes, int | None] | None:
        """A put whose idp: key is taken: (the job's id, its state's word,
        the priority it was lowered to or None); None if the key is free.
        A deleted job's key in its cooldown answers (its id, DELETED, None)."""
        ext = self.tagged
        id_ = ext.holder(t.name, idp)
        j = None if id_ is None else self.jobs.get(id_)
        if j is not None:
            ext.bump(ext.dedup, t.name, 1)
            if pri < j.pri:
                self._lower(j, pri, now)
                return j.id, STATE_WORDS[j.state], pri
            return j.id, STATE_WORDS[j.state], None
        cd = ext.cooldown(t.name, idp)
        if cd is not None:
            if now < cd.expires:
                ext.bump(ext.dedup, t.name, 1)
                return cd.orig, b"DELETED", None
            self._uncool(cd)
        return None

    def _lower(self, j: Job, pri: int, now: int) -> None:
        """A duplicate put's lower priority, for the job holding the key."""
        old, j.pri = j.pri, pri
        t = j.tube
        if j.state == READY:
            key = (pri << SHIFT) | j.id
            ext = self.tagged
            tags = ext.jobs[j.id]
            if j.id in ext.parked_ids and tags.con is not None:
                heappush(ext.parked[tags.con][t], key)  # (the old entry is stale now)
                self._hide(t, key)
                if ext.room(tags.con) > 0:
                    # Now better than jobs brought back before it: its turn
                    # comes first among them (those come back after it).
                    self._unpark(tags.con)
            else:
                # A run entry goes stale (run_job wants deadline 0); ready since then.
                j.deadline = j.deadline or j.created or 1
                heappush(t.ready, key)
                if t.ikey is None or key < t.ikey:
                    self.index_push(t, key)
            if old >= URGENT_PRI > pri:
                t.urgent += 1
                self.urgent_ct += 1
        if self.store.reserve_update(j):
            self.store.write(j)

    def insert(self, j: Job, now: int, log: bool = True) -> None:
        tags = self.tagged.jobs.get(j.id)
        if tags is None:
            Queue.insert(self, j, now, log)
        else:
            self.insert_tagged(j, tags, now, log)

    def insert_tagged(self, j: Job, tags: Tags, now: int, log: bool = True) -> None:
        """insert of a job with tags (ext.jobs has them already)."""
        ext = self.tagged
        # _register(j, tags), inline: every tagged put's path
        idp = tags.idp
        if idp is not None and idp[0] != 58:  # (58, ':': void_idp's)
            keys = ext.keys.get(j.tube.name)  # (_key, inline)
            if keys is None:
                keys = ext.keys[j.tube.name] = {}
            if idp not in keys:
                ext.nkeys += 1
            keys[idp] = j.id
        con = tags.con
        if con is not None:
            ext.bump(ext.con_jobs, con, 1)
            limits = ext.con_limit
            if limits.get(con, 0) < tags.limit:
                limits[con] = tags.limit
                if con in ext.parked:
                    self._unpark(con)  # (more room now)
        if tags.grp is not None:
            g = ext.groups.get(tags.grp)
            if g is None:
                g = ext.groups[tags.grp] = Group()
            g.members.add(j.id)
        aft = tags.aft
        if aft is not None:
            ext.bump(ext.aft_jobs, aft, 1)
            g = ext.groups.get(aft)
            if g is None:
                ext.groups[aft] = Group()  # (tuber's empty entry: stats-group finds it)
            elif not j.times[0] and not g.complete():
                self.jobs[j.id] = j  # (Queue.insert's bookkeeping, then held)
                self.body_bytes += len(j.body)
                j.tube.total_jobs += 1
                self.total_jobs += 1
                self._hold(j, log)
                return
        Queue.insert(self, j, now, log)

    def _register(self, j: Job, tags: Tags) -> None:
        """A tagged job's keys, limit and groups (at its put or at recovery)."""
        ext = self.tagged
        idp = tags.idp
        if idp is not None and idp[0] != 58:  # (58, ':': void_idp's)
            keys = ext.keys.get(j.tube.name)
            if keys is None:
                keys = ext.keys[j.tube.name] = {}
            if idp not in keys:
                ext.nkeys += 1
            keys[idp] = j.id
        if tags.con is not None:
            ext.bump(ext.con_jobs, tags.con, 1)
            ext.con_limit[tags.con] = max(ext.con_limit.get(tags.con, 0), tags.limit)
        if tags.grp is not None:
            g = ext.groups.get(tags.grp)
            if g is None:
                g = ext.groups[tags.grp] = Group()
            g.members.add(j.id)
        if tags.aft is not None:
            ext.bump(ext.aft_jobs, tags.aft, 1)
            if tags.aft not in ext.groups:
                ext.groups[tags.aft] = Group()  # (tuber's empty entry: stats-group finds it)

    # -- held aft: jobs -------------------------------------------------------

    def _hold(self, j: Job, log: bool) -> None:
        ext = self.tagged
        j.state = DELAYED
        j.deadline = HELD
        tags = ext.jobs[j.id]
        ext.groups[tags.aft].waiting[j.id] = None  # type: ignore[index]  # (aft: set)
        ext.bump(ext.held, j.tube.name, 1)
        ext.nheld += 1
        if log:
            self.store.write(j)

    def come_due(self, j: Job, now: int) -> None:
        """A delayed aft: job whose group is open is held again, as in tuber."""
        tags = self.tagged.jobs.get(j.id)
        if tags is not None and self.tagged.group_open(tags.aft):
            # (no room to log it: the binlog has it delayed and due, and a
            # restart holds it again the same way)
            self._hold(j, self.store.reserve_update(j))
        else:
            self.place_ready(j, now)

    def place_delayed(self, j: Job, delay: int, now: int, log: bool = False) -> None:
        if now + delay < HELD_MIN:
            Queue.place_delayed(self, j, delay, now, log)
            return
        # A held job's record (a follower's copy): held, or ready if its
        # group has completed meanwhile.
        tags = self.tagged.jobs.get(j.id)
        if tags is not None and self.tagged.group_open(tags.aft):
            self._hold(j, log)
        else:
            self.place_ready(j, now, log=log)

    def remove(self, j: Job) -> None:
        ext = self.tagged
        state = j.state
        if state == DELAYED and j.deadline == HELD:
            j.state = INVALID
            ext.bump(ext.held, j.tube.name, -1)
            ext.nheld -= 1
            return
        if state == READY:
            if j.id in ext.parked_ids:
                self._unpark_id(j)
            else:
                tags = ext.jobs.get(j.id)
                if tags is not None and tags.con in ext.parked:
                    # One brought back for the room its key had leaves ready
                    # without taking it (deleted, reserved by id): the next
                    # hidden one comes back instead, once it has left.
                    Queue.remove(self, j)
                    self._unpark(tags.con)
                    return
        elif state == BURIED:
            tags = ext.jobs.get(j.id)
            g = None if tags is None or tags.grp is None else ext.groups.get(tags.grp)
            if g is not None:
                g.buried -= 1
        Queue.remove(self, j)

    def place_buried(self, j: Job) -> None:
        Queue.place_buried(self, j)
        tags = self.tagged.jobs.get(j.id)
        g = None if tags is None or tags.grp is None else self.tagged.groups.get(tags.grp)
        if g is not None:
            g.buried += 1

    def _group_done(self, name: bytes, now: int) -> None:
        """A member of group name was deleted: if none is left, release
        what it holds (in slices past SLICE jobs) and forget the group."""
        g = self.tagged.groups.get(name)
        if g is None or not g.complete():
            return
        del self.tagged.groups[name]
        # (nothing adds to g.waiting now: a later aft:name put finds no group)
        if len(g.waiting) <= SLICE:
            self._release_held(g.waiting, now)
        else:
            self.slices.spawn(self._release_later(g.waiting))

    def _release_held(self, waiting: dict[int, None], now: int, n: int = -1) -> None:
        """Release n (-1: all) of the jobs `waiting` lists, taking them out
        of it one at a time: no copy, and a big one is freed as it goes."""
        jobs = self.jobs
        while waiting and n:
            n -= 1
            id_, _ = waiting.popitem()
            j = jobs.get(id_)
            if j is not None and j.state == DELAYED and j.deadline == HELD:
                self.remove(j)
                self.place_ready(j, now, log=self.store.reserve_update(j))

    def _release_later(self, waiting: dict[int, None]) -> Generator[None, int, None]:
        now = yield
        while waiting:
            self._release_held(waiting, now, SLICE)
            now = yield

    # -- deletes, cooldowns -------------------------------------------------

    def delete(self, c: Conn | None, id_: int, now: int, count: bool = True,
               any_holder: bool = False) -> Outcome:
        """As Queue.delete; then the job's tags are let go. any_holder: a
        flush-tube's delete, which starts no cooldown (tuber's)."""
        tags = self.tagged.jobs.get(id_)
        if tags is None:
            return Queue.delete(self, c, id_, now, count, any_holder)
        j = self.jobs.get(id_)
        outcome = Queue.delete(self, c, id_, now, count, any_holder)
        if outcome is not NOT_FOUND and j is not None:
            self._forget(j, tags, now, any_holder)
        return outcome

    def _forget(self, j: Job, tags: Tags, now: int, flushed: bool) -> None:
        ext = self.tagged
        del ext.jobs[j.id]
        if tags.idp is not None:
            name = j.tube.name
            keys = ext.keys.get(name)
            if keys is not None and keys.get(tags.idp) == j.id:
                del keys[tags.idp]
                ext.nkeys -= 1
                if not keys:
                    del ext.keys[name]
                if tags.ttl and not flushed:
                    self._cool(name, tags.idp, j.id, now + tags.ttl * NS)
                elif not keys:
                    self._tube_maybe_free(name)
        con = tags.con
        if con is not None:
            ext.bump(ext.con_jobs, con, -1)
            if con not in ext.con_jobs:
                # Its last job: what the key kept goes with it (tuber keeps
                # the limit until a reservation of the key ends, which a
                # key whose jobs are never reserved never sees).
                if con not in ext.con_count:
                    ext.con_limit.pop(con, None)
                ext.parked.pop(con, None)  # (stale entries only, by now)
        aft = tags.aft
        if aft is not None:
            ext.bump(ext.aft_jobs, aft, -1)
            g = ext.groups.get(aft)
            if g is not None:
                g.waiting.pop(j.id, None)
                if aft not in ext.aft_jobs and g.complete() and not g.waiting:
                    # Named by no job now, and no member left: tuber's empty
                    # entry would stay for ever (COMPATIBILITY.md).
                    del ext.groups[aft]
        if tags.grp is not None:
            g = ext.groups.get(tags.grp)
            if g is not None:
                g.members.discard(j.id)
                self._group_done(tags.grp, now)

    def _cool(self, tube: bytes, key: bytes, orig: int, expires: int) -> None:
        old = self.tagged.cooldown(tube, key)
        if old is not None:
            self._uncool(old)
        cd = Cooldown(self.tagged.ext_id(), tube, key, orig, expires)
        self.cooled(cd)
        self.store.note(cd)  # (no room: kept in memory only, until a restart)

    def cooled(self, cd: Cooldown) -> None:
        """Keep cd as its key's cooldown until it ends (recovery's too)."""
        ext = self.tagged
        cools = ext.cools.get(cd.tube)
        if cools is None:
            cools = ext.cools[cd.tube] = {}
        cools[cd.key] = ext.cool_ids[cd.id] = cd
        ext.ncools += 1
        heappush(ext.cool_heap, (cd.expires, cd.id))
        self.timers.timer(cd.expires)

    def _uncool(self, cd: Cooldown) -> None:
        ext = self.tagged
        if ext.cool_ids.pop(cd.id, None) is None:
            return  # (gone already: a flush-tube's slices)
        self.store.forget(cd)
        cools = ext.cools.get(cd.tube)
        if cools is not None and cools.get(cd.key) is cd:
            del cools[cd.key]
            ext.ncools -= 1
            if not cools:
                del ext.cools[cd.tube]
                self._tube_maybe_free(cd.tube)

    def clear_tube(self, name: bytes, last: int) -> None:
        """A flush-tube that started when `last` was the next id has
        ended: the tube's cooldowns go, and the keys of its jobs below
        `last` that it left (held ones), as in tuber. (A follower applies
        the leader's record of it the same way.) The cooldowns' records
        are let go in slices."""
        ext = self.tagged
        cools = ext.cools.pop(name, None)
        if cools:
            ext.ncools -= len(cools)
            self.slices.spawn(self._uncool_all(list(cools.values())))
        keys = ext.keys.get(name)
        if keys:
            for key, id_ in list(keys.items()):  # (after a flush: held jobs' only)
                if id_ < last:
                    del keys[key]
                    ext.nkeys -= 1
                    tags = ext.jobs.get(id_)
                    if tags is not None:
                        ext.jobs[id_] = void_idp(tags)
            if not keys:
                del ext.keys[name]
        self.store.note(Clear(ext.ext_id(), name, last))
        self._tube_maybe_free(name)

    def _uncool_all(self, cools: list[Cooldown]) -> Generator[None, int, None]:
        yield
        ids = self.tagged.cool_ids
        for i in range(0, len(cools), SLICE):
            for cd in cools[i:i + SLICE]:
                if ids.pop(cd.id, None) is cd:
                    self.store.forget(cd)
            yield

    def apply_cool(self, tube: bytes, key: bytes, orig: int, expires: int) -> None:
        """A follower: the leader's cooldown record (its own delete may
        have made the same one)."""
        cd = self.tagged.cooldown(tube, key)
        if cd is None or (cd.orig, cd.expires) != (orig, expires):
            self._cool(tube, key, orig, expires)

    def tick_cools(self, now: int, more: bool) -> bool:
        """Let the cooldowns that have ended go (after the timers' tick:
        `more` is what it said); True if more of either is due."""
        ext = self.tagged
        heap = ext.cool_heap
        k = SLICE
        while heap and heap[0][0] <= now and k:
            k -= 1
            cd = ext.cool_ids.get(heappop(heap)[1])
            if cd is not None and cd.expires <= now:
                self._uncool(cd)
        return more or bool(k == 0 and heap and heap[0][0] <= now)

    def next_due(self) -> int | None:
        due = Queue.next_due(self)
        heap = self.tagged.cool_heap
        if heap and (due is None or heap[0][0] < due):
            return heap[0][0]
        return due

    # -- concurrency keys ---------------------------------------------------

    def ready_top(self, t: Tube) -> Job | None:
        """The best ready job of t whose concurrency key has room; those
        above it whose key has none are hidden on the way."""
        j = Queue.ready_top(self, t)
        ext = self.tagged
        while j is not None:
            tags = ext.jobs.get(j.id)
            if tags is None or tags.con is None or not ext.blocked_key(tags.con):
                return j
            self._park(t, j, tags.con)
            j = Queue.ready_top(self, t)
        return None

    def _park(self, t: Tube, j: Job, key: bytes) -> None:
        run = t.run
        if run and run[0] == j.id:
            run.popleft()
        else:
            heappop(t.ready)
        ext = self.tagged
        tubes = ext.parked.get(key)
        if tubes is None:
            tubes = ext.parked[key] = {}
        heap = tubes.get(t)
        if heap is None:
            heap = tubes[t] = []
        key_ = (j.pri << SHIFT) | j.id
        heappush(heap, key_)
        self._hide(t, key_)
        if j.id not in ext.parked_ids:
            ext.parked_ids.add(j.id)
            ext.bump(ext.blocked, t.name, 1)

    def _hide(self, t: Tube, key: int) -> None:
        """key's job is hidden: it goes into t's heap of hidden jobs (for
        peek-ready and flush-tube, without a walk over every key)."""
        hidden = self.tagged.hidden.get(t)
        if hidden is None:
            hidden = self.tagged.hidden[t] = StaleHeap(TUBE_SLACK)
        heappush(hidden, key)
        if hidden.over(self.tagged.blocked.get(t.name, 0) + 1):
            hidden.sweep(self.slices, self._hidden_live(t), lambda: self.tagged.blocked.get(t.name, 0))

    def _hidden_live(self, t: Tube) -> Callable[[int], bool]:
        jobs, ids = self.jobs, self.tagged.parked_ids

        def live(key: int) -> bool:
            id_ = key & MASK
            j = jobs.get(id_)
            return (j is not None and id_ in ids and j.tube is t and j.state == READY
                    and j.pri == key >> SHIFT)
        return live

    def _unpark_id(self, j: Job) -> None:
        """A hidden job leaves ready (deleted, reserved by id): its entry
        in parked goes stale."""
        ext = self.tagged
        ext.parked_ids.discard(j.id)
        ext.bump(ext.blocked, j.tube.name, -1)
        if j.tube.name not in ext.blocked:
            ext.hidden.pop(j.tube, None)  # (none hidden: its entries are all stale)

    def _unpark(self, key: bytes) -> None:
        """key has room: bring back as many of its hidden jobs, from each tube."""
        ext = self.tagged
        tubes = ext.parked.get(key)
        if not tubes:
            return
        room = ext.room(key)
        jobs, ids = self.jobs, ext.parked_ids
        for t, heap in list(tubes.items()):
            n = room
            while n > 0 and heap:
                k = heappop(heap)
                id_ = k & MASK
                j = jobs.get(id_)
                if j is None or j.state != READY or j.pri != k >> SHIFT or id_ not in ids:
                    continue  # stale
                self._unpark_id(j)
                heappush(t.ready, k)
                if t.ikey is None or k < t.ikey:
                    self.index_push(t, k)
                n -= 1
            if not heap:
                del tubes[t]
            if n < room and t.waiting and not t.matching:
                t.matching = True  # its waiters get them at the next step
                self.slices.spawn(self.match_later(t))
        if not tubes:
            del ext.parked[key]

    def _reserve(self, c: Conn, j: Job, now: int) -> None:
        Queue._reserve(self, c, j, now)
        t = j.tube
        ids = self.tagged.reserved.get(t)
        if ids is None:
            ids = self.tagged.reserved[t] = StaleHeap(TUBE_SLACK)
        heappush(ids, j.id)
        if ids.over(t.nreserved):
            ids.sweep(self.slices, self._reserved_in(t), lambda: t.nreserved)
        tags = self.tagged.jobs.get(j.id)
        if tags is not None and tags.con is not None:
            ext = self.tagged
            key = tags.con
            ext.con_count[key] = ext.con_count.get(key, 0) + 1
            ext.con_limit[key] = max(ext.con_limit.get(key, 0), tags.limit)
            if key in ext.parked and ext.room(key) > 0:
                self._unpark(key)

    def _unreserve(self, j: Job) -> None:
        Queue._unreserve(self, j)
        self._returned(j)

    def _reserved_in(self, t: Tube) -> Callable[[int], bool]:
        """Is an entry of t's reserved ids (peek-reserved's) live?"""
        blocks = self.blocks

        def live(id_: int) -> bool:
            j: Job | None = blocks.get(id_ >> BITS, NO_JOBS)[id_ & LOW]
            return j is not None and j.state == RESERVED and j.tube is t
        return live

    def peek_reserved(self, t: Tube) -> Job | None:
        """The reserved job of t with the lowest id (tuber's peek-reserved):
        the top of t's heap of reserved ids, its stale entries dropped on
        the way (O(log n) each, once)."""
        ids = self.tagged.reserved.get(t)
        if ids is None:
            return None
        id_ = ids.top(self._reserved_in(t))
        return None if id_ is None else self.jobs.get(id_)

    def _returned(self, j: Job) -> None:
        """j's reservation ended: its concurrency slot frees, and its tube's
        reserved ids go once it has none."""
        if not j.tube.nreserved:
            self.tagged.reserved.pop(j.tube, None)
        tags = self.tagged.jobs.get(j.id)
        if tags is None or tags.con is None:
            return
        ext = self.tagged
        key = tags.con
        n = ext.con_count.get(key, 0) - 1
        if n > 0:
            ext.con_count[key] = n
        else:
            ext.con_count.pop(key, None)
            ext.con_limit.pop(key, None)
        if key in ext.parked:
            self._unpark(key)

    def reserve_job(self, c: Conn, id_: int, now: int) -> Outcome:
        """tuber's: NOT_FOUND too for a job whose key has no room, or whose
        aft: group has members left."""
        tags = self.tagged.jobs.get(id_)
        if tags is not None and (
                (tags.con is not None and self.tagged.blocked_key(tags.con))
                or self.tagged.group_open(tags.aft)):
            return NOT_FOUND
        return Queue.reserve_job(self, c, id_, now)

    def peek_ready(self, t: Tube) -> Job | None:
        """The best ready job, hidden ones included (tuber's peek-ready)."""
        best = self.ready_top(t)
        hidden = self.tagged.hidden.get(t)
        if hidden:
            key = hidden.top(self._hidden_live(t))
            if key is not None:
                j = self.jobs[key & MASK]
                if best is None or (j.pri, j.id) < (best.pri, best.id):
                    best = j
        return best

    def hidden(self, t: Tube) -> list[int]:
        """t's hidden jobs' entries (flush-tube deletes them too): a copy,
        made in C, stale entries included."""
        return list(self.tagged.hidden.get(t, ()))

    def maybe_free(self, t: Tube) -> None:
        # Held jobs are counted in no state; and a tube keeps its keys and
        # cooldowns (flush-tube finds it), as in tuber.
        ext = self.tagged
        name = t.name
        if name not in ext.held and name not in ext.keys and name not in ext.cools:
            Queue.maybe_free(self, t)
            if not t.alive:
                ext.dedup.pop(name, None)  # (its counter goes with it, as stats-tube's do)

    def _tube_maybe_free(self, name: bytes) -> None:
        """Tube `name` lost its last key or cooldown: it may go now."""
        t = self.tubes.get(name)
        if t is not None:
            self.maybe_free(t)

    def memory_used(self) -> int:
        """Queue.memory_used, and the tags' state: held jobs (in no state's
        count), each tagged job's tags and keys, each cooldown."""
        ext = self.tagged
        return (Queue.memory_used(self) + ext.nheld * JOB_OVERHEAD
                + len(ext.jobs) * TAGS_OVERHEAD + len(ext.cool_ids) * COOL_OVERHEAD)

    # -- recovery -----------------------------------------------------------

    def load(self, jobs: Iterable[Job], now: int, wall_offset: int) -> None:
        """Queue.load, with the tags recovery found (ext.jobs, for these
        jobs only): keys, limits and groups first (a buried member counts
        as it is placed), then held jobs; a group with no member left
        releases its held jobs (a release the binlog had no room for)."""
        ext = self.tagged
        rest, held_jobs = [], []
        for j in jobs:
            tags = ext.jobs.get(j.id)
            if tags is not None:
                self._register(j, tags)
                if j.state == DELAYED and tags.aft is not None and held(j.deadline, wall_offset):
                    held_jobs.append(j)
                    continue
            rest.append(j)
        Queue.load(self, rest, now, wall_offset)
        for j in held_jobs:
            self.jobs[j.id] = j
            self.body_bytes += len(j.body)
            self._hold(j, log=False)
        for name in [n for n, g in ext.groups.items() if g.complete() and g.waiting]:
            self._release_held(ext.groups.pop(name).waiting, now)

    def find_record(self, id_: int) -> Job | Cooldown | None:
        """The binlog's lookup (compaction): a job, or a cooldown."""
        if id_ >= EXT_ID:
            return self.tagged.cool_ids.get(id_)
        return self.jobs.get(id_)

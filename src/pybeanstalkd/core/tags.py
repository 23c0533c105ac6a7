"""The server-wide state the put tags (--extensions; puttags.py) keep:
idp: keys and their cooldowns, con: keys, grp:/aft: groups, and the
counts /metrics shows (tagged.py applies them to the queue)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar


from .idmap import IdMap
from .weighted import XorShift

if TYPE_CHECKING:
    from collections.abc import Callable

    from .heaps import StaleHeap
    from .job import Job, Tube
    from .puttags import Tags

# What the tags add to a job, and what a cooldown costs, for --max-memory
# (tagged.py): measured with tracemalloc over 100,000 puts (docs/
# performance/2026-11-26-put-tags.md): idp:key-<n> +251 bytes a job (its
# tags and key are its own), idp: grp: con: +303, tags that repeat +52; a
# job deleted into a cooldown left 357 bytes more than it freed.
TAGS_OVERHEAD: Final = 256
COOL_OVERHEAD: Final = 400
# Binlog ids from EXT_ID on name the records of this state (binlog/ext.py),
# never a job: with --extensions, job ids stop below it.
EXT_ID: Final = 1 << 63
# A held job's deadline: far past any delay (2**32 s is 4.3e18 ns), so that
# its binlog record (state delayed) keeps it delayed in the reference too,
# until a kick. A recovered deadline at or past HELD_MIN is a held job's;
# the margin between them is for the wall clock's lead on the monotonic
# one growing between a record and its recovery (a held record may wait
# for decades, and a reboot restarts the monotonic clock).
HELD: Final = 3 << 61
HELD_MIN: Final = 1 << 62
# The latest time a binlog record holds (wall ns, an int64). A held job's
# deadline plus the wall clock passes it in 2043: its record holds this
# instead (binlog/format.py, wall), and recovery takes it for a held one.
I64_MAX: Final = (1 << 63) - 1


def held(deadline: int, wall_offset: int) -> bool:
    """Is a delayed aft: job's recovered deadline (a record's wall ns) a
    held job's?"""
    return deadline - wall_offset >= HELD_MIN or deadline == I64_MAX


V = TypeVar("V")


class AtHand(Generic[V]):
    """The entry of a dict by name found last, kept at hand with its name
    (value None: none): a producer's puts name the same few groups and
    keys, as they repeat the same few lines, and the name is then the same
    object, from the same Tags. Whatever removes an entry from the dict
    forgets it here. Saves the lookup by name, compiled: 131 instructions
    a grp: or aft: put, about 70 a con: put. Its fields are read where it
    is looked up (ExtState.group, ExtState.con): a method reading them cost
    a grp: put 13 instructions more."""

    __slots__ = ("name", "value")

    def __init__(self) -> None:
        self.name: bytes | None = None
        self.value: V | None = None

    def forget(self, value: V) -> None:
        """value's entry left its dict."""
        if value is self.value:
            self.name = self.value = None


class Group:
    """grp:NAME's members and the aft:NAME jobs it holds."""

    __slots__ = ("members", "buried", "waiting", "afts")

    def __init__(self) -> None:
        # Its jobs not yet deleted, in blocks of ids (idmap.py), so that no
        # step grows with the group: stats-group goes through a block at a
        # time (a dict of a million can be neither walked while it changes
        # nor copied in one step: 25 ms here), and a million members deleted
        # leave no table of a million to free at once when the group goes
        # (5 to 16 ms here), an emptied block going with its last member.
        self.members: IdMap[bool] = IdMap()
        self.buried = 0  # ... of which buried
        # Held aft: jobs' ids. A kick-job'd one stays listed (as in tuber)
        # until its group completes.
        self.waiting: dict[int, None] = {}
        # The live aft:NAME jobs, held or not: the entry of a group with no
        # member goes with the last of them (ExtState.aft_left keeps their
        # count while the name has no entry).
        self.afts = 0

    def complete(self) -> bool:
        return not self.members.n and not self.buried


class ConKey:
    """A con: key's state, from its first job's put until it has neither
    a job nor a reservation held."""

    __slots__ = ("held", "limit", "jobs", "parked")

    def __init__(self) -> None:
        self.held = 0  # reservations of its jobs held now
        # Its limit: the highest of its jobs' N seen at a put or a reserve;
        # 0 (none: 1 applies) once no reservation is held (tuber's
        # bookkeeping), or its last job is gone.
        self.limit = 0
        self.jobs = 0  # its live jobs
        # Its ready jobs hidden while it has no room: tube -> heap of
        # pri << 64 | id (stale entries allowed, swept: hiding.push_parked);
        # a tube's goes when it empties.
        self.parked: dict[Tube, StaleHeap] = {}

    def room(self) -> int:
        """Reservations it may still take."""
        return (self.limit or 1) - self.held


class Cooldown:
    """A deleted job's idp key, kept TTL seconds. In the binlog it is a
    record of its own (binlog/ext.py), which keeps its file until the
    cooldown ends or compaction copies it on: hence the fields a job's
    record has for the binlog (id, tube, body, state, file)."""

    __slots__ = ("id", "tube", "key", "orig", "expires", "file", "state", "body")

    def __init__(self, id_: int, tube: bytes, key: bytes, orig: int, expires: int) -> None:
        self.id = id_  # from EXT_ID on: the binlog's name for it, not a job's
        self.tube = tube
        self.key = key
        self.orig = orig  # the deleted job's id, which duplicates are answered
        self.expires = expires  # monotonic ns
        self.file: Any = None  # (binlog/files.py's File: core does not import it)
        self.state = 0
        self.body = b""


class Clear:
    """flush-tube's record: the tube's cooldowns are gone, and so are the
    keys of its jobs below `last` (held ones, which flush-tube leaves)."""

    __slots__ = ("id", "tube", "last", "file", "state", "body")

    def __init__(self, id_: int, tube: bytes, last: int) -> None:
        self.id = id_
        self.tube = tube
        self.last = last
        self.file: object = None
        self.state = 0
        self.body = b""


class ExtState:
    """The tags' server-wide state (one per queue, with --extensions)."""

    def __init__(self, max_tries: int = 0, rand: Callable[[], float] | None = None) -> None:
        self.max_tries = max_tries  # --max-tries (0: none)
        # Draws in [0, 1) for the weighted reserves (reserve-mode): the
        # server's are seeded from the OS; by default, fixed ones (the pure
        # layer reads no OS entropy, and gives the same answers each run).
        self.rand: Callable[[], float] = XorShift().random if rand is None else rand
        # A tagged job keeps its tags (Job.tags); these are counted (their
        # memory). A record's tags come before its job's full record: a
        # follower keeps them here by id until the job comes (Tagged.attach).
        self.tagged = 0
        self.pending: dict[int, Tags] = {}
        # idp: by tube name, key -> the live job holding it (a put's job
        # from its tags' stage on: Keys.claim), and key -> its cooldown (a
        # tube's maps go when they empty: a tube is kept while it has one,
        # and flush-tube drops a tube's at once)
        self.keys: dict[bytes, dict[bytes, Job]] = {}
        self.keys_at_hand: AtHand[dict[bytes, Job]] = AtHand()  # (let go where a map goes)
        self.cools: dict[bytes, dict[bytes, Cooldown]] = {}
        self.nkeys = self.ncools = 0
        self.cool_ids: dict[int, Cooldown] = {}  # by binlog id (compaction finds them)
        self.cool_heap: list[tuple[int, int]] = []  # (expires, binlog id): their ends
        self.next_ext = EXT_ID  # the next binlog id of a record of ours
        self.cons: dict[bytes, ConKey] = {}  # con: keys
        self.con_at_hand: AtHand[ConKey] = AtHand()  # (let go in forget_con)
        self.con_keys = 0  # ... with a reservation held now
        # The live aft: jobs of a name whose group's entry went while they
        # lived (it completed), by name: a group made again for the name
        # counts them (Group.afts). The count is in one place at a time.
        self.aft_left: dict[bytes, int] = {}
        # Ready jobs hidden because their key is at its limit (in their
        # ConKey.parked)
        self.parked_ids: set[int] = set()
        # ... and by tube, all keys together: tube -> heap (heaps.StaleHeap)
        self.hidden: dict[Tube, StaleHeap] = {}
        self.groups: dict[bytes, Group] = {}
        self.group_at_hand: AtHand[Group] = AtHand()  # (let go in forget_group)
        # For /metrics, by tube name: duplicate puts answered; held aft:
        # jobs; jobs hidden by their concurrency key.
        self.dedup: dict[bytes, int] = {}
        self.held: dict[bytes, int] = {}
        self.blocked: dict[bytes, int] = {}
        self.nheld = 0  # held jobs, all tubes (their memory counts)

    def ext_id(self) -> int:
        self.next_ext += 1
        return self.next_ext

    def blocked_key(self, key: bytes) -> bool:
        """Has key no room for another reservation?"""
        k = self.con(key)
        return k is not None and k.room() <= 0

    def con(self, key: bytes) -> ConKey | None:
        """con: key's state, if it has one."""
        hand = self.con_at_hand
        k = hand.value
        if k is None or key is not hand.name:
            k = self.cons.get(key)
            if k is not None:
                hand.name = key
                hand.value = k
        return k

    def con_key(self, key: bytes) -> ConKey:
        """con: key's state, made if it has none (its first job's put)."""
        k = self.con(key)
        if k is None:
            k = self.cons[key] = ConKey()
            hand = self.con_at_hand
            hand.name = key
            hand.value = k
        return k

    def forget_con(self, key: bytes) -> None:
        """con: key's state goes (no job, no reservation held)."""
        self.con_at_hand.forget(self.cons.pop(key))

    def group(self, name: bytes) -> Group:
        """name's group, made if it has no entry (tuber's empty entry, for
        an aft: job: stats-group finds it)."""
        hand = self.group_at_hand
        g = hand.value
        if g is None or name is not hand.name:
            g = self.groups.get(name)
            if g is None:
                g = self.groups[name] = Group()
                if self.aft_left:
                    g.afts = self.aft_left.pop(name, 0)
            hand.name = name
            hand.value = g
        return g

    def forget_group(self, name: bytes) -> Group:
        """name's group's entry goes (it completed, or nothing names it);
        the aft: jobs naming it are counted without it."""
        g = self.groups.pop(name)
        self.group_at_hand.forget(g)
        if g.afts:
            self.aft_left[name] = g.afts
        return g

    def group_open(self, name: bytes | None) -> bool:
        """Would an aft:name job be held now?"""
        if name is None:
            return False
        g = self.groups.get(name)
        return g is not None and not g.complete()

    def holder(self, tube: bytes, key: bytes) -> int | None:
        """The id of the job of tube holding idp: key, if one does."""
        keys = self.keys.get(tube)
        j = None if keys is None else keys.get(key)
        return None if j is None else j.id

    def let_key_go(self, tube: bytes, key: bytes, id_: int) -> bool:
        """Job id_'s idp: key in tube, if the job holds it, is let go (and
        the tube's map of keys with its last one). Did it hold it? (A put's
        job that claimed its key has id 0 until its id is taken.)"""
        keys = self.keys.get(tube)
        if keys is None:
            return False
        j = keys.get(key)
        if j is None or j.id != id_:
            return False
        del keys[key]
        self.nkeys -= 1
        if not keys:
            self.forget_keys(tube)
        return True

    def tube_keys(self, tube: bytes) -> dict[bytes, Job]:
        """tube's map of idp: keys, made if it has none (a put's claim, a
        record's job). A producer's keyed puts go to one tube: its map is
        kept at hand (a lookup by name less a put, 55 instructions)."""
        hand = self.keys_at_hand
        keys = hand.value
        if keys is None or tube is not hand.name:
            keys = self.keys.get(tube)
            if keys is None:
                keys = self.keys[tube] = {}
            hand.name = tube
            hand.value = keys
        return keys

    def forget_keys(self, tube: bytes) -> None:
        """tube's map of idp: keys goes (its last key went)."""
        self.keys_at_hand.forget(self.keys.pop(tube))

    def cooldown(self, tube: bytes, key: bytes) -> Cooldown | None:
        if not self.cools:
            return None  # (the commonest: no key cools, in any tube)
        cools = self.cools.get(tube)
        return None if cools is None else cools.get(key)

    def concurrency_keys(self) -> int:
        return self.con_keys

    def bump(self, counter: dict[bytes, int], name: bytes, by: int) -> None:
        n = counter.get(name, 0) + by
        if n:
            counter[name] = n
        else:
            counter.pop(name, None)

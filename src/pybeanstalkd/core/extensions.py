"""tuber's protocol extensions (--extensions): batches, and tube and server
control. Each parses and answers byte for byte as tuber 0.6.4's
(src/protocol.rs and src/server.rs there), so that a client written for
tuber works here. Without --extensions none of this is reached: every
line is answered as beanstalkd 1.13 answers it (COMPATIBILITY.md).

    reserve-batch N      N in 1..1000; never blocks: RESERVED_BATCH n, then
                         n RESERVED entries (n may be 0)
    delete-batch ID...   1..1000 ids: DELETED_BATCH <deleted> <not found>
    flush-tube TUBE      every job of the tube, reserved ones included:
                         FLUSHED n (NOT_FOUND: no such tube)
    drain, undrain       DRAINING, NOT_DRAINING (puts answer DRAINING meanwhile)
    watch TUBE [W]       W in 1..9999 (default 1): the tube's weight for this
                         connection's weighted reserves; WATCHING n
    reserve-mode MODE    fifo, weighted or weighted-fair: USING MODE
    put ... TAGS         a put with tags (puttags.py): idp:, con:, grp:, aft:, try:
    stats-group NAME     a group's jobs by state, and the aft: jobs it holds
    peek-reserved        the lowest-id reserved job of the used tube

A word with no argument after it (`reserve-batch`) is UNKNOWN_COMMAND, as
tuber's exact-prefix matching makes it; a bad argument is BAD_FORMAT.
"""
from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING, Final

from . import protocol as P
from . import admin
from .admin import delete_each, state_keys
from . import commands, reserving
from .outcome import DONE, NOT_LOGGED
from .protocol import U32_MAX, U64_MAX, Bad, name_ok, seconds, yaml_reply
from .session import BUSY, CALL_UNITS, OUT_LIMIT, WIDE, wide_budget
from .slices import SLICE
from .stats import Quoted, yaml
from .puttags import parse_tags, rust_uint
from .tags import HELD

from .weighted import FIFO, FIFO_POLICY, WEIGHTED, WEIGHTED_FAIR, Weighted

if TYPE_CHECKING:
    from collections.abc import Generator

    from .session import EngineState
    from .outcome import Outcome
    from .protocol import Command
    from .queue import Queue
    from .session import Session
    from .job import Tube
    from .tagged import Tagged

MAX_BATCH: Final = 1000  # ids a delete-batch, jobs a reserve-batch may name
MAX_WEIGHT: Final = 9999  # a watched tube's weight (tuber's MAX_TUBE_WEIGHT)
MODES = {b"fifo": FIFO, b"weighted": WEIGHTED, b"weighted-fair": WEIGHTED_FAIR}
MODE_NAMES = {v: k for k, v in MODES.items()}
# The longest line with --extensions: a delete-batch of MAX_BATCH ids of 20
# digits (tuber's MAX_LINE_LEN); without it, the reference's LINE_BUF_SIZE.
LINE_MAX: Final = 13 + MAX_BATCH * 21 + 2
# Whitespace as Rust's trim and split_whitespace see it, in ASCII.
_SPACE = b" \t\n\v\f\r"



# The arguments of each extension command, parsed as tuber's are
# (protocol.py says what a parser takes and returns). The table
# (core/cmdtable.py) matches "word " as tuber does, and a word alone is
# UNKNOWN_COMMAND.


def put_tagged_args(op: str, line: bytes, at: int) -> Command | None:
    """A put with tags; None for the reference's put (four numbers and
    nothing more), which its own parser then reads."""
    words = line[at:].split()
    if len(words) <= 4:
        return None
    line = line.rstrip(b"\0")  # (tuber trims trailing NULs; any other is bad)
    if 0 in line:  # (a NUL)
        raise Bad
    words = line[at:].split()
    pri, delay, ttr, size = (rust_uint(w, U32_MAX) for w in words[:4])
    return (op, pri, seconds(delay), seconds(ttr), size, parse_tags(words[4:]))


def batch_size(op: str, line: bytes, at: int) -> Command:
    n = rust_uint(line[at:].strip(_SPACE), U32_MAX)
    if not 1 <= n <= MAX_BATCH:
        raise Bad
    return (op, n)


def job_ids(op: str, line: bytes, at: int) -> Command:
    words = line[at:].split()
    if not 1 <= len(words) <= MAX_BATCH:
        raise Bad
    return (op, tuple(rust_uint(w, U64_MAX) for w in words))


def weighted_tube(op: str, line: bytes, at: int) -> Command:
    rest = line[at:]
    parts = rest.split(b" ")
    if rest != rest.strip(_SPACE) or len(parts) > 2 or not name_ok(parts[0]):
        raise Bad
    weight = rust_uint(parts[1], U32_MAX) if len(parts) == 2 else 1
    if not 1 <= weight <= MAX_WEIGHT:
        raise Bad
    return (op, parts[0], weight)


def reserve_mode(op: str, line: bytes, at: int) -> Command:
    mode = MODES.get(line[at:])
    if mode is None:
        raise Bad
    return (op, mode)


def c_reserve_batch(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    """Reserve up to N ready jobs at once, as reserve would one by one,
    never waiting; counted as one reserve (tuber's cmd-reserve).

    A batch stops early once its entries hold OUT_LIMIT bytes (one
    job at least), as a read's pipelined reserves do: a client that
    asks for 1,000 big jobs and never reads holds at most that plus
    one body, wherever the bodies were (--bodies-on-disk reads them
    back into the reply). Fewer jobs than asked is an answer tuber
    gives too, when fewer are ready."""
    commands.worker(e, s)
    e.counts.add("reserve")
    out = s.out
    at = len(out)
    n = 0
    limit = cmd[1]
    wide = len(s.watch)
    if wide > WIDE:
        # Each reserve costs its watched tubes: a batch gets as many as
        # one call of a read's commands could run (engine.py).
        limit = min(limit, wide_budget(CALL_UNITS, wide))
    q = e.q
    take = reserving.reserve_now
    size = 0
    seen = at
    while n < limit and size < OUT_LIMIT and take(q, s, now):
        n += 1
        for x in out[seen:]:
            size += len(x)
        seen = len(out)
    if not out:
        s.sink.append(s)
    if e.broken:  # (--bodies-on-disk) a body not read back: not an entry
        kept = [x for x in out[at:] if x is not P.INTERNAL_ERROR]
        n -= len(out) - at - len(kept)
        out[at:] = kept
    out.insert(at, b"RESERVED_BATCH %d\r\n" % n)  # (before the entries reserve wrote)
    if e.verbose >= 2:  # (-V -V logs each reply; this one bypassed send)
        e.log(">%d reply RESERVED_BATCH %d" % (s.fd, n))


def c_delete_batch(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    """Delete each id in turn, as delete would; counted as that many
    deletes. A delete the binlog could not record answers
    INTERNAL_ERROR, as a single delete does (tuber has no such case).
    Past SLICE ids, in slices of SLICE (the reply after the last), as
    a big kick: 1,000 deletes in one step kept every other client
    waiting 5 ms here."""
    ids = cmd[1]
    e.counts.add("delete", len(ids))

    def answer(deleted: int) -> bytes:
        if deleted < 0:
            return P.INTERNAL_ERROR
        return b"DELETED_BATCH %d %d\r\n" % (deleted, len(ids) - deleted)

    if not e.q.slices.spawn(e.in_slices(s, _delete_ids(e.q, s, ids, now), answer)):
        s.state = BUSY


def c_flush_tube(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    t = e.q.tubes.get(cmd[1])
    if t is None:
        s.send(P.NOT_FOUND)
        return
    if not e.q.slices.spawn(e.in_slices(s, flush_tube(e.q, t, now), _flushed)):
        s.state = BUSY


def c_put_tagged(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    """A put with tags: its job gets an id once its body is in and it
    is no duplicate (commands.finish_put's tags' stage), as in tuber."""
    _, pri, delay, ttr, size, tags = cmd
    e.counts.add("put")
    commands.put(e, s, pri, delay, ttr, size, True, now, tags)


class TagCommands:
    """The extension commands that ask the tags' policy, which --extensions
    made (engine.py): the command table holds the methods of the one
    bound to it, so they reach it typed, with no check of its type."""

    __slots__ = ("tags",)

    def __init__(self, tags: Tagged) -> None:
        self.tags = tags

    def c_watch_weight(self, e: EngineState, s: Session, cmd: Command, now: int) -> None:
        """watch, with a weight (1 if none is given: a watch again sets it
        back to 1, as in tuber); counted as a watch."""
        _, name, weight = cmd
        e.counts.add("watch")
        n = reserving.watch(e.q, s, name)
        # (a weight of 1 is one forgotten: the shared fifo policy has none to
        # forget, and needs no session's own)
        (s.weighted if weight == 1 else self.weighted(s)).weigh(name, weight)
        s.send(b"WATCHING %d\r\n" % n)

    def c_reserve_mode(self, e: EngineState, s: Session, cmd: Command, now: int) -> None:
        self.weighted(s).mode = cmd[1]
        s.send(b"USING %s\r\n" % MODE_NAMES[cmd[1]])

    def weighted(self, s: Session) -> Weighted:
        """s's own reserve policy, made in place of the shared fifo one when
        it first names a mode or a weight."""
        if s.weighted is FIFO_POLICY:
            s.weighted = Weighted(self.tags.ext.rand)
        return s.weighted

    def c_stats_group(self, e: EngineState, s: Session, cmd: Command, now: int) -> None:
        """tuber's stats-group (counted as a stats): a group's members by
        state (held ones are delayed), and the aft: jobs it holds. The
        members are counted in slices."""
        e.counts.add("stats")
        name = cmd[1]
        g = self.tags.ext.groups.get(name)
        if g is None:
            s.send(P.NOT_FOUND)
            return
        counts = [0, 0, 0, 0, 0]  # by state: invalid, ready, reserved, buried, delayed
        waiting = len(g.waiting)

        def count() -> Generator[None, int, int]:
            jobs = e.q.jobs
            members = g.members
            first = True
            for k in sorted(members.blocks):  # (a block's ids copied as it is reached)
                ids = members.ids(k)
                for i in range(0, len(ids), SLICE):
                    if not first:
                        yield
                    first = False
                    for id_ in ids[i:i + SLICE]:
                        j = jobs.get(id_)
                        if j is not None:
                            counts[j.state] += 1
            return 0

        def answer(_: int) -> bytes:
            return yaml_reply(yaml([
                (b"name", Quoted(name)), (b"ready", counts[1]), (b"reserved", counts[2]),
                (b"delayed", counts[4]), (b"buried", counts[3]), (b"waiting-jobs", waiting)]))

        if not e.q.slices.spawn(e.in_slices(s, count(), answer)):
            s.state = BUSY

    def c_peek_reserved(self, e: EngineState, s: Session, cmd: Command, now: int) -> None:
        """tuber's peek-reserved: the reserved job of the used tube with
        the lowest id (whoever holds it), from the tube's index of them."""
        j = self.tags.reserved_ids.lowest(e.q, s.use)
        if j is None:
            s.send(P.NOT_FOUND)
            return
        s.send_job(b"FOUND", j)  # (--bodies-on-disk: maybe read back)


def c_drain(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    e.draining = True
    s.send(P.DRAINING)


def c_undrain(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    e.draining = False
    s.send(b"NOT_DRAINING\r\n")


def _delete_ids(q: Queue, s: Session, ids: tuple[int, ...],
                now: int) -> Generator[None, int, int]:
    """delete-batch's deletes, SLICE a slice: how many it deleted, or -1 if
    the binlog could not record one (the others are deleted all the same)."""
    deleted = lost = 0
    delete = q.delete
    for i, id_ in enumerate(ids):
        if i and not i % SLICE:
            now = yield
        outcome = delete(s, id_, now)
        if outcome is DONE:
            deleted += 1
        elif outcome is NOT_LOGGED:
            lost += 1
    return -1 if lost else deleted


def _flushed(n: int) -> bytes:
    return b"FLUSHED %d\r\n" % n if n >= 0 else P.INTERNAL_ERROR


def flush_tube(q: Queue, t: Tube, now: int) -> Generator[None, int, int]:
    """Slices deleting the jobs t holds when it starts: ready, delayed,
    buried, and reserved ones whoever holds them (their holders then get
    NOT_FOUND for them; no work time is sampled). Counted as t's deletes
    (its cmd-delete), not as delete commands. The value is how many, or -1
    if the binlog could not record one (that job is gone from memory; a
    restart brings it back). Which jobs: see flush_every."""
    n, outcome = yield from flush_every(q, t, now, count=True)
    return -1 if outcome is NOT_LOGGED else n


def flush_every(q: Queue, t: Tube, now: int,
                count: bool = True) -> Generator[None, int, tuple[int, Outcome]]:
    """flush-tube's slices (count: as t's cmd-delete; the HTTP side's
    flush counts none). The value is (how many, DONE), or it stops at the
    first delete the binlog could not record: (how many before it,
    NOT_LOGGED).

    A tube of more than admin.COPY_MAX jobs is not copied: its jobs are
    found in the job map (ids below the next one at the start, SLICE jobs
    of it a slice), and each is deleted whatever its state by then, so
    none is missed. A smaller one is flushed as follows.

    Which jobs: those with an id below the next one at the start (a job put
    meanwhile stays) found in t's ready, delayed and buried sets at the
    start (copies of the lists, in C: admin.state_keys), among the
    reservations (a walk over every holder's reservations, in slices, if
    t had any), and in those sets again after the walk
    (a job released or timed out before the walk came to it). Each is
    deleted if it is still in the queue, whatever its state by then. Only
    a job that changes state twice while the walk runs (reserved, then
    released and reserved again) can be missed."""
    last = q.ids.next
    stays = lambda j, key: j.tube is not t or j.deadline == HELD  # noqa: E731
    if t.nready + t.ndelayed + len(t.buried) + t.nreserved > admin.COPY_MAX:
        # Too many to copy in one step: found in the job map, a block a
        # slice, whatever their state (none can be missed this way).
        n = 0
        for found in admin.each_block(q, last):
            for i in range(0, len(found), SLICE):
                now = yield
                got, outcome = yield from delete_each(
                    q, [j.id for j in found[i:i + SLICE] if j.tube is t], last, stays, now, count)
                n += got
                if outcome is NOT_LOGGED:
                    return n, outcome
        q.tags.flushed(q, t.name, last)
        return n, DONE
    keys = state_keys(q, t)
    want = t.nreserved
    # (a dict: a job released and reserved again by a holder walked later
    # is found twice)
    held: dict[int, None] = {}
    k = SLICE
    for j in reserving.reservations(q) if want else ():
        if not k:
            now = yield
            k = SLICE
        k -= 1
        if j.tube is t:
            held[j.id] = None
    if want:
        keys += state_keys(q, t)
    n, outcome = yield from delete_each(q, chain(held, keys), last, stays, now, count, k)
    if outcome is NOT_LOGGED:
        return n, outcome
    q.tags.flushed(q, t.name, last)
    return n, DONE

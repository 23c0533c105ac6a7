"""What each command does: the handlers the command table (cmdtable.py)
names, and a put's admission and its body's arrival. Each takes the
engine: its queue, counters and settings."""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import jobmoves, protocol as P, replies as R, reserving
from .job import JOB_OVERHEAD, Job, put_ttr
from .outcome import DONE, DRAINING, IDS_USED_UP, MALFORMED, NO_ROOM, OVER_CAP, TOO_BIG, Outcome
from .protocol import NS, name_ok
from .session import BITBUCKET, BODY, BUSY
from .stats import job_stats, server_stats, tube_stats
from .tagged import Tagged, policy
from .puttags import Tags

if TYPE_CHECKING:
    from typing import Literal

    from .session import EngineState
    from .protocol import Command
    from .job import Tube
    from .session import Session


def c_put(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    _, pri, delay, ttr, size, clean = cmd
    put(e, s, pri, delay, ttr, size, clean, now)


def put(e: EngineState, s: Session, pri: int, delay: int, ttr: int, size: int, clean: bool,
        now: int, tags: Tags | bytes | None = None) -> None:
    """put's command line; its body comes next (finish_put). The checks
    go in the reference's order: the size, the line's tail, then the rest
    of the admission. With tags (--extensions), the job's id waits for
    its body: a duplicate uses none (finish_put's tags' stage)."""
    outcome = admit(e, size, clean)
    if outcome is TOO_BIG:
        _skip_body(s, size, outcome)
        return
    if outcome is MALFORMED:
        s.send(R.PUT[outcome])
        return
    if not s.producer:
        s.producer = True
        e.producer_ct += 1
    if outcome is not DONE:
        _skip_body(s, size, outcome)
        return
    if e.max_memory is not None:
        e.inflight += size + 2 + JOB_OVERHEAD
    # created: the time a read came in up to STAMP (131 µs) before
    # (e.stamp), where `now` is a nanosecond more per command before
    # it (engine.py): the puts of one read, and of every read in that
    # time, share one int (32 bytes a job less).
    # The id from the queue's ids (jobids.py: the one place they are
    # handed out), or with tags none yet (0).
    id_ = e.q.ids.take() if tags is None else 0
    s.in_job = Job(id_, s.use, pri, delay, put_ttr(ttr), b"", e.stamp)
    s.in_tags = tags
    s.state = BODY
    s.need = size + 2


def _skip_body(s: Session, size: int, outcome: Outcome) -> None:
    """As the reference when it refuses a put at its line: the body is
    read and dropped, then the reply goes out; no id is used up."""
    s.state = BITBUCKET
    s.need = size + 2
    s.skip_reply = R.PUT[outcome]


def admit(e: EngineState, size: int, clean: bool = True, whole: bool = False) -> Outcome:
    """May a put of a `size`-byte body (CRLF not counted) be taken? DONE,
    or why not, in the reference's order: TOO_BIG; MALFORMED (`clean`:
    False for junk after the size on the command line); IDS_USED_UP;
    OVER_CAP. The protocol asks at the command line, and store_put
    checks the rest once the body is in. `whole`: the body is here
    already (the HTTP side): DRAINING is checked now, before an id is
    used up."""
    if size > e.max_job_size:
        return TOO_BIG
    if not clean:
        return MALFORMED
    q = e.q
    if whole and e.draining:
        return DRAINING
    if q.ids.used_up():
        _ids_used_up(e)
        return IDS_USED_UP
    cap = e.max_memory
    if cap is not None:
        # (the bodies in flight count: puts received together cannot pass the cap)
        over = q.memory_used() + e.inflight + size + 2 + JOB_OVERHEAD > cap
        if over is not e.at_cap:
            e.cap_crossed(over)
        if over:
            return OVER_CAP
    return DONE


def _ids_used_up(e: EngineState) -> None:
    """Every job id up to 2**64 - 1 has been used (a binlog can hold such
    an id): puts are refused, as a put that cannot be logged is. The
    reference wraps to 0, and a record of id 0 reads as the end of its
    binlog file, which loses the jobs after it at the next start. On a
    cluster's leader, until etcd gives it more ids (etcd slow): said
    once each time, the leader clears the flag when it has ids again
    (cluster/ids.py)."""
    if not e.said_ids_used_up:
        e.said_ids_used_up = True
        e.log("put refused: job ids are used up (the last is %d)" % e.q.ids.last)


def store_put(e: EngineState, j: Job, body: bytes, now: int, tags: Tags | None = None) -> Outcome:
    """An admitted put's job, its body in (CRLF included): DONE, stored
    and its record written; DRAINING; or NO_ROOM, the binlog has no room
    (the id stays used). tags: its tags, from the tags' stage."""
    if e.draining:
        return DRAINING
    j.body = body
    store = e.q.store
    if store.keeps and not store.reserve_put(j):
        return NO_ROOM
    e.q.insert(j, now, True, tags)
    return DONE


def finish_put(e: EngineState, s: Session, body: bytes, now: int) -> None:
    """A put's body is in: admitted at its line, its id taken (at its line,
    or here after the tags' stage), stored, inserted."""
    j: Job  # put() set s.in_job for the BODY state that led here
    j, s.in_job = s.in_job, None  # type: ignore[assignment]
    given, s.in_tags = s.in_tags, None
    if e.max_memory is not None:
        e.inflight -= len(body) + JOB_OVERHEAD
    if body[-1] != 10 or body[-2] != 13:  # (its CRLF, read in place: a slice is a copy)
        s.send(P.EXPECTED_CRLF)
        return
    staged: Tags | None = None
    tags: Tags | None = None
    p: Tagged | None = None
    if given is not None:
        # Tags come only with --extensions, whose queue has the Tagged
        # policy: asked once here (a check of its type), for the stage
        # and for a put dropped after it. (Passing it down from the
        # engine instead would put a parameter on every put's body.)
        p = policy(e.q)
        staged = _tags_stage(e, s, p, j, given, now)
        if staged is None:
            return
        if not isinstance(given, bytes):
            # (a key alone, which the stage claimed, leaves nothing for the
            # insert to register: not asking the policy, a new-key put
            # 12,077 -> 12,008 instructions, compiled)
            tags = staged
    if e.verbose >= 2:
        e.log("<%d job %d" % (s.fd, j.id))
    outcome = store_put(e, j, body, now, tags)
    if outcome is DONE:
        s.send(b"INSERTED %d\r\n" % j.id)
        return
    if p is not None and staged is not None:
        p.keys.dropped(e.q, j, staged)
    s.send(R.PUT[outcome])


def _tags_stage(e: EngineState, s: Session, p: Tagged, j: Job, given: Tags | bytes,
                now: int) -> Tags | None:
    """A tagged put's tags, before its id (in tuber's order): None if it
    was answered here (DRAINING; a duplicate, which uses no id; no ids
    left); else j has its id and its idp: key, and the tags' state the
    tags returned (a put dropped after this lets them go: finish_put).
    given: bytes for a put whose one tag is idp:KEY (the engine's fast
    path, putlines.py)."""
    tags: Tags = Tags(given) if isinstance(given, bytes) else given
    if e.draining:
        s.send(P.DRAINING)
        return None
    q = e.q
    if tags.idp is not None:
        dup = p.keys.claim(q, j, tags.idp, now)
        if dup is not None:
            id_, word, lowered = dup
            s.send(b"INSERTED %d %s\r\n" % (id_, word) if lowered is None
                   else b"INSERTED %d %s %d\r\n" % (id_, word, lowered))
            return None
    id_ = j.id = q.ids.take()
    if not id_:
        p.keys.dropped(q, j, tags)
        _ids_used_up(e)
        s.send(R.PUT[IDS_USED_UP])
        return None
    j.tags = tags  # (before the binlog's room is asked: it holds them too)
    p.ext.tagged += 1
    return tags


def _found(e: EngineState, s: Session, j: Job | None) -> None:
    if j is None:
        s.send(P.NOT_FOUND)
    else:
        s.send_job(b"FOUND", j)


def c_peek(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    _found(e, s, e.q.jobs.get(cmd[1]))


def c_peek_ready(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    q = e.q
    _found(e, s, q.tags.peek_ready(q, s.use, q.ready_top(s.use)))  # (hidden ones too: tuber's)


def c_peek_delayed(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    _found(e, s, e.q.delayed_top(s.use))


def c_peek_buried(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    _found(e, s, e.q.buried_top(s.use))


def worker(e: EngineState, s: Session) -> None:
    if not s.worker:
        s.worker = True
        e.worker_ct += 1


def reserve(e: EngineState, s: Session, timeout: int | None, now: int) -> None:
    """reserve and reserve-with-timeout (timeout in ns; the engine's fast
    path calls this too). A peer that half-closed gets TIMED_OUT at once
    rather than a wait (Engine.eof)."""
    # (asked here first: interpreted, calling worker() each reserve cost
    # about 390 instructions; compiled, the test costs 5 more a command of rd)
    if not s.worker:
        worker(e, s)
    reserving.reserve(e.q, s, timeout, now)
    if s.waiting and s.hup:
        reserving.hangup(e.q, s)


def c_reserve(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    reserve(e, s, None, now)


def c_reserve_timeout(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    reserve(e, s, cmd[1] * NS, now)


def c_reserve_job(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    outcome = reserving.reserve_job(e.q, s, cmd[1], now)
    if outcome is not DONE:
        s.send(R.RESERVE_JOB[outcome])
        return
    worker(e, s)


def c_delete(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    delete(e, s, cmd[1], now)


def delete(e: EngineState, s: Session, id_: int, now: int) -> None:
    """(the engine's fast path calls this too)"""
    s.send(R.DELETE[e.q.delete(s, id_, now)])


def c_release(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    _, id_, pri, delay = cmd
    release(e, s, id_, pri, delay, now)


def release(e: EngineState, s: Session, id_: int, pri: int, delay: int, now: int) -> None:
    """delay in ns (the engine's fast path calls this too)"""
    s.send(R.RELEASE[jobmoves.release(e.q, s, id_, pri, delay, now)])


def c_bury(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    s.send(R.BURY[jobmoves.bury(e.q, s, cmd[1], cmd[2], now)])


def c_kick(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    if not e.q.slices.spawn(e.in_slices(s, jobmoves.kick(e.q, s.use, cmd[1], now), _kicked)):
        s.state = BUSY


def c_kick_job(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    s.send(R.KICK_JOB[jobmoves.kick_job(e.q, cmd[1], now)])


def c_touch(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    touch(e, s, cmd[1], now)


def touch(e: EngineState, s: Session, id_: int, now: int) -> None:
    """(the engine's fast path calls this too)"""
    s.send(R.TOUCH[jobmoves.touch(e.q, s, id_, now)])


def c_stats(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    s.send(P.yaml_reply(server_stats(e.q, e.counts, e)))


def c_stats_job(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    j = e.q.jobs.get(cmd[1])
    s.send(P.NOT_FOUND if j is None else P.yaml_reply(job_stats(j, now, e.q.tags.job_extra(e.q, j))))


def c_stats_tube(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    t = e.q.tubes.get(cmd[1])
    s.send(P.NOT_FOUND if t is None else P.yaml_reply(tube_stats(t, now)))


def c_list_tubes(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    s.send(P.yaml_list(t.name for t in e.q.tubes.made))


def c_list_tube_used(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    s.send(b"USING %s\r\n" % s.use.name)


def c_list_tubes_watched(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    s.send(P.yaml_list(t.name for t in s.watch))


def c_use(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    reserving.use(e.q, s, cmd[1])
    s.send(b"USING %s\r\n" % s.use.name)


def c_watch(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    s.send(b"WATCHING %d\r\n" % reserving.watch(e.q, s, cmd[1]))


def c_ignore(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    n = reserving.ignore(e.q, s, cmd[1])
    s.send(P.NOT_IGNORED if n is None else b"WATCHING %d\r\n" % n)


def c_quit(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    s.closing = True


def c_pause_tube(e: EngineState, s: Session, cmd: Command, now: int) -> None:
    _, name, delay = cmd
    t: Tube | Literal[False] | None = e.q.tubes.get(name) if name_ok(name) else False
    if t is False:
        s.send(P.BAD_FORMAT)  # counted already: the reference checks the name late
    elif t is None:
        s.send(P.NOT_FOUND)
    else:
        reserving.pause_tube(e.q, t, delay, now)
        s.send(P.PAUSED)


def reauth(e: EngineState, s: Session, token: bytes) -> None:
    """`auth` again on an authenticated connection (beanstalkd-rs): the
    right token changes nothing, a wrong one closes the connection."""
    assert e.auth is not None  # (command() calls this only with --auth-tokens)
    if e.auth.verify(token):
        s.send(b"AUTHENTICATED\r\n")
    else:
        s.send(b"UNAUTHORIZED\r\n")
        s.closing = True


def _kicked(n: int) -> bytes:
    return b"KICKED %d\r\n" % n

"""The YAML bodies of stats, stats-tube and stats-job, byte for byte as 1.13.

Key order follows the reference's code, not protocol.txt. Only the string
values (version, hostname, os, platform, name, tube) are double-quoted.
Each is built from a list of (key, value) fields, which ops/ also reads
(JSON, metrics), so that every view shows the same values.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

from .protocol import NS
from .job import DELAYED, RESERVED, STATE_NAMES, counters
from .tags import HELD_MIN

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .session import Calls, EngineState
    from .job import Job, Tube
    from .queue import Queue


def _secs(ns: int) -> int:
    """Nanoseconds to whole seconds, truncated toward zero as C does."""
    return ns // NS if ns >= 0 else -((-ns) // NS)


# A bytes, which ops/ reads as any other value's (JSON, metrics): compiled,
# an ordinary (non-native) class.
@mypyc_attr(native_class=False)
class Quoted(bytes):
    """A string value, double-quoted in the YAML."""


def yaml(fields: Iterable[tuple[bytes, object]]) -> bytes:
    """The YAML body of (key, value) fields: ints, bools, Quoted or raw bytes."""
    out = [b"---\n"]
    for k, v in fields:
        if v is True or v is False:
            out.append(b"%s: %s\n" % (k, b"true" if v else b"false"))
        elif type(v) is int:
            out.append(b"%s: %d\n" % (k, v))
        elif type(v) is Quoted:
            out.append(b'%s: "%s"\n' % (k, v))
        else:
            out.append(b"%s: %s\n" % (k, v))
    return b"".join(out)


def server_fields(q: Queue, counts: Calls, s: EngineState) -> list[tuple[bytes, object]]:
    """`stats` as (key, value) pairs; `s` is the engine: connection counts,
    identity, and the clock. rusage values are raw bytes like b"0.012000"."""
    fields: list[tuple[bytes, object]] = [
        (b"current-jobs-urgent", q.urgent_ct),
        (b"current-jobs-ready", q.ready_ct),
        (b"current-jobs-reserved", q.reserved_ct),
        (b"current-jobs-delayed", q.delayed_ct),
        (b"current-jobs-buried", q.buried_ct),
    ]
    fields += [(b"cmd-" + k.encode(), counts[k]) for k in counts.shown]
    utime, stime = s.rusage()
    wal = s.wal_stats()
    fields += [
        (b"job-timeouts", q.timeouts_ct),
        (b"total-jobs", q.total_jobs),
        (b"max-job-size", s.max_job_size),
        (b"current-tubes", len(q.tubes)),
        (b"current-connections", s.conn_ct),
        (b"current-producers", s.producer_ct),
        (b"current-workers", s.worker_ct),
        (b"current-waiting", q.waiting_ct),
        (b"total-connections", s.total_conn_ct & 0xFFFFFFFF),
        (b"pid", s.host.pid),
        (b"version", Quoted(s.version)),
        (b"rusage-utime", utime),
        (b"rusage-stime", stime),
        (b"uptime", s.uptime()),
        (b"binlog-oldest-index", wal[0]),
        (b"binlog-current-index", wal[1]),
        (b"binlog-records-migrated", wal[2]),
        (b"binlog-records-written", wal[3]),
        (b"binlog-max-size", wal[4]),
        *([(b"current-concurrency-keys", q.ext.concurrency_keys())] if q.ext is not None else []),
        # --bodies-on-disk: the stored jobs' bodies, CRLFs included, left
        # in the binlog's files and kept in RAM
        *([(b"body-bytes-on-disk", q.store.on_disk),
           (b"body-bytes-in-ram", q.body_bytes - q.store.on_disk)] if s.bodies_on_disk else []),
        (b"draining", bool(s.draining)),
        (b"id", s.host.instance_id),
        (b"hostname", Quoted(s.host.hostname)),
        (b"os", Quoted(s.host.os)),
        (b"platform", Quoted(s.host.platform)),
    ]
    return fields


def server_stats(q: Queue, counts: Calls, s: EngineState) -> bytes:
    return yaml(server_fields(q, counts, s))


def tube_fields(t: Tube, now: int) -> list[tuple[bytes, object]]:
    paused = t.unpause_at > now
    return [
        (b"name", Quoted(t.name)),
        (b"current-jobs-urgent", t.urgent),
        (b"current-jobs-ready", t.nready),
        (b"current-jobs-reserved", t.nreserved),
        (b"current-jobs-delayed", t.ndelayed),
        (b"current-jobs-buried", len(t.buried)),
        (b"total-jobs", t.total_jobs),
        (b"current-using", t.using),
        (b"current-watching", t.watching),
        (b"current-waiting", len(t.waiting)),
        (b"cmd-delete", t.cmd_delete),
        (b"cmd-pause-tube", t.cmd_pause),
        (b"pause", _secs(t.pause) if paused else 0),
        (b"pause-time-left", _secs(t.unpause_at - now) if paused else 0),
    ]


def tube_stats(t: Tube, now: int) -> bytes:
    return yaml(tube_fields(t, now))


def job_fields(j: Job, now: int, extra: Iterable[tuple[bytes, object]] = ()
               ) -> list[tuple[bytes, object]]:
    """stats-job's fields, then `extra` (TagPolicy.job_extra: --max-tries's,
    --extensions' tags). A held aft: job (tags.py) has no time left."""
    left = (_secs(j.deadline - now) if j.state in (RESERVED, DELAYED) and j.deadline < HELD_MIN
            else 0)
    reserves, timeouts, releases, buries, kicks = counters(j)
    return [
        (b"id", j.id),
        (b"tube", Quoted(j.tube.name)),
        (b"state", STATE_NAMES[j.state]),
        (b"pri", j.pri),
        (b"age", _secs(now - j.created)),
        (b"delay", _secs(j.delay)),
        (b"ttr", _secs(j.ttr)),
        (b"time-left", left),
        (b"file", j.file.seq if j.file is not None else 0),
        (b"reserves", reserves),
        (b"timeouts", timeouts),
        (b"releases", releases),
        (b"buries", buries),
        (b"kicks", kicks),
        *extra,
    ]


def job_stats(j: Job, now: int, extra: Iterable[tuple[bytes, object]] = ()) -> bytes:
    return yaml(job_fields(j, now, extra))

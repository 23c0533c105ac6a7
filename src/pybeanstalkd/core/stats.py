"""The YAML bodies of stats, stats-tube and stats-job, byte for byte as 1.13.

Key order follows the reference's code, not protocol.txt. Only the string
values (version, hostname, os, platform, name, tube) are double-quoted.
"""
from __future__ import annotations

from .protocol import NS
from .job import DELAYED, RESERVED, STATE_NAMES, counters

# The cmd-* keys of `stats`, in order; the op names are the parser's.
CMD_KEYS = (
    "put", "peek", "peek-ready", "peek-delayed", "peek-buried", "reserve",
    "reserve-with-timeout", "delete", "release", "use", "watch", "ignore", "bury",
    "kick", "touch", "stats", "stats-job", "stats-tube", "list-tubes",
    "list-tube-used", "list-tubes-watched", "pause-tube",
)


def _secs(ns: int) -> int:
    """Nanoseconds to whole seconds, truncated toward zero as C does."""
    return ns // NS if ns >= 0 else -((-ns) // NS)


def server_stats(q, counts: dict, s) -> bytes:
    """`s` is the engine: connection counts, identity, and the clock."""
    lines = [
        b"---\n",
        b"current-jobs-urgent: %d\n" % q.urgent_ct,
        b"current-jobs-ready: %d\n" % q.ready_ct,
        b"current-jobs-reserved: %d\n" % q.reserved_ct,
        b"current-jobs-delayed: %d\n" % q.delayed_ct,
        b"current-jobs-buried: %d\n" % q.buried_ct,
    ]
    lines += [b"cmd-%s: %d\n" % (k.encode(), counts[k]) for k in CMD_KEYS]
    utime, stime = s.rusage()
    wal = s.wal_stats()
    lines += [
        b"job-timeouts: %d\n" % q.timeouts_ct,
        b"total-jobs: %d\n" % q.total_jobs,
        b"max-job-size: %d\n" % s.max_job_size,
        b"current-tubes: %d\n" % len(q.tubes),
        b"current-connections: %d\n" % s.conn_ct,
        b"current-producers: %d\n" % s.producer_ct,
        b"current-workers: %d\n" % s.worker_ct,
        b"current-waiting: %d\n" % q.waiting_ct,
        b"total-connections: %d\n" % (s.total_conn_ct & 0xFFFFFFFF),
        b"pid: %d\n" % s.pid,
        b'version: "%s"\n' % s.version,
        b"rusage-utime: %s\n" % utime,
        b"rusage-stime: %s\n" % stime,
        b"uptime: %d\n" % s.uptime(),
        b"binlog-oldest-index: %d\n" % wal[0],
        b"binlog-current-index: %d\n" % wal[1],
        b"binlog-records-migrated: %d\n" % wal[2],
        b"binlog-records-written: %d\n" % wal[3],
        b"binlog-max-size: %d\n" % wal[4],
        b"draining: %s\n" % (b"true" if s.draining else b"false"),
        b"id: %s\n" % s.instance_id,
        b'hostname: "%s"\n' % s.hostname,
        b'os: "%s"\n' % s.os,
        b'platform: "%s"\n' % s.platform,
    ]
    return b"".join(lines)


def tube_stats(t, now: int) -> bytes:
    paused = t.pause and t.unpause_at > now
    return b"".join((
        b'---\nname: "%s"\n' % t.name,
        b"current-jobs-urgent: %d\n" % t.urgent,
        b"current-jobs-ready: %d\n" % t.nready,
        b"current-jobs-reserved: %d\n" % t.nreserved,
        b"current-jobs-delayed: %d\n" % t.ndelayed,
        b"current-jobs-buried: %d\n" % len(t.buried),
        b"total-jobs: %d\n" % t.total_jobs,
        b"current-using: %d\n" % t.using,
        b"current-watching: %d\n" % t.watching,
        b"current-waiting: %d\n" % len(t.waiting),
        b"cmd-delete: %d\n" % t.cmd_delete,
        b"cmd-pause-tube: %d\n" % t.cmd_pause,
        b"pause: %d\n" % (_secs(t.pause) if paused else 0),
        b"pause-time-left: %d\n" % (_secs(t.unpause_at - now) if paused else 0),
    ))


def job_stats(j, now: int) -> bytes:
    left = _secs(j.deadline - now) if j.state in (RESERVED, DELAYED) else 0
    return b"".join((
        b"---\nid: %d\n" % j.id,
        b'tube: "%s"\n' % j.tube.name,
        b"state: %s\n" % STATE_NAMES[j.state],
        b"pri: %d\n" % j.pri,
        b"age: %d\n" % _secs(now - j.created),
        b"delay: %d\n" % _secs(j.delay),
        b"ttr: %d\n" % _secs(j.ttr),
        b"time-left: %d\n" % left,
        b"file: %d\n" % (j.file.seq if j.file is not None else 0),
        b"reserves: %d\ntimeouts: %d\nreleases: %d\nburies: %d\nkicks: %d\n" % counters(j),
    ))

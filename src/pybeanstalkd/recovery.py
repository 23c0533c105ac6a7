"""Startup with -b: lock the directory, read every binlog file, replay the jobs.

As the reference: files are read from the lowest number to the highest; a
record for a known job replaces its fields; a short record for an unknown job
is ignored (its full record was in a deleted file); Reserved reads as Ready;
Invalid removes the job. Errors name the file and offset, and the server
starts anyway with what it could read. A new file is always started.

Unlike the reference, buried jobs come back in their bury order and their
`buries` count is not incremented (beanstalkd #668).
"""
from __future__ import annotations

import fcntl
import os
import time

from . import walfile as F
from .queue import BURIED, DELAYED, Job
from .wal import SHORT, File, Wal


class RecoveryError(Exception):
    """The binlog cannot be used at all; the message says why."""


def lock_dir(dirname: str):
    path = os.path.join(dirname, "lock")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise RecoveryError(f"walg.c:426 in waldirlock: open: {e.strerror}",
                            f"serv.c:24 in srv_acquire_wal: failed to lock wal dir {dirname}")
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        raise RecoveryError(f"walg.c:426 in waldirlock: fcntl: {e.strerror}",
                            f"serv.c:24 in srv_acquire_wal: failed to lock wal dir {dirname}")
    return fd  # kept open for the life of the process: the lock is never released


def scan(dirname: str) -> list[int]:
    seqs = []
    for name in os.listdir(dirname):
        if name.startswith("binlog.") and name[7:].isdigit() and name[7:].isascii():
            seqs.append(int(name[7:]))
    return sorted(seqs)


def recover(wal: Wal, q, max_job_size: int, now: int, warn) -> int:
    """Load the binlog into queue q; returns the number of jobs recovered."""
    seqs = scan(wal.dir)
    jobs: dict[int, Job] = {}  # in order of first appearance
    q.loading = {}
    err = False
    ids = [0]  # the largest id with a full record: ids are not reused
    wall_offset = time.time_ns() - now
    if seqs:
        wal.next_seq = seqs[-1] + 1
        present = set(seqs)
        for seq in range(seqs[0], seqs[-1] + 1):
            path = wal._path(seq)
            if seq not in present:
                warn(f"open {path}: No such file or directory")
                continue
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
            except OSError as e:
                warn(f"open {path}: {e.strerror}")
                err = True
                continue
            version = F.version_of(data, path, warn)
            if version is None:
                # Not a binlog we can read: leave it in place, never delete it.
                warn(f"{path}: skipped, left in place")
                err = True
                continue
            f = File(seq, path)
            f.refs = 1  # held while reading
            wal._add(f)
            gen = F.read_records(data, version, max_job_size, path, warn, ids)
            try:
                while True:
                    if not _apply(next(gen), f, jobs, q, wal, wall_offset, warn):
                        err = True
                        break
            except StopIteration as stop:
                if stop.value is False:
                    err = True
            wal._decref(f)
    if err:
        warn("Errors reading one or more WAL files.")
        warn("Continuing. You may be missing data.")
    if not wal._make_next():
        raise RecoveryError("makenextfile: cannot create the next binlog file")
    wal.cur = wal.tail
    q.next_id = max(q.next_id, ids[0] + 1)
    _replay(jobs, q, wal, now, wall_offset)
    return len(jobs)


def _apply(r, f: File, jobs: dict, q, wal: Wal, wall_offset: int, warn) -> bool:
    j = jobs.get(r.id)
    if j is None and not r.name:
        return True  # a short record whose job was deleted or moved
    state = r.state
    if state == F.INVALID:
        if j is not None:
            _forget(j, jobs, q, wal)
        return True
    if state == F.RESERVED:
        state = F.READY
    if j is None:
        t = q.tube(r.name)
        j = Job(r.id, t, r.pri, r.delay, r.ttr, r.body, 0)
        jobs[r.id] = j
        q.loading[t] = q.loading.get(t, 0) + 1
    elif r.name and len(r.body) != len(j.body):
        warn(f"{f.path}:{r.offset}: job {r.id} size changed")
        warn(f"{f.path}:{r.offset}: was {len(j.body)}, now {len(r.body)}")
        _forget(j, jobs, q, wal)
        return False
    j.pri, j.delay, j.ttr = r.pri, r.delay, r.ttr
    j.created = r.created - wall_offset
    j.deadline = r.deadline  # wall clock until replay
    j.reserves, j.timeouts, j.releases = r.reserves, r.timeouts, r.releases
    j.buries, j.kicks, j.state = r.buries, r.kicks, state
    j.bury_pos = r.bury_pos if r.bury_pos is not None else (f.seq << 32 | r.offset)
    if r.name:
        j.body = r.body
        wal._drop(j)
        j.file = f
        f.jobs[j.id] = j
        f.refs += 1
        j.used = F.full_size(r.name, len(r.body))
        wal.alive += j.used
    return True


def _forget(j: Job, jobs: dict, q, wal: Wal):
    del jobs[j.id]
    wal._drop(j)
    t = j.tube
    q.loading[t] -= 1
    q.maybe_free(t)


def _replay(jobs: dict, q, wal: Wal, now: int, wall_offset: int):
    buried = []
    for j in jobs.values():
        n = wal.reserve(SHORT)  # room for each job's future delete
        if not n:
            raise RecoveryError("failed to replay log: cannot reserve binlog space")
        j.resv += n
        q.jobs[j.id] = j
        if j.id >= q.next_id:
            q.next_id = j.id + 1
        if j.state == BURIED:
            buried.append(j)
        elif j.state == DELAYED and j.deadline - wall_offset > now:
            q._make_delayed(j, j.deadline - wall_offset - now, now)
        else:
            q._make_ready(j, now)
    buried.sort(key=lambda j: j.bury_pos)
    for j in buried:
        q._bury(j)
    q.loading = None

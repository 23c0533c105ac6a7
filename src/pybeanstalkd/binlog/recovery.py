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
import gc
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from . import format as F
from .ext import Codec, Recovered, is_ours
from ..core.job import Job, OnDisk, pack_counters, times
from .bodies import DiskWal
from .files import SHORT, File, Wal

if TYPE_CHECKING:
    from ..core.queue import Queue
    from ..core.tube import Tube


class RecoveryError(Exception):
    """The binlog cannot be used at all; the message says why."""


def lock_dir(dirname: str) -> int:
    path = os.path.join(dirname, "lock")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise RecoveryError(f"walg.c:426 in waldirlock: open: {e.strerror}",
                            f"serv.c:24 in srv_acquire_wal: failed to lock wal dir {dirname}") from e
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        raise RecoveryError(f"walg.c:426 in waldirlock: fcntl: {e.strerror}",
                            f"serv.c:24 in srv_acquire_wal: failed to lock wal dir {dirname}") from e
    return fd  # kept open for the life of the process: the lock is never released


def scan(dirname: str) -> list[int]:
    seqs = []
    for name in os.listdir(dirname):
        if name.startswith("binlog.") and name[7:].isdigit() and name[7:].isascii():
            seqs.append(int(name[7:]))
    return sorted(seqs)


def recover(wal: Wal, q: Queue, max_job_size: int, now: int, warn: F.Warn) -> int:
    """Load the binlog into queue q; returns the number of jobs recovered."""
    gc.disable()  # a million long-lived objects: collections would only cost
    try:
        return _recover(wal, q, max_job_size, now, warn)
    finally:
        gc.enable()
        gc.freeze()  # and later collections need not scan them


def _recover(wal: Wal, q: Queue, max_job_size: int, now: int, warn: F.Warn) -> int:
    seqs = scan(wal.dir)
    jobs: dict[int, Job] = {}  # in order of first appearance
    loading: dict[Tube, int] = {}
    q.loading = loading
    err = False
    wall_offset = time.time_ns() - now
    reader = None
    if q.ext is not None:  # --extensions: the put tags' records too (ext.py)
        reader = Recovered(wal, q.ext, warn)
        wal.ext = Codec(q.ext)
    st = [0, True]  # the largest id with a full record (ids are not reused); ok
    # --bodies-on-disk: bodies this size or more stay in the files (bodies.py)
    ram_min = wal.ram_min if isinstance(wal, DiskWal) else None
    # A file all of whose jobs a later file holds is let go as it is read,
    # but unlinked only once the files after it are on disk (below): after
    # a kill -9 their writes may still be in the page cache alone, and a
    # power loss then would find a moved job in neither file.
    wal.synced = wal.written = -1
    if seqs:
        wal.next_seq = seqs[-1] + 1
        present = set(seqs)
        for seq in range(seqs[0], seqs[-1] + 1):
            path = wal.path_of(seq)
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
            wal.add_file(f)
            st[1] = True
            records = F.read_records(data, version, max_job_size, path, warn, st, ram_min)
            if (not _load_file(records, f, jobs, q, loading, wal, wall_offset, warn, reader)
                    or not st[1]):
                err = True
            wal.decref(f)
    if err:
        warn("Errors reading one or more WAL files.")
        warn("Continuing. You may be missing data.")
    if wal.retired.doomed and wal.wantsync and not _sync_files(wal, warn):
        wal.retired.doomed.clear()  # (kept on disk: read again at the next start)
    wal.synced = wal.written = 0
    wal.synced_to(0)  # (the files let go while reading)
    if not wal.make_next():
        raise RecoveryError("makenextfile: cannot create the next binlog file")
    wal.cur = wal.tail
    q.ids.seen(st[0])
    _reserve_deletes(jobs, wal)
    if isinstance(wal, DiskWal):  # (what recovery's drops took off it meanwhile: recounted)
        on_disk = 0
        for j in jobs.values():
            body: bytes | OnDisk = j.body
            if body.__class__ is OnDisk:
                on_disk += len(body)
        wal.bodies.on_disk = on_disk
    q.loading = None
    if reader is not None:
        reader.install(q, jobs.__contains__, wall_offset, now)  # type: ignore[arg-type]
    q.load(jobs.values(), now, wall_offset)
    wal.find = q.jobs.get if reader is None else q.find_record  # type: ignore[attr-defined]
    return len(jobs)


def _sync_files(wal: Wal, warn: F.Warn) -> bool:
    """fdatasync every file recovery keeps, and the directory; False (and
    said) if one failed."""
    paths = []
    f: File | None = wal.head
    while f is not None:
        paths.append(f.path)
        f = f.next
    try:
        for path in paths:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        fd = os.open(wal.dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        warn(f"fsync at start-up: {e}; files whose jobs later files hold are kept")
        return False
    return True


def _load_file(records: Iterable[F.Record], f: File, jobs: dict[int, Job], q: Queue,
               loading: dict[Tube, int], wal: Wal, wall_offset: int, warn: F.Warn,
               reader: Recovered | None = None) -> bool:
    """Load one file's records; False if one was bad. loading is q.loading."""
    tubes, fids = q.tubes, f.ids
    alive = 0
    last_created = -1
    fixed = F.full_size(b"", 0)  # a full record's bytes besides name and body
    for off, name, r, body in records:
        id_ = r[0]
        j = jobs.get(id_)
        # (body is not None: a full record, its name not empty)
        if j is None and body is not None and r[14] != F.INVALID:
            # The common case, kept fast: a new job's full record.
            t = tubes.get(name) or q.tube(name)
            created = r[7] - wall_offset
            if created == last_created:
                created = last_created  # (one int for the jobs of one read: 32 bytes each)
            last_created = created
            j = jobs[id_] = Job(id_, t, r[1], r[3], r[4], body, created)
            j.counts = _counts(r)
            j.file = f
            state = r[14]
            if state == F.BURIED:
                j.state, j.deadline = state, F.bury_pos(r, f.seq, off)
            else:
                j.state, j.deadline = (F.READY if state == F.RESERVED else state), r[8]
            alive += fixed + len(name) + len(body)
            fids.append(id_)
            f.refs += 1
            loading[t] = loading.get(t, 0) + 1
        elif j is None and reader is not None and is_ours(r):
            reader.take(r, f, lambda i: (jobs[i].tube.name if i in jobs else None))
        elif not _apply(off, name, r, body, j, f, jobs, q, wal, wall_offset, warn):
            wal.alive += alive
            return False
    wal.alive += alive
    return True


def _counts(r: F.Jobrec) -> int:
    # r[9:14]: reserve, timeout, release, bury and kick counts
    return pack_counters(*r[9:14]) if r[9] or r[10] or r[11] or r[12] or r[13] else 0


def _set_fields(j: Job, r: F.Jobrec, f: File, off: int) -> None:
    j.deadline = r[8]  # wall clock until the queue loads it
    j.counts = _counts(r)
    state = r[14]
    j.state = F.READY if state == F.RESERVED else state
    if state == F.BURIED:
        j.deadline = F.bury_pos(r, f.seq, off)


def _apply(off: int, name: bytes, r: F.Jobrec, body: bytes | OnDisk | None, j: Job | None,
           f: File, jobs: dict[int, Job], q: Queue, wal: Wal, wall_offset: int,
           warn: F.Warn) -> bool:
    """Any other record: a short one, or one for a job already seen."""
    if j is None:
        return True  # a short record whose job was deleted or moved
    if r[14] == F.INVALID:
        _forget(j, jobs, q, wal)
        return True
    if body is not None and len(body) != len(j.body):  # (a full record)
        warn(f"{f.path}:{off}: job {j.id} size changed")
        warn(f"{f.path}:{off}: was {len(j.body)}, now {len(body)}")
        _forget(j, jobs, q, wal)
        return False
    j.pri, j.times, j.created = r[1], times(r[3], r[4]), r[7] - wall_offset
    _set_fields(j, r, f, off)
    if body is not None:
        j.body = body
        wal.drop(j)
        j.file = f
        f.ids.append(j.id)
        f.refs += 1
        wal.alive += F.full_size(name, len(body))
    return True


def _forget(j: Job, jobs: dict[int, Job], q: Queue, wal: Wal) -> None:
    del jobs[j.id]
    wal.drop(j)
    t = j.tube
    # q.loading is _recover's dict while recovery runs: not None here (left
    # unchecked, as it was, once per deleted job)
    q.loading[t] -= 1  # type: ignore[index]
    q.maybe_free(t)


def _reserve_deletes(jobs: dict[int, Job], wal: Wal) -> None:
    """Room for every job's future delete, in bulk while the current file has it."""
    bulk = min(len(jobs), wal.cur.free // SHORT)
    if bulk:
        wal.reserve(bulk * SHORT)  # fits the current file: reserve's fast path
    for _ in range(len(jobs) - bulk):
        if not wal.reserve(SHORT):
            raise RecoveryError("prot.c:2323 in prot_replay: failed to reserve space",
                                "serv.c:33 in srv_acquire_wal: failed to replay log")

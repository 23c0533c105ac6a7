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
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import format as F
from .apply import apply
from .ext import Reader, Recovered
from ..core import loading, replica
from ..core.job import Job, OnDisk
from ..core.tags import EXT_ID
from .file import File
from .files import SHORT, Wal

if TYPE_CHECKING:
    from ..core.queue import Queue
    from ..core.job import Tube
    from ..core.puttags import Tags


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


def recover(wal: Wal, q: Queue, max_job_size: int, now: int, warn: F.Warn,
            wall_ns: int | None = None) -> int:
    """Load the binlog into queue q; returns the number of jobs recovered.
    now: the queue's (monotonic) clock; wall_ns: the wall clock at the same
    moment (None: read it). The records' times are wall ns: wall_ns - now
    turns them into the queue's, and the Wal writes with it from then on."""
    gc.disable()  # a million long-lived objects: collections would only cost
    try:
        wall = time.time_ns() if wall_ns is None else wall_ns
        return _recover(wal, q, max_job_size, now, warn, wall - now)
    finally:
        gc.enable()
        gc.freeze()  # and later collections need not scan them


def _recover(wal: Wal, q: Queue, max_job_size: int, now: int, warn: F.Warn,
             wall_offset: int) -> int:
    seqs = scan(wal.dir)
    jobs: dict[int, Job] = {}  # in order of first appearance
    err = False
    wal.wall_offset = wall_offset
    # (the Wal's codec writes q's tags, or none if q has none: ValueError if not)
    find = wal.codec.finder(q)
    reader = None
    if q.ext is not None:  # --extensions: the put tags' records too (ext.py)
        reader = Recovered(wal)
    to = Loader(q, wal, jobs, wall_offset, warn, reader)
    st = [0, True]  # the largest id with a full record (ids are not reused); ok
    # --bodies-on-disk: bodies this size or more stay in the files (bodies.py)
    ram_min = wal.bodies.ram_min
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
            to.file = f
            for r in F.read_records(data, version, max_job_size, path, warn, st, ram_min):
                if not apply(to, r):
                    err = True
                    break
            if not st[1]:
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
    # With --extensions, ids from EXT_ID on name records of ours: a job's
    # record with one was damaged or forged, and skipped (Loader.put); its
    # id is not one to go on from (past the ids' bound: every put would fail)
    q.ids.seen(st[0] if reader is None or st[0] < EXT_ID else to.top)
    _reserve_deletes(jobs, wal)
    wal.bodies.recovered(jobs.values())
    q.loading = None
    if reader is not None:
        reader.install(q, wall_offset, now)
    loading.load(q, jobs.values(), now, wall_offset)
    wal.find = find
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


class Loader:
    """The queue as recovery fills it (apply.py's Applier): the jobs read so
    far, in jobs, with the wall-clock times of their records until the
    queue loads them all at the end (Queue.load), each held by the file
    of its latest full record (file: the one being read)."""

    def __init__(self, q: Queue, wal: Wal, jobs: dict[int, Job], wall_offset: int,
                 warn: F.Warn, reader: Recovered | None) -> None:
        self.q, self.wal, self.jobs = q, wal, jobs
        self.wall_offset = wall_offset
        self.warn = warn
        self.reader = reader
        self.job: Callable[[int], Job | None] = jobs.get
        self.chunks: Reader | None = None if reader is None else Reader()
        self.file = File(0, "")  # (set before each file's records)
        # q.loading: each tube's jobs, so that none is freed while loading
        self.loading: dict[Tube, int] = {}
        q.loading = self.loading
        self.last_created = -1  # (one int for the jobs put at one time: 32 bytes each)
        self.top = 0  # the largest id of a job put

    def put(self, r: F.JobRecord) -> bool:
        """The common case, kept fast: a new job's full record."""
        q, f, id_, name = self.q, self.file, r.id, r.name
        if id_ > self.top:
            self.top = id_
        body: bytes | OnDisk = r.body  # type: ignore[assignment]  # (a full record's)
        t = q.tubes.tube(name)
        created = r.created - self.wall_offset
        if created == self.last_created:
            created = self.last_created  # (one int for the jobs of one read: 32 bytes each)
        self.last_created = created
        # (made by its constructor: a compiled Job has no other way)
        j = self.jobs[id_] = Job(id_, t, r.pri, r.delay, r.ttr, body, created)
        j.counts = r.counts
        j.file = f
        if self.reader is not None:
            self.reader.take(j)
        # (the record's state, reserved too: loading.load places the jobs)
        state = j.state = r.state
        j.deadline = F.bury_pos(r, f.seq) if state == F.BURIED else r.deadline
        self.wal.alive += _FIXED + len(name) + len(body)
        f.add_id(id_)
        f.refs += 1
        loading = self.loading
        loading[t] = loading.get(t, 0) + 1
        return True

    def update(self, j: Job, r: F.JobRecord) -> bool:
        """A later record of a job read: its fields, and with a full record
        its body and file. A full record whose body's size changed is bad:
        the job is dropped and the file read no further, as the reference
        does."""
        body, f, wal = r.body, self.file, self.wal
        if body is not None and len(body) != len(j.body):
            off = r.offset
            self.warn(f"{f.path}:{off}: job {j.id} size changed")
            self.warn(f"{f.path}:{off}: was {len(j.body)}, now {len(body)}")
            self.delete(j)
            return False
        replica.refresh(j, r.pri, r.delay, r.ttr, r.counts)
        j.created = r.created - self.wall_offset
        j.deadline = r.deadline  # wall clock until the queue loads it
        state = j.state = r.state
        if state == F.BURIED:
            j.deadline = F.bury_pos(r, f.seq)
        if body is not None:
            j.body = body  # (an OnDisk with --bodies-on-disk)
            wal.drop(j)
            if self.reader is not None:
                self.reader.take(j)
            j.file = f
            f.add_id(j.id)
            f.refs += 1
            wal.alive += F.full_size(r.name, len(body))
        return True

    def delete(self, j: Job) -> None:
        del self.jobs[j.id]
        self.wal.drop(j)
        t = j.tube
        self.loading[t] -= 1
        self.q.maybe_free(t)

    # -- records of ours (--extensions: self.reader is set) --------------------

    def tags(self, id_: int, tags: Tags, size: int) -> None:
        self.reader.tagged(id_, tags, size)  # type: ignore[union-attr]

    def cool(self, orig: int, end: int, tube: bytes, key: bytes) -> None:
        self.reader.cooled(orig, end, tube, key, self.file)  # type: ignore[union-attr]

    def clear(self, last: int, tube: bytes) -> None:
        self.reader.cleared(last, tube, self.jobs.values())  # type: ignore[union-attr]

    def bad(self, why: str) -> bool:
        self.warn(f"{self.file.path}: {why}; skipped")
        return True


_FIXED = F.full_size(b"", 0)  # a full record's bytes besides name and body


def _reserve_deletes(jobs: dict[int, Job], wal: Wal) -> None:
    """Room for every job's future delete, in bulk while the current file has it."""
    bulk = min(len(jobs), wal.cur.free // SHORT)
    if bulk:
        wal.reserve(bulk * SHORT)  # fits the current file: reserve's fast path
    for _ in range(len(jobs) - bulk):
        if not wal.reserve(SHORT):
            raise RecoveryError("prot.c:2323 in prot_replay: failed to reserve space",
                                "serv.c:33 in srv_acquire_wal: failed to replay log")

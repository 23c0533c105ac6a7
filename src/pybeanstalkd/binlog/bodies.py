"""Bodies left in the binlog (--bodies-on-disk): a job keeps where its body
is instead of its bytes.

Every body is in a binlog file already: its job's full record ends with it.
Once that record has been handed to the kernel (flush), the job's body
becomes an OnDisk (its offset in Job.file, and its size), and reserve, peek
and the HTTP side read it back with pread, from the page cache when it is
hot. Bodies under --body-ram-min stay in RAM: below it the OnDisk costs
about what it saves, and a read more per reserve.

Where a body is, is kept true through the log's own moves:

* compaction reads a moved job's body back into RAM before it drops the old
  record, and the body leaves RAM again once the new record is written: no
  read ever needs a file that compaction has let go;
* a file is unlinked only when no job's latest full record is in it (its
  refs, as without the flag), and its read fd is closed first;
* recovery makes the OnDisks from the records it reads (recovery.py), so
  no body is loaded at start-up.

A body that cannot be read back (EIO, a file truncated under the server)
is None to the caller, which answers INTERNAL_ERROR; the warning names the
file and offset, once per body.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..core.job import INVALID, M32, OnDisk
from .files import File, Wal

if TYPE_CHECKING:
    from ..core.job import Job

READERS = 64  # read fds kept open, one per file (the oldest opened is closed first)
BAD_MAX = 4096  # unreadable bodies remembered: each is warned about (and read) once


class DiskWal(Wal):
    """The binlog, with bodies of ram_min bytes or more (CRLF included)
    left in its files."""

    def __init__(self, dirname: str, filesize: int, ram_min: int, **kw: object) -> None:
        super().__init__(dirname, filesize, **kw)  # type: ignore[arg-type]
        self.ram_min = ram_min
        self.on_disk = 0  # bytes of the stored jobs' bodies left in the files
        # Full records in the write buffer whose body leaves RAM once they
        # are written: (job, its file, where the body starts)
        self.unwritten: list[tuple[Job, File, int]] = []
        self.readers: dict[int, int] = {}  # file seq -> read fd
        self.bad: set[tuple[int, int]] = set()  # (seq, offset) warned about
        self.read_errors = 0

    # -- where bodies go ------------------------------------------------------

    def _write(self, j: Job, rec: bytes | None = None) -> bool:
        if not self.use:  # (the binlog failed: Wal._write drops nothing now)
            body: bytes | OnDisk = j.body
            if j.state == INVALID and body.__class__ is OnDisk:
                self.on_disk -= len(body)  # a delete: its body counts no more
            return True
        if j.file is not None:  # a short record: the body stays where it is
            return Wal._write(self, j, rec)
        ok = Wal._write(self, j, rec)
        f = j.file
        if f is not None:
            body = j.body
            n = len(body)
            if n >= self.ram_min and body.__class__ is bytes:
                # (the record ends with the body, and used(f) with the record)
                self.unwritten.append((j, f, self.used(f) - n))
        return ok

    def flush(self) -> None:
        Wal.flush(self)
        unwritten = self.unwritten
        if unwritten and (not self.buf or not self.use):
            if self.use:  # (else a write failed: the bodies stay in RAM)
                for j, f, pos in unwritten:
                    body: bytes | OnDisk = j.body
                    # (not deleted, nor moved on since: its record is this one)
                    if j.file is f and body.__class__ is bytes:
                        j.body = OnDisk(pos << 32 | len(body))  # type: ignore[assignment]
                        self.on_disk += len(body)
            unwritten.clear()

    def drop(self, j: Job) -> None:
        body: bytes | OnDisk = j.body
        if j.file is not None and body.__class__ is OnDisk:
            self.on_disk -= len(body)
        Wal.drop(self, j)

    def _live_in(self, f: File) -> Job | None:
        """A job compaction moves: its body comes back into RAM first (the
        old record may go as soon as the job is dropped from it)."""
        j = Wal._live_in(self, f)
        where: bytes | OnDisk | None = None if j is None else j.body
        if j is not None and where.__class__ is OnDisk:
            if (f.seq, where >> 32) in self.bad:
                return None  # (compaction waits for its delete: said once)
            body = self.body(j)
            if body is None:
                # Its record cannot be rewritten without its bytes, and
                # files go in order: the binlog grows until the job goes.
                self.warn(f"{f.path}: compaction waits until job {j.id} is deleted (its body"
                          " cannot be read); the binlog cannot shrink past this file until"
                          " then")
                return None
            self.on_disk -= len(body)
            j.body = body
        return j

    def _gc(self) -> None:
        Wal._gc(self)
        readers = self.readers
        if readers:
            head = self.head
            for seq in [s for s in readers if head is None or s < head.seq]:
                os.close(readers.pop(seq))  # (its file is gone: unlinked in order)

    # -- reading back ----------------------------------------------------------

    def body(self, j: Job) -> bytes | None:
        b: bytes | OnDisk = j.body
        if b.__class__ is not OnDisk:
            return j.body
        return self._read(j, b)  # (an OnDisk: narrowed by the line above)

    def _read(self, j: Job, b: OnDisk) -> bytes | None:
        f: File = j.file
        size, pos = b & M32, b >> 32
        try:
            fd = self.readers.get(f.seq)
            if fd is None:
                fd = self._reader(f)
            data = os.pread(fd, size, pos)
        except OSError as e:
            self._unreadable(j, f, pos, e.strerror or str(e))
            return None
        if len(data) != size or data[-2:] != b"\r\n":
            self._unreadable(j, f, pos, f"{len(data)} of its {size} bytes, not ending"
                             " with CRLF" if len(data) == size else
                             f"only {len(data)} of its {size} bytes: the file is cut short")
            return None
        return data

    def _reader(self, f: File) -> int:
        readers = self.readers
        if len(readers) >= READERS:
            os.close(readers.pop(next(iter(readers))))
        fd = readers[f.seq] = os.open(f.path, os.O_RDONLY | os.O_CLOEXEC)
        return fd

    def _unreadable(self, j: Job, f: File, pos: int, why: str) -> None:
        self.read_errors += 1
        key = (f.seq, pos)
        if key in self.bad:
            return
        if len(self.bad) < BAD_MAX:
            self.bad.add(key)
        self.warn(f"{f.path}:{pos}: job {j.id}: its body could not be read: {why}")

    def close(self) -> None:
        Wal.close(self)
        for fd in self.readers.values():
            os.close(fd)
        self.readers.clear()

    def body_stats(self) -> tuple[int, int]:
        """(bytes of bodies left in the files, reads that failed)"""
        return self.on_disk, self.read_errors

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
file and offset, once per body. So is one whose bytes are not the job's:
each OnDisk keeps the CRC-32 of its body (4 bytes, in the int it already
is), taken from the bytes in RAM as they go to the file, or from the
record that carries it (format.MARK_CRC) at recovery; a body read back is
checked against it, so that bit rot, a stray write or a bad sector never
becomes a job's body (counted apart: `mismatches`).
"""
from __future__ import annotations

import errno
import os
import zlib
from typing import TYPE_CHECKING

from ..core.job import INVALID, OnDisk, on_disk
from . import format as F
from .files import File, Wal

if TYPE_CHECKING:
    from ..core.job import Job
    from .format import Warn

READERS = 64  # read fds kept open, one per file (the oldest opened is closed first)
BAD_MAX = 4096  # unreadable bodies remembered: each is warned about (and read) once
# A read that failed with one of these failed for want of resources, not
# for its body's sake (Bodies.transient).
SHORT_OF = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS))


class DiskWal(Wal):
    """The binlog, with bodies of ram_min bytes or more (CRLF included)
    left in its files."""

    def __init__(self, dirname: str, filesize: int, ram_min: int, **kw: object) -> None:
        super().__init__(dirname, filesize, **kw)  # type: ignore[arg-type]
        # (one attribute for the bodies' count, their reading, ram_min and
        # the bodies not yet written: an object of more than 29 attributes
        # loses CPython's shared-key dict, and every attribute load on it
        # is slower; Wal has 28)
        self.bodies = Bodies(self.warn, ram_min, dirname)

    @property
    def ram_min(self) -> int:
        """Bodies of this many bytes or more (CRLF included) are left on disk."""
        return self.bodies.ram_min

    @property
    def on_disk(self) -> int:  # type: ignore[override]  # (Wal's is a class attribute: 0)
        """Bytes of the stored jobs' bodies left in the files."""
        return self.bodies.on_disk

    @property
    def read_errors(self) -> int:
        """Reads of a body that failed, the same body's counted each time."""
        return self.bodies.errors

    @property
    def mismatches(self) -> int:
        """Of read_errors: bodies read whole whose bytes failed their CRC."""
        return self.bodies.mismatches

    # -- where bodies go ------------------------------------------------------

    def _write(self, j: Job, rec: bytes | None = None) -> bool:
        if not self.use:  # (the binlog failed: Wal._write drops nothing now)
            body: bytes | OnDisk = j.body
            if j.state == INVALID and body.__class__ is OnDisk:
                self.bodies.on_disk -= len(body)  # a delete: its body counts no more
            return True
        if j.file is not None:  # a short record: the body stays where it is
            return Wal._write(self, j, rec)
        body = j.body
        if body.__class__ is not bytes:
            return Wal._write(self, j, rec)
        # Every full record carries its body's CRC-32 (a follower's put
        # brings it as it is), so that a restart, which may read the body
        # into RAM or leave it in the file, checks it against what was
        # written. A body of ram_min bytes or more leaves RAM once written,
        # its CRC-32 with it.
        crc = zlib.crc32(body)
        if rec is None:
            rec = F.encode(j, True, self.wall_offset, crc=crc)
        ok = Wal._write(self, j, rec)
        f = j.file
        n = len(body)
        bodies = self.bodies
        if f is not None and n >= bodies.ram_min:
            # (the record ends with the body, and used(f) with the record)
            bodies.unwritten.append((j, f, self.used(f) - n, crc))
        return ok

    def flush(self) -> None:
        Wal.flush(self)
        unwritten = self.bodies.unwritten
        if unwritten and (not self.buf or not self.use):
            if self.use:  # (else a write failed: the bodies stay in RAM)
                bodies = self.bodies
                for j, f, pos, crc in unwritten:
                    body: bytes | OnDisk = j.body
                    # (not deleted, nor moved on since: its record is this one)
                    if j.file is f and body.__class__ is bytes:
                        j.body = on_disk(crc, pos, len(body))
                        bodies.on_disk += len(body)
            unwritten.clear()

    def drop(self, j: Job) -> None:
        body: bytes | OnDisk = j.body
        if j.file is not None and body.__class__ is OnDisk:
            self.bodies.on_disk -= len(body)
        Wal.drop(self, j)

    def _live_in(self, f: File) -> Job | None:
        """A job compaction moves: its body comes back into RAM first (the
        old record may go as soon as the job is dropped from it)."""
        j = Wal._live_in(self, f)
        where: bytes | OnDisk | None = None if j is None else j.body
        if j is not None and where.__class__ is OnDisk:
            if (f.seq, where.offset) in self.bodies.bad:
                return None  # (compaction waits for its delete: said once)
            body = self.body(j)
            if body is None:
                if self.bodies.transient:
                    return None  # (out of descriptors: the next write's compaction tries again)
                # Its record cannot be rewritten without its bytes, and
                # files go in order: the binlog grows until the job goes.
                self.warn(f"{f.path}: compaction waits until job {j.id} is deleted (its body"
                          " cannot be read); the binlog cannot shrink past this file until"
                          " then")
                return None
            self.bodies.on_disk -= len(body)
            j.body = body
        return j

    def _gc(self) -> None:
        Wal._gc(self)
        if self.bodies.fds:
            self.bodies.close_before(None if self.head is None else self.head.seq)

    # -- reading back ----------------------------------------------------------

    def body(self, j: Job) -> bytes | None:
        b = j.body
        if isinstance(b, bytes):
            return b
        return self.bodies.read(j, b)

    @property
    def transient(self) -> bool:  # type: ignore[override]  # (Wal's is a class attribute: False)
        """Did the last body() that gave None fail for want of descriptors
        or memory (the body may be fine: try again later), not for its
        file's or its bytes' sake?"""
        return self.bodies.transient

    def free_read_fds(self) -> int:
        """Close the read fds kept (out of descriptors, the server gives
        them to clients: server/accept.py); how many. Bodies are read
        from the next one on as before, each opening its file again."""
        n = len(self.bodies.fds)
        self.bodies.close_before(None)
        return n

    def close(self) -> None:
        Wal.close(self)
        self.bodies.close_before(None)
        self.bodies.close_spare()

    def body_stats(self) -> tuple[int, int]:
        """(bytes of bodies left in the files, reads that failed)"""
        return self.bodies.on_disk, self.bodies.errors


class Bodies:
    """The bodies a DiskWal left in its files: their bytes, and how they
    are read back. A read fd is kept per file (at most READERS, the oldest
    opened closed first). A body that cannot be read is warned about once,
    by its file and offset, and counted each time.

    Out of descriptors (EMFILE, ENFILE: many clients, a low ulimit -n), a
    read still gets one: the read fd kept for another file is given up,
    or else `spare`, a descriptor held for this alone, is closed for the
    read and taken again after it. Should none be had even so, the read
    fails as `transient`: no fault of the body, which is not marked
    unreadable (a reserve gives its job back instead of burying it), and
    one warning says so until a read succeeds again."""

    def __init__(self, warn: Warn, ram_min: int, dirname: str) -> None:
        self.warn = warn
        self.dir = dirname
        self.ram_min = ram_min  # (DiskWal.ram_min)
        # Full records in the write buffer whose body leaves RAM once they
        # are written: (job, its file, where the body starts, its CRC-32)
        self.unwritten: list[tuple[Job, File, int, int]] = []
        self.on_disk = 0  # bytes of the stored jobs' bodies left in the files
        self.fds: dict[int, int] = {}  # file seq -> read fd
        self.bad: set[tuple[int, int]] = set()  # (seq, offset) warned about
        self.errors = 0
        self.mismatches = 0  # (of errors) read whole, failing their CRC
        self.transient = False  # the last read that failed, failed for want of resources
        self.short = False  # ... and that was said: not again until a read succeeds
        self.spare = -1
        self._take_spare()

    def read(self, j: Job, b: OnDisk) -> bytes | None:
        f: File = j.file
        size, pos = len(b), b.offset
        try:
            fd = self.fds.get(f.seq)
            if fd is None:
                fd = self._open(f)
            data = os.pread(fd, size, pos)
        except OSError as e:
            if e.errno in SHORT_OF:
                self._short_of(f, e.strerror or str(e))
            else:
                self._unreadable(j, f, pos, e.strerror or str(e))
            return None
        finally:
            if self.spare == -1:
                self._take_spare()
        if len(data) != size or data[-2:] != b"\r\n":
            self._unreadable(j, f, pos, f"{len(data)} of its {size} bytes, not ending"
                             " with CRLF" if len(data) == size else
                             f"only {len(data)} of its {size} bytes: the file is cut short")
            return None
        if zlib.crc32(data) != b.crc:
            self.mismatches += 1
            self._unreadable(j, f, pos, "its bytes are not the ones written (CRC-32 mismatch):"
                             " changed on disk")
            return None
        if self.short:
            self.short = False
            self.warn("bodies are read back again")
        return data

    def _open(self, f: File) -> int:
        fds = self.fds
        if len(fds) >= READERS:
            os.close(fds.pop(next(iter(fds))))
        while True:
            try:
                fd = fds[f.seq] = os.open(f.path, os.O_RDONLY | os.O_CLOEXEC)
                return fd
            except OSError as e:
                if e.errno not in (errno.EMFILE, errno.ENFILE):
                    raise
                if fds:  # another file's read fd: given up for this one
                    os.close(fds.pop(next(iter(fds))))
                elif self.spare >= 0:  # taken again after the read (read's finally)
                    os.close(self.spare)
                    self.spare = -1
                else:
                    raise

    def _take_spare(self) -> None:
        """Hold a descriptor in reserve for a read out of descriptors (the
        binlog's directory: it is there). If none is free, the one a read
        just opened is given up for it: the next read may need the reserve
        more than that file's fd. Any other failure: no reserve (-2), and
        no try again at every read."""
        try:
            self.spare = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            if e.errno not in (errno.EMFILE, errno.ENFILE):
                self.spare = -2
                return
            self.spare = -1  # (taken again after the next read)
            if self.fds:
                os.close(self.fds.pop(next(reversed(self.fds))))
                try:
                    self.spare = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                except OSError:
                    pass

    def close_spare(self) -> None:
        if self.spare >= 0:
            os.close(self.spare)
            self.spare = -2

    def _short_of(self, f: File, why: str) -> None:
        self.errors += 1
        self.transient = True
        if not self.short:
            self.short = True
            self.warn(f"{f.path}: bodies cannot be read back for now: {why} (out of"
                      " descriptors or memory); their reserves answer INTERNAL_ERROR and the"
                      " jobs stay ready until they can")

    def _unreadable(self, j: Job, f: File, pos: int, why: str) -> None:
        self.errors += 1
        self.transient = False
        key = (f.seq, pos)
        if key in self.bad:
            return
        if len(self.bad) < BAD_MAX:
            self.bad.add(key)
        self.warn(f"{f.path}:{pos}: job {j.id}: its body could not be read: {why}")

    def close_before(self, seq: int | None) -> None:
        """Close the read fds of the files before seq (None: all of them):
        files are unlinked in order."""
        fds = self.fds
        for s in [s for s in fds if seq is None or s < seq]:
            os.close(fds.pop(s))

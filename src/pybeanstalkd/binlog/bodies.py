"""Where the binlog's jobs' bodies are kept: the Wal's (files.py) bodies'
policy. The Wal owns one, given at construction, and calls it at each step
that can move a body: a full record given to the write buffer (crc,
written), the records handed to the kernel (flushed), a record holding a
body that no longer counts (dropped), a job compaction moves (fetch), files
let go (let_go), a body read back (read), recovery's end, close; the policy
owns what it counts (on_disk, errors...), which the Wal and ops/ read.
Each call brings what the policy needs to know (a file, where a record
ends, whether a write went through): the policy never asks the Wal back,
and this module does not import it.

`BodyPolicy`, the null policy, keeps every body in RAM (a plain binlog): its
hooks do nothing, and its `moves` is False, so that the Wal skips the hooks
of the write path and pays an attribute load where a body could leave RAM
(calling them, with -b -F: 37 instructions a put and 26 a reserve and its
delete compiled, 1,004 and 570 pure).

`DiskBodies` (--bodies-on-disk) leaves bodies in the binlog: a job keeps
where its body is instead of its bytes. Every body is in a binlog file
already: its job's full record ends with it. Once that record has been
handed to the kernel (flush), the job's body becomes an OnDisk (its offset
in Job.file, and its size), and reserve, peek and the HTTP side read it
back with pread, from the page cache when it is hot. Bodies under
--body-ram-min stay in RAM: below it the OnDisk costs about what it saves,
and a read more per reserve.

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

from ..core.job import OnDisk, on_disk

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..core.job import Job
    from .file import File
    from .format import Warn

READERS = 64  # read fds kept open, one per file (the oldest opened is closed first)
BAD_MAX = 4096  # unreadable bodies remembered: each is warned about (and read) once
# A read that failed with one of these failed for want of resources, not
# for its body's sake (DiskBodies.transient).
SHORT_OF = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS))


class BodyPolicy:
    """Where the Wal keeps its jobs' bodies; this one, the null policy,
    keeps every body in RAM and none in the files. DiskBodies is the other.
    The counters are the policy's own: the Wal reads on_disk and transient
    through it (the store's, core/store.py), ops/ the rest."""

    def __init__(self) -> None:
        # Does this policy move bodies out of RAM? If not, the Wal calls
        # none of the hooks of the write path (crc, written, flushed,
        # dropped, fetch): see the module's docstring for what the calls
        # cost. (An instance attribute: in CPython 3.11 a class attribute
        # read through an instance takes the slow path.)
        self.moves = False

    # Bodies of this many bytes or more (CRLF included) are left in the
    # files; None: none is (recovery reads every body into RAM)
    ram_min: int | None = None
    on_disk = 0  # bytes of the stored jobs' bodies left in the files
    # The last read() that gave None failed for want of descriptors or
    # memory (the body may be fine: try again later), not for its file's
    # or its bytes' sake
    transient = False
    errors = 0  # reads of a body that failed, the same body's counted each time
    mismatches = 0  # of errors: bodies read whole whose bytes failed their CRC

    # -- the write path: asked only of a policy that moves bodies ------------

    def crc(self, j: Job) -> int:
        """The CRC-32 j's full record is to carry (format.MARK_CRC), or -1
        for none. Only a record that carries one is given to written()."""
        return -1

    def written(self, j: Job, f: File, end: int, crc: int) -> None:
        """j's full record, which ends with its body, was given to the
        write buffer of file f (the last record in it so far), to end at
        offset end."""

    def flushed(self, ok: bool) -> None:
        """The records buffered were handed to the kernel (ok), or were
        not: the binlog failed (it is out of use)."""

    def dropped(self, j: Job) -> None:
        """j's full record, which holds j's body (it is not in RAM), no
        longer counts: the job was deleted or moved on."""

    def fetch(self, f: File, j: Job) -> bool:
        """Compaction is to move j, whose body is not in RAM, out of f:
        bring the body into RAM first. False: not now (the job stays)."""
        return False  # (no body is in the files here)

    # -- the rest ---------------------------------------------------------------

    def read(self, j: Job, b: OnDisk) -> bytes | None:
        """j's body, which is not in RAM: its bytes, or None (said why)."""
        return None

    def let_go(self, seq: int | None) -> None:
        """The files before seq (None: every file) were let go, and are
        unlinked once the records that replace them are safe."""

    def free_fds(self) -> int:
        """Descriptors given back from those kept only to go faster: how many."""
        return 0

    def recovered(self, jobs: Iterable[Job]) -> None:
        """Recovery loaded these jobs (each body in RAM, or an OnDisk)."""

    def close(self) -> None:
        """The binlog is closed: no body is read again."""


# The null policy: it holds nothing, so every plain binlog shares it
IN_RAM = BodyPolicy()


class DiskBodies(BodyPolicy):
    """Bodies of ram_min bytes or more (CRLF included) left in the files:
    their bytes, and how they are read back. A read fd is kept per file (at
    most READERS, the oldest opened closed first). A body that cannot be
    read is warned about once, by its file and offset, and counted each
    time.

    Out of descriptors (EMFILE, ENFILE: many clients, a low ulimit -n), a
    read still gets one: the read fd kept for another file is given up,
    or else `spare`, a descriptor held for this alone, is closed for the
    read and taken again after it. Should none be had even so, the read
    fails as `transient`: no fault of the body, which is not marked
    unreadable (a reserve gives its job back instead of burying it), and
    one warning says so until a read succeeds again."""

    def __init__(self, dirname: str, ram_min: int, warn: Warn) -> None:
        self.moves = True
        self.warn = warn
        self.dir = dirname
        self.ram_min = ram_min
        # Full records in the write buffer whose body leaves RAM once they
        # are written: (job, its file, where the body starts, its CRC-32)
        self.unwritten: list[tuple[Job, File, int, int]] = []
        self.on_disk = 0
        self.fds: dict[int, int] = {}  # file seq -> read fd
        self.bad: set[tuple[int, int]] = set()  # (seq, offset) warned about
        self.errors = 0
        self.mismatches = 0
        self.transient = False
        self.short = False  # a read failed as transient, and that was said (not again until one succeeds)
        self.spare = -1
        self._take_spare()

    # -- where bodies go ------------------------------------------------------

    def crc(self, j: Job) -> int:
        # Every full record carries its body's CRC-32 (a follower's put
        # brings it as it is), so that a restart, which may read the body
        # into RAM or leave it in the file, checks it against what was
        # written. A body of ram_min bytes or more leaves RAM once written,
        # its CRC-32 with it.
        body = j.body
        return zlib.crc32(body) if isinstance(body, bytes) else -1

    def written(self, j: Job, f: File, end: int, crc: int) -> None:
        n = len(j.body)
        ram_min = self.ram_min
        if ram_min is not None and n >= ram_min:
            # (the record ends with the body)
            self.unwritten.append((j, f, end - n, crc))

    def flushed(self, ok: bool) -> None:
        """The bodies whose records were handed to the kernel leave RAM; if
        the write failed, they stay."""
        unwritten = self.unwritten
        if unwritten:
            if ok:  # (else a write failed: the bodies stay in RAM)
                for j, f, pos, crc in unwritten:
                    body: bytes | OnDisk = j.body
                    # (not deleted, nor moved on since: its record is this one)
                    if j.file is f and body.__class__ is bytes:
                        j.body = on_disk(crc, pos, len(body))
                        self.on_disk += len(body)
            unwritten.clear()

    def dropped(self, j: Job) -> None:
        self.on_disk -= len(j.body)

    def fetch(self, f: File, j: Job) -> bool:
        """The body comes back into RAM before compaction moves the job
        (the old record may go as soon as the job is dropped from it)."""
        where = j.body
        if isinstance(where, bytes):
            return True  # (in RAM already)
        if (f.seq, where.offset) in self.bad:
            return False  # (compaction waits for its delete: said once)
        body = self.read(j, where)
        if body is None:
            if self.transient:
                return False  # (out of descriptors: the next write's compaction tries again)
            # Its record cannot be rewritten without its bytes, and
            # files go in order: the binlog grows until the job goes.
            self.warn(f"{f.path}: compaction waits until job {j.id} is deleted (its body"
                      " cannot be read); the binlog cannot shrink past this file until"
                      " then")
            return False
        self.on_disk -= len(body)
        j.body = body
        return True

    def recovered(self, jobs: Iterable[Job]) -> None:
        """Count the bodies recovery left in the files (its drops took
        theirs off the count meanwhile)."""
        on_disk = 0
        for j in jobs:
            body: bytes | OnDisk = j.body
            if body.__class__ is OnDisk:
                on_disk += len(body)
        self.on_disk = on_disk

    # -- reading back ----------------------------------------------------------

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

    def let_go(self, seq: int | None) -> None:
        if self.fds:
            self.close_before(seq)

    def free_fds(self) -> int:
        """Close the read fds kept (out of descriptors, the server gives
        them to clients: server/accept.py); how many. Bodies are read
        from the next one on as before, each opening its file again."""
        n = len(self.fds)
        self.close_before(None)
        return n

    def close(self) -> None:
        self.close_before(None)
        self.close_spare()

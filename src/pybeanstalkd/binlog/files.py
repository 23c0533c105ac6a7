"""The binlog: files, space reservation, compaction, garbage collection.

The layout and the bookkeeping follow beanstalkd's walg.c, so that a directory
moves between the two servers and files roll over at the same points:

* Space is reserved before a command is acknowledged: a put reserves its full
  record plus a short record for its future delete, so a delete can always be
  logged, even on a full disk. Reservations live in files; they are moved
  between files in multiples of a short record (84 bytes).
* A file is closed (truncated to what is used or reserved) when writing moves
  on, and let go once it is the oldest and no live job's full record is in it.
* Compaction rewrites the full record of a job from the oldest file.
* A file let go is unlinked only once the records that replace its jobs
  (compaction's rewrites, all written before it was let go) are as safe as
  the file was: fsynced, or with -F written. Unlinked at once, a kill -9
  before the write, or a power loss before the fsync, would lose jobs whose
  puts were acknowledged long ago (Wal._gc, Wal.synced_to).

Differences, each in COMPATIBILITY.md: short records do not count as live
bytes, so a job released with a delay over and over is compacted instead of
pinning its file forever (#622); buried jobs carry their bury position; old
files and the directory are fsynced too.

Records are buffered and written with one write() per event; fsync runs in a
thread driven by the server (sync.py's Syncer).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from . import format as F
from .bodies import IN_RAM
from .codec import PlainCodec
from .file import File
from ..core.store import Store
from ..core.tags import Cooldown

if TYPE_CHECKING:
    from ..core.job import Job
    from ..core.store import Record
    from .bodies import BodyPolicy

# (Final names: compiled, each is a C constant or static, where a plain
# global is a dict lookup at each use; a put reserves with SHORT.)
SHORT: Final = F.SHORT_SIZE
BLOCK: Final = 4096
LIVE_SCAN: Final = 256  # stale ids a compaction step may drop (Wal._live_in)
# The records' write, bound once: compiled, os.write is an attribute
# lookup on the module at each call (about 270 instructions), and with
# -f0 the write is between a put's read and its reply. (The fsync stays
# os.fdatasync, looked up at each call: the tests inject its failures.)
_write: Final = os.write
# posix_fallocate leaves unwritten extents: each fdatasync after a write into
# one must also commit the filesystem's journal (ext4, xfs) to mark it
# written, which about doubles its time and CPU. With -f0 (fsyncs back to
# back) zeros are written this far ahead of the records, and most
# fdatasyncs flush data alone. Not with -f MS: one commit per MS is nothing,
# and the zeros would double what reaches the disk.
ZERO_AHEAD: Final = 256 * 1024
_ZEROS: Final = memoryview(bytes(ZERO_AHEAD))


class Retired:
    """The files closed for writing, on their way out."""

    __slots__ = ("files", "doomed")

    def __init__(self) -> None:
        # closed since the last fsync began: their fds close once it is done
        self.files: list[File] = []
        # let go (Wal._gc), oldest first, each with the lsn that must be safe
        # (synced, or written with -F) before it is unlinked (Wal._unlink_upto)
        self.doomed: list[tuple[int, str]] = []


def _whole_blocks(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _falloc(fd: int, size: int) -> None:
    """Preallocate like the reference: zeros up to a multiple of 4096 bytes."""
    size = _whole_blocks(size)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno not in (95, 38):  # EOPNOTSUPP, ENOSYS: write zeros instead
            raise
        zeros = bytes(BLOCK)
        for _ in range(size // BLOCK):
            os.write(fd, zeros)
        os.lseek(fd, 0, os.SEEK_SET)


class Wal(Store):
    """The binlog: the queue's store (core/store.py) that writes its records."""

    def __init__(self, dirname: str, filesize: int, wantsync: bool = True, warn: F.Warn = print,
                 falloc: Callable[[int, int], None] = _falloc, zero_ahead: bool = False,
                 codec: PlainCodec | None = None, bodies: BodyPolicy = IN_RAM) -> None:
        super().__init__()
        self.dir = dirname
        self.filesize = filesize
        self.wantsync = wantsync
        self.warn = warn
        self.falloc = falloc  # replaceable, to test a full disk
        self.use = True
        # The files, oldest (head) to newest (tail), and the one written
        # (cur). head is None while there are none: until recover() makes
        # the first, and while recovery has deleted every file read so far
        # (_gc). Until the first, tail and cur are a placeholder with no
        # room, which nothing writes to. Once in use, cur keeps the list
        # non-empty.
        self.head: File | None = None
        self.tail = self.cur = File(0, "")
        self.nfile = 0
        self.next_seq = 1
        self.alive = 0  # bytes of live jobs' full records
        self.resv = 0  # bytes reserved, all files
        self.nmig = self.nrec = 0
        self.buf: list[bytes] = []  # records for cur, not yet written
        self.lsn = 0  # bytes of records produced so far
        self.written = 0  # ... of which handed to the kernel
        self.synced = 0  # ... of which fsynced
        self.new_files = False  # the directory needs an fsync
        # files closed for writing, until their fds close and they are unlinked
        self.retired = Retired()
        # The directory's fd for those fsyncs, kept from the first file on:
        # opened only when a file was made, it could fail for want of
        # descriptors (many clients), and the fsync with it.
        self.dirfd = -1
        self.no_room = False  # the next file could not be made (said once: _no_file)
        # Wall clock ns less monotonic ns, to write times as wall ns: set
        # by recover(), which reads the records' times back with it
        self.wall_offset = 0
        # id -> the stored job or None: the queue's job map, once recover()
        # has loaded it. Compaction finds a file's live jobs through it.
        self.find: Callable[[int], Job | Cooldown | None] = lambda id_: None
        # --cluster: called with each batch of records written (tap())
        self.tapped: Callable[[bytes], object] | None = None
        self.zero_ahead = zero_ahead  # -f0 (Settings.fsync_each_write): see ZERO_AHEAD
        # What a full record is written as, and the records of ours
        # (codec.py): a plain binlog's, or --extensions' with the tags
        self.codec = PlainCodec() if codec is None else codec
        # Where the jobs' bodies are kept (bodies.py): all in RAM (IN_RAM),
        # or left in the files (--bodies-on-disk: DiskBodies). Told at each
        # step that can move a body, and the owner of what it counts.
        self.bodies = bodies

    @property
    def on_disk(self) -> int:
        """Bytes of the stored jobs' bodies left in the files (the store's:
        core/store.py)."""
        return self.bodies.on_disk

    @property
    def transient(self) -> bool:
        """Did the last body() that gave None fail for want of descriptors
        or memory (the body may be fine: try again later), not for its
        file's or its bytes' sake?"""
        return self.bodies.transient

    def free_read_fds(self) -> int:
        """Give back the descriptors kept only to read bodies faster (out of
        descriptors, the server gives them to clients: server/accept.py);
        how many."""
        return self.bodies.free_fds()

    def tap(self, fn: Callable[[bytes], object]) -> None:
        """Have fn called with each batch of records as it is written: a
        cluster leader ships them (cluster/link.py: Replicator)."""
        self.tapped = fn

    # -- files ------------------------------------------------------------

    def path_of(self, seq: int) -> str:
        return os.path.join(self.dir, "binlog.%d" % seq)

    def add_file(self, f: File) -> None:
        if self.head is None:
            self.head = f
        else:
            self.tail.next = f
        self.tail = f
        self.nfile += 1

    def make_next(self) -> bool:
        f = File(self.next_seq, self.path_of(self.next_seq))
        try:
            fd = os.open(f.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o400)
        except OSError as e:
            self._no_file(f"open {f.path}: {e.strerror}")
            return False
        try:
            self.falloc(fd, self.filesize)
            os.write(fd, F.FULL_HEAD.pack(F.VERSION))
        except OSError as e:
            os.close(fd)
            self._no_file(f"falloc {f.path}: {e.strerror}")
            try:
                os.unlink(f.path)
            except OSError:
                pass
            return False
        if self.no_room:
            self.no_room = False
            self.warn(f"{f.path}: made; binlog files can be made again")
        f.fd = fd
        f.open = True
        f.refs = 1
        f.free = self.filesize - 4
        self.next_seq += 1
        self.new_files = True
        if self.dirfd < 0 and self.wantsync:
            self._open_dir()
        self.add_file(f)
        return True

    def in_place(self, f: File) -> None:
        """Is the file at f's path still the one written to (said if not,
        as f is left: rolled over, or at shutdown: sync.py)? One renamed over or
        removed in use holds none of the records written to f since, and
        a restart will not have their jobs: nothing can bring them back
        here, but it is said rather than found at the restart."""
        try:
            same = os.path.samestat(os.fstat(f.fd), os.stat(f.path))
        except OSError:
            same = False
        if not same:
            self.warn(f"{f.path} is not the file written to (replaced or removed in use): the"
                      " records written to it are not in the directory, and a restart will not"
                      " have their jobs")

    def _no_file(self, why: str) -> None:
        """No next file (a full disk, no descriptor): every put and every
        compaction tries again, so it is said once until one is made (a
        line a try flooded stderr, thousands a second on a busy server)."""
        if not self.no_room:
            self.no_room = True
            self.warn(f"{why}; puts get OUT_OF_MEMORY until a binlog file can be made"
                      " (said once)")

    def _open_dir(self) -> None:
        try:
            self.dirfd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            self.warn(f"open {self.dir}: {e.strerror}; the directory is synced once it opens")

    def _close(self, f: File) -> None:
        """Stop writing f: truncate it to what is used or reserved."""
        if not f.open:
            return
        self.flush()
        self.in_place(f)
        if f.free:
            try:
                os.ftruncate(f.fd, self.filesize - f.free)
            except OSError as e:
                self.warn(f"ftruncate {f.path}: {e.strerror}")
        f.open = False
        if self.wantsync:
            self.retired.files.append(f)  # the fd closes after its last fsync
        else:
            os.close(f.fd)
        self.decref(f)


    def decref(self, f: File) -> None:
        f.refs -= 1
        if f.refs < 1:
            self._gc()

    def _gc(self) -> None:
        let_go = False
        while self.head is not None and self.head.refs < 1:
            f = self.head
            self.head = f.next  # (None: f was the last file, see __init__)
            self.nfile -= 1
            # Its jobs' newer records are all before lsn: each was given to
            # the buffer before the job let go of f (_compact holds f meanwhile).
            self.retired.doomed.append((self.lsn, f.path))
            let_go = True
        if let_go:
            # (the bodies' read fds of the files let go close before they are unlinked)
            self.bodies.let_go(None if self.head is None else self.head.seq)
            self._unlink_upto(self.synced if self.wantsync else self.written)

    def synced_to(self, lsn: int) -> None:
        """An fsync covered the records up to lsn: the files let go that
        waited for them are unlinked."""
        if lsn > self.synced:
            self.synced = lsn
        if self.retired.doomed:
            self._unlink_upto(self.synced)

    def _unlink_upto(self, lsn: int) -> None:
        """Unlink the files let go whose jobs' records up to lsn are safe.
        At start-up (nothing written yet) a file goes at once."""
        doomed = self.retired.doomed
        while doomed and doomed[0][0] <= lsn:
            path = doomed.pop(0)[1]
            try:
                os.unlink(path)
            except OSError as e:
                self.warn(f"unlink {path}: {e.strerror}")

    def _usenext(self) -> bool:
        f = self.cur
        if f.next is None:
            self.warn("there is no next wal file")
            return False
        self.flush()
        self.cur = f.next
        self._close(f)
        return True

    # -- reservations (beanstalkd's reserve/balance, see module doc) ---------

    @staticmethod
    def _move(to: File, frm: File, n: int) -> None:
        frm.resv -= n
        frm.free += n
        to.resv += n
        to.free -= n

    def _needfree(self, n: int) -> bool:
        return self.tail.free >= n or self.make_next()

    def _balance_rest(self, b: File | None, n: int) -> bool:
        while b is not None:
            r = (b.resv - n) % SHORT
            if r:
                c = SHORT - r
                if self.tail.resv >= c and b.free >= c:
                    self._move(b, self.tail, c)
                elif self._needfree(r):
                    self._move(self.tail, b, r)
                else:
                    return False
            b, n = b.next, 0
        return True

    def _balance(self, n: int) -> bool:
        while self.cur.resv < n:
            m = self.cur.resv
            if not self._needfree(m):
                return False
            self._move(self.tail, self.cur, m)
            self._usenext()
        return self._balance_rest(self.cur, n)

    def reserve(self, n: int) -> int:
        if not self.use:
            return 1
        cur = self.cur
        if cur.free >= n:
            cur.free -= n
            cur.resv += n
            self.resv += n
            return n
        if not self._needfree(n):
            return 0
        tail = self.tail
        tail.free -= n
        tail.resv += n
        self.resv += n
        if not self._balance(n):
            self.resv -= n
            tail.resv -= n
            tail.free += n
            return 0
        return n

    def reserve_put(self, j: Job) -> bool:
        # its full record (its tags' before it), and the short record of its
        # future delete
        return self.reserve(self.codec.size(j) + SHORT) != 0

    def reserve_update(self, j: Job) -> bool:
        return self.reserve(SHORT) != 0

    # -- writing ----------------------------------------------------------

    def write(self, j: Job, rec: bytes | None = None) -> bool:
        """Log job j's current state, then compact. False if the binlog failed.
        rec: the record's bytes, if the caller has them (a follower's put)."""
        ok = self._write(j, rec)
        # _compact's loop runs only when _ratio() >= 2, and moves a job only
        # out of a file older than the one before cur: checked here first
        if (self.use and self.nfile > 2
                and self.nfile * self.filesize >= 3 * (self.alive + self.resv)):
            self._compact()
        return ok

    def _write(self, j: Job, rec: bytes | None = None) -> bool:
        if not self.use:
            if j.state == F.INVALID and j.body.__class__ is not bytes:
                self.bodies.dropped(j)  # (a delete: its body in the files counts no more)
            return True
        if self.cur.resv <= 0 and not self._usenext():
            self.fail("no reserved space left")
            return False
        f = self.cur
        full = j.file is None
        if j.state == F.BURIED and j.deadline < 0:  # UNPLACED: just buried
            j.deadline = (f.seq << 32) | self.used(f)
        if full:
            crc = -1
            if self.bodies.moves:
                # A policy that moves bodies out of RAM has the record carry
                # its body's CRC-32, and is told where the body is (below)
                crc = self.bodies.crc(j)
                if rec is None:
                    rec = F.encode(j, True, self.wall_offset, crc=crc)
            elif rec is None:
                rec = F.encode(j, True, self.wall_offset)
            rec = self.codec.full(j, rec)
        elif rec is None:
            rec = F.encode(j, False, self.wall_offset)
        n = len(rec)
        self.buf.append(rec)
        self.lsn += n
        f.resv -= n
        self.resv -= n
        f.unsynced = True
        self.nrec += 1
        if full:
            j.file = f
            f.add_id(j.id)
            f.refs += 1
            self.alive += n
            if crc >= 0:
                self.bodies.written(j, f, self.used(f), crc)
        elif j.state == F.INVALID:
            self.drop(j)
        return True

    def used(self, f: File) -> int:
        """Where f's next record goes: its version and the records given
        to it (all of them written, after a flush of the current file)."""
        return self.filesize - f.free - f.resv

    def drop(self, j: Job) -> None:
        """Job j's full record no longer counts (deleted or moved)."""
        f: File | None = j.file
        if f is None:
            return
        if self.bodies.moves and j.body.__class__ is not bytes:
            self.bodies.dropped(j)  # (its body is in f: the policy's count)
        j.file = None
        self.alive -= self.codec.size(j)
        self.decref(f)

    def drop_cooldown(self, c: Cooldown) -> None:
        """Cooldown c's record no longer counts (ended, or moved)."""
        f: File | None = c.file
        if f is None:
            return
        c.file = None
        self.alive -= self.codec.cooldown_size(c)
        self.decref(f)

    def note(self, rec: Record) -> bool:
        """Reserve room for a record of ours (ext.py) and write it: a
        cooldown keeps its file, as a job's full record does."""
        if not self.use:
            return True
        if not self.reserve(len(self.codec.note(rec, 0))):
            return False
        ok = self._note(rec)
        if self.nfile * self.filesize >= 3 * (self.alive + self.resv):
            self._compact()
        return ok

    def _note(self, rec: Record) -> bool:
        """Write a record of ours whose room is reserved (as _write does a
        job's; that one stays inline: every put and delete runs it)."""
        data = self.codec.note(rec, self.wall_offset)
        n = len(data)
        if self.cur.resv <= 0 and not self._usenext():
            self.fail("no reserved space left")
            return False
        f = self.cur
        self.buf.append(data)
        self.lsn += n
        f.resv -= n
        self.resv -= n
        f.unsynced = True
        self.nrec += 1
        if isinstance(rec, Cooldown):
            rec.file = f
            f.add_id(rec.id)
            f.refs += 1
            self.alive += n
        return True

    def forget(self, rec: Record) -> None:
        if isinstance(rec, Cooldown):  # (a flush-tube's record holds no file)
            self.drop_cooldown(rec)

    def body(self, j: Job) -> bytes | None:
        """j's body: in RAM, or read back by the bodies' policy (None: it
        could not be, and the policy said why)."""
        body = j.body
        return body if isinstance(body, bytes) else self.bodies.read(j, body)

    def _ratio(self) -> int:
        d = self.alive + self.resv
        return (self.nfile * self.filesize - d) // d if d else 0

    def _compact(self) -> None:
        for _ in range(self._ratio() - 1):
            head = self.head
            if head is None or head is self.cur or head.next is self.cur:
                return
            found = self._live_in(head)  # any job (or cooldown) will do
            if found is None or not self._copy_on(head, found):
                return

    def _copy_on(self, head: File, found: Job | Cooldown) -> bool:
        """Rewrite found's record after cur, so that head may go; False if
        it cannot be now."""
        if isinstance(found, Cooldown):
            n = self.reserve(self.codec.cooldown_size(found))
        else:
            # A body left in head comes back into RAM before the job is
            # dropped from head, which may then go (bodies.py)
            if self.bodies.moves and found.body.__class__ is not bytes \
                    and not self.bodies.fetch(head, found):
                return False
            n = self.reserve(self.codec.size(found))
        if not n:
            return False
        # head is held until the rewrite is in the buffer: let go between
        # the two, it would not wait for the rewrite (_gc)
        head.refs += 1
        self.nmig += 1
        if isinstance(found, Cooldown):
            self.drop_cooldown(found)
            self._note(found)
        else:
            self.drop(found)
            self._write(found)
        self.decref(head)
        return True

    def _live_in(self, f: File) -> Job | Cooldown | None:
        """A job (or a cooldown) whose latest full record is in f, or None.
        Stale ids at the end of f.ids are dropped on the way, at most
        LIVE_SCAN a call (the next write's compaction goes on), so no call is
        O(records)."""
        ids = f.ids
        find = self.find
        for _ in range(min(len(ids), LIVE_SCAN)):
            j = find(ids[-1])
            if j is not None and j.file is f:
                return j  # (its id stays until it has moved: a move may fail)
            ids.pop()
        return None

    def flush(self) -> None:
        """Hand buffered records to the kernel (one write per event); then
        the bodies' policy may let the bodies written leave RAM."""
        if not self.buf:
            return
        if self.use:
            buf = self.buf
            data = buf[0] if len(buf) == 1 else b"".join(buf)
            buf.clear()
            try:
                n = _write(self.cur.fd, data)
                if n < len(data):
                    view = memoryview(data)[n:]
                    while view:
                        view = view[_write(self.cur.fd, view):]
            except OSError as e:
                self.fail(f"write {self.cur.path}: {e.strerror}")
            else:
                self.written = self.lsn
                if not self.wantsync and self.retired.doomed:  # (-F: written is as safe as it gets)
                    self._unlink_upto(self.lsn)
                if self.zero_ahead:
                    f = self.cur
                    if self.used(f) + ZERO_AHEAD // 2 > f.zeroed:
                        self._zero_ahead(f)
                if self.tapped is not None:
                    self.tapped(data)
        if self.bodies.moves and (not self.buf or not self.use):
            self.bodies.flushed(self.use)  # (all written, or none will be)

    def _zero_ahead(self, f: File) -> None:
        """Write zeros past the records, within the preallocated size (see
        ZERO_AHEAD). Only a cost saved: a failure is left to the writes."""
        size = _whole_blocks(self.filesize)
        start = max(f.zeroed, self.used(f))
        stop = f.zeroed = min(start + ZERO_AHEAD, size)
        if stop > start:
            try:
                os.pwrite(f.fd, _ZEROS[:stop - start], start)
            except OSError:
                f.zeroed = size  # (not again for this file)

    def fail(self, why: str) -> None:
        """Stop using the binlog (a write or an fsync failed)."""
        self.warn(f"binlog disabled: {why}; jobs are kept in memory only")
        self.use = False

    def sync_targets(self) -> tuple[list[int], int | None, list[int]]:
        """What an fsync must cover: fds with unsynced data, the directory fd
        if a file was created, and the fds to close once it is done."""
        retired = self.retired.files
        if retired:
            fds = [f.fd for f in retired if f.unsynced]
            close = [f.fd for f in retired]
            retired.clear()
        else:  # (nearly every fsync: no file was retired since the last)
            fds, close = [], []
        cur = self.cur
        if cur is not None and cur.unsynced and cur.open:
            fds.append(cur.fd)
            cur.unsynced = False
        dirfd = None
        if self.new_files:
            if self.dirfd < 0:
                self._open_dir()  # (failed before: retried at each fsync)
            if self.dirfd >= 0:
                self.new_files = False
                dirfd = self.dirfd
        return fds, dirfd, close

    def close(self) -> None:
        """Close every fd this binlog holds, unsynced (the caller synced
        first, if it wanted to); it is not written again."""
        for old in self.retired.files:
            os.close(old.fd)
        self.retired.files.clear()
        f: File | None = self.head
        while f is not None:
            if f.open:
                os.close(f.fd)
                f.open = False
            f = f.next
        if self.dirfd >= 0:
            os.close(self.dirfd)
            self.dirfd = -1
        self.use = False
        self.bodies.close()

    def stats(self) -> tuple[int, int, int, int, int]:
        if not self.use or self.head is None:
            return (0, 0, self.nmig, self.nrec, self.filesize)
        return (self.head.seq, self.cur.seq, self.nmig, self.nrec, self.filesize)

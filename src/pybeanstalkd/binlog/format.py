"""The binlog's on-disk format: beanstalkd's version 7 (x86-64 layout), and v5.

A file is a native int 7, then records until EOF or an id of 0 (the zeros of
preallocation). A full record is int32 namelen, the tube name, an 80-byte
Jobrec and the body (with its CRLF); a short record is int32 0 and a Jobrec.

Jobrec padding holds whatever the writer had in memory. We put a marker and
the job's bury position there, so that the buried order survives restarts and
compaction (beanstalkd #668); beanstalkd ignores padding. A full record that
a --bodies-on-disk server writes carries, instead, the CRC-32 of its body
(marker MARK_CRC; a buried job's, MARK_BURIED_CRC, keeps its bury position
in the deadline field, which beanstalkd does not read for a buried job):
read back after a restart, from the file or into RAM, the body is checked
against what was written, not against what the file holds by then.
"""
from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Final

from ..core.job import OnDisk, on_disk, pack_counters
from ..core.tags import I64_MAX

if TYPE_CHECKING:
    from ..core.job import Job

VERSION: Final = 7
VERSION5: Final = 5
MAX_NAME: Final = 200

# id, pri, pad, delay, ttr, body_size, pad, created_at, deadline_at,
# reserve_ct, timeout_ct, release_ct, bury_ct, kick_ct, state, pad
JOBREC: Final = struct.Struct("<QIIqqiIqqIIIIIB3s")
FULL_HEAD: Final = struct.Struct("<i")
SHORT: Final = struct.Struct("<iQIIqqiIqqIIIIIB3s")
SHORT_SIZE: Final[int] = SHORT.size  # 84
JOBREC5: Final = struct.Struct("<QI4xQQi4xQQIIIIIB")  # 77 bytes, times in microseconds
MARK: Final = b"pyb"  # in the last padding bytes: the two 32-bit pads hold a bury position
MARK_CRC: Final = b"pyc"  # ... the first pad holds the body's CRC-32 (zlib.crc32), the second 0
# ... a buried job's: the first pad its body's CRC-32, the second 0, and
# the deadline (no buried job has one) its bury position
MARK_BURIED_CRC: Final = b"pyd"
CRC_MARKS: Final = (MARK_CRC, MARK_BURIED_CRC)

JOBREC_SIZE: Final = 80  # (a constant where JOBREC.size is an attribute lookup: full_size)
assert JOBREC.size == JOBREC_SIZE and SHORT_SIZE == 84 and JOBREC5.size == 77

# A job's states (core/job.py's)
INVALID: Final = 0
READY: Final = 1
RESERVED: Final = 2
BURIED: Final = 3
DELAYED: Final = 4

# A JOBREC as unpacked, with the five counters as one 20-byte field (their
# little-endian bytes are Job.counts): id, pri, pad, delay, ttr, body_size,
# pad, created_at, deadline_at, the counters, state, and the 3-byte pad.
Jobrec = tuple[int, int, int, int, int, int, int, int, int, bytes, int, bytes]
JOBREC_C = struct.Struct("<QIIqqiIqq20sB3s")
_NO_COUNTS = bytes(20)


class JobRecord:
    """One record as read_records yields it: a full record (name and body
    set) or a short one (name b"", body None). Times are the wall-clock ns
    the file holds; counts is the five counters packed as Job.counts."""

    __slots__ = ("offset", "name", "body", "id", "pri", "pad1", "delay", "ttr", "size",
                 "pad2", "created", "deadline", "counts", "state", "mark")

    offset: int  # where the record starts in its file (or frame)
    name: bytes  # the tube's name; b"" in a short record
    # A full record's body, CRLF included (an OnDisk when read_records'
    # ram_min leaves it in the file); None in a short record.
    body: bytes | OnDisk | None
    id: int
    pri: int
    # The two 32-bit pads: our bury position (MARK), or pad1 the body's
    # CRC-32 (MARK_CRC, MARK_BURIED_CRC); see bury_pos.
    pad1: int
    delay: int
    ttr: int
    size: int  # the body's size, as the record says
    pad2: int
    created: int
    deadline: int
    counts: int
    state: int
    mark: bytes  # the 3-byte pad: MARK, MARK_CRC... in a record of ours

    def __init__(self, offset: int, name: bytes, f: Jobrec,
                 body: bytes | OnDisk | None) -> None:
        self.offset, self.name, self.body = offset, name, body
        counters: bytes
        (self.id, self.pri, self.pad1, self.delay, self.ttr, self.size, self.pad2,
         self.created, self.deadline, counters, self.state, self.mark) = f
        self.counts = 0 if counters == _NO_COUNTS else int.from_bytes(counters, "little")

    def fields(self) -> Jobrec:
        """The Jobrec as unpacked (JOBREC_C): what packs back to its 80 bytes."""
        return (self.id, self.pri, self.pad1, self.delay, self.ttr, self.size, self.pad2,
                self.created, self.deadline, self.counts.to_bytes(20, "little"), self.state,
                self.mark)


# Where warnings go: called with the message (what it returns is not used).
Warn = Callable[[str], object]


def full_size(name: bytes, body_size: int) -> int:
    return 4 + len(name) + JOBREC_SIZE + body_size


def version_of(data: bytes, path: str, warn: Warn) -> int | None:
    """The file's format version, or None (with a warning) if we cannot read it."""
    if len(data) < 4:
        warn(f"{path}:0: unexpected EOF reading 4 bytes (got {len(data)}): version")
        return None
    version: int
    (version,) = FULL_HEAD.unpack_from(data, 0)
    if version not in (VERSION, VERSION5):
        warn(f"{path}: unknown version: {version}")
        return None
    return version


def read_records(data: bytes, version: int, max_job_size: int, path: str, warn: Warn,
                 st: list[int], ram_min: int | None = None) -> Iterator[JobRecord]:
    """Yield a JobRecord for each record of one file's bytes (v5 records
    are converted to v7's fields). A short record has an empty name and a
    body of None. Reading stops at EOF or at
    trailing zeros; on a bad or torn record it warns "<path>:<offset>:
    <reason>", sets st[1] = False and stops. st[0] is raised to the largest
    id of a full record, torn ones included: like the reference, such an id
    is used up. ram_min (--bodies-on-disk): a body of this size or more
    is not copied but yielded as an OnDisk into data."""
    read = _read_v7 if version == VERSION else _read_v5
    for rec in read(data, 4, max_job_size, path, warn, st, ram_min):
        if rec is None:
            st[1] = False
            return
        yield rec


def _eof(path: str, warn: Warn, pos: int, need: int, got: int, what: str) -> None:
    warn(f"{path}:{pos}: unexpected EOF reading {need} bytes (got {got}): {what}")


def _take(data: bytes, pos: int, size: int, path: str, warn: Warn, what: str) -> bytes | None:
    """data[pos:pos + size], or None (warned) if the file ends first."""
    got = data[pos:pos + size]
    if len(got) < size:
        _eof(path, warn, pos, size, len(got), what)
        return None
    return got


def _name(data: bytes, pos: int, namelen: int, start: int, path: str, warn: Warn,
          what: str) -> bytes | None:
    """A full record's tube name, or None (warned)."""
    if namelen > MAX_NAME:
        warn(f"{path}:{start}: namelen {namelen} exceeds maximum of {MAX_NAME}")
        return None
    if namelen < 0:
        warn(f"{path}:{start}: namelen {namelen} is negative")
        return None
    return _take(data, pos, namelen, path, warn, what)


def _body(data: bytes, pos: int, id_: int, size: int, start: int, max_job_size: int, path: str,
          warn: Warn, st: list[int], what: str, ram_min: int | None,
          crc: int | None = None) -> bytes | OnDisk | None:
    """A full record's body (an OnDisk if ram_min says so), or None
    (warned). Its id is used up even if the body is torn (st[0], see
    read_records). crc: the body's CRC-32 as its record gives it (MARK_CRC);
    without one, an OnDisk's is reckoned from the bytes read now. A body
    read into RAM that fails it is b"" (warned; see _read_v7)."""
    if size < 2 or size - 2 > max_job_size:
        warn(f"{path}:{start}: job {id_} is too big ({size} > {max_job_size})")
        return None
    if id_ > st[0]:
        st[0] = id_
    if ram_min is not None and size >= ram_min:
        if len(data) - pos < size:
            _eof(path, warn, pos, size, len(data) - pos, what)
            return None
        if data[pos + size - 2:pos + size] == b"\r\n":
            if crc is None:
                with memoryview(data) as view:
                    crc = zlib.crc32(view[pos:pos + size])
            return on_disk(crc, pos, size)
        body: bytes | None = b""  # (damaged: said below)
    else:
        body = _take(data, pos, size, path, warn, what)
    if body is not None and body[-2:] != b"\r\n":
        # Every body ends with the CRLF its put required. One that does not
        # has a damaged size: its bytes would be the records after it (an
        # inflated size) or a part of its own (a shrunk one).
        warn(f"{path}:{start}: job {id_} is damaged: its {size}-byte body does not end"
             f" with CRLF")
        return None
    if crc is not None and body is not None and zlib.crc32(body) != crc:
        # A body left on disk, now kept in RAM (a plain binlog, a higher
        # --body-ram-min), changed since: not the job's. Its record's
        # fields stand (the caller reads it as a short record), and so do
        # the records after it.
        warn(f"{path}:{start}: job {id_} is damaged: its body is not the one written"
             f" (CRC-32 mismatch); its record is read without it")
        st[1] = False
        return b""
    return body


# The readers yield None after warning about a bad or torn record, then stop.
def _read_v7(data: bytes, pos: int, max_job_size: int, path: str, warn: Warn,
             st: list[int], ram_min: int | None, resync: bool = True) -> Iterator[JobRecord | None]:
    """The records from pos on. Where zeros stand in for records (a file
    cut short in use, whose writer went on at its offset; a hole a crash
    left) and records follow them, reading goes on there (_cut): the
    reference stops at the zeros, or at the record the cut tore, and
    loses without a word every job logged after the cut."""
    while True:
        stop = yield from _run_v7(data, pos, max_job_size, path, warn, st, ram_min)
        if stop is None:
            return
        start, zeros = stop
        at = _cut(data, start, zeros, max_job_size, path, warn, st) if resync else None
        if at is None:
            if not zeros:
                yield None  # (a bad record: warned)
            return
        pos = at


def _run_v7(data: bytes, pos: int, max_job_size: int, path: str, warn: Warn, st: list[int],
            ram_min: int | None) -> Generator[JobRecord, None, tuple[int, bool] | None]:
    """Records from pos until the file's end (None), zeros where a record
    should be ((its offset, True)) or a bad record, warned ((offset, False))."""
    n = len(data)
    unpack = JOBREC_C.unpack_from
    unpack_len = FULL_HEAD.unpack_from
    while pos < n:
        start = pos
        if n - pos < 4:
            _eof(path, warn, pos, 4, n - pos, "namelen")
            return start, False
        (namelen,) = unpack_len(data, pos)
        pos += 4
        if namelen:
            name = _name(data, pos, namelen, start, path, warn, "tube name")
            if name is None:
                return start, False
            pos += namelen
        else:
            name = b""
        if n - pos < 80:
            _eof(path, warn, pos, 80, n - pos, "job struct")
            return start, False
        f = unpack(data, pos)
        pos += 80
        if f[0] == 0:
            return start, True  # (as a rule the zeros of preallocation, to the end)
        if f[10] > DELAYED:
            warn(f"{path}:{start}: unknown job state: {f[10]}")
            return start, False
        body = None
        if namelen:
            body = _body(data, pos, f[0], f[5], start, max_job_size, path, warn, st, "job body",
                         ram_min, f[2] if f[11] in CRC_MARKS else None)
            if body is None:
                return start, False
            pos += f[5]
            if not body:  # (it failed its CRC) the record's fields, as a short record's
                yield JobRecord(start, b"", f, None)
                continue
        yield JobRecord(start, name, f, body)
    return None


CUT: Final[bytes] = bytes(SHORT_SIZE)  # a cut's zeros, at least: valid records hold shorter runs
RESYNC_TRIES: Final = 64  # non-zero bytes _resync looks at before giving up
_NON_ZERO = re.compile(rb"[^\0]")


def _cut(data: bytes, start: int, zeros: bool, max_job_size: int, path: str, warn: Warn,
         st: list[int]) -> int | None:
    """Where records go on after a cut at start (zeros: there were zeros
    where a record should be; else the record there was bad, and a cut is
    a run of CUT zeros after it), or None: no records follow zeros."""
    n = len(data)
    z = start if zeros else data.find(CUT, start)
    if z < 0 or data.count(0, z) == n - z:
        return None  # (zeros to the end: preallocation's)
    at = _resync(data, z, max_job_size)
    st[1] = False
    if at is None:
        if zeros:
            warn(f"{path}:{start}: zeros where a record should be, then bytes that are no"
                 " records: the file was cut or overwritten in use; read no further")
        return None
    warn(f"{path}:{start}: records lost up to {at}, zeros from {z} (the file was cut or"
         f" overwritten in use): reading on at {at}")
    return at


def _resync(data: bytes, start: int, max_job_size: int) -> int | None:
    """Where records go on after zeros at start, or None. The first
    non-zero byte is a full record's namelen, or in a short record's id
    (4 zero bytes of namelen before it, and the id's low bytes may be
    zeros too): a record starts there or 4 to 11 bytes before. The first
    of these where two records read whole (or one, then the file's end) is
    taken; the next non-zero byte is tried after them."""
    p = start
    for _ in range(RESYNC_TRIES):
        m = _NON_ZERO.search(data, p)
        if m is None:
            return None
        q: int = m.start()
        for back in (0, 4, 5, 6, 7, 8, 9, 10, 11):
            at = q - back
            if at >= start and _reads_on(data, at, max_job_size):
                return at
        p = q + 1
    return None


def _reads_on(data: bytes, at: int, max_job_size: int) -> bool:
    recs = _read_v7(data, at, max_job_size, "", _quiet, [0, True], None, resync=False)
    return next(recs, None) is not None and next(recs, False) is not None


def _quiet(message: str) -> None:
    """A probe's warnings (_reads_on): not said."""


def _read_v5(data: bytes, pos: int, max_job_size: int, path: str, warn: Warn,
             st: list[int], ram_min: int | None) -> Iterator[JobRecord | None]:
    n = len(data)
    while pos < n:
        start = pos
        if n - pos < 8:
            _eof(path, warn, pos, 8, n - pos, "v5 namelen")
            yield None
            return
        namelen = int.from_bytes(data[pos:pos + 8], "little")
        pos += 8
        name = _name(data, pos, namelen, start, path, warn, "v5 tube name")
        if name is None:
            yield None
            return
        pos += namelen
        if n - pos < JOBREC5.size:
            _eof(path, warn, pos, JOBREC5.size, n - pos, "v5 job struct")
            yield None
            return
        (id_, pri, delay, ttr, size, created, deadline, *counts, state) = (
            JOBREC5.unpack_from(data, pos))
        pos += JOBREC5.size
        if id_ == 0:
            return
        if state > DELAYED:
            warn(f"{path}:{start}: unknown v5 job state: {state}")
            yield None
            return
        f = (id_, pri, 0, delay * 1000, ttr * 1000, size, 0, created * 1000,
             deadline * 1000, pack_counters(*counts).to_bytes(20, "little"), state, b"\0\0\0")
        body = None
        if namelen:
            body = _body(data, pos, id_, size, start, max_job_size, path, warn, st, "v5 job body",
                         ram_min)
            if body is None:
                yield None
                return
            pos += size
        yield JobRecord(start, name, f, body)


def bury_pos(r: JobRecord, seq: int) -> int:
    """Where the job was buried: stored by us, else this record's position
    (in file seq)."""
    mark = r.mark
    if mark == MARK:
        return r.pad2 << 32 | r.pad1
    return r.deadline if mark == MARK_BURIED_CRC else seq << 32 | r.offset


def wall(t: int, wall_offset: int) -> int:
    """A monotonic time as the wall ns a record holds: in an int64, so a
    time past its last one (a held job's deadline from 2043 on, a delay of
    2**32 - 1 s from 2126) is that last one rather than a struct.error."""
    t += wall_offset
    return t if t < I64_MAX else I64_MAX


def encode(j: Job, full: bool, wall_offset: int, body: bytes | None = None, crc: int = -1) -> bytes:
    """A record for job j in its current state (times converted to wall clock).
    body: j's, when j.body is not its bytes (OnDisk: a full record needs them).
    crc: the body's CRC-32 for a full record to carry (MARK_CRC), or -1."""
    if body is None:
        own = j.body
        if isinstance(own, bytes):
            body = own
        elif full:
            raise TypeError(f"job {j.id}'s body is in the binlog: a full record needs its bytes")
        else:
            body = b""  # (a short record holds no body: len(j.body) is its size)
    state = j.state
    if crc >= 0 and full:
        return _encode_crc(j, body, crc, wall_offset)
    if full and state == READY and not j.counts:
        # A put's record (or one compaction moves): no deadline, no bury
        # position, counters zero. Fewer fields to pack; the same bytes.
        name = j.tube.name
        n = len(name)
        pack = _FRESH[n] if n <= MAX_NAME else None
        if pack is None:
            pack = struct.Struct("<i%dsQI4xqqi4xq28x4s" % n).pack
            if n <= MAX_NAME:
                _FRESH[n] = pack
        times = j.times
        return pack(n, name, j.id, j.pri, times.delay, times.ttr, len(body),
                    j.created + wall_offset, _FRESH_END) + body
    deadline = wall(j.deadline, wall_offset) if state in (DELAYED, RESERVED) else 0
    pos = j.deadline if state == BURIED else 0  # the bury position, see files.py
    times = j.times
    delay, ttr = times.delay, times.ttr
    # Job.counts packs the five uint32 counters in Jobrec order: its 20
    # little-endian bytes are the record's counter fields.
    counts = j.counts.to_bytes(20, "little")
    if not full:
        return _SHORT_PACK(0, j.id, j.pri, pos & 0xFFFFFFFF, delay, ttr, len(j.body),
                           pos >> 32, j.created + wall_offset, deadline, counts, state, MARK)
    name = j.tube.name
    head = _FULL.get(len(name))
    if head is None:
        head = _FULL[len(name)] = struct.Struct("<i%ds%s" % (len(name), _OUT[1:]))
    return head.pack(len(name), name, j.id, j.pri, pos & 0xFFFFFFFF, delay, ttr, len(body),
                     pos >> 32, j.created + wall_offset, deadline, counts, state, MARK) + body


def _encode_crc(j: Job, body: bytes, crc: int, wall_offset: int) -> bytes:
    """A full record carrying its body's CRC-32 (a buried job's, with its
    bury position where a deadline would be: MARK_BURIED_CRC)."""
    state = j.state
    mark = MARK_CRC
    if state == BURIED:
        deadline, mark = j.deadline, MARK_BURIED_CRC  # (placed: Wal._write)
    else:
        deadline = wall(j.deadline, wall_offset) if state in (DELAYED, RESERVED) else 0
    times = j.times
    delay, ttr = times.delay, times.ttr
    name = j.tube.name
    head = _FULL.get(len(name))
    if head is None:
        head = _FULL[len(name)] = struct.Struct("<i%ds%s" % (len(name), _OUT[1:]))
    return head.pack(len(name), name, j.id, j.pri, crc, delay, ttr, len(body), 0,
                     j.created + wall_offset, deadline, j.counts.to_bytes(20, "little"), state,
                     mark) + body


_OUT: Final[str] = JOBREC_C.format
_SHORT_OUT: Final = struct.Struct("<i" + _OUT[1:])
assert _SHORT_OUT.size == SHORT_SIZE
# its pack, bound once as a put's are (_FRESH): a delete's record is
# packed before its fsync, and a method called by name is looked up first
_SHORT_PACK: Final[Callable[..., bytes]] = _SHORT_OUT.pack
_FULL: Final[dict[int, struct.Struct]] = {}  # a full record's head, by tube name length
# the same, zero fields left out (see encode); the bound pack, called
# without a method lookup (a -f0 put encodes one before its fsync), in a
# list by the name's length: an index, where a dict's get hashed the key
_FRESH: Final[list[Callable[..., bytes] | None]] = [None] * (MAX_NAME + 1)
# ... whose last four bytes, the state and the mark, are the same in each:
# one field to pack, not two
_FRESH_END: Final = bytes((READY,)) + MARK

"""The binlog's on-disk format: beanstalkd's version 7 (x86-64 layout), and v5.

A file is a native int 7, then records until EOF or an id of 0 (the zeros of
preallocation). A full record is int32 namelen, the tube name, an 80-byte
Jobrec and the body (with its CRLF); a short record is int32 0 and a Jobrec.

Jobrec padding holds whatever the writer had in memory. We put a marker and
the job's bury position there, so that the buried order survives restarts and
compaction (beanstalkd #668); beanstalkd ignores padding.
"""
from __future__ import annotations

import struct

VERSION = 7
VERSION5 = 5
MAX_NAME = 200

# id, pri, pad, delay, ttr, body_size, pad, created_at, deadline_at,
# reserve_ct, timeout_ct, release_ct, bury_ct, kick_ct, state, pad
JOBREC = struct.Struct("<QIIqqiIqqIIIIIB3s")
FULL_HEAD = struct.Struct("<i")
SHORT = struct.Struct("<iQIIqqiIqqIIIIIB3s")
SHORT_SIZE = SHORT.size  # 84
JOBREC5 = struct.Struct("<QI4xQQi4xQQIIIIIB")  # 77 bytes, times in microseconds
MARK = b"pyb"  # in the last padding bytes: the two 32-bit pads hold a bury position

assert JOBREC.size == 80 and SHORT_SIZE == 84 and JOBREC5.size == 77

INVALID, READY, RESERVED, BURIED, DELAYED = 0, 1, 2, 3, 4


class Rec:
    """One decoded record."""

    __slots__ = ("name", "id", "pri", "delay", "ttr", "size", "created", "deadline",
                 "reserves", "timeouts", "releases", "buries", "kicks", "state",
                 "bury_pos", "body", "offset")


def full_size(name: bytes, body_size: int) -> int:
    return 4 + len(name) + JOBREC.size + body_size


class ReadError(Exception):
    def __init__(self, offset: int, msg: str):
        super().__init__(msg)
        self.offset = offset


def version_of(data: bytes, path: str, warn) -> int | None:
    """The file's format version, or None (with a warning) if we cannot read it."""
    if len(data) < 4:
        warn(f"{path}:0: unexpected EOF reading 4 bytes (got {len(data)}): version")
        return None
    (version,) = FULL_HEAD.unpack_from(data, 0)
    if version not in (VERSION, VERSION5):
        warn(f"{path}: unknown version: {version}")
        return None
    return version


def read_records(data: bytes, version: int, max_job_size: int, path: str, warn, ids):
    """Yield the records of one file's bytes; warn and stop at the first error.

    Returns True at EOF or at trailing zeros; on a bad or torn record it calls
    warn("<path>:<offset>: <reason>") and returns False. ids[0] is raised to
    the largest id of a full record, torn ones included: like the reference,
    such an id is used up."""
    if version == VERSION:
        return (yield from _read_v7(data, 4, max_job_size, path, warn, ids))
    return (yield from _read_v5(data, 4, max_job_size, path, warn, ids))


def _eof(path, warn, pos, need, got, what):
    warn(f"{path}:{pos}: unexpected EOF reading {need} bytes (got {got}): {what}")
    return False


def _read_v7(data, pos, max_job_size, path, warn, ids):
    n = len(data)
    unpack = JOBREC.unpack_from
    while pos < n:
        start = pos
        if n - pos < 4:
            return _eof(path, warn, pos, 4, n - pos, "namelen")
        (namelen,) = FULL_HEAD.unpack_from(data, pos)
        pos += 4
        if namelen > MAX_NAME:
            warn(f"{path}:{start}: namelen {namelen} exceeds maximum of {MAX_NAME}")
            return False
        if namelen < 0:
            warn(f"{path}:{start}: namelen {namelen} is negative")
            return False
        name = data[pos:pos + namelen]
        if len(name) < namelen:
            return _eof(path, warn, pos, namelen, len(name), "tube name")
        pos += namelen
        if n - pos < JOBREC.size:
            return _eof(path, warn, pos, JOBREC.size, n - pos, "job struct")
        f = unpack(data, pos)
        pos += JOBREC.size
        if f[0] == 0:
            return True  # trailing zeros of preallocation
        r = Rec()
        (r.id, r.pri, pad1, r.delay, r.ttr, r.size, pad2, r.created, r.deadline,
         r.reserves, r.timeouts, r.releases, r.buries, r.kicks, r.state, pad3) = f
        r.name = name
        r.offset = start
        r.bury_pos = (pad2 << 32 | pad1) if pad3 == MARK else None
        r.body = None
        if r.state > DELAYED:
            warn(f"{path}:{start}: unknown job state: {r.state}")
            return False
        if namelen:
            if r.size < 2 or r.size - 2 > max_job_size:
                warn(f"{path}:{start}: job {r.id} is too big ({r.size} > {max_job_size})")
                return False
            ids[0] = max(ids[0], r.id)
            r.body = data[pos:pos + r.size]
            if len(r.body) < r.size:
                return _eof(path, warn, pos, r.size, len(r.body), "job body")
            pos += r.size
        yield r
    return True


def _read_v5(data, pos, max_job_size, path, warn, ids):
    n = len(data)
    while pos < n:
        start = pos
        if n - pos < 8:
            return _eof(path, warn, pos, 8, n - pos, "v5 namelen")
        namelen = int.from_bytes(data[pos:pos + 8], "little")
        pos += 8
        if namelen > MAX_NAME:
            warn(f"{path}:{start}: namelen {namelen} exceeds maximum of {MAX_NAME}")
            return False
        name = data[pos:pos + namelen]
        if len(name) < namelen:
            return _eof(path, warn, pos, namelen, len(name), "v5 tube name")
        pos += namelen
        if n - pos < JOBREC5.size:
            return _eof(path, warn, pos, JOBREC5.size, n - pos, "v5 job struct")
        f = JOBREC5.unpack_from(data, pos)
        pos += JOBREC5.size
        if f[0] == 0:
            return True
        r = Rec()
        (r.id, r.pri, delay, ttr, r.size, created, deadline,
         r.reserves, r.timeouts, r.releases, r.buries, r.kicks, r.state) = f
        r.delay, r.ttr = delay * 1000, ttr * 1000
        r.created, r.deadline = created * 1000, deadline * 1000
        r.name, r.offset, r.bury_pos, r.body = name, start, None, None
        if r.state > DELAYED:
            warn(f"{path}:{start}: unknown v5 job state: {r.state}")
            return False
        if namelen:
            if r.size < 2 or r.size - 2 > max_job_size:
                warn(f"{path}:{start}: job {r.id} is too big ({r.size} > {max_job_size})")
                return False
            ids[0] = max(ids[0], r.id)
            r.body = data[pos:pos + r.size]
            if len(r.body) < r.size:
                return _eof(path, warn, pos, r.size, len(r.body), "v5 job body")
            pos += r.size
        yield r
    return True


def encode(j, full: bool, wall_offset: int) -> bytes:
    """A record for job j in its current state (times converted to wall clock)."""
    state = j.state
    deadline = j.deadline + wall_offset if state in (DELAYED, RESERVED) else 0
    pos = j.bury_pos if state == BURIED else 0
    fields = (j.id, j.pri, pos & 0xFFFFFFFF, j.delay, j.ttr, len(j.body), pos >> 32,
              j.created + wall_offset, deadline, j.reserves, j.timeouts, j.releases,
              j.buries, j.kicks, state, MARK)
    if not full:
        return SHORT.pack(0, *fields)
    name = j.tube.name
    return b"".join((FULL_HEAD.pack(len(name)), name, JOBREC.pack(*fields), j.body))

"""The put tags' records in the binlog (--extensions; core/puttags.py, core/tags.py).

They are short records that beanstalkd skips: a short record whose id it
has not seen a full record for is ignored (file.c, readrec: "the full
record was in an earlier file that has been deleted"). Our ids for them
start at 2**63 (tags.EXT_ID), which no job reaches, so the reference reads
a directory we wrote, serves its plain jobs and passes over the rest; and
a follower gets them in the shipped bytes like any other record.

A message is cut into chunks of 68 bytes, each an 84-byte short record:

    int32 0 | u64 EXT_ID | index << 32 | length | 68 bytes | state 0 | "pyx"

(the state byte stays a valid one; "pyx" in the padding marks it ours).
A message's chunks are written in one piece; a torn or partial message is
dropped. Messages:

    TAGS   1 | u64 job id | u32 ttl | u32 limit | u32 tries | idp grp aft con
           written just before the job's every full record, so the tags
           move with it through compaction and leave with its file
    COOL   2 | u64 deleted job's id | i64 end (wall ns) | tube | key
           a cooldown; it keeps its file until it ends, and compaction
           copies it on like a job
    CLEAR  3 | u64 first id not cleared | tube
           a flush-tube's end: the tube's cooldowns, and the keys of its
           jobs below that id, are gone

(strings: a length byte, then the bytes; an empty one is absent).
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Protocol

from . import format as F
from ..core.tagged import policy
from ..core.puttags import Tags, void_idp
from ..core.tags import EXT_ID, Clear, Cooldown

__all__ = ["EXT_ID", "Reader", "Recovered", "chunks", "decode", "is_ours", "note_msg"]

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..core.job import Job
    from ..core.queue import Queue
    from .file import File

CHUNK = struct.Struct("<iQ68sB3s")
PAYLOAD = 68
MARK = b"pyx"
TAGS, COOL, CLEAR = 1, 2, 3
_TAGS = struct.Struct("<BQIII")
_COOL = struct.Struct("<BQq")
_CLEAR = struct.Struct("<BQ")
_M32 = 0xFFFFFFFF

assert CHUNK.size == F.SHORT_SIZE


def _s(b: bytes | None) -> bytes:
    b = b or b""
    return bytes((len(b),)) + b


def chunks(msg: bytes) -> bytes:
    n = len(msg)
    return b"".join(CHUNK.pack(0, EXT_ID | (i // PAYLOAD) << 32 | n, msg[i:i + PAYLOAD], 0, MARK)
                    for i in range(0, n, PAYLOAD))


def chunked_size(n: int) -> int:
    return -(-n // PAYLOAD) * F.SHORT_SIZE


def tags_msg(id_: int, t: Tags) -> bytes:
    return (_TAGS.pack(TAGS, id_, t.ttl, t.limit, t.tries)
            + _s(t.idp) + _s(t.grp) + _s(t.aft) + _s(t.con))


def is_ours(r: F.JobRecord) -> bool:
    return r.id >= EXT_ID and r.mark == MARK


def note_msg(rec: Cooldown | Clear, wall_offset: int) -> bytes:
    """The records of a cooldown (its end in wall ns), or of a flush-tube's end."""
    if isinstance(rec, Cooldown):
        return chunks(_COOL.pack(COOL, rec.orig, F.wall(rec.expires, wall_offset))
                      + _s(rec.tube) + _s(rec.key))
    return chunks(_CLEAR.pack(CLEAR, rec.last) + _s(rec.tube))


class Reader:
    """Puts a stream of records' chunks back into messages, and applies
    them: at recovery (to what will be loaded), or on a follower (to its
    queue, live)."""

    def __init__(self) -> None:
        self.msg = bytearray()
        self.want = -1  # the message's length; -1: between messages
        self.next = 0  # the chunk index expected

    def chunk(self, r: F.JobRecord) -> bytes | None:
        """Take one chunk; a whole message once its last chunk is in."""
        index, n = r.id >> 32 & 0x7FFFFFFF, r.id & _M32
        payload = F.JOBREC_C.pack(*r.fields())[8:8 + PAYLOAD]
        if index == 0:
            self.msg = bytearray()
            self.want, self.next = n, 0
        if index != self.next or n != self.want:
            self.want = -1  # (a torn message: dropped)
            return None
        self.msg += payload
        self.next += 1
        if len(self.msg) < n:
            return None
        self.want = -1
        return bytes(self.msg[:n])


def decode(msg: bytes) -> tuple[int, tuple[Any, ...]]:
    """(kind, fields): TAGS (id, Tags); COOL (orig, end wall ns, tube, key);
    CLEAR (last, tube). ValueError if it does not parse."""
    try:
        kind = msg[0]
        if kind == TAGS:
            _, id_, ttl, limit, tries = _TAGS.unpack_from(msg)
            idp, grp, aft, con = _strings(msg, _TAGS.size, 4)
            return kind, (id_, Tags(idp, ttl, con, limit, grp, aft, tries))
        if kind == COOL:
            _, orig, end = _COOL.unpack_from(msg)
            tube, key = _strings(msg, _COOL.size, 2)
            return kind, (orig, end, tube, key)
        if kind == CLEAR:
            _, last = _CLEAR.unpack_from(msg)
            (tube,) = _strings(msg, _CLEAR.size, 1)
            return kind, (last, tube)
    except (struct.error, IndexError):
        pass
    raise ValueError("a bad record of ours")


def _strings(msg: bytes, pos: int, n: int) -> list[bytes | None]:
    out: list[bytes | None] = []
    for _ in range(n):
        size = msg[pos]
        s = msg[pos + 1:pos + 1 + size]
        if len(s) != size:
            raise IndexError
        out.append(s or None)
        pos += 1 + size
    return out


class Books(Protocol):
    """What Recovered keeps its counts in: the binlog it recovers
    (files.py's Wal, which writes these records through codec.py, and so
    is above this module)."""

    alive: int  # bytes of the live records: a job's tags, a cooldown's

    def drop_cooldown(self, c: Cooldown) -> None: ...  # its record counts no more


class Recovered:
    """Recovery's side of the records of ours (apply.py gives them to its
    Loader, which hands them here): a job's tags, until its full record
    comes next (take), and the cooldowns, each keeping the file it was read
    from (as a job's full record does)."""

    def __init__(self, wal: Books) -> None:
        self.wal = wal
        self.tags: dict[int, Tags] = {}  # by job id, until taken
        self.cools: dict[tuple[bytes, bytes], Cooldown] = {}
        self.last_id = EXT_ID  # the cooldowns' ids (compaction finds them by id)

    def tagged(self, id_: int, tags: Tags, size: int) -> None:
        self.tags[id_] = tags
        self.wal.alive += size  # (with the full record after it)

    def take(self, j: Job) -> None:
        """j's full record is read: it takes the tags read just before it,
        if any (else it keeps those it had): the Wal counts them in its
        record's size from now on."""
        tags = self.tags.pop(j.id, None)
        if tags is not None:
            j.tags = tags

    def cooled(self, orig: int, end: int, tube: bytes, key: bytes, f: File) -> None:
        old = self.cools.pop((tube, key), None)
        if old is not None:
            self.wal.drop_cooldown(old)
        self.last_id += 1
        cd = Cooldown(self.last_id, tube, key, orig, end)  # (end: wall ns, for now)
        self.cools[(tube, key)] = cd
        cd.file = f
        f.add_id(cd.id)
        f.refs += 1
        self.wal.alive += len(note_msg(cd, 0))

    def cleared(self, last: int, tube: bytes, jobs: Iterable[Job]) -> None:
        for k in [k for k in self.cools if k[0] == tube]:
            self.wal.drop_cooldown(self.cools.pop(k))
        for j in jobs:
            tags = j.tags
            if tags is not None and tags.idp is not None and j.id < last and j.tube.name == tube:
                j.tags = void_idp(tags)

    def install(self, q: Queue, wall_offset: int, now: int) -> None:
        """Hand the cooldowns not yet ended to q, before it loads the jobs
        (which have their tags); tags whose job's full record never came
        go."""
        p = policy(q)
        ext = p.ext
        self.tags.clear()
        ext.next_ext = self.last_id
        for cd in self.cools.values():
            cd.expires -= wall_offset
            if cd.expires <= now:
                self.wal.drop_cooldown(cd)
            else:
                p.keys.cooling.keep(q, cd)

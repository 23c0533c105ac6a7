"""A job: its fields, its packed counters, and the shared (delay, ttr) pairs.

Kept small because a server may hold millions: 10 slots (112 bytes with the
object headers), counters packed into one int, the (delay, ttr) pair shared
between jobs, and the bury position stored where a buried job has no deadline.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    from .tube import Tube

# A job's states: the binlog's values
INVALID: Final = 0
READY: Final = 1
RESERVED: Final = 2
BURIED: Final = 3
DELAYED: Final = 4
STATE_NAMES: Final = {READY: b"ready", RESERVED: b"reserved", BURIED: b"buried",
               DELAYED: b"delayed", INVALID: b"invalid"}
M32: Final = 0xFFFFFFFF
# Job.counts packs the five per-job counters as uint32 fields (they wrap, as
# the reference's do). A job never reserved has counts 0: a shared small int.
RESERVES: Final = 0
TIMEOUTS: Final = 32
RELEASES: Final = 64
BURIES: Final = 96
KICKS: Final = 128
UNPLACED: Final = -1  # Job.deadline of a buried job the binlog has not positioned
# What a stored job costs beyond its body's bytes, for --max-memory: the Job,
# its id map and heap or run entries, the body's bytes-object header and
# allocator rounding; a reservation adds its TTR heap entry and two dict
# entries. Measured as RSS growth per job (docs/PERFORMANCE.md, memory cap).
JOB_OVERHEAD: Final = 400
RESERVED_OVERHEAD: Final = 224


def bump(counts: int, field: int) -> int:
    """counts with the uint32 counter at bit `field` incremented, wrapping."""
    if (counts >> field) & M32 == M32:
        return counts & ~(M32 << field)
    return counts + (1 << field)


def counters(j: Job) -> tuple[int, int, int, int, int]:
    """(reserves, timeouts, releases, buries, kicks)"""
    c = j.counts
    return c & M32, c >> 32 & M32, c >> 64 & M32, c >> 96 & M32, c >> 128


def pack_counters(reserves: int, timeouts: int, releases: int, buries: int, kicks: int) -> int:
    return reserves | timeouts << 32 | releases << 64 | buries << 96 | kicks << 128


_TIMES: Final[dict[tuple[int, int], tuple[int, int]]] = {}


def times(delay: int, ttr: int) -> tuple[int, int]:
    """(delay, ttr), one shared tuple per pair: most jobs use a few pairs."""
    pair = (delay, ttr)
    shared = _TIMES.get(pair)
    if shared is None:
        shared = pair
        if len(_TIMES) < 4096:
            _TIMES[pair] = pair
    return shared


# An int, so that it costs no more than one (a native class would hold one
# as well): compiled, an ordinary (non-native) class.
@mypyc_attr(native_class=False)
class OnDisk(int):
    """A body left in the binlog (--bodies-on-disk): the CRC-32 of its
    bytes << 64 | where it starts in its job's file (Job.file, under 2**31:
    -s is a C int) << 32 | its size, CRLF included. len() is that size, as
    a body's is, so that what counts bytes works on either; what needs the
    bytes asks the store (Store.body), which checks them against the CRC.
    64 bytes, where the body's own bytes object costs 33 more than its
    size."""

    __slots__ = ()

    def __len__(self) -> int:
        return self & M32

    @property
    def offset(self) -> int:
        return self >> 32 & M32

    @property
    def crc(self) -> int:
        return self >> 64


def on_disk(crc: int, offset: int, size: int) -> OnDisk:
    """Where a body is in its file, and its bytes' CRC-32 (zlib.crc32)."""
    return OnDisk(crc << 64 | offset << 32 | size)


class Job:
    # 10 slots: with the GC and object headers, 112 bytes (a pymalloc class).
    # The reserving connection is found through Queue.owners (held.py), not a slot.
    __slots__ = ("id", "tube", "pri", "times", "body", "state", "created",
                 "deadline", "counts", "file")

    def __init__(self, id_: int, tube: Tube, pri: int, delay: int, ttr: int, body: bytes | OnDisk,
                 created: int) -> None:
        self.id = id_
        self.tube = tube
        self.pri = pri
        # ns: the last put or release delay, and ttr (times(), inline)
        self.times = _TIMES.get((delay, ttr)) or times(delay, ttr)
        # bytes, with the trailing CRLF. With --bodies-on-disk, an OnDisk
        # once the binlog holds it (binlog/bodies.py). len() is the body's
        # size either way; what needs the bytes asks the store (Store.body).
        self.body: bytes | OnDisk = body
        self.state = INVALID
        self.created = created
        # ns: when reserved, TTR expiry; when delayed, ready time. When buried:
        # the binlog position of the record that buried it (or UNPLACED).
        # 0 only until the job is first reserved (see Queue.run_job).
        self.deadline = 0
        self.counts = 0  # see pack_counters
        # The binlog file holding the job's latest full record (binlog/files.py:
        # File). Any: core/ may not import binlog/, not even for its types.
        self.file: Any = None

    @property
    def delay(self) -> int:
        return self.times[0]

    @property
    def ttr(self) -> int:
        return self.times[1]

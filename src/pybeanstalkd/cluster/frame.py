"""Replication frames: what a leader ships to its followers (issue 13).

A frame carries one group-commit batch: the binlog v7 records the leader
wrote in one flush cycle, byte for byte. Around them:

    magic "pbr1" | epoch u64 | seq u64 | length u32 | crc32 u32 | records

A snapshot carries a full record of every job the leader holds, as of its
batch `seq`, in parts: zero or more frames of magic "pbp1", then the last
of magic "pbs1", all with that epoch and seq. A follower replaces what it
has with it, and the stream goes on from seq + 1. A follower acks what it
has on disk with

    magic "pba1" | epoch u64 | seq u64

- epoch: the revision of the leader key in etcd, a fencing number etcd
  hands out, not we. A follower that has seen epoch E refuses any frame
  of an older one, so a deposed leader cannot collect a full ack.
- seq: the batch's number within its epoch, from 1, with no gaps; a gap
  or a repeat means the follower must catch up from a snapshot.
- crc32: over the header's first 24 bytes and the records.

Before any frame, a link proves the cluster's secret (kept in etcd): the
follower sends a nonce, "pbn1" | 16 bytes; the leader answers with its
epoch and an HMAC-SHA256 of both under the secret, "pbh1" | epoch u64 |
mac. A follower takes frames only after a valid answer, and only of that
epoch: whoever can reach the peer port but not etcd cannot feed it.

Pure: bytes in, frames and verdicts out; no I/O, no clock.
"""
from __future__ import annotations

import hashlib
import hmac
import struct
import zlib
from dataclasses import dataclass

MAGIC = b"pbr1"
SNAPSHOT = b"pbs1"
PART = b"pbp1"  # a snapshot's part, not its last
HEAD = struct.Struct("<4sQQII")
ACK = struct.Struct("<4sQQ")
ACK_MAGIC = b"pba1"
HEAD_SIZE = HEAD.size  # 28
# Bounds what a reader buffers before it can check a frame's checksum.
MAX_RECORDS = 1 << 30


class FrameError(Exception):
    """The byte stream is not frames: the connection cannot be trusted."""


@dataclass(frozen=True, slots=True)
class Frame:
    epoch: int
    seq: int
    records: bytes
    snapshot: bool = False
    last: bool = True  # (a snapshot's part: False but for the last)


def encode(epoch: int, seq: int, records: bytes, snapshot: bool = False,
           last: bool = True) -> bytes:
    """A batch (seq from 1), or a snapshot's part as of batch seq (from 0)."""
    if not (0 < epoch < 1 << 64 and (0 if snapshot else 1) <= seq < 1 << 64):
        raise ValueError("epoch and seq must be u64, and not 0 (but a snapshot's seq)")
    if len(records) > MAX_RECORDS:
        raise ValueError("batch too big")
    magic = (SNAPSHOT if last else PART) if snapshot else MAGIC
    head = struct.pack("<4sQQI", magic, epoch, seq, len(records))
    crc = zlib.crc32(records, zlib.crc32(head))
    return head + struct.pack("<I", crc) + records


class Reader:
    """Frames out of a byte stream, whatever the reads' boundaries."""

    def __init__(self, max_records: int = MAX_RECORDS):
        self.buf = bytearray()
        self.max_records = max_records

    def feed(self, data: bytes) -> list[Frame]:
        buf = self.buf
        buf += data
        out = []
        pos = 0
        while len(buf) - pos >= HEAD_SIZE:
            magic, epoch, seq, n, crc = HEAD.unpack_from(buf, pos)
            if magic != MAGIC and magic != SNAPSHOT and magic != PART:
                raise FrameError(f"bad magic {bytes(magic)!r}")
            if n > self.max_records:
                raise FrameError(f"frame of {n} bytes, over {self.max_records}")
            end = pos + HEAD_SIZE + n
            if len(buf) < end:
                break
            records = bytes(buf[pos + HEAD_SIZE:end])
            if zlib.crc32(records, zlib.crc32(buf[pos:pos + HEAD_SIZE - 4])) != crc:
                raise FrameError(f"bad checksum in frame {epoch}/{seq}")
            snapshot = magic != MAGIC
            if not epoch or not (seq or snapshot):
                raise FrameError(f"frame {epoch}/{seq}: epoch and seq start at 1")
            out.append(Frame(epoch, seq, records, snapshot, magic != PART))
            pos = end
        del buf[:pos]
        return out


NONCE = struct.Struct("<4s16s")
NONCE_MAGIC = b"pbn1"
HELLO = struct.Struct("<4sQ32s")
HELLO_MAGIC = b"pbh1"


def encode_nonce(nonce: bytes) -> bytes:
    return NONCE.pack(NONCE_MAGIC, nonce)


def read_nonce(data: bytes) -> bytes:
    magic, nonce = NONCE.unpack(data)
    if magic != NONCE_MAGIC:
        raise FrameError(f"bad nonce magic {bytes(magic)!r}")
    return nonce


def _mac(secret: bytes, nonce: bytes, epoch: int) -> bytes:
    return hmac.new(secret, HELLO_MAGIC + nonce + epoch.to_bytes(8, "little"), hashlib.sha256).digest()


def encode_hello(secret: bytes, nonce: bytes, epoch: int) -> bytes:
    return HELLO.pack(HELLO_MAGIC, epoch, _mac(secret, nonce, epoch))


def check_hello(secret: bytes, nonce: bytes, data: bytes) -> int:
    """The epoch the leader proved, from the first HELLO.size bytes."""
    magic, epoch, mac = HELLO.unpack_from(data)
    if magic != HELLO_MAGIC:
        raise FrameError(f"bad hello magic {bytes(magic)!r}")
    if not hmac.compare_digest(mac, _mac(secret, nonce, epoch)):
        raise FrameError("the link did not prove the cluster's secret")
    return epoch


def encode_ack(epoch: int, seq: int) -> bytes:
    return ACK.pack(ACK_MAGIC, epoch, seq)


class AckReader:
    """(epoch, seq) acks out of a follower's byte stream."""

    def __init__(self):
        self.buf = b""

    def feed(self, data: bytes) -> list[tuple[int, int]]:
        buf = self.buf + data
        out = []
        pos = 0
        while len(buf) - pos >= ACK.size:
            magic, epoch, seq = ACK.unpack_from(buf, pos)
            if magic != ACK_MAGIC:
                raise FrameError(f"bad ack magic {bytes(magic)!r}")
            out.append((epoch, seq))
            pos += ACK.size
        self.buf = buf[pos:]
        return out


# Verdicts on a frame, from the follower's side.
APPLY = "apply"  # the next batch of the current epoch: append, fsync, ack
RESTART = "restart"  # a snapshot's part, of a current or newer epoch: replace all, then go on
STALE = "stale"  # from an epoch older than one seen: refuse (fencing)
RESYNC = "resync"  # a gap, a repeat, or a new epoch mid-stream: catch up first


class Follower:
    """A follower's fencing state: the newest epoch it knows of, and the
    last batch it applied in that epoch.

    It learns epochs two ways: from etcd (`promise`, before it acks
    anything of a new leader) and from frames. A frame of a newer epoch
    than the one it follows is not applied as it comes: a new leader
    starts by sending a snapshot (seq 1 of its epoch comes after it)."""

    def __init__(self):
        self.epoch = 0  # the newest epoch seen; frames of older ones are refused
        self.following = 0  # the epoch whose stream is being applied (0: none)
        self.seq = 0  # the last seq applied in `following`

    def promise(self, epoch: int) -> bool:
        """etcd says epoch leads now: refuse older frames from here on.
        False if epoch is older than one already seen."""
        if epoch < self.epoch:
            return False
        if epoch > self.epoch:
            self.epoch = epoch
        return True

    def start(self, epoch: int, seq: int):
        """A snapshot of the leader of epoch, as of its batch seq, is in:
        its stream goes on from seq + 1."""
        if epoch < self.epoch:
            raise ValueError(f"snapshot of epoch {epoch}, older than {self.epoch}")
        self.epoch = self.following = epoch
        self.seq = seq

    def check(self, f: Frame) -> str:
        if f.epoch < self.epoch:
            return STALE
        if f.snapshot:
            return RESTART
        if f.epoch != self.following or f.seq != self.seq + 1:
            if f.epoch > self.epoch:
                self.epoch = f.epoch  # refuse the old leader from now on
            return RESYNC
        return APPLY

    def applied(self, f: Frame):
        """f (checked: APPLY) is on disk: the next one is f.seq + 1."""
        assert f.epoch == self.following and f.seq == self.seq + 1
        self.seq = f.seq

"""Replication frames, and the handshake that opens every link.

The handshake
-------------
The follower listens on its peer port; the leader connects to the address
under which it found the follower registered in etcd. Both know the
cluster's secret, which etcd holds (coord.secret()), and each proves it to
the other before anything else is sent:

1. follower -> "pbn4" | nonce_f (32 bytes) | its name
2. leader   -> "pbh4" | epoch u64 | nonce_l (32 bytes) | its name
               | target: the name it meant to reach | mac_l (32 bytes)
3. follower -> "pbf4" | mac_f (32 bytes)

(a name is u8 length | UTF-8 bytes, 1 to MAX_NAME of them), where

    mac_l = HMAC-SHA256(secret, "leader hello" | epoch | leader | target | nonce_f | nonce_l)
    mac_f = HMAC-SHA256(secret, "follower hello" | epoch | follower | leader | nonce_f | nonce_l)

The follower answers only a hello whose mac_l is right and whose target is
its own name: a hello the leader made for another node (an attacker on
that node's address relaying this node's nonce to the leader, and the
leader's hello back) is refused. The leader sends nothing of its jobs
before it has checked mac_f, made with the name it meant to reach: a
process that listens on a stopped node's address, or on an address etcd
still lists for a node gone, gets the leader's hello and nothing else.
Each side's fresh nonce makes every proof good for one connection only.

Then both derive the session key

    K = HMAC-SHA256(secret, "session" | epoch | leader | follower | nonce_f | nonce_l)

and every message after the handshake, both ways (the leader's chunks, the
follower's acks, below), ends with a 16-byte tag, the first half of
HMAC-SHA256(K, direction | counter u64 | the message's bytes). The counter
is the message's number in its direction on this link, from 0, and is not
sent: a chunk or an ack replayed, dropped, reordered, reflected back,
injected, or taken from another link, fails its tag, and the link is
closed. That holds for the follower's acks too: a forged ack could make
the leader count a follower as holding what it does not, and lose it on a
failover. (All the fields under a MAC are of a fixed size or
length-prefixed, after a label that ends with a zero byte: no two
different messages have the same bytes under the MAC.)

Why a shared secret and not mandatory mutual TLS: mTLS would make every
cluster run a CA and renew its certificates before a link could work. The
secret is already in etcd, which every node must reach anyway; so a link
is authenticated with no new setting, and whoever can read etcd is a node
of the cluster. TLS (--tls-cert, optionally --tls-client-ca) stays the
layer that keeps the jobs confidential on a network that is not trusted:
without it a link's frames are authenticated but in clear.

The frames
----------
A frame carries one group-commit batch: the binlog v7 records the leader
wrote in one flush cycle, byte for byte. A snapshot carries a full record
of every job the leader holds, as of its batch `seq`, in parts, each a
frame. A frame goes on the wire in chunks of at most MAX_CHUNK (1 MiB)
bytes of its records, each chunk with its own tag:

    magic | epoch u64 | seq u64 | length u32 | records (length bytes) | tag (16 bytes)

Every chunk but a frame's last has magic "pbc4"; the last one's says what
the frame is: "pbr4" a batch, "pbp4" a snapshot's part but its last, "pbs4"
a snapshot's last part. All the chunks of a frame carry its epoch and seq.
A follower checks each chunk's tag as soon as that chunk is in, and joins
the checked chunks into the frame; so it holds at most one chunk's bytes
(MAX_CHUNK + 40) that no tag has vouched for yet, whatever a frame's size
(a batch holding a put of 1 GiB, the most -z allows, goes out in 1025
chunks), and a header that announces more than MAX_CHUNK is refused before
any of its records is read. What it holds beyond that was signed under the
session key. A follower replaces what it has with a snapshot, and the
stream goes on from seq + 1. A snapshot's last part starts with

    through u64

the last batch the leader wrote while the parts went out (seq if none;
those batches follow the snapshot). Each part reads its jobs as they are
when it is made, so the follower's state is the leader's only once it has
applied those batches too: until then it derives from its own state
nothing the leader's records tell it (an aft: job's hold or release:
core/replica.py, restoring). It acks what it has on disk with

    magic "pba4" | epoch u64 | seq u64 | tag (16 bytes)

- epoch: the revision of the leader key in etcd, a fencing number etcd
  hands out, not we. A follower that has seen epoch E (in a frame, or in
  etcd) refuses any frame of an older one, and the hello of an older
  leader, so a deposed leader cannot collect a full ack. A link carries
  frames of the epoch its hello proved only.
- seq: the batch's number within its epoch, from 1, with no gaps; a gap
  or a repeat means the follower must catch up from a snapshot.
- No crc32 (the format of version 1 had one): the tag covers every byte
  of the chunk, so any damage a checksum would find fails it too, and a
  second pass over each batch would buy nothing.

The tag costs one HMAC per chunk (per batch, not per job, for a batch up
to 1 MiB) on each side.

Versions: version 4 of this format (the magics' last character: 3 had no
`through`, 2 sent a frame as one piece of up to 1 GiB under one tag)
cannot link with an older one; all the nodes of a cluster run the same
version. A node of another version is refused at its first message, with
a reason that says so, rather than misread.

Pure: bytes in, frames and verdicts out; no I/O, no clock (the caller
brings the nonces, from os.urandom).
"""
from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

MAGIC = b"pbr4"  # a batch's last chunk
SNAPSHOT = b"pbs4"  # a snapshot's last part's last chunk
PART = b"pbp4"  # the last chunk of a snapshot's part, not its last
CHUNK = b"pbc4"  # a chunk of a frame, not its last
KINDS = (MAGIC, SNAPSHOT, PART, CHUNK)
HEAD = struct.Struct("<4sQQI")
HEAD_SIZE = HEAD.size  # 24
ACK = struct.Struct("<4sQQ")
THROUGH = struct.Struct("<Q")  # what a snapshot's last part starts with
ACK_MAGIC = b"pba4"
TAG = 16  # bytes of a chunk's (or an ack's) tag
# Bytes of records in one chunk, at most: what a follower holds before it
# can check a tag is one chunk (with its header and tag), whatever the size
# of the frame. 1 MiB: a chunk's 40 bytes and one HMAC set-up are nothing next to it.
MAX_CHUNK = 1 << 20

GREETING_MAGIC = b"pbn4"
HELLO_MAGIC = b"pbh4"
PROOF_MAGIC = b"pbf4"
NONCE_SIZE = 32
MAC_SIZE = 32
MAX_NAME = 255  # bytes of a node's name (UTF-8)
_GREETING = struct.Struct("<4s32s")  # then the follower's name
_HELLO = struct.Struct("<4sQ32s")  # then the leader's name, the target's, mac_l
PROOF = struct.Struct("<4s32s")
MAX_GREETING = _GREETING.size + 1 + MAX_NAME  # 292
MAX_HELLO = _HELLO.size + 2 * (1 + MAX_NAME) + MAC_SIZE  # 588

# Labels (each ends with a zero byte): what a MAC is for, so that no MAC
# made for one purpose passes for another.
_LEADER_HELLO = b"pybeanstalkd link 4: leader hello\0"
_FOLLOWER_HELLO = b"pybeanstalkd link 4: follower hello\0"
_SESSION = b"pybeanstalkd link 4: session\0"
_TO_FOLLOWER = b"pybeanstalkd link 4: leader to follower\0"
_TO_LEADER = b"pybeanstalkd link 4: follower to leader\0"


class FrameError(Exception):
    """The byte stream is not frames, or fails a check: the connection
    cannot be trusted."""


def _magic(got: bytes, want: bytes | tuple[bytes, ...], what: str):
    wanted = want if isinstance(want, tuple) else (want,)
    if got in wanted:
        return
    got = bytes(got)
    for w in wanted:
        if got[:3] == w[:3]:
            raise FrameError(f"{what} of another version of this format ({got!r}, not {w!r}):"
                             " all the nodes of a cluster must run the same version")
    raise FrameError(f"bad {what} magic {got!r}")


# -- frames and acks, after the handshake ------------------------------------


@dataclass(frozen=True, slots=True)
class Frame:
    """A batch or a snapshot's part: the records of all its chunks."""
    epoch: int
    seq: int
    records: bytes
    snapshot: bool = False
    last: bool = True  # (a snapshot's part: False but for the last)
    # A snapshot's last part: the last batch the leader wrote while the
    # parts went out (their records are not the leader's state before it).
    through: int = 0


def encode(epoch: int, seq: int, records, snapshot: bool = False, last: bool = True,
           more: bool = False) -> bytes:
    """One chunk, without its tag (each link signs it: Session.sign): a
    batch (seq from 1) or a snapshot's part as of batch seq (from 0); with
    more, a chunk of it but its last. At most MAX_CHUNK bytes of records
    (chunks cuts a frame's)."""
    if not (0 < epoch < 1 << 64 and (0 if snapshot else 1) <= seq < 1 << 64):
        raise ValueError("epoch and seq must be u64, and not 0 (but a snapshot's seq)")
    if len(records) > MAX_CHUNK:
        raise ValueError(f"a chunk of {len(records)} bytes of records, over {MAX_CHUNK}")
    magic = CHUNK if more else (SNAPSHOT if last else PART) if snapshot else MAGIC
    return HEAD.pack(magic, epoch, seq, len(records)) + records


def chunks(epoch: int, seq: int, records: bytes, snapshot: bool = False, last: bool = True,
           chunk: int = MAX_CHUNK) -> list[bytes]:
    """A frame (as encode's) in chunks of at most chunk bytes of records,
    without their tags: one chunk, unless its records are longer."""
    n = len(records)
    if n <= chunk:
        return [encode(epoch, seq, records, snapshot, last)]
    with memoryview(records) as view:  # (each chunk is one copy of its bytes)
        return [encode(epoch, seq, view[i:i + chunk], snapshot, last, more=i + chunk < n)
                for i in range(0, n, chunk)]


def end_chunks(epoch: int, seq: int, through: int, records=b"",
               chunk: int = MAX_CHUNK) -> list[bytes]:
    """A snapshot's last part (as chunks' frames): through, the last batch
    the leader wrote while the parts went out (seq if none), then records."""
    if not seq <= through < 1 << 64:
        raise ValueError(f"a snapshot as of batch {seq} goes through batch {through}")
    return chunks(epoch, seq, THROUGH.pack(through) + bytes(records), True, True, chunk)


def encode_ack(epoch: int, seq: int) -> bytes:
    """An ack without its tag (Session.seal adds it)."""
    return ACK.pack(ACK_MAGIC, epoch, seq)


class Session:
    """One link's messages after its handshake (the leader's chunks, the
    follower's acks), in one direction each way: each one's tag is checked
    against the key, the direction and its number in that direction (from 0)."""

    def __init__(self, key: bytes, leader: bool):
        base = hmac.new(key, digestmod=hashlib.sha256)
        self._out, self._in = base.copy(), base  # (the key's set-up, done once)
        self._out.update(_TO_FOLLOWER if leader else _TO_LEADER)
        self._in.update(_TO_LEADER if leader else _TO_FOLLOWER)
        self.sent = 0  # messages signed: the next one's number
        self.received = 0  # messages checked

    def sign(self, data) -> bytes:
        """The tag of the next message sent (data: its bytes); messages
        must go out in the order they are signed."""
        h = self._out.copy()
        h.update(self.sent.to_bytes(8, "little"))
        h.update(data)
        self.sent += 1
        return h.digest()[:TAG]

    def seal(self, data: bytes) -> bytes:
        return data + self.sign(data)

    def verify(self, tag, *parts):
        """The next message received (its bytes: parts) carries tag, or FrameError."""
        h = self._in.copy()
        h.update(self.received.to_bytes(8, "little"))
        for p in parts:
            h.update(p)
        if not hmac.compare_digest(h.digest()[:TAG], tag):
            raise FrameError("a frame failed its tag: forged, replayed, reordered or damaged")
        self.received += 1


class Reader:
    """Frames out of a byte stream, whatever the reads' boundaries: each
    chunk checked against the link's session as soon as it is in, and the
    checked chunks of a frame joined into it. It holds unchecked at most
    one chunk (max_chunk bytes of records, its header and tag) and what
    one read brought beyond it: a header announcing more is refused
    before its records are read."""

    def __init__(self, session: Session, max_chunk: int = MAX_CHUNK):
        self.session = session
        self.buf = bytearray()  # bytes not checked yet
        self.max_chunk = max_chunk
        self.chunks: list[bytes] = []  # the records of a frame's chunks checked so far
        self.at = (0, 0)  # their epoch and seq

    def feed(self, data) -> list[Frame]:
        buf = self.buf
        buf += data
        out = []
        pos = 0
        with memoryview(buf) as view:
            while len(buf) - pos >= HEAD_SIZE:
                magic, epoch, seq, n = HEAD.unpack_from(buf, pos)
                _magic(magic, KINDS, "frame")
                if n > self.max_chunk:
                    raise FrameError(f"a chunk of {n} bytes of records, over {self.max_chunk}")
                body = pos + HEAD_SIZE
                end = body + n + TAG
                if len(buf) < end:
                    break
                records = view[body:end - TAG].tobytes()
                self.session.verify(view[end - TAG:end], view[pos:body], records)
                pos = end
                f = self._checked(magic, epoch, seq, records)
                if f is not None:
                    out.append(f)
        del buf[:pos]
        return out

    def _checked(self, magic: bytes, epoch: int, seq: int, records: bytes) -> Frame | None:
        """A chunk whose tag is right: its frame, if it was the last."""
        parts = self.chunks
        if parts and (epoch, seq) != self.at:
            raise FrameError(f"a chunk of frame {epoch}/{seq} within frame {self.at[0]}/{self.at[1]}")
        if magic == CHUNK:
            self.at = (epoch, seq)
            parts.append(records)
            return None
        snapshot = magic != MAGIC
        if not epoch or not (seq or snapshot):
            raise FrameError(f"frame {epoch}/{seq}: epoch and seq start at 1")
        if parts:
            parts.append(records)
            records = b"".join(parts)
            self.chunks = []
        through = 0
        if magic == SNAPSHOT:
            if len(records) < THROUGH.size:
                raise FrameError(f"snapshot {epoch}/{seq}: its last part names no last batch")
            through = THROUGH.unpack_from(records)[0]
            if through < seq:
                raise FrameError(f"snapshot {epoch}/{seq}: through batch {through}, before it")
            records = records[THROUGH.size:]
        return Frame(epoch, seq, records, snapshot, magic != PART, through)


class AckReader:
    """(epoch, seq) acks out of a follower's byte stream, each checked
    against the link's session."""

    SIZE = ACK.size + TAG

    def __init__(self, session: Session):
        self.session = session
        self.buf = b""

    def feed(self, data: bytes) -> list[tuple[int, int]]:
        buf = self.buf + data
        out = []
        pos = 0
        while len(buf) - pos >= self.SIZE:
            magic, epoch, seq = ACK.unpack_from(buf, pos)
            _magic(magic, ACK_MAGIC, "ack")
            end = pos + ACK.size
            self.session.verify(buf[end:end + TAG], buf[pos:end])
            out.append((epoch, seq))
            pos = end + TAG
        self.buf = buf[pos:]
        return out


# -- the handshake -------------------------------------------------------------


def _name(name: str) -> bytes:
    raw = name.encode()
    if not 0 < len(raw) <= MAX_NAME:
        raise ValueError(f"a node's name is 1 to {MAX_NAME} bytes (UTF-8), not {len(raw)}")
    return bytes((len(raw),)) + raw


def _read_name(buf: bytes, pos: int) -> tuple[str, int] | None:
    """The name at buf[pos:] and where it ends; None if not all in."""
    if len(buf) <= pos:
        return None
    end = pos + 1 + buf[pos]
    if len(buf) < end:
        return None
    if end == pos + 1:
        raise FrameError("an empty node name")
    try:
        return bytes(buf[pos + 1:end]).decode(), end
    except UnicodeDecodeError:
        raise FrameError("a node name that is not UTF-8") from None


def _nonce(nonce: bytes) -> bytes:
    if len(nonce) != NONCE_SIZE:
        raise ValueError(f"a nonce is {NONCE_SIZE} bytes")
    return nonce


def _mac(key: bytes, label: bytes, epoch: int, first: str, second: str,
         nonce_f: bytes, nonce_l: bytes) -> bytes:
    msg = b"".join((label, epoch.to_bytes(8, "little"), _name(first), _name(second),
                    _nonce(nonce_f), _nonce(nonce_l)))
    return hmac.new(key, msg, hashlib.sha256).digest()


def session_key(secret: bytes, epoch: int, leader: str, follower: str,
                nonce_f: bytes, nonce_l: bytes) -> bytes:
    return _mac(secret, _SESSION, epoch, leader, follower, nonce_f, nonce_l)


@dataclass(frozen=True, slots=True)
class Greeting:
    """The follower's first message."""
    nonce: bytes
    name: str


def encode_greeting(nonce: bytes, name: str) -> bytes:
    return _GREETING.pack(GREETING_MAGIC, _nonce(nonce)) + _name(name)


def parse_greeting(buf: bytes) -> tuple[Greeting, int] | None:
    """The greeting at the start of buf and its size; None if not all in."""
    if len(buf) >= 4:
        _magic(buf[:4], GREETING_MAGIC, "greeting")
    if len(buf) < _GREETING.size:
        return None
    _, nonce = _GREETING.unpack_from(buf)
    got = _read_name(buf, _GREETING.size)
    if got is None:
        return None
    name, end = got
    return Greeting(nonce, name), end


@dataclass(frozen=True, slots=True)
class Hello:
    """The leader's answer to a greeting."""
    epoch: int
    nonce: bytes  # the leader's
    leader: str
    target: str  # the node the leader meant to reach
    mac: bytes


def encode_hello(secret: bytes, epoch: int, leader: str, target: str,
                 nonce_f: bytes, nonce_l: bytes) -> bytes:
    if not 0 < epoch < 1 << 64:
        raise ValueError("an epoch is a u64, not 0")
    mac = _mac(secret, _LEADER_HELLO, epoch, leader, target, nonce_f, nonce_l)
    return _HELLO.pack(HELLO_MAGIC, epoch, _nonce(nonce_l)) + _name(leader) + _name(target) + mac


def parse_hello(buf: bytes) -> tuple[Hello, int] | None:
    """The hello at the start of buf and its size; None if not all in."""
    if len(buf) >= 4:
        _magic(buf[:4], HELLO_MAGIC, "hello")
    if len(buf) < _HELLO.size:
        return None
    _, epoch, nonce = _HELLO.unpack_from(buf)
    if not epoch:
        raise FrameError("a hello of epoch 0")
    got = _read_name(buf, _HELLO.size)
    if got is None:
        return None
    leader, pos = got
    got = _read_name(buf, pos)
    if got is None:
        return None
    target, pos = got
    end = pos + MAC_SIZE
    if len(buf) < end:
        return None
    return Hello(epoch, nonce, leader, target, bytes(buf[pos:end])), end


def encode_proof(secret: bytes, epoch: int, follower: str, leader: str,
                 nonce_f: bytes, nonce_l: bytes) -> bytes:
    return PROOF.pack(PROOF_MAGIC, _mac(secret, _FOLLOWER_HELLO, epoch, follower, leader,
                                        nonce_f, nonce_l))


def parse_proof(buf: bytes) -> tuple[bytes, int] | None:
    """The follower's mac_f at the start of buf and the proof's size; None if not all in."""
    if len(buf) >= 4:
        _magic(buf[:4], PROOF_MAGIC, "proof")
    if len(buf) < PROOF.size:
        return None
    return PROOF.unpack_from(buf)[1], PROOF.size


_M = TypeVar("_M")  # a handshake message: Greeting, Hello, or a proof's mac (bytes)


class HandshakeBuffer(Generic[_M]):
    """The bytes of one handshake message (a greeting, a hello or a proof),
    held until all of it is in, whatever the reads' boundaries.

    Every message is checked in one order: its magic first, as soon as 4
    bytes are in (parse does that before anything else: a peer of another
    version, or no peer of ours, is told so at once); then the bound: the
    message must end within limit bytes, its longest, so that whoever is at
    the other end makes this side hold no more than that; then whether all
    of it is in. Only the message is parsed here: the bytes that follow it
    are the stream's, and go back to the caller untouched."""

    def __init__(self, parse: Callable[[bytes], tuple[_M, int] | None], limit: int):
        self.parse = parse  # parse_greeting, parse_hello or parse_proof
        self.limit = limit
        self.held = b""

    def __len__(self) -> int:
        return len(self.held)

    def feed(self, data: bytes) -> tuple[_M, bytes] | None:
        """None until the message is all in; then it, and the bytes that came
        after it. FrameError if its magic is wrong, if it does not end
        within the bound, or if parse finds it malformed."""
        held = self.held + data
        got = self.parse(held[:self.limit])  # (the magic, first)
        if got is None:
            if len(held) > self.limit:
                raise FrameError(f"a handshake message longer than {self.limit} bytes")
            self.held = held
            return None
        message, end = got
        self.held = b""
        return message, held[end:]


class Accepting:
    """The follower's side of a handshake: its greeting out; the leader's
    hello in, checked; its own proof out, and the link's session. It holds
    at most MAX_HELLO bytes meanwhile."""

    def __init__(self, secret: bytes, name: str, nonce: bytes):
        self.secret, self.name, self.nonce = secret, name, _nonce(nonce)
        _name(name)
        self.buf = HandshakeBuffer(parse_hello, MAX_HELLO)
        self.hello: Hello | None = None  # once checked
        self.session: Session | None = None

    def greeting(self) -> bytes:
        return encode_greeting(self.nonce, self.name)

    def feed(self, data: bytes) -> bytes | None:
        """Bytes from the leader: None until its hello is all in; then the
        proof to send (and the session is set). FrameError if the hello is
        not one the cluster's leader made for this node, on this link."""
        if self.session is not None:
            raise FrameError("the handshake is over")
        got = self.buf.feed(data)
        if got is None:
            return None
        h, rest = got
        want = _mac(self.secret, _LEADER_HELLO, h.epoch, h.leader, h.target, self.nonce, h.nonce)
        if not hmac.compare_digest(h.mac, want):
            raise FrameError("its hello does not prove the cluster's secret")
        if h.target != self.name:
            raise FrameError(f"its hello was made for node {h.target!r}, not for this one"
                             f" ({self.name!r}): relayed from that node's address?")
        if rest:
            raise FrameError("it sent bytes after its hello, before this node's proof")
        self.hello = h
        self.session = Session(session_key(self.secret, h.epoch, h.leader, self.name,
                                           self.nonce, h.nonce), leader=False)
        return encode_proof(self.secret, h.epoch, self.name, h.leader, self.nonce, h.nonce)


class Connecting:
    """The leader's side of a handshake with the node it meant to reach
    (target): the follower's greeting in (greeted: the hello to send), then
    its proof in (proved: the link's session)."""

    def __init__(self, secret: bytes, epoch: int, name: str, target: str, nonce: bytes):
        self.secret, self.epoch, self.name, self.target = secret, epoch, name, target
        self.nonce = _nonce(nonce)
        _name(name), _name(target)
        self.greeting_buf = HandshakeBuffer(parse_greeting, MAX_GREETING)
        self.proof_buf = HandshakeBuffer(parse_proof, PROOF.size)
        self.greeting: Greeting | None = None
        self.session: Session | None = None

    def greeted(self, data: bytes) -> bytes | None:
        """Bytes from the follower: None until its greeting is all in; then
        the hello to send. FrameError if it is not the greeting of target."""
        if self.greeting is not None:
            raise FrameError("a greeting again")
        got = self.greeting_buf.feed(data)
        if got is None:
            return None
        g, rest = got
        if g.name != self.target:
            raise FrameError(f"the node at its address says it is {g.name!r}")
        if rest:
            raise FrameError("it sent bytes after its greeting, before this node's hello")
        self.greeting = g
        return encode_hello(self.secret, self.epoch, self.name, self.target, g.nonce, self.nonce)

    def proved(self, data: bytes) -> Session | None:
        """Bytes from the follower after the hello: None until its proof is
        all in; then the link's session. FrameError if the proof is wrong."""
        g = self.greeting
        if g is None or self.session is not None:
            raise FrameError("a proof out of turn")
        got = self.proof_buf.feed(data)
        if got is None:
            return None
        mac, rest = got
        want = _mac(self.secret, _FOLLOWER_HELLO, self.epoch, self.target, self.name,
                    g.nonce, self.nonce)
        if not hmac.compare_digest(mac, want):
            raise FrameError("its proof is wrong: it does not know the cluster's secret")
        if rest:
            raise FrameError("it sent bytes after its proof, before the snapshot")
        self.session = Session(session_key(self.secret, self.epoch, self.name, self.target,
                                           g.nonce, self.nonce), leader=True)
        return self.session


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

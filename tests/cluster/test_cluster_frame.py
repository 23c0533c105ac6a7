"""Replication frames and the link's handshake (cluster/frame.py): the
stream survives any split of its reads, a damaged, forged, replayed or
reordered frame (or ack) is never taken, each side of a link must prove
the cluster's secret and the follower its name, and a follower's fencing
refuses old epochs and never applies a batch out of order."""
import os
import struct

import pytest
from hypothesis import given, settings, strategies as st

from pybeanstalkd.cluster import frame as F

u64 = st.integers(1, (1 << 64) - 1)
frames = st.lists(st.tuples(u64, u64, st.binary(max_size=300)), max_size=8)
SECRET = b"the cluster's secret"


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    cuts = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]


def handshake(epoch=7, leader="a", follower="b", target=None, secret=SECRET,
              follower_secret=None):
    """Both sides of a link's handshake, run to the end: (leader's session,
    follower's session). FrameError where a side refuses."""
    acc = F.Accepting(follower_secret or secret, follower, os.urandom(32))
    con = F.Connecting(secret, epoch, leader, target or follower, os.urandom(32))
    hello = con.greeted(acc.greeting())
    proof = acc.feed(hello)
    return con.proved(proof), acc.session


def signed(session, *fs) -> bytes:
    return b"".join(session.seal(F.encode(*f)) for f in fs)


@given(frames, st.lists(st.integers(0, 10_000), max_size=12))
def test_frames_come_back_whatever_the_reads(fs, cuts):
    to_f, at_f = handshake()
    data = signed(to_f, *fs)
    reader = F.Reader(at_f)
    got = [f for piece in split_at(data, cuts) for f in reader.feed(piece)]
    assert [(f.epoch, f.seq, f.records) for f in got] == fs
    assert reader.buf == b""


def test_the_layout():
    assert F.encode(7, 3, b"rec") == b"pbr4" + struct.pack("<QQI", 7, 3, 3) + b"rec"
    assert F.HEAD_SIZE == 24
    to_f, _ = handshake()
    data = to_f.seal(F.encode(7, 3, b"rec"))
    assert len(data) == F.HEAD_SIZE + 3 + F.TAG == 43


@settings(max_examples=300)
@given(u64, u64, st.binary(min_size=1, max_size=64), st.data())
def test_a_damaged_frame_is_never_taken_for_another(epoch, seq, records, data):
    to_f, at_f = handshake()
    good = to_f.seal(F.encode(epoch, seq, records))
    i = data.draw(st.integers(0, len(good) - 1))
    bit = data.draw(st.integers(0, 7))
    bad = bytearray(good)
    bad[i] ^= 1 << bit
    try:
        got = F.Reader(at_f).feed(bytes(bad))
    except F.FrameError:
        return
    # Only a longer length field can pass unnoticed: the reader waits for
    # bytes that never came, and hands out nothing.
    assert got == [] and 20 <= i < 24


def test_refuses_what_is_not_a_frame():
    _, at_f = handshake()
    with pytest.raises(F.FrameError, match="magic"):
        F.Reader(at_f).feed(b"RESERVED 1 3\r\nabc\r\n" + b"\0" * 20)
    # A node of the previous version: said so.
    for old in (struct.pack("<4sQQII", b"pbr1", 1, 1, 0, 0), struct.pack("<4sQQI", b"pbr2", 1, 1, 0),
                struct.pack("<4sQQI", b"pbr3", 1, 1, 0)):
        with pytest.raises(F.FrameError, match="another version of this format"):
            F.Reader(at_f).feed(old)
    head = struct.pack("<4sQQI", b"pbr4", 1, 1, 1 << 31)
    with pytest.raises(F.FrameError, match="over"):
        F.Reader(at_f).feed(head)  # refused before its bytes are buffered
    to_f, at_f = handshake()
    got = F.Reader(at_f, max_chunk=10).feed(to_f.seal(F.encode(1, 1, b"x" * 10)))
    assert got[0].records == b"x" * 10
    with pytest.raises(F.FrameError):
        F.Reader(at_f, max_chunk=10).feed(to_f.seal(F.encode(1, 1, b"x" * 11)))
    to_f, at_f = handshake()
    with pytest.raises(F.FrameError, match="start at 1"):
        F.Reader(at_f).feed(to_f.seal(struct.pack("<4sQQI", b"pbr4", 0, 1, 0)))
    for e, s in ((0, 1), (1, 0), (1 << 64, 1)):
        with pytest.raises(ValueError):
            F.encode(e, s, b"")
    with pytest.raises(ValueError, match="over"):
        F.encode(1, 1, bytes(F.MAX_CHUNK + 1))  # (chunks() cuts a frame's records)


# -- the handshake ------------------------------------------------------------


def test_a_handshake_gives_both_sides_one_session_and_frames_go_both_ways():
    acc = F.Accepting(SECRET, "b", os.urandom(32))
    con = F.Connecting(SECRET, 7, "a", "b", os.urandom(32))
    greeting = acc.greeting()
    assert greeting[:4] == b"pbn4" and len(greeting) == 4 + 32 + 1 + 1
    # Whatever the reads' boundaries: None until a message is all in.
    assert [con.greeted(bytes([c])) for c in greeting[:-1]] == [None] * (len(greeting) - 1)
    hello = con.greeted(greeting[-1:])
    assert hello[:4] == b"pbh4"
    assert [acc.feed(bytes([c])) for c in hello[:-1]] == [None] * (len(hello) - 1)
    proof = acc.feed(hello[-1:])
    assert proof[:4] == b"pbf4" and len(proof) == F.PROOF.size
    assert (acc.hello.epoch, acc.hello.leader, acc.hello.target) == (7, "a", "b")
    assert con.proved(proof[:10]) is None
    to_f = con.proved(proof[10:])
    at_f = acc.session
    frames = [(7, 0, b"snap", True, False), (7, 1, b"one"), (7, 2, b"two")]
    got = F.Reader(at_f).feed(signed(to_f, *frames))
    assert [(f.epoch, f.seq, f.records) for f in got] == [fr[:3] for fr in frames]
    acks = at_f.seal(F.encode_ack(7, 0)) + at_f.seal(F.encode_ack(7, 2))
    assert F.AckReader(to_f).feed(acks) == [(7, 0), (7, 2)]
    # The longest names fit in what a side buffers.
    long = "n" * F.MAX_NAME
    acc = F.Accepting(SECRET, long, os.urandom(32))
    con = F.Connecting(SECRET, 7, long, long, os.urandom(32))
    assert len(acc.greeting()) == F.MAX_GREETING
    hello = con.greeted(acc.greeting())
    assert len(hello) == F.MAX_HELLO
    con.proved(acc.feed(hello))
    with pytest.raises(ValueError):
        F.Accepting(SECRET, long + "n", os.urandom(32))
    with pytest.raises(ValueError):
        F.Accepting(SECRET, "b", os.urandom(16))


def test_a_leader_without_the_secret_is_refused_and_gets_no_proof():
    acc = F.Accepting(SECRET, "b", os.urandom(32))
    con = F.Connecting(b"guess", 7, "a", "b", os.urandom(32))
    with pytest.raises(F.FrameError, match="does not prove the cluster's secret"):
        acc.feed(con.greeted(acc.greeting()))
    assert acc.session is None
    # Nor a hello made for another nonce (a replay of an earlier link's).
    old = F.Accepting(SECRET, "b", os.urandom(32))
    hello = F.Connecting(SECRET, 7, "a", "b", os.urandom(32)).greeted(old.greeting())
    with pytest.raises(F.FrameError, match="does not prove"):
        F.Accepting(SECRET, "b", os.urandom(32)).feed(hello)
    # Any change to a good hello: the epoch, a name, a nonce.
    acc = F.Accepting(SECRET, "b", os.urandom(32))
    hello = F.Connecting(SECRET, 7, "a", "b", os.urandom(32)).greeted(acc.greeting())
    for i in range(4, len(hello)):
        bad = bytearray(hello)
        bad[i] ^= 1
        try:
            got = F.Accepting(SECRET, "b", acc.nonce).feed(bytes(bad))
        except F.FrameError:
            continue
        assert got is None  # (a longer name: it waits for bytes that never come)


def test_a_hello_made_for_another_node_is_refused():
    """The relay: a process on c's address hands the leader b's nonce as
    c's; the leader's hello, made for c, is refused by b."""
    b = F.Accepting(SECRET, "b", os.urandom(32))
    g, _ = F.parse_greeting(b.greeting())
    posing = F.encode_greeting(g.nonce, "c")
    leader = F.Connecting(SECRET, 7, "a", "c", os.urandom(32))
    hello = leader.greeted(posing)
    with pytest.raises(F.FrameError, match="made for node 'c', not for this one"):
        b.feed(hello)
    assert b.session is None
    # Nor does the leader answer b's own greeting at c's address.
    with pytest.raises(F.FrameError, match="says it is 'b'"):
        F.Connecting(SECRET, 7, "a", "c", os.urandom(32)).greeted(b.greeting())


def test_a_follower_whose_proof_is_wrong_gets_nothing():
    with pytest.raises(F.FrameError, match="does not prove"):  # (it refuses the hello first)
        handshake(follower_secret=b"guess")
    acc = F.Accepting(SECRET, "b", os.urandom(32))
    con = F.Connecting(SECRET, 7, "a", "b", os.urandom(32))
    hello = con.greeted(acc.greeting())
    h, _ = F.parse_hello(hello)
    wrong = [
        F.PROOF.pack(b"pbf4", os.urandom(32)),  # made up
        F.encode_proof(b"guess", 7, "b", "a", acc.nonce, h.nonce),  # without the secret
        F.encode_proof(SECRET, 7, "c", "a", acc.nonce, h.nonce),  # another node's
        F.encode_proof(SECRET, 8, "b", "a", acc.nonce, h.nonce),  # another epoch's
        F.encode_proof(SECRET, 7, "b", "a", acc.nonce, os.urandom(32)),  # another link's
        b"pbf4" + h.mac,  # the leader's own, reflected
    ]
    for proof in wrong:
        c2 = F.Connecting(SECRET, 7, "a", "b", h.nonce)
        c2.greeted(acc.greeting())
        with pytest.raises(F.FrameError, match="proof is wrong"):
            c2.proved(proof)
        assert c2.session is None
    with pytest.raises(F.FrameError, match="another version"):
        con.proved(b"pbf1" + bytes(32))


def test_a_side_refuses_bytes_out_of_turn_and_buffers_at_most_a_hello():
    acc = F.Accepting(SECRET, "b", os.urandom(32))
    con = F.Connecting(SECRET, 7, "a", "b", os.urandom(32))
    hello = con.greeted(acc.greeting())
    with pytest.raises(F.FrameError, match="after its hello"):
        F.Accepting(SECRET, "b", acc.nonce).feed(hello + b"frames")
    with pytest.raises(F.FrameError, match="after its greeting"):
        F.Connecting(SECRET, 7, "a", "b", os.urandom(32)).greeted(acc.greeting() + b"x")
    with pytest.raises(F.FrameError, match="bad hello magic"):
        F.Accepting(SECRET, "b", os.urandom(32)).feed(b"GET ")
    with pytest.raises(F.FrameError, match="another version"):
        F.Accepting(SECRET, "b", os.urandom(32)).feed(b"pbh1" + bytes(40))
    with pytest.raises(F.FrameError, match="another version"):
        F.Connecting(SECRET, 7, "a", "b", os.urandom(32)).greeted(b"pbn1" + bytes(16))
    # The longest hello there is, a byte at a time: held, never more of it.
    longest = b"pbh4" + struct.pack("<Q", 1) + bytes(32) + (b"\xff" + b"n" * 255) * 2 + bytes(32)
    assert len(longest) == F.MAX_HELLO
    a = F.Accepting(SECRET, "b", os.urandom(32))
    for i in range(len(longest) - 1):
        assert a.feed(longest[i:i + 1]) is None and len(a.buf) == i + 1
    with pytest.raises(F.FrameError, match="does not prove"):
        a.feed(longest[-1:])
    with pytest.raises(F.FrameError, match="epoch 0"):
        F.Accepting(SECRET, "b", os.urandom(32)).feed(b"pbh4" + bytes(8 + 32))


def test_a_handshake_buffer_holds_one_message_and_hands_on_what_follows():
    greeting = F.encode_greeting(os.urandom(32), "b")
    hello = F.encode_hello(SECRET, 7, "a", "b", os.urandom(32), os.urandom(32))
    frames = F.encode(7, 1, b"batch") + bytes(F.TAG)
    # A message a byte at a time: None, and only its bytes held, until its last.
    buf = F.HandshakeBuffer(F.parse_hello, F.MAX_HELLO)
    for i in range(len(hello) - 1):
        assert buf.feed(hello[i:i + 1]) is None and len(buf) == i + 1
    h, rest = buf.feed(hello[-1:])
    assert (h.epoch, h.leader, h.target, rest, len(buf)) == (7, "a", "b", b"", 0)
    # The bytes after it go back as they came, however the reads fell, even
    # more of them than the bound: the bound is the message's.
    frames = frames + bytes(F.MAX_GREETING)
    data = greeting + frames
    for cut in (1, len(greeting) - 1, len(greeting), len(greeting) + 3):
        buf = F.HandshakeBuffer(F.parse_greeting, F.MAX_GREETING)
        reads = [data[:cut], data[cut:]]
        got = None
        while got is None:
            got = buf.feed(reads.pop(0))
        g, rest = got
        assert g.name == "b" and rest + b"".join(reads) == frames  # (later reads: the stream's)
    # A wrong magic: refused once 4 bytes are in, before the bound is looked at.
    buf = F.HandshakeBuffer(F.parse_hello, F.MAX_HELLO)
    assert [buf.feed(bytes([c])) for c in b"GET"] == [None] * 3
    with pytest.raises(F.FrameError, match="bad hello magic"):
        buf.feed(b" ")
    with pytest.raises(F.FrameError, match="another version"):
        F.HandshakeBuffer(F.parse_proof, F.PROOF.size).feed(b"pbf1" + bytes(2 * F.PROOF.size))
    # A message longer than its bound: refused as the byte past the bound
    # comes, before the rest of the message, and no more than the bound held.
    limit = 100
    assert len(hello) < limit
    long = F.encode_hello(SECRET, 7, "a" * 50, "b" * 50, os.urandom(32), os.urandom(32))
    assert len(long) > limit + 1
    buf = F.HandshakeBuffer(F.parse_hello, limit)
    for i in range(limit):
        assert buf.feed(long[i:i + 1]) is None
    assert len(buf) == limit
    with pytest.raises(F.FrameError, match="longer than 100 bytes"):
        buf.feed(long[limit:limit + 1])
    with pytest.raises(F.FrameError, match="longer than 100 bytes"):  # (all of it in one read)
        F.HandshakeBuffer(F.parse_hello, limit).feed(long)
    assert F.HandshakeBuffer(F.parse_hello, len(long)).feed(long)[0].leader == "a" * 50


def test_a_replayed_reordered_dropped_or_injected_frame_is_refused():
    to_f, at_f = handshake()
    f1, f2, f3 = (to_f.seal(F.encode(7, s, b"batch %d" % s)) for s in (1, 2, 3))
    reader = F.Reader(at_f)
    assert [f.seq for f in reader.feed(f1)] == [1]
    for bad in (f1, f3):  # a replay; f2 dropped
        with pytest.raises(F.FrameError, match="failed its tag"):
            F.Reader(at_f).feed(bad)
    assert [f.seq for f in reader.feed(f2 + f3)] == [2, 3]

    to_f, at_f = handshake()
    f1, f2 = (to_f.seal(F.encode(7, s, b"x")) for s in (1, 2))
    with pytest.raises(F.FrameError):
        F.Reader(at_f).feed(f2 + f1)  # reordered
    # Injected: made under another link's session (same secret, same names).
    to_f, at_f = handshake()
    other, _ = handshake()
    with pytest.raises(F.FrameError):
        F.Reader(at_f).feed(other.seal(F.encode(7, 0, b"forged", True)))
    # A leader's frame sent back to it as the follower's (reflected).
    to_f, at_f = handshake()
    ack = F.encode_ack(7, 0)
    with pytest.raises(F.FrameError):
        F.AckReader(to_f).feed(to_f.seal(ack))
    # A frame tampered with: its header or its records.
    to_f, at_f = handshake()
    good = to_f.seal(F.encode(7, 1, b"records"))
    for i in (5, 13, len(good) - F.TAG - 1, len(good) - 1):
        bad = bytearray(good)
        bad[i] ^= 0x40
        with pytest.raises(F.FrameError):
            F.Reader(at_f).feed(bytes(bad))


def test_a_forged_or_replayed_ack_is_refused():
    to_f, at_f = handshake()
    reader = F.AckReader(to_f)
    a0 = at_f.seal(F.encode_ack(7, 0))
    assert reader.feed(a0) == [(7, 0)]
    with pytest.raises(F.FrameError, match="failed its tag"):
        F.AckReader(to_f).feed(F.encode_ack(7, 99) + bytes(F.TAG))  # forged
    with pytest.raises(F.FrameError, match="failed its tag"):
        F.AckReader(to_f).feed(a0)  # replayed
    forged = bytearray(at_f.seal(F.encode_ack(7, 1)))
    forged[12] ^= 1  # its seq changed
    with pytest.raises(F.FrameError, match="failed its tag"):
        reader.feed(bytes(forged))
    with pytest.raises(F.FrameError, match="another version"):
        F.AckReader(to_f).feed(struct.pack("<4sQQ", b"pba1", 7, 1) + bytes(F.TAG))


def fr(epoch, seq):
    return F.Frame(epoch, seq, b"")


def test_a_follower_applies_its_leaders_batches_in_order():
    f = F.Follower()
    assert f.check(fr(5, 1)) == F.RESYNC  # nothing to go on from: a snapshot first
    f.start(5, 0)
    assert f.check(fr(5, 1)) == F.APPLY
    f.applied(fr(5, 1))
    assert f.check(fr(5, 1)) == F.RESYNC  # a repeat
    assert f.check(fr(5, 3)) == F.RESYNC  # a gap
    assert f.check(fr(5, 2)) == F.APPLY
    f.applied(fr(5, 2))
    with pytest.raises(AssertionError):
        f.applied(fr(5, 4))


def test_a_follower_fences_off_old_leaders():
    f = F.Follower()
    f.start(5, 10)
    assert f.check(fr(4, 11)) == F.STALE
    # A frame of a new epoch: not applied before its snapshot, and from
    # now on the old leader is refused.
    assert f.check(fr(6, 1)) == F.RESYNC
    assert f.check(fr(5, 11)) == F.STALE
    f.start(6, 0)
    assert f.check(fr(6, 1)) == F.APPLY
    # etcd names a newer leader before any of its frames arrive.
    assert f.promise(8) is True
    assert f.check(fr(6, 1)) == F.STALE
    assert f.promise(7) is False and f.promise(8) is True
    with pytest.raises(ValueError):
        f.start(7, 0)
    f.start(8, 3)
    assert f.check(fr(8, 4)) == F.APPLY


@given(st.lists(st.tuples(st.sampled_from(["frame", "promise", "start"]),
                          st.integers(1, 4), st.integers(0, 4))))
def test_fencing_holds_in_any_sequence(steps):
    """Whatever happens: never an apply from an epoch older than one seen,
    never one out of seq order."""
    f = F.Follower()
    seen = 0
    last = {}  # epoch -> last seq applied
    for kind, epoch, seq in steps:
        if kind == "promise":
            assert f.promise(epoch) == (epoch >= seen)
            seen = max(seen, epoch)
        elif kind == "start":
            if epoch < seen:
                with pytest.raises(ValueError):
                    f.start(epoch, seq)
            else:
                f.start(epoch, seq)
                seen, last[epoch] = epoch, seq
        else:
            v = f.check(fr(epoch, seq + 1))
            if v == F.APPLY:
                assert epoch == seen and last.get(epoch) == seq
                f.applied(fr(epoch, seq + 1))
                last[epoch] = seq + 1
            else:
                assert v == (F.STALE if epoch < seen else F.RESYNC)
            seen = max(seen, epoch)


def test_snapshots_and_acks():
    to_f, at_f = handshake(epoch=3)
    data = (signed(to_f, (3, 0, b"al", True, False))
            + b"".join(to_f.seal(c) for c in F.end_chunks(3, 0, 0, b"l"))
            + signed(to_f, (3, 1, b"next")))
    assert data[:4] == b"pbp4" and data[42:46] == b"pbs4"
    got = F.Reader(at_f).feed(data)
    assert [(f.epoch, f.seq, f.records, f.snapshot, f.last, f.through) for f in got] == [
        (3, 0, b"al", True, False, 0), (3, 0, b"l", True, True, 0),
        (3, 1, b"next", False, True, 0)]
    with pytest.raises(ValueError):
        F.encode(3, 0, b"")  # a batch's seq starts at 1
    acks = at_f.seal(F.encode_ack(3, 7)) + at_f.seal(F.encode_ack(4, 1))
    r = F.AckReader(to_f)
    assert r.feed(acks[:5]) == [] and r.feed(acks[5:]) == [(3, 7), (4, 1)]
    with pytest.raises(F.FrameError):
        F.AckReader(to_f).feed(b"RESERVED 1 5\r\nhello world\r\n" + bytes(20))
    f = F.Follower()
    f.start(3, 5)
    assert f.check(F.Frame(2, 9, b"", True)) == F.STALE
    assert f.check(F.Frame(3, 9, b"", True)) == F.RESTART
    assert f.check(F.Frame(4, 0, b"", True)) == F.RESTART
    f.start(4, 0)
    assert f.check(F.Frame(4, 1, b"")) == F.APPLY


def test_a_snapshots_end_names_its_last_batch_under_the_tag():
    """A snapshot's last part starts with `through`, the last batch the
    leader wrote while the parts went out: in the first of its chunks,
    signed as the rest of them (a follower completes the groups the
    snapshot left complete once it has applied that batch)."""
    to_f, at_f = handshake(epoch=3)
    wire = b"".join(to_f.seal(c) for c in F.end_chunks(3, 5, 9, b"records", chunk=4))
    assert wire[:4] == b"pbc4" and wire[F.HEAD_SIZE:F.HEAD_SIZE + 4] == struct.pack("<Q", 9)[:4]
    got = F.Reader(at_f, max_chunk=4).feed(wire)
    assert [(f.seq, f.records, f.snapshot, f.last, f.through) for f in got] == [
        (5, b"records", True, True, 9)]
    # A byte of it changed on the way: the chunk fails its tag.
    to_f, at_f = handshake(epoch=3)
    bad = bytearray(to_f.seal(F.end_chunks(3, 5, 9)[0]))
    bad[F.HEAD_SIZE] ^= 1
    with pytest.raises(F.FrameError, match="failed its tag"):
        F.Reader(at_f).feed(bytes(bad))
    # A last part too short to name one, or naming a batch before the
    # snapshot's own (a leader's bug; signed all the same): refused.
    for records, why in ((b"1234567", "names no last batch"),
                         (struct.pack("<Q", 4), "through batch 4, before it")):
        to_f, at_f = handshake(epoch=3)
        with pytest.raises(F.FrameError, match=why):
            F.Reader(at_f).feed(to_f.seal(F.encode(3, 5, records, snapshot=True)))
    with pytest.raises(ValueError):
        F.end_chunks(3, 5, 4)
    # Its parts but the last name none.
    to_f, at_f = handshake(epoch=3)
    got = F.Reader(at_f).feed(to_f.seal(F.encode(3, 5, b"1234", snapshot=True, last=False)))
    assert [(f.records, f.last, f.through) for f in got] == [(b"1234", False, 0)]


# -- frames in chunks: what a follower holds before it checks a tag ----------

CHUNK = 1 << 20  # records of one chunk, at most
HELD = F.HEAD_SIZE + CHUNK + F.TAG  # bytes a reader may hold unverified, at most


def fed(reader, data: bytes, piece: int = 1 << 16):
    """Feed data in pieces (as reads come): (the frames, the most bytes the
    reader held between reads)."""
    out, held = [], 0
    for i in range(0, len(data), piece):
        out += reader.feed(data[i:i + piece])
        held = max(held, len(reader.buf))
    return out, held


def test_a_header_announcing_more_than_a_chunk_is_refused_before_its_bytes_are_held():
    for n in (CHUNK + 1, 64 << 20, (1 << 30) - 1):
        for magic in (F.MAGIC, F.SNAPSHOT, F.PART):
            _, at_f = handshake()
            reader = F.Reader(at_f)
            with pytest.raises(F.FrameError, match="over"):
                reader.feed(struct.pack("<4sQQI", magic, 1, 1, n))
    # A whole chunk is taken: the bound is the leader's chunk size.
    to_f, at_f = handshake()
    got, held = fed(F.Reader(at_f), to_f.seal(F.encode(1, 1, b"c" * CHUNK)))
    assert [len(f.records) for f in got] == [CHUNK] and held < HELD


def test_a_batch_of_many_chunks_is_checked_chunk_by_chunk():
    records = os.urandom(5 * CHUNK + 123)
    to_f, at_f = handshake()
    chunks = F.chunks(7, 1, records)
    assert len(chunks) == 6 and max(len(c) for c in chunks) == F.HEAD_SIZE + CHUNK
    wire = b"".join(to_f.seal(c) for c in chunks)
    reader = F.Reader(at_f)
    got, held = fed(reader, wire)
    assert [(f.epoch, f.seq, f.records, f.snapshot) for f in got] == [(7, 1, records, False)]
    assert held < HELD and reader.buf == b""
    # One byte of the third chunk changed on the way: refused once that
    # chunk is in, without waiting for the rest of the batch.
    to_f, at_f = handshake()
    wire = bytearray(b"".join(to_f.seal(c) for c in F.chunks(7, 1, records)))
    wire[2 * HELD + CHUNK // 2] ^= 1
    reader = F.Reader(at_f)
    taken = 0
    with pytest.raises(F.FrameError, match="failed its tag"):
        for i in range(0, len(wire), 4096):
            taken = i + 4096
            reader.feed(bytes(wire[i:taken]))
    assert 3 * HELD <= taken < 3 * HELD + 4096


def test_a_chunk_dropped_replayed_reordered_or_from_another_batch_is_refused():
    def sealed(session, *fs, size=4):
        return [session.seal(c) for f in fs for c in F.chunks(*f, chunk=size)]
    to_f, at_f = handshake()
    a = sealed(to_f, (7, 1, b"abcdefghij"), (7, 2, b"klmnopqrst"))
    assert len(a) == 6
    assert [f.records for f in F.Reader(at_f, max_chunk=4).feed(b"".join(a))] == [
        b"abcdefghij", b"klmnopqrst"]
    for bad in (a[:1] + a[2:],  # a chunk dropped
                a[:2] + a[1:],  # replayed
                [a[1], a[0]] + a[2:],  # reordered
                a[:1] + a[3:]):  # the rest of the batch from the next one
        to_f, at_f = handshake()
        with pytest.raises(F.FrameError, match="failed its tag"):
            F.Reader(at_f, max_chunk=4).feed(b"".join(bad))
    # Even under the link's key (a leader's bug), a frame's chunks are of
    # one epoch and seq.
    to_f, at_f = handshake()
    mixed = to_f.seal(F.encode(7, 1, b"abcd", more=True)) + to_f.seal(F.encode(7, 2, b"ef"))
    with pytest.raises(F.FrameError, match="chunk"):
        F.Reader(at_f, max_chunk=4).feed(mixed)


@given(st.lists(st.tuples(u64, u64, st.binary(max_size=40), st.booleans(), st.booleans()),
                max_size=6),
       st.integers(1, 9), st.lists(st.integers(0, 10_000), max_size=12))
def test_chunked_frames_come_back_whole_whatever_the_reads(fs, size, cuts):
    def framed(e, s, r, snap, last):  # (a snapshot's last part names its last batch)
        return F.end_chunks(e, s, s, r, size) if snap and last else F.chunks(e, s, r, snap, last, size)
    to_f, at_f = handshake()
    data = b"".join(to_f.seal(c) for f in fs for c in framed(*f))
    reader = F.Reader(at_f, max_chunk=size)
    got = [f for piece in split_at(data, cuts) for f in reader.feed(piece)]
    # (a batch is its own last: `last` is a snapshot's)
    assert [(f.epoch, f.seq, f.records, f.snapshot, f.last, f.through) for f in got] == [
        (e, s, r, snap, last or not snap, s if snap and last else 0) for e, s, r, snap, last in fs]
    assert reader.buf == b"" and at_f.received == to_f.sent

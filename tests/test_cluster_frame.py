"""Replication frames (cluster/frame.py): the stream survives any split of
its reads, a damaged frame is never taken for another, and a follower's
fencing refuses old epochs and never applies a batch out of order."""
import struct

import pytest
from hypothesis import given, settings, strategies as st

from pybeanstalkd.cluster import frame as F

u64 = st.integers(1, (1 << 64) - 1)
frames = st.lists(st.tuples(u64, u64, st.binary(max_size=300)), max_size=8)


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    cuts = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]


@given(frames, st.lists(st.integers(0, 10_000), max_size=12))
def test_frames_come_back_whatever_the_reads(fs, cuts):
    data = b"".join(F.encode(e, s, r) for e, s, r in fs)
    reader = F.Reader()
    got = [f for piece in split_at(data, cuts) for f in reader.feed(piece)]
    assert [(f.epoch, f.seq, f.records) for f in got] == fs
    assert reader.buf == b""


def test_the_layout():
    data = F.encode(7, 3, b"rec")
    assert data[:4] == b"pbr1" and len(data) == F.HEAD_SIZE + 3
    assert struct.unpack_from("<QQI", data, 4) == (7, 3, 3)
    assert data[F.HEAD_SIZE:] == b"rec"


@settings(max_examples=300)
@given(u64, u64, st.binary(min_size=1, max_size=64), st.data())
def test_a_damaged_frame_is_never_taken_for_another(epoch, seq, records, data):
    good = F.encode(epoch, seq, records)
    i = data.draw(st.integers(0, len(good) - 1))
    bit = data.draw(st.integers(0, 7))
    bad = bytearray(good)
    bad[i] ^= 1 << bit
    try:
        got = F.Reader().feed(bytes(bad))
    except F.FrameError:
        return
    # Only a longer length field can pass unnoticed: the reader waits for
    # bytes that never came, and hands out nothing.
    assert got == [] and 20 <= i < 24


def test_refuses_what_is_not_a_frame():
    with pytest.raises(F.FrameError, match="magic"):
        F.Reader().feed(b"RESERVED 1 3\r\nabc\r\n" + b"\0" * 20)
    head = struct.pack("<4sQQI", b"pbr1", 1, 1, 1 << 31)
    with pytest.raises(F.FrameError, match="over"):
        F.Reader().feed(head + b"\0\0\0\0")  # refused before its bytes are buffered
    assert F.Reader(max_records=10).feed(F.encode(1, 1, b"x" * 10))[0].records == b"x" * 10
    with pytest.raises(F.FrameError):
        F.Reader(max_records=10).feed(F.encode(1, 1, b"x" * 11))
    zero = struct.pack("<4sQQI", b"pbr1", 0, 1, 0)
    import zlib
    with pytest.raises(F.FrameError, match="start at 1"):
        F.Reader().feed(zero + struct.pack("<I", zlib.crc32(zero)))
    for e, s in ((0, 1), (1, 0), (1 << 64, 1)):
        with pytest.raises(ValueError):
            F.encode(e, s, b"")


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
    data = (F.encode(3, 0, b"al", snapshot=True, last=False) + F.encode(3, 0, b"l", snapshot=True)
            + F.encode(3, 1, b"next"))
    assert data[:4] == b"pbp1" and data[30:34] == b"pbs1"
    got = F.Reader().feed(data)
    assert [(f.epoch, f.seq, f.records, f.snapshot, f.last) for f in got] == [
        (3, 0, b"al", True, False), (3, 0, b"l", True, True), (3, 1, b"next", False, True)]
    with pytest.raises(ValueError):
        F.encode(3, 0, b"")  # a batch's seq starts at 1
    acks = F.encode_ack(3, 7) + F.encode_ack(4, 1)
    r = F.AckReader()
    assert r.feed(acks[:5]) == [] and r.feed(acks[5:]) == [(3, 7), (4, 1)]
    with pytest.raises(F.FrameError):
        F.AckReader().feed(b"RESERVED 1 5\r\nhello\r\n")
    f = F.Follower()
    f.start(3, 5)
    assert f.check(F.Frame(2, 9, b"", True)) == F.STALE
    assert f.check(F.Frame(3, 9, b"", True)) == F.RESTART
    assert f.check(F.Frame(4, 0, b"", True)) == F.RESTART
    f.start(4, 0)
    assert f.check(F.Frame(4, 1, b"")) == F.APPLY

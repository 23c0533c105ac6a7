"""stats-group on a big group and flush-tube of a big tube (--extensions),
on the pure engine with the fake clock: neither copies what it walks in
one step (a million ids: 10 to 40 ms with every client waiting), each
slice walks one block of the job map at most, other clients are served
between slices, and the reply is right."""
from __future__ import annotations


import pytest

from fakeclock import Harness
from pybeanstalkd.core import admin
from pybeanstalkd.core.jobmap import BITS
from pybeanstalkd.core.slices import SLICE
from pybeanstalkd.core.idmap import IdMap

BLOCK = 1 << BITS
N = 2 * BLOCK + 100  # the jobs of a group or a tube: three blocks of the job map


class Uncopied(dict):
    """A dict that must not be walked whole."""

    def __iter__(self):
        raise AssertionError("walked whole in one step")


@pytest.fixture
def h(monkeypatch):
    # (the size past which a walk goes block by block: a group or a tube
    # of N is big here)
    monkeypatch.setattr(admin, "COPY_MAX", 1000, raising=False)
    return Harness(extensions=True, auto=False)


def field(reply: bytes, key: bytes) -> int:
    for line in reply.split(b"\n"):
        if line.startswith(key + b": "):
            return int(line[len(key) + 2:])
    raise KeyError(key)


def fill(h, s, n, line: bytes):
    for _ in range(0, n, 500):
        h.send(s, line * min(500, n))
        n -= 500
    while h.step():
        pass
    h.take(s)


def slices(h, other) -> int:
    """Run the background work to its end, a slice at a time, another
    client served between them; how many slices."""
    steps, more = 0, True
    while more:
        more = h.step()
        steps += 1
        assert h.send(other, b"list-tube-used\r\n") == b"USING default\r\n"
    return steps


def test_stats_group_of_a_big_group(h, monkeypatch):
    s, w, other = h.conn(), h.conn(), h.conn()
    fill(h, s, N, b"put 5 0 60 1 grp:big\r\nx\r\n")
    h.send(w, b"reserve-batch 30\r\n")
    h.take(w)
    for i in range(31, 41):
        h.send(w, b"reserve-job %d\r\nbury %d 0\r\n" % (i, i))
    h.take(w)
    g = h.e.q.ext.groups[b"big"]
    # (its members in blocks of the job map's size: none is walked whole)
    assert len(g.members.blocks) == 3 and max(b.live for b in g.members.blocks.values()) <= BLOCK
    monkeypatch.setattr(IdMap, "__iter__", Uncopied.__iter__)
    assert h.send(s, b"stats-group big\r\n") == b""  # (in slices: not yet)
    steps = slices(h, other)
    assert steps >= N // SLICE  # (SLICE members a slice)
    got = h.take(s)
    assert (field(got, b"ready"), field(got, b"reserved"), field(got, b"buried")) == (
        N - 40, 30, 10)


def test_flush_of_a_big_tube(h):
    p, w, f, other = h.conn(), h.conn(), h.conn(), h.conn()
    h.send(p, b"use big\r\n")
    fill(h, p, N - 200, b"put 5 0 60 1\r\nx\r\n")
    fill(h, p, 100, b"put 7 100 60 1\r\nd\r\n")  # delayed
    fill(h, p, 100, b"put 3 0 60 1 grp:g\r\nt\r\n")  # ready, in the heap
    h.send(w, b"watch big\r\nreserve-batch 50\r\n")
    h.take(w)
    assert h.send(f, b"flush-tube big\r\n") == b""  # (in slices: not yet)
    h.send(p, b"put 0 0 60 1\r\nn\r\n")  # put after the start: stays
    steps = slices(h, other)
    assert steps >= 3
    assert h.take(f) == b"FLUSHED %d\r\n" % N
    st = h.send(f, b"stats-tube big\r\n")
    assert (field(st, b"current-jobs-ready"), field(st, b"current-jobs-reserved"),
            field(st, b"current-jobs-delayed")) == (1, 0, 0)
    assert h.send(w, b"reserve-with-timeout 0\r\n").startswith(b"RESERVED %d 1\r\nn" % (N + 1))


def test_a_big_group_deleted_leaves_no_big_table(h):
    """Deleting a big group's members empties their blocks one by one,
    each dropped with its last member: when the group goes, nothing the
    size of the group is left to free at once."""
    s = h.conn()
    fill(h, s, N, b"put 5 0 60 1 grp:big\r\nx\r\n")
    g = h.e.q.ext.groups[b"big"]
    ids = sorted(g.members)
    for i in ids[:-10]:
        h.send(s, b"delete %d\r\n" % i)
    h.take(s)
    assert len(g.members) == 10 and len(g.members.blocks) == 1  # (emptied blocks dropped)
    assert field(h.send(s, b"stats-group big\r\n"), b"ready") == 10
    for i in ids[-10:]:
        h.send(s, b"delete %d\r\n" % i)
    assert h.send(s, b"stats-group big\r\n") == b"NOT_FOUND\r\n"


def test_a_delete_batch_of_a_thousand_runs_in_slices(h):
    """A delete-batch of 1,000 ids (tuber's most) deletes SLICE of them a
    slice, other clients served between, and answers once, with the true
    counts, after its last slice."""
    s, w, other = h.conn(), h.conn(), h.conn()
    fill(h, s, 1000, b"put 5 0 60 1 grp:big\r\nx\r\n")
    assert h.send(w, b"reserve-job 1000\r\n").startswith(b"RESERVED 1000 ")  # (not s's)
    ids = b" ".join(b"%d" % i for i in range(1, 1001))
    assert h.send(s, b"delete-batch %s\r\nlist-tube-used\r\n" % ids) == b""
    assert slices(h, other) >= 1000 // SLICE
    assert h.take(s) == b"DELETED_BATCH 999 1\r\nUSING default\r\n"
    assert field(h.send(s, b"stats-group big\r\n"), b"reserved") == 1

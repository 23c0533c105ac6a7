"""The id map's blocks (core/jobmap.py: full or thinned, the spare)
attacked through the pure engine: random command sequences whose ids cross
block boundaries, with the map's invariants checked after every step."""
import os
import random
import sys

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fakeclock import Harness, with_binlog
from jobmaptools import check_map
from pybeanstalkd.core.jobmap import BITS, THIN
from pybeanstalkd.core.store import Store

SIZE = 1 << BITS


def put(h, s, body=b"x", pri=0, delay=0, ttr=60):
    return h.send(s, b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body))


def put_id(h, s, **kw) -> int:
    out = put(h, s, **kw)
    assert out.startswith(b"INSERTED "), out
    return int(out.split()[1])


class Refusing(Store):
    """No binlog, which has no room for a put (reserve_put) while `full`."""

    full = False

    def reserve_put(self, j):
        return not self.full


class EngineMap(RuleBasedStateMachine):
    """Random commands on a few connections; a model of which ids are stored."""

    def __init__(self):
        super().__init__()
        self.h = Harness()
        self.q = self.h.e.q
        self.q.store = Refusing()
        self.conns = [self.h.conn() for _ in range(3)]
        self.live: set[int] = set()
        self.held: list[set[int]] = [set() for _ in self.conns]  # reserved, as last told

    @initialize(start=st.sampled_from([1, SIZE - 3, 2 * SIZE - 1, 5 * SIZE - 20, (1 << 40) - 2]))
    def start_at(self, start):
        self.q.ids.next = start

    def any_id(self, data):
        near = [self.q.ids.next + d for d in (-2, -1, 0, 1)]
        near += [((self.q.ids.next >> BITS) << BITS) + d for d in (-1, 0, 1)]
        pool = sorted(self.live) + [i for i in near if i > 0]
        return data.draw(st.sampled_from(pool))

    # -- puts and next_id ---------------------------------------------------

    @rule(n=st.integers(1, 24), delay=st.sampled_from([0, 0, 0, 2, 50]),
          ttr=st.sampled_from([1, 2, 60]), c=st.integers(0, 2), pri=st.integers(0, 3))
    def puts(self, n, delay, ttr, c, pri):
        for _ in range(n):
            self.live.add(put_id(self.h, self.conns[c], delay=delay, ttr=ttr, pri=pri))

    @rule(blocks=st.integers(0, 3), back=st.integers(0, 20))
    def jump(self, blocks, back):
        """next_id moves on, as a cluster leader's new block of ids moves it."""
        target = (((self.q.ids.next >> BITS) + blocks) << BITS) - back
        if target > self.q.ids.next:
            self.q.ids.next = target

    @rule(c=st.integers(0, 2), data=st.data())
    def refused_put(self, c, data):
        """A put refused once its body is in (the binlog has no room) uses its id up."""
        s = self.conns[c]
        store = self.q.store
        store.full = True
        try:
            assert put(self.h, s) != b""
        finally:
            store.full = False

    @rule(c=st.integers(0, 2))
    def drained_put(self, c):
        e = self.h.e
        e.draining = True
        try:
            assert put(self.h, self.conns[c]) == b"DRAINING\r\n"
        finally:
            e.draining = False

    # -- reserving ----------------------------------------------------------

    @rule(c=st.integers(0, 2), n=st.integers(1, 8))
    def reserve(self, c, n):
        s = self.conns[c]
        for _ in range(n):
            out = self.h.send(s, b"reserve-with-timeout 0\r\n")
            if not out.startswith(b"RESERVED "):
                assert out in (b"TIMED_OUT\r\n", b"DEADLINE_SOON\r\n"), out
                break
            i = int(out.split()[1])
            assert i in self.live
            self.held[c].add(i)

    @rule(c=st.integers(0, 2), data=st.data())
    def reserve_job(self, c, data):
        i = self.any_id(data)
        out = self.h.send(self.conns[c], b"reserve-job %d\r\n" % i)
        if out.startswith(b"RESERVED "):
            assert i in self.live
            self.held[c].add(i)
        else:
            assert out == b"NOT_FOUND\r\n", out
            assert i not in self.live or self.q.jobs[i].state == 2  # RESERVED

    @precondition(lambda self: any(self.held))
    @rule(data=st.data(), what=st.sampled_from(["release", "release-delay", "bury", "touch",
                                                 "delete"]))
    def act_on_held(self, data, what):
        c = data.draw(st.sampled_from([c for c in range(3) if self.held[c]]))
        i = data.draw(st.sampled_from(sorted(self.held[c])))
        s = self.conns[c]
        cmd = {"release": b"release %d 0 0\r\n", "release-delay": b"release %d 0 3\r\n",
               "bury": b"bury %d 0\r\n", "touch": b"touch %d\r\n",
               "delete": b"delete %d\r\n"}[what] % i
        out = self.h.send(s, cmd)
        if out == b"NOT_FOUND\r\n":  # its TTR ran out meanwhile, or taken by another
            self.held[c].discard(i)
            return
        assert out in (b"RELEASED\r\n", b"BURIED\r\n", b"TOUCHED\r\n", b"DELETED\r\n"), out
        if what != "touch":
            self.held[c].discard(i)
        if what == "delete":
            self.live.discard(i)

    # -- by id ----------------------------------------------------------------

    @rule(c=st.integers(0, 2), data=st.data())
    def delete(self, c, data):
        i = self.any_id(data)
        out = self.h.send(self.conns[c], b"delete %d\r\n" % i)
        if out == b"DELETED\r\n":
            assert i in self.live
            self.live.discard(i)
            for h in self.held:
                h.discard(i)
        else:
            assert out == b"NOT_FOUND\r\n", out
            assert i not in self.live or self.q.jobs[i].state == 2  # reserved by another

    @rule(c=st.integers(0, 2), data=st.data(), keep=st.sampled_from([0, 1, 2, THIN - 1, THIN,
                                                                       THIN + 1, 17, 40]))
    def thin_a_block(self, c, data, keep):
        """Delete every job of one block but `keep` of them, in random order."""
        if not self.live:
            return
        k = data.draw(st.sampled_from(sorted({i >> BITS for i in self.live})))
        ids = [i for i in self.live if i >> BITS == k]
        rnd = random.Random(data.draw(st.integers(0, 1 << 30)))
        rnd.shuffle(ids)
        for i in ids[keep:]:
            out = self.h.send(self.conns[c], b"delete %d\r\n" % i)
            if out == b"DELETED\r\n":
                self.live.discard(i)
                for h in self.held:
                    h.discard(i)
            else:
                assert out == b"NOT_FOUND\r\n" and self.q.jobs[i].state == 2

    @rule(c=st.integers(0, 2), data=st.data())
    def peek_and_stats(self, c, data):
        i = self.any_id(data)
        s = self.conns[c]
        out = self.h.send(s, b"peek %d\r\n" % i)
        assert out.startswith(b"FOUND %d " % i) if i in self.live else out == b"NOT_FOUND\r\n"
        out = self.h.send(s, b"stats-job %d\r\n" % i)
        assert out.startswith(b"OK ") if i in self.live else out == b"NOT_FOUND\r\n"

    @rule(c=st.integers(0, 2), data=st.data())
    def kick_job(self, c, data):
        i = self.any_id(data)
        out = self.h.send(self.conns[c], b"kick-job %d\r\n" % i)
        assert out in (b"KICKED\r\n", b"NOT_FOUND\r\n"), out
        if i not in self.live:
            assert out == b"NOT_FOUND\r\n"

    @rule(c=st.integers(0, 2), n=st.integers(1, 50))
    def kick(self, c, n):
        assert self.h.send(self.conns[c], b"kick %d\r\n" % n).startswith(b"KICKED ")

    @rule(c=st.integers(0, 2))
    def peeks(self, c):
        s = self.conns[c]
        for cmd in (b"peek-ready\r\n", b"peek-delayed\r\n", b"peek-buried\r\n"):
            out = self.h.send(s, cmd)
            if out.startswith(b"FOUND "):
                assert int(out.split()[1]) in self.live
            else:
                assert out == b"NOT_FOUND\r\n"

    # -- time and connections ---------------------------------------------------

    @rule(seconds=st.sampled_from([0.5, 1.5, 3, 60]))
    def advance(self, seconds):
        self.h.advance(seconds)

    @rule(c=st.integers(0, 2))
    def reconnect(self, c):
        self.h.close(self.conns[c])
        self.conns[c] = self.h.conn()
        self.held[c] = set()

    @invariant()
    def map_ok(self):
        check_map(self.q, self.live)


TestEngineMap = EngineMap.TestCase
TestEngineMap.settings = settings(max_examples=int(os.environ.get("JOBMAP_EXAMPLES", 150)), stateful_step_count=40, deadline=None,
                                  suppress_health_check=list(HealthCheck))



class EngineMapExt(EngineMap):
    """The same with --extensions: tagged puts (a duplicate uses no id),
    delete-batch, flush-tube and reserve-batch on the same map."""

    def __init__(self):
        RuleBasedStateMachine.__init__(self)
        self.h = Harness(extensions=True)
        self.q = self.h.e.q
        self.q.store = Refusing()
        self.conns = [self.h.conn() for _ in range(3)]
        self.live = set()
        self.held = [set() for _ in self.conns]

    @rule(c=st.integers(0, 2), key=st.integers(0, 5))
    def tagged_put(self, c, key):
        out = self.h.send(self.conns[c], b"put 0 0 60 1 idp:k%d\r\nx\r\n" % key)
        assert out.startswith(b"INSERTED "), out
        self.live.add(int(out.split()[1]))

    @rule(c=st.integers(0, 2), data=st.data())
    def delete_batch(self, c, data):
        ids = sorted({self.any_id(data) for _ in range(data.draw(st.integers(1, 6)))})
        out = self.h.send(self.conns[c], b"delete-batch %s\r\n" % b" ".join(b"%d" % i for i in ids))
        assert out.startswith(b"DELETED_BATCH "), out
        for i in ids:
            if i not in self.q.jobs:
                self.live.discard(i)
                for h in self.held:
                    h.discard(i)

    @rule(c=st.integers(0, 2))
    def flush(self, c):
        out = self.h.send(self.conns[c], b"flush-tube default\r\n")
        assert out.startswith(b"FLUSHED ") or out == b"NOT_FOUND\r\n", out
        self.live = set(self.q.jobs)
        self.held = [h & self.live for h in self.held]

    @rule(c=st.integers(0, 2), n=st.integers(1, 20))
    def reserve_batch(self, c, n):
        out = self.h.send(self.conns[c], b"reserve-batch %d\r\n" % n)
        assert out.startswith(b"RESERVED_BATCH "), out
        for line in out.split(b"\r\n"):
            if line.startswith(b"RESERVED "):
                i = int(line.split()[1])
                assert i in self.live
                self.held[c].add(i)


TestEngineMapExt = EngineMapExt.TestCase
TestEngineMapExt.settings = TestEngineMap.settings

# -- patterns -----------------------------------------------------------------

@pytest.fixture
def h():
    return Harness()


@pytest.mark.parametrize("keep", [1, THIN - 1, THIN, THIN + 1])
def test_survivors_across_many_blocks(h, keep):
    """Each of many full blocks thinned to `keep` survivors: thinned at
    THIN or fewer, full above; then the survivors go in random order."""
    a = h.conn()
    q = h.e.q
    nblocks = 6
    q.ids.next = SIZE  # block 1 onwards, each full
    ids = [put_id(h, a) for _ in range(nblocks * SIZE)]
    put_id(h, a)  # next_id's block is past them all
    rnd = random.Random(keep)
    kept = []
    for k in range(1, nblocks + 1):
        mine = [i for i in ids if i >> BITS == k]
        rnd.shuffle(mine)
        kept += mine[:keep]
        for i in mine[keep:]:
            assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
        b = q.jobs.blocks[k]
        assert b.live == keep
        assert (b.few is not None) == (keep <= THIN)
        if keep <= THIN:
            assert sys.getsizeof(b.few) < 2000
    check_map(q)
    for i in kept:
        assert h.send(a, b"peek %d\r\n" % i) == b"FOUND %d 1\r\nx\r\n" % i
    rnd.shuffle(kept)
    for i in kept:
        assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
        check_map(q)
    assert sorted(q.jobs.blocks) == [(nblocks + 1)]


def test_reinsert_into_a_thinned_block_then_delete(h):
    """Recovery and cluster apply write through JobMap.__setitem__: into a
    thinned block, an id it had, or one it never had; Queue.delete then
    takes them out and the counts stay right."""
    a = h.conn()
    q = h.e.q
    ids = [put_id(h, a) for _ in range(SIZE + 5)]  # 1 .. 4101: blocks 0 and 1
    for i in ids[:SIZE - 1 - THIN]:
        assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    b0 = q.jobs.blocks[0]
    assert b0.few is not None and b0.live == THIN
    # a job parked with its id (as a follower's record would find it: binlog/apply.py): take one
    # out by the map, put it back, and one of the ids deleted
    gone = ids[0]
    j = q.jobs[ids[SIZE - 2]]
    del q.jobs[j.id]
    assert q.jobs.blocks[0].live == THIN - 1
    q.jobs[j.id] = j
    assert q.jobs.blocks[0].live == THIN
    q.jobs[j.id] = j  # again: no double count
    assert q.jobs.blocks[0].live == THIN
    # a new job into the thinned block through the queue's insert
    q.ids.next = gone
    assert put_id(h, a) == gone
    q.ids.next = ids[-1] + 1
    assert q.jobs.blocks[0].live == THIN + 1
    check_map(q)
    for i in sorted(q.jobs):
        if i >> BITS == 0:
            assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
            check_map(q)
    assert 0 not in q.jobs.blocks


@pytest.mark.parametrize("why", ["no-room", "too-big", "out-of-memory"])
def test_a_refused_put_at_a_block_boundary_leaves_no_empty_block(why):
    h = Harness(max_memory=10_000) if why == "out-of-memory" else Harness()
    a = h.conn()
    q = h.e.q
    q.ids.next = SIZE - 1
    assert put_id(h, a) == SIZE - 1
    if why == "no-room":
        q.store = store = Refusing()
        store.full = True
        assert put(h, a) == b"OUT_OF_MEMORY\r\n"  # (the reference's word for it)
        store.full = False
    elif why == "too-big":
        assert put(h, a, body=b"x" * 70000) == b"JOB_TOO_BIG\r\n"
    else:
        assert put(h, a, body=b"x" * 20000) == b"OUT_OF_MEMORY\r\n"
    assert h.send(a, b"delete %d\r\n" % (SIZE - 1)) == b"DELETED\r\n"
    assert not q.jobs.blocks
    check_map(q)
    nxt = put_id(h, a)
    assert nxt in (SIZE, SIZE + 1)
    assert list(q.jobs.blocks) == [1] and q.jobs.blocks[1].live == 1
    check_map(q)


def test_a_put_whose_body_comes_late_lands_in_a_thinned_block(h):
    """An id is taken at the put's command line: by the time its body is in,
    its block may be thinned or gone (and the spare used)."""
    a, slow, slow2 = h.conn(), h.conn(), h.conn()
    q = h.e.q
    ids = [put_id(h, a) for _ in range(SIZE - 3)]  # 1 .. 4093
    assert h.send(slow, b"put 0 0 60 1\r\n") == b""  # takes 4094
    assert h.send(slow2, b"put 0 0 60 1\r\n") == b""  # takes 4095
    later = put_id(h, a)
    assert later == SIZE
    for i in ids[:-THIN]:
        assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    assert q.jobs.blocks[0].few is not None
    assert h.send(slow, b"x\r\n") == b"INSERTED 4094\r\n"
    check_map(q)
    for i in ids[-THIN:] + [SIZE - 2]:
        assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    assert 0 not in q.jobs.blocks
    check_map(q)
    assert h.send(slow2, b"x\r\n") == b"INSERTED 4095\r\n"
    assert q.jobs.blocks[0].live == 1
    check_map(q)
    assert h.send(a, b"peek 4095\r\n") == b"FOUND 4095 1\r\nx\r\n"


@pytest.mark.parametrize("cmd", [
    b"peek %d", b"delete %d", b"kick-job %d", b"stats-job %d", b"reserve-job %d",
    b"touch %d", b"release %d 0 0", b"bury %d 0"])
@pytest.mark.parametrize("i", [0, 1, 4095, 4096, 1 << 32, (1 << 63) - 1, 1 << 63,
                               (1 << 64) - 1])
def test_huge_and_zero_ids_are_not_found(h, cmd, i):
    a = h.conn()
    put_id(h, a)
    if i == 1:
        i = 2  # (1 is there)
    assert h.send(a, (cmd % i) + b"\r\n") == b"NOT_FOUND\r\n"
    assert h.e.q.jobs.get(i) is None and i not in h.e.q.jobs
    check_map(h.e.q)


def test_huge_ids_stored(h):
    """Ids near 2**64 - 1 (a binlog may hold them): blocks keyed past 2**52."""
    a = h.conn()
    q = h.e.q
    q.ids.next = (1 << 64) - 5
    ids = [put_id(h, a) for _ in range(5)]
    assert ids[-1] == (1 << 64) - 1
    assert put(h, a) == b"INTERNAL_ERROR\r\n"  # ids used up: refused, no id, no block
    check_map(q)
    for i in ids:
        assert h.send(a, b"peek %d\r\n" % i).startswith(b"FOUND %d " % i)
    for i in ids:
        assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    assert not q.jobs.blocks


# -- recovery -------------------------------------------------------------------

def test_restart_finds_every_survivor(tmp_path):
    h, wal = with_binlog(tmp_path)
    a = h.conn()
    q = h.e.q
    q.ids.next = SIZE - 100
    ids = [put_id(h, a, delay=(5 if n % 7 == 0 else 0)) for n in range(3 * SIZE)]
    rnd = random.Random(7)
    keep = set()
    for k in sorted({i >> BITS for i in ids}):
        mine = [i for i in ids if i >> BITS == k]
        rnd.shuffle(mine)
        n = rnd.choice([0, 1, THIN, THIN + 1, 200])
        keep.update(mine[:n])
        for i in mine[n:]:
            assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    for i in sorted(keep)[::5]:  # some reserved then buried
        assert h.send(a, b"reserve-job %d\r\n" % i).startswith(b"RESERVED")
        assert h.send(a, b"bury %d 0\r\n" % i) == b"BURIED\r\n"
    check_map(q, keep)
    wal.flush()
    h2, _ = with_binlog(tmp_path)
    q2 = h2.e.q
    check_map(q2, keep)
    assert q2.ids.next == q.ids.next
    b = h2.conn()
    for i in sorted(keep):
        assert h2.send(b, b"peek %d\r\n" % i).startswith(b"FOUND %d " % i)
    for i in sorted(keep, key=lambda i: -i):
        assert h2.send(b, b"delete %d\r\n" % i) == b"DELETED\r\n"
        check_map(q2)
    assert not q2.jobs.blocks

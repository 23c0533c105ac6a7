"""A follower fed its leader's binlog records (cluster/apply.py,
core/replica.py) holds the same jobs as the leader, in the same states
(reserved there is ready here), and its own binlog recovers them."""
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fakeclock import OPEN_WALS, Harness
from pybeanstalkd.binlog import format as F
from pybeanstalkd.binlog.bodies import DiskBodies
from pybeanstalkd.binlog.files import Wal
from pybeanstalkd.binlog.recovery import recover
from pybeanstalkd.cluster.apply import Restore, apply_records, snapshot_parts
from pybeanstalkd.core import replica
from pybeanstalkd.core.job import BURIED, DELAYED, READY, RESERVED, OnDisk, counters
from support import Client, Server, require_reference

quiet = lambda m: None  # noqa: E731


def node(path, now=None, ram_min=None, **engine):
    """ram_min: --bodies-on-disk (bodies of ram_min bytes or more left in
    the node's own binlog files); engine: the Engine's settings."""
    os.makedirs(path, exist_ok=True)
    if ram_min is None:
        wal = Wal(path, 1 << 20, warn=quiet)
        h = Harness(store=wal, **engine)
    else:
        wal = Wal(path, 1 << 20, warn=quiet, bodies=DiskBodies(path, ram_min, quiet))
        h = Harness(store=wal, bodies_on_disk=True, **engine)
    OPEN_WALS.append(wal)  # (closed after the test: conftest.py)
    if now is not None:
        h.now = now
    recover(wal, h.e.q, h.e.max_job_size, h.now, quiet)
    return h, wal


class Pair:
    """A leader engine with a binlog, and a follower queue applying what
    the leader's binlog writes, on one fake clock."""

    def __init__(self, path, ram_min=None):
        self.lh, self.lwal = node(os.path.join(path, "leader"), ram_min=ram_min)
        self.fh, self.fwal = node(os.path.join(path, "follower"), ram_min=ram_min)
        self.fwal.wall_offset = self.lwal.wall_offset  # one host, one clock
        self.batches = []
        self.lwal.tap(self.batches.append)
        self.c = self.lh.conn()
        self.parts = None
        self.send(b"watch a\r\n")

    def send(self, line: bytes) -> bytes:
        out = self.lh.send(self.c, line)
        self.sync()
        return out

    def sync(self):
        self.lwal.flush()  # as the transport does after each event
        if self.parts is not None:
            return  # a snapshot goes out: step()
        for b in self.batches:
            apply_records(self.fh.e.q, b, self.fwal.wall_offset, self.fh.now,
                          self.fh.e.max_job_size)
        self.batches.clear()
        self.fwal.flush()

    def begin_parts(self, part_bytes=1):
        """A snapshot in parts (of one record each by default), the leader
        going on between them (step() sends the next); batches shipped
        meanwhile follow it."""
        self.lwal.flush()
        self.batches.clear()
        self.parts = snapshot_parts(self.lh.e.q, self.lwal.wall_offset, part_bytes)
        self.restore = Restore("k")
        self.first_max = max(self.lh.e.q.jobs, default=0)
        self.held = []

    def step(self) -> bool:
        """The next part; True once the snapshot and what followed it are in
        (as a link sends them: the end names the last batch written while
        the parts went out, and the follower settles once it applied it)."""
        self.lwal.flush()
        self.held += self.batches  # (shipped after the snapshot)
        self.batches.clear()
        part = next(self.parts, None)
        if part is not None:
            self.restore.part(self.fh.e.q, part, self.fwal.wall_offset, self.fh.now,
                              self.fh.e.max_job_size)
            return False
        self.restore.end(self.fh.e.q, self.fh.now)
        for b in self.held:
            apply_records(self.fh.e.q, b, self.fwal.wall_offset, self.fh.now,
                          self.fh.e.max_job_size, snapshot=True)
        self.parts, self.held = None, []
        replica.settled(self.fh.e.q, self.fh.now)
        self.sync()
        return True

    def resnap(self):
        """A snapshot in one part, at once."""
        self.begin_parts(1 << 62)
        while not self.step():
            pass

    def advance(self, seconds):
        self.lh.advance(seconds)
        self.sync()
        self.fh.advance(seconds)
        assert self.fh.now == self.lh.now


def jobs(q, exact=True):
    out = {}
    for j in q.jobs.values():
        state = READY if j.state == RESERVED else j.state
        out[j.id] = (j.tube.name, j.pri, q.store.body(j), state,
                     j.deadline if exact and state == DELAYED else None)
    return out


def buried_order(q):
    return {t.name: list(t.buried) for t in q.tubes.named.values() if t.buried}


def same(p: Pair):
    lq, fq = p.lh.e.q, p.fh.e.q
    assert jobs(fq) == jobs(lq)
    assert buried_order(fq) == buried_order(lq)
    assert fq.ids.next == lq.ids.next


def ids_of(reply: bytes):
    return int(reply.split()[1])


def test_each_journaled_change_reaches_the_follower(tmp_path):
    p = Pair(str(tmp_path))
    assert p.send(b"put 5 0 60 2\r\nhi\r\n") == b"INSERTED 1\r\n"
    assert p.send(b"use a\r\n") == b"USING a\r\n"
    assert p.send(b"put 3 10 60 3\r\nyou\r\n") == b"INSERTED 2\r\n"  # delayed
    assert p.send(b"put 7 0 60 5\r\nthere\r\n") == b"INSERTED 3\r\n"
    same(p)
    assert p.send(b"reserve-with-timeout 0\r\n").startswith(b"RESERVED 1 ")
    same(p)  # reserved there, ready here
    assert p.send(b"bury 1 9\r\n") == b"BURIED\r\n"
    assert p.send(b"reserve-with-timeout 0\r\n").startswith(b"RESERVED 3 ")
    assert p.send(b"release 3 2 5\r\n") == b"RELEASED\r\n"
    same(p)
    st = p.fh.e.q.jobs[3]
    assert st.state == DELAYED and st.pri == 2
    assert p.fh.e.q.jobs[1].state == BURIED and p.fh.e.q.jobs[1].pri == 9
    assert p.send(b"kick-job 1\r\n") == b"KICKED\r\n"
    assert p.send(b"delete 2\r\n") == b"DELETED\r\n"
    same(p)
    # A later record brings the job's counts, delay and ttr too (stats-job's
    # reserves, releases, buries, kicks, delay), not only its state
    for id_, want in ((1, (1, 0, 0, 1, 1)), (3, (1, 0, 1, 0, 0))):
        lj, fj = p.lh.e.q.jobs[id_], p.fh.e.q.jobs[id_]
        assert counters(fj) == counters(lj) == want, id_
        assert (fj.times.delay, fj.times.ttr) == (lj.times.delay, lj.times.ttr), id_
    assert p.fh.e.q.jobs[3].times.delay == 5 * 10**9
    p.advance(6)  # job 3 comes due on both clocks
    same(p)
    assert p.fh.e.q.jobs[3].state == READY
    assert p.send(b"delete 3\r\n") == b"DELETED\r\n"
    assert p.send(b"delete 1\r\n") == b"DELETED\r\n"
    same(p)
    assert jobs(p.fh.e.q) == {}


ops = st.lists(st.one_of(
    st.tuples(st.just("put"), st.sampled_from([b"default", b"a"]), st.integers(0, 3),
              st.sampled_from([0, 0, 2])),
    st.tuples(st.just("reserve")),
    st.tuples(st.just("release"), st.integers(0, 3), st.sampled_from([1, 3])),
    st.tuples(st.just("bury"), st.integers(0, 3)),
    st.tuples(st.just("delete"), st.integers(1, 30)),
    st.tuples(st.just("kick"), st.sampled_from([b"default", b"a"]), st.integers(1, 3)),
    st.tuples(st.just("kick-job"), st.integers(1, 30)),
    st.tuples(st.just("advance"), st.sampled_from([0.5, 1.5, 4, 61])),
    st.tuples(st.just("snapshot")),
    st.tuples(st.just("parts")),
), max_size=60)


@pytest.mark.parametrize("ram_min", [None, 0], ids=["bodies-in-ram", "bodies-on-disk"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_a_follower_holds_what_its_leader_holds(tmp_path_factory, ram_min, steps):
    """With --bodies-on-disk, each node's bodies are in its own files (read
    back to compare)."""
    path = str(tmp_path_factory.mktemp("pair"))
    p = Pair(path, ram_min)
    held = []  # ids reserved by p.c
    for op in steps:
        kind = op[0]
        if kind == "put":
            p.send(b"use %s\r\n" % op[1])
            p.send(b"put %d %d 60 4\r\nbody\r\n" % (op[2], op[3]))
        elif kind == "reserve":
            r = p.send(b"reserve-with-timeout 0\r\n")
            if r.startswith(b"RESERVED"):
                held.append(ids_of(r))
        elif kind in ("release", "bury") and held:
            i = held.pop(0)
            line = (b"release %d %d %d\r\n" % (i, op[1], op[2]) if kind == "release"
                    else b"bury %d %d\r\n" % (i, op[1]))
            p.send(line)
        elif kind == "delete":
            if p.send(b"delete %d\r\n" % op[1]) == b"DELETED\r\n" and op[1] in held:
                held.remove(op[1])
        elif kind == "kick":
            p.send(b"use %s\r\n" % op[1])
            p.send(b"kick %d\r\n" % op[2])
        elif kind == "kick-job":
            p.send(b"kick-job %d\r\n" % op[1])
        elif kind == "snapshot" and p.parts is None:  # the follower catches up from scratch
            p.resnap()
        elif kind == "parts" and p.parts is None:  # ... in parts, the leader going on
            p.begin_parts()
        elif kind == "advance":
            p.advance(op[1])
            held = [i for i in held if p.lh.e.q.jobs.get(i) is not None
                    and p.lh.e.q.jobs[i].state == RESERVED]
        if p.parts is not None:
            superset(p)  # never less than the leader, meanwhile
            if p.step():
                same(p)
        else:
            same(p)
    while p.parts is not None:
        p.step()
    same(p)
    # The follower's own binlog holds the same jobs.
    p.fwal.flush()
    h2, _ = node(os.path.join(path, "follower"), now=p.fh.now, ram_min=ram_min)
    if ram_min is not None:  # (recovered: no body loaded, each read back from the files)
        assert all(type(j.body) is OnDisk for j in h2.e.q.jobs.values())
        assert all(type(j.body) is OnDisk for j in p.fh.e.q.jobs.values())
    assert jobs(h2.e.q, exact=False) == jobs(p.lh.e.q, exact=False) or _delayed_came_due(h2, p)


def superset(p: Pair):
    """Mid-snapshot, the follower holds every job the leader had when the
    snapshot began and still has (it may hold more, and older states)."""
    have = p.fh.e.q.jobs
    assert all(i in have for i in p.lh.e.q.jobs if i <= p.first_max)


def _delayed_came_due(h2, p):
    """Recovery reads delays by the wall clock, which moved on while the fake
    one did not: a delayed job may come back ready; nothing else differs."""
    a, b = jobs(h2.e.q, exact=False), jobs(p.lh.e.q, exact=False)
    strip = lambda d: {i: v[:3] + ((READY,) if v[3] == DELAYED else v[3:4]) for i, v in d.items()}  # noqa: E731
    return strip(a) == strip(b)


def test_a_snapshot_replaces_what_a_follower_had(tmp_path):
    p = Pair(str(tmp_path))
    for i in range(6):
        p.send(b"put %d 0 60 3\r\nj%02d\r\n" % (i, i))
    # The follower misses what comes next (it was down)...
    p.lwal.tap(lambda data: None)
    p.send(b"delete 2\r\n")
    p.send(b"reserve-with-timeout 0\r\n")
    p.send(b"bury 1 4\r\n")
    p.send(b"reserve-with-timeout 0\r\n")
    p.send(b"bury 3 4\r\n")
    p.send(b"put 0 30 60 1\r\nd\r\n")
    assert jobs(p.fh.e.q) != jobs(p.lh.e.q)
    p.lwal.tap(p.batches.append)
    p.resnap()  # ...and catches up
    same(p)
    assert list(p.fh.e.q.tubes.named[b"default"].buried) == [1, 3]
    p.send(b"kick 1\r\n")
    same(p)


def test_the_followers_binlog_is_one_beanstalkd_reads(tmp_path):
    p = Pair(str(tmp_path))
    for i in range(5):
        p.send(b"put %d 0 60 3\r\nj%02d\r\n" % (i, i))
    p.send(b"reserve-with-timeout 0\r\n")
    p.send(b"bury 1 0\r\n")
    p.send(b"delete 2\r\n")
    p.send(b"put 0 3600 60 1\r\nd\r\n")
    p.fwal.flush()
    os.fsync(p.fwal.cur.fd)
    srv = Server([require_reference(), "-b", os.path.join(str(tmp_path), "follower")])
    try:
        c = Client(srv.connect())
        stats = c.cmd(b"stats\r\n")
        for key, want in ((b"current-jobs-ready", 3), (b"current-jobs-buried", 1),
                          (b"current-jobs-delayed", 1)):
            assert b"\n%s: %d\n" % (key, want) in stats, (key, stats)
        assert c.cmd(b"peek 1\r\n") == b"FOUND 1 3\r\nj00\r\n"
        assert c.cmd(b"peek 2\r\n") == b"NOT_FOUND\r\n"
        c.close()
    finally:
        srv.stop()


def test_a_followers_put_records_are_the_leaders_bytes_and_its_own(tmp_path):
    # A follower stores a put's record as it came (cluster/apply.py): those
    # bytes must be the ones it would write for the job it holds.
    p = Pair(str(tmp_path))
    p.send(b"put 5 0 60 2\r\nhi\r\n")
    p.send(b"use a\r\n")
    p.send(b"put 4294967295 0 1 3\r\nyou\r\n")
    p.advance(1.5)
    p.send(b"put 0 0 3600 5\r\nthere\r\n")
    p.send(b"put 3 20 60 1\r\nd\r\n")  # delayed: applied and encoded here
    p.send(b"delete 1\r\n")
    p.fwal.flush()
    with open(os.path.join(str(tmp_path), "leader", "binlog.1"), "rb") as f:
        leader = f.read()
    with open(os.path.join(str(tmp_path), "follower", "binlog.1"), "rb") as f:
        follower = f.read()
    assert p.lwal.written == p.fwal.written > 0
    end = 4 + p.fwal.written  # (the version, then the records; zeros after them)
    assert follower[:end] == leader[:end]
    records = {}
    for r in F.read_records(follower[:end], F.VERSION, 65535, "f", print, [0, True]):
        if r.name:  # a full record: the job's latest
            records[r.id] = follower[r.offset:r.offset + 84 + len(r.name) + r.size]
    fq = p.fh.e.q
    assert sorted(fq.jobs) == [2, 3, 4]
    for id_ in fq.jobs:
        assert records[id_] == F.encode(fq.jobs[id_], True, p.fwal.wall_offset)


@pytest.mark.parametrize("id_", [(1 << 63) + 5, (1 << 64) - 1])
def test_a_leaders_job_record_with_an_id_of_the_tags_records_is_refused(tmp_path, id_):
    """With --extensions the ids from 2**63 on name the tags' records: a
    frame holding a job's record with one (a forged leader, bytes changed
    on the way) is refused, as recovery skips it; the follower's ids do not
    move past it (they once did, to 2**64, where a flush-tube's record
    could not be packed)."""
    from fakeclock import with_binlog
    from pybeanstalkd.cluster.apply import ApplyError
    from pybeanstalkd.core.job import Job

    h, wal = with_binlog(tmp_path, extensions=True)
    forged = Job(id_, h.e.q.tubes.tube(b"default"), 0, 0, 60 * 10**9, b"b\r\n", h.now)
    forged.state = READY
    with pytest.raises(ApplyError, match="an id of the extensions' records"):
        apply_records(h.e.q, F.encode(forged, True, wal.wall_offset), wal.wall_offset,
                      h.now, h.e.max_job_size)
    assert h.e.q.ids.next == 1 and id_ not in h.e.q.jobs
    # Its tags' record first, as a leader writes them: refused at the tags,
    # none kept (they would count against --max-memory with no job).
    from pybeanstalkd.binlog import ext as X
    from pybeanstalkd.core.puttags import Tags
    frame = X.chunks(X.tags_msg(id_, Tags(grp=b"g"))) + F.encode(forged, True, wal.wall_offset)
    with pytest.raises(ApplyError, match="an id of the extensions' records"):
        apply_records(h.e.q, frame, wal.wall_offset, h.now, h.e.max_job_size)
    assert not h.e.q.ext.pending and h.e.q.tags.memory() == 0
    c = h.conn()
    assert h.send(c, b"put 0 0 60 1\r\nx\r\n") == b"INSERTED 1\r\n"
    assert h.send(c, b"flush-tube default\r\n") == b"FLUSHED 1\r\n"


def test_jobs_buried_while_a_snapshot_goes_out_keep_the_leaders_bury_order(tmp_path):
    """Jobs reserved when the snapshot lists its jobs, buried (3, then 2)
    before their parts are read: the parts bury them in id order, the
    batches that follow in the leader's; a record that leaves a buried
    job buried keeps its place only once those are applied."""
    p = Pair(str(tmp_path))
    p.send(b"use a\r\n")
    for i in range(3):
        p.send(b"put 0 0 60 1\r\n%d\r\n" % i)
    for i in range(3):
        assert p.send(b"reserve-with-timeout 0\r\n").startswith(b"RESERVED %d " % (i + 1))
    p.begin_parts(1)
    assert not p.step()  # job 1's part
    assert p.lh.send(p.c, b"bury 3 0\r\n") == b"BURIED\r\n"
    assert p.lh.send(p.c, b"bury 2 0\r\n") == b"BURIED\r\n"
    while not p.step():
        pass
    assert list(p.lh.e.q.tubes.named[b"a"].buried) == [3, 2]
    same(p)

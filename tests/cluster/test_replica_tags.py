"""A follower of a leader with --extensions gets the put tags' state in the
shipped records (binlog/ext.py), through batches and snapshots alike, and
keeps it when it takes over: a key, a cooldown, a held aft: job."""
import os

import pytest

from fakeclock import OPEN_WALS, Harness
from pybeanstalkd.binlog.bodies import DiskBodies
from pybeanstalkd.binlog.codec import TaggedCodec
from pybeanstalkd.binlog.files import Wal
from pybeanstalkd.binlog.recovery import recover
from pybeanstalkd.core.tags import ExtState
from test_replica import Pair, quiet


def ext_node(path, now=None, ram_min=None):
    """ram_min: --bodies-on-disk, as in test_replica.node."""
    os.makedirs(path, exist_ok=True)
    st = ExtState()
    if ram_min is None:
        wal = Wal(path, 1 << 20, warn=quiet, codec=TaggedCodec(st))
        h = Harness(store=wal, extensions=True, tag_state=st)
    else:
        wal = Wal(path, 1 << 20, warn=quiet, codec=TaggedCodec(st),
                  bodies=DiskBodies(path, ram_min, quiet))
        h = Harness(store=wal, extensions=True, tag_state=st, bodies_on_disk=True)
    OPEN_WALS.append(wal)  # (closed after the test: conftest.py)
    recover(wal, h.e.q, h.e.max_job_size, h.now, quiet)
    return h, wal


@pytest.fixture(params=[None, 0], ids=["bodies-in-ram", "bodies-on-disk"])
def pair(tmp_path, monkeypatch, request):
    import test_replica
    monkeypatch.setattr(test_replica, "node", ext_node)
    return Pair(str(tmp_path), request.param)


def put(p, tags, body=b"a", pri=0):
    tail = b" " + tags if tags else b""  # (a blank tail is the reference's BAD_FORMAT)
    return p.send(b"put %d 0 60 %d%s\r\n%s\r\n" % (pri, len(body), tail, body))


def state_of(q):
    ext = q.ext
    return ({t: {k: j.id for k, j in m.items()} for t, m in ext.keys.items()},
            {(t, k): c.orig for t, m in ext.cools.items() for k, c in m.items()},
            {n: (sorted(g.members), g.buried, sorted(g.waiting)) for n, g in ext.groups.items()},
            dict(ext.held), {key: k.limit for key, k in ext.cons.items() if k.limit},
            {j.id: j.tags for j in q.jobs.values() if j.tags}, ext.tagged, ext.pending)


def forget_groups(ext):
    """No group left (each entry let go as the policy lets one go), nor a
    count of aft: jobs: a follower that has nothing."""
    for name in list(ext.groups):
        ext.forget_group(name)
    ext.aft_left.clear()


def test_a_follower_holds_the_same_tags_state(pair):
    p = pair
    p.send(b"use a\r\n")
    assert put(p, b"idp:k grp:g") == b"INSERTED 1\r\n"
    assert put(p, b"aft:g con:c:3") == b"INSERTED 2\r\n"
    assert put(p, b"idp:gone:3600") == b"INSERTED 3\r\n"
    p.send(b"delete 3\r\n")
    assert put(p, b"idp:k", pri=0) == b"INSERTED 1 READY\r\n"
    lq, fq = p.lh.e.q, p.fh.e.q
    assert state_of(fq) == state_of(lq)
    assert fq.ext.held == {b"a": 1}
    # the follower takes over: its own clients see the same answers
    c = p.fh.conn()
    p.fh.send(c, b"use a\r\n")
    assert p.fh.send(c, b"put 0 0 60 1 idp:k\r\nb\r\n") == b"INSERTED 1 READY\r\n"
    assert p.fh.send(c, b"put 0 0 60 1 idp:gone\r\nb\r\n") == b"INSERTED 3 DELETED\r\n"
    assert p.fh.send(c, b"watch a\r\n") == b"WATCHING 2\r\n"
    assert p.fh.send(c, b"reserve-with-timeout 0\r\n") == b"RESERVED 1 1\r\na\r\n"
    assert p.fh.send(c, b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"  # 2 is held
    assert p.fh.send(c, b"delete 1\r\n") == b"DELETED\r\n"
    assert p.fh.send(c, b"reserve-with-timeout 0\r\n") == b"RESERVED 2 1\r\na\r\n"


def test_a_flush_and_a_release_reach_the_follower(pair):
    p = pair
    p.send(b"use a\r\n")
    put(p, b"grp:g")
    put(p, b"aft:g")
    put(p, b"idp:x:3600")
    p.send(b"delete 3\r\n")
    assert p.send(b"flush-tube a\r\n") == b"FLUSHED 1\r\n"  # (2 stays, held... released)
    lq, fq = p.lh.e.q, p.fh.e.q
    assert state_of(fq) == state_of(lq)
    p.fh.idle()  # (the cooldowns' records are let go in slices)
    assert not fq.ext.cools and not fq.ext.cool_ids and fq.ext.nheld == 0
    assert fq.jobs[2].state == lq.jobs[2].state


def test_a_snapshot_carries_the_tags_and_cooldowns(pair):
    p = pair
    p.send(b"use a\r\n")
    put(p, b"idp:k grp:g")
    put(p, b"aft:g")
    put(p, b"idp:gone:3600")
    p.send(b"delete 3\r\n")
    fq = p.fh.e.q
    # a fresh follower: forget all it had, and catch up from a snapshot
    for j in fq.jobs.values():
        j.tags = None
    fq.ext.tagged = 0
    for cd in list(fq.ext.cool_ids.values()):
        fq.tags.keys.cooling.end(fq, cd)
    for id_ in list(fq.jobs):
        fq.delete(None, id_, p.fh.now, count=False)
    forget_groups(fq.ext)
    p.resnap()
    assert state_of(fq) == state_of(p.lh.e.q)


def away(p):
    """The follower misses what the leader writes from now on (its link is
    down): back() brings it back from a snapshot in parts."""
    p.lwal.flush()
    p.lwal.tap(lambda data: None)


def back(p, part_bytes=1):
    p.lwal.tap(p.batches.append)
    p.begin_parts(part_bytes)


def held(q, id_):
    from pybeanstalkd.core.job import DELAYED
    from pybeanstalkd.core.tags import HELD
    j = q.jobs.get(id_)
    return j is not None and j.state == DELAYED and j.deadline == HELD


def test_a_held_job_stays_held_across_a_snapshot_in_parts(pair):
    """While a snapshot goes out in parts, the leader puts a new member of
    group g and deletes the old one, whose part has not gone out yet. The
    snapshot's end drops the old member on the follower before the new
    member's put (which follows the snapshot) is applied: that drop must
    not complete g and release the aft:g job the leader still holds. It
    completes g once the batches written meanwhile are in, if g still is."""
    p = pair
    p.send(b"use a\r\n")
    assert put(p, b"") == b"INSERTED 1\r\n"
    assert put(p, b"grp:g") == b"INSERTED 2\r\n"
    assert put(p, b"aft:g") == b"INSERTED 3\r\n"  # held
    p.begin_parts(1)
    assert not p.step()  # the jobs are listed, job 1's part goes out
    assert p.lh.send(p.c, b"put 0 0 60 1 grp:g\r\nx\r\n") == b"INSERTED 4\r\n"
    assert p.lh.send(p.c, b"delete 2\r\n") == b"DELETED\r\n"
    while not p.step():
        pass
    lq, fq = p.lh.e.q, p.fh.e.q
    assert held(lq, 3) and held(fq, 3)
    assert state_of(fq) == state_of(lq)
    # The leader's group then completes: the release reaches the follower.
    assert p.send(b"delete 4\r\n") == b"DELETED\r\n"
    assert fq.jobs.get(3).state == lq.jobs.get(3).state == 1  # READY
    assert state_of(fq) == state_of(lq)
    # The same drop with no member put meanwhile completes g on the
    # follower once the snapshot is in, as the leader's delete did there.
    assert put(p, b"grp:h") == b"INSERTED 5\r\n"
    assert put(p, b"aft:h") == b"INSERTED 6\r\n"
    away(p)
    assert p.send(b"delete 5\r\n") == b"DELETED\r\n"  # 6 released, the follower away
    back(p)
    while not p.step():
        pass
    assert not held(fq, 6) and not held(lq, 6) and b"h" not in fq.ext.groups
    assert state_of(fq) == state_of(lq)


def test_a_snapshot_places_held_and_kicked_aft_jobs_as_the_leader_has_them(pair):
    """A snapshot lists a group's jobs by id: a job held by g comes before
    the members put since (the follower has no member of g yet), and an
    aft:g job the leader kicked comes while g has members. Each is placed
    as its record says (held; ready), not by the follower's view of g."""
    p = pair
    p.send(b"use a\r\n")
    put(p, b"grp:g")
    put(p, b"aft:g")  # 2: held
    put(p, b"aft:g")  # 3: held, then kicked
    put(p, b"grp:g")
    p.send(b"delete 1\r\n")
    assert p.send(b"kick-job 3\r\n") == b"KICKED\r\n"
    lq, fq = p.lh.e.q, p.fh.e.q
    assert held(lq, 2) and not held(lq, 3)
    for id_ in list(fq.jobs):  # a follower that has nothing
        fq.delete(None, id_, p.fh.now, count=False)
    forget_groups(fq.ext)
    p.resnap()
    assert held(fq, 2) and not held(fq, 3) and fq.jobs[3].state == lq.jobs[3].state
    # (g still lists the kicked job as waiting on the leader, as tuber does:
    # no record says so, so neither the follower nor a restart lists it)
    assert lq.ext.groups[b"g"].waiting.keys() - fq.ext.groups[b"g"].waiting.keys() == {3}
    lq.ext.groups[b"g"].waiting.pop(3)
    assert state_of(fq) == state_of(lq)


def test_an_aft_job_due_while_a_snapshot_comes_in_is_held_as_the_leader_holds_it(pair):
    """The follower still has g's old member (the leader deleted it while
    the follower was away) when an aft:g job comes due on its clock: the
    leader made it ready, and puts a new member of g later. The follower
    must not hold it for the member it is about to drop."""
    p = pair
    p.send(b"use a\r\n")
    put(p, b"grp:g")
    away(p)
    assert p.send(b"delete 1\r\n") == b"DELETED\r\n"
    assert p.send(b"put 0 2 60 1 aft:g\r\nx\r\n") == b"INSERTED 2\r\n"
    back(p)
    assert not p.step()  # job 2's part: delayed
    p.advance(3)  # due on both clocks
    assert p.lh.e.q.jobs[2].state == 1
    assert p.lh.send(p.c, b"put 0 0 60 1 grp:g\r\nx\r\n") == b"INSERTED 3\r\n"
    while not p.step():
        pass
    lq, fq = p.lh.e.q, p.fh.e.q
    assert fq.jobs[2].state == lq.jobs[2].state == 1
    assert state_of(fq) == state_of(lq)


def test_a_snapshot_brings_the_leaders_cooldowns_and_keys_in_place_of_the_followers(pair):
    """What the follower missed while away: a cooldown the leader's
    flush-tube ended, a held job's key that flush-tube voided, and the
    cooldown of a job deleted meanwhile (the snapshot's end drops that job:
    its cooldown is the leader's, ending when the leader's does)."""
    p = pair
    p.send(b"use a\r\n")
    put(p, b"idp:gone:3600")
    p.send(b"delete 1\r\n")
    put(p, b"grp:g")
    put(p, b"idp:k grp:g aft:g")  # 3: held by its own group, for good
    p.send(b"use b\r\n")
    put(p, b"idp:late:3600")
    away(p)
    assert p.send(b"flush-tube a\r\n") == b"FLUSHED 1\r\n"  # 2 deleted, 3 stays held
    assert p.send(b"delete 4\r\n") == b"DELETED\r\n"
    p.advance(10)
    lq, fq = p.lh.e.q, p.fh.e.q
    assert fq.ext.holder(b"a", b"k") == 3 and lq.ext.holder(b"a", b"k") is None
    back(p)
    while not p.step():
        pass
    assert state_of(fq) == state_of(lq)
    assert {(t, k): c.expires for t, m in fq.ext.cools.items() for k, c in m.items()} == {
        (t, k): c.expires for t, m in lq.ext.cools.items() for k, c in m.items()}


def test_a_buried_job_whose_priority_a_duplicate_lowers_keeps_its_place(pair):
    """A duplicate put lowers the priority of the buried job holding its
    key: the leader's record of it leaves the job where it was in its
    tube's bury order, and so does the follower (a kick takes the same job
    on both)."""
    p = pair
    p.send(b"use a\r\n")
    put(p, b"idp:k", pri=5)
    put(p, b"", pri=5)
    for id_ in (1, 2):
        assert p.send(b"reserve-with-timeout 0\r\n").startswith(b"RESERVED %d " % id_)
        assert p.send(b"bury %d 5\r\n" % id_) == b"BURIED\r\n"
    assert put(p, b"idp:k", pri=1) == b"INSERTED 1 BURIED 1\r\n"
    lq, fq = p.lh.e.q, p.fh.e.q
    assert list(fq.tubes.named[b"a"].buried) == list(lq.tubes.named[b"a"].buried) == [1, 2]
    assert fq.jobs[1].pri == 1
    p.send(b"kick 1\r\n")
    assert fq.jobs[1].state == lq.jobs[1].state == 1 and fq.jobs[2].state == 3

"""A follower's snapshot window: from the moment the leader fixes the
snapshot's seq, through its parts, to the last batch written while they
went out. What the follower holds once it has all of them is what the
leader holds (keys, cooldowns, held jobs), and what it keeps meanwhile
is freed or bounded; and one that leads before that last batch came
holds what the leader held at the listing (Parts)."""
# ruff: noqa: F811  (pair: test_replica_tags' fixture, taken by the tests' arguments)
import asyncio
import gc

import pytest

from test_replica import same
from test_replica_tags import ext_node, held, pair, put, state_of  # noqa: F401  (pair: fixture)
from pybeanstalkd.cluster.apply import Restore, apply_records, snapshot_parts
from pybeanstalkd.cluster.link import FollowerNode, Replicator
from pybeanstalkd.core import replica

SECRET = b"the cluster's secret"


def test_a_snapshot_does_not_make_the_followers_cooldowns_again(pair):
    """restoring() uncooled every cooldown and the first part made it
    again: each snapshot left one more cool_heap entry per cooldown (until
    its end: an idp: TTL, hours) and two binlog records."""
    p = pair
    p.send(b"use a\r\n")
    for i in range(100):
        put(p, b"idp:k%d:3600" % i)
        p.send(b"delete %d\r\n" % (i + 1))
    fq = p.fh.e.q
    assert len(fq.ext.cool_heap) == 100
    written = p.fwal.written
    for _ in range(5):
        p.resnap()
    assert len(fq.ext.cool_ids) == 100
    assert len(fq.ext.cool_heap) == 100
    assert p.fwal.written == written
    assert state_of(fq) == state_of(p.lh.e.q)


def test_a_batch_shipped_before_the_listing_takes_no_key(pair):
    """A batch shipped between the snapshot's seq (connect) and the
    listing of its jobs is older than the parts it follows. Job 1 takes k,
    is deleted, job 2 takes k: the listing has job 2 only; then job 1's put
    took k from it and its delete freed k. After a failover a put with k
    made a new job where the leader answered with job 2."""
    p = pair
    p.begin_parts(1)  # (Replicator.connect: the seq is fixed)
    p.lh.send(p.c, b"use a\r\n")
    assert p.lh.send(p.c, b"put 0 0 60 1 idp:k\r\nx\r\n") == b"INSERTED 1\r\n"
    assert p.lh.send(p.c, b"delete 1\r\n") == b"DELETED\r\n"
    assert p.lh.send(p.c, b"put 0 0 60 1 idp:k\r\ny\r\n") == b"INSERTED 2\r\n"
    while not p.step():
        pass
    lq, fq = p.lh.e.q, p.fh.e.q
    assert state_of(fq)[0] == state_of(lq)[0] == {b"a": {b"k": 2}}  # (keys: their holders' ids)
    assert state_of(fq) == state_of(lq)


def test_the_link_lists_the_jobs_when_it_fixes_the_snapshots_seq(tmp_path):
    """The same over a link, -f0: the Syncer ships a batch (gate.sync_starting)
    from a callback that runs before the link's task first does."""
    lh, lwal = ext_node(str(tmp_path / "leader"))
    fh, fwal = ext_node(str(tmp_path / "follower"))
    fwal.wall_offset = lwal.wall_offset
    c = lh.conn()
    lh.send(c, b"use a\r\n")

    async def main():
        f = FollowerNode(fh.e.q, fwal, fh.e.max_job_size, SECRET, "f", refusals_s=0)
        srv = await f.serve("127.0.0.1", 0)
        rep = Replicator(lh.e.q, lwal, 7, SECRET, "leader", eager=False)
        link = await rep.connect("f", "127.0.0.1", srv.sockets[0].getsockname()[1])
        assert lh.send(c, b"put 0 0 60 1 idp:k\r\nx\r\n") == b"INSERTED 1\r\n"
        assert lh.send(c, b"delete 1\r\n") == b"DELETED\r\n"
        assert lh.send(c, b"put 0 0 60 1 idp:k\r\ny\r\n") == b"INSERTED 2\r\n"
        rep.ship()
        await link.until(rep.seq)
        assert state_of(fh.e.q)[0] == state_of(lh.e.q)[0] == {b"a": {b"k": 2}}
        srv.close()
        link.writer.close()
    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_snapshot_ships_no_cooldown_a_flush_tube_ended(pair):
    """flush-tube ends a tube's cooldowns in ext.cools at once and lets
    their records go from ext.cool_ids in slices; snapshot_parts listed
    cool_ids, so a snapshot made meanwhile gave the follower cooldowns the
    leader had ended (a put with such a key: DELETED there, a job here)."""
    p = pair
    p.send(b"use a\r\n")
    for i in range(200):
        put(p, b"idp:k%d:3600" % i)
        p.send(b"delete %d\r\n" % (i + 1))
    p.lh.auto = False  # the leader's background work: a slice a pass
    assert p.lh.send(p.c, b"flush-tube a\r\n") == b"FLUSHED 0\r\n"
    p.lh.step()
    p.sync()
    p.resnap()
    p.fh.idle()
    assert not p.fh.e.q.ext.cools and not p.lh.e.q.ext.cools


def test_a_record_older_than_a_part_gives_no_voided_key_back(pair):
    """A held job's put, shipped after the seq but before the listing
    (or a compaction copy of it, older than its part), came after a part
    read after a flush-tube voided its key: the follower's tags got the
    key back (stats-job shows it), with no entry in the keys map."""
    p = pair
    p.send(b"use b\r\n")
    put(p, b"grp:g")
    put(p, b"")
    p.begin_parts(1)
    p.lh.send(p.c, b"use a\r\n")
    assert p.lh.send(p.c, b"put 5 0 60 1 aft:g idp:k\r\nx\r\n") == b"INSERTED 3\r\n"  # held
    p.lwal.flush()
    assert not p.step()
    assert p.lh.send(p.c, b"flush-tube a\r\n") == b"FLUSHED 0\r\n"
    while not p.step():
        pass
    lq, fq = p.lh.e.q, p.fh.e.q
    assert fq.jobs[3].tags.idp == lq.jobs[3].tags.idp == b":"
    assert state_of(fq) == state_of(lq)


def test_settling_keeps_no_id_of_a_deleted_job(pair):
    """Holding.settling, while snapshots end but the batch they name does not
    come (the link drops after the end): the held jobs of each group the
    end's drops completed stayed listed, deleted since or not."""
    p = pair
    lq, fq = p.lh.e.q, p.fh.e.q
    p.send(b"use a\r\n")
    for k in range(5):
        base = lq.ids.next
        put(p, b"grp:g%d" % k)
        for _ in range(20):
            put(p, b"aft:g%d" % k)
        p.lwal.flush()
        p.batches.clear()
        for i in range(21):  # the link is down
            p.lh.send(p.c, b"delete %d\r\n" % (base + i))
        p.lwal.flush()
        p.batches.clear()
        r = Restore(("k", k))
        for part in snapshot_parts(lq, p.lwal.wall_offset, 1):
            r.part(fq, part, p.fwal.wall_offset, p.fh.now, p.fh.e.max_job_size)
        r.end(fq, p.fh.now)  # (its `through` never comes)
    s = fq.tags.holding.settling
    assert all(i in fq.jobs for w in s.values() for i in w)
    replica.settled(fq, p.fh.now)


def _gap(p):
    """The parts left, the end, and settled() at once: this node leads
    before the batches written meanwhile come."""
    fq = p.fh.e.q
    p.lwal.flush()
    for part in p.parts:
        p.restore.part(fq, part, p.fwal.wall_offset, p.fh.now, p.fh.e.max_job_size)
    p.restore.end(fq, p.fh.now)
    replica.settled(fq, p.fh.now)  # (FollowerNode.settle)
    p.fh.idle()


def _listed_with_a_held_job(p):
    """Job 1 plain, job 2 group g's member, job 3 an aft:g job held, in
    tube a; the snapshot's listing made and job 1's part read."""
    p.send(b"use a\r\n")
    put(p, b"")
    put(p, b"grp:g")
    put(p, b"aft:g")  # 3: held
    p.begin_parts(1)
    assert not p.step()  # job 1's part


def test_a_follower_that_leads_before_through_holds_what_the_leader_held(pair):
    """The leader puts job 4 into group g and deletes job 2, g's member at
    the listing, before job 2's part is read. The parts had neither: the
    follower, leading before the batches that follow them came, found g
    complete and released job 3, which the leader held. Job 2's part now
    carries its record as it was before the delete (Parts)."""
    p = pair
    lq, fq = p.lh.e.q, p.fh.e.q
    _listed_with_a_held_job(p)
    assert p.lh.send(p.c, b"put 0 0 60 1 grp:g\r\nx\r\n") == b"INSERTED 4\r\n"
    assert p.lh.send(p.c, b"delete 2\r\n") == b"DELETED\r\n"
    _gap(p)  # Node.lead -> FollowerNode.settle: the batches never come
    assert held(lq, 3)
    assert held(fq, 3)


def test_a_copy_older_than_a_voided_key_gives_it_no_key_back(pair):
    """As above, with the listing fixed at the seq: a compaction copy of a held
    job (its full record, its tags as they are then: key k) written after
    the listing and before a flush-tube voided k, follows a part read after
    the flush. (The copy's bytes are a full record as a put's: here the
    put's own, shipped again after the part.)"""
    p = pair
    p.send(b"use b\r\n")
    put(p, b"grp:g")
    p.send(b"use a\r\n")
    p.lwal.flush()
    p.batches.clear()
    p.lh.send(p.c, b"put 5 0 60 1 aft:g idp:k\r\nx\r\n")  # 2: held
    p.lwal.flush()
    copy = b"".join(p.batches)  # (its tags' record, then its full record)
    p.sync()
    assert p.send(b"flush-tube a\r\n") == b"FLUSHED 0\r\n"
    lq, fq = p.lh.e.q, p.fh.e.q
    assert fq.jobs[2].tags.idp == b":"
    apply_records(fq, copy, p.fwal.wall_offset, p.fh.now, p.fh.e.max_job_size, snapshot=True)
    assert fq.jobs[2].tags.idp == lq.jobs[2].tags.idp == b":"


def test_a_job_held_when_listed_goes_out_held(pair):
    """Job 2, g's last member, is deleted after the listing: the leader
    releases job 3. A node that leads before the batches that say so came
    has job 2 and job 3 held, as at the listing (not job 3 released with
    job 2 there, a state the leader never had); job 2's delete, done again
    there, releases job 3. One that gets the batches has the leader's state."""
    p = pair
    lq, fq = p.lh.e.q, p.fh.e.q
    _listed_with_a_held_job(p)
    assert p.lh.send(p.c, b"delete 2\r\n") == b"DELETED\r\n"
    p.lh.idle()
    assert not held(lq, 3) and 2 not in lq.jobs
    _gap(p)
    assert held(fq, 3) and 2 in fq.jobs
    assert sorted(fq.ext.groups[b"g"].members) == [2]
    c = p.fh.conn()
    p.fh.send(c, b"watch a\r\n")
    assert p.fh.send(c, b"delete 2\r\n") == b"DELETED\r\n"
    p.fh.idle()
    assert fq.jobs[3].state == lq.jobs[3].state  # released


@pytest.mark.parametrize("led", [False, True], ids=["batches-come", "leads-first"])
def test_a_member_deleted_and_one_put_after_the_listing(pair, led):
    """Group g's members at the listing reach the follower (one of them
    deleted before its part was read: its record as before the delete), a
    member put after it comes with the batches: with them the follower
    has the leader's state; without them, it holds what g held then."""
    p = pair
    lq, fq = p.lh.e.q, p.fh.e.q
    p.send(b"use a\r\n")
    put(p, b"grp:g")  # 1
    put(p, b"aft:g")  # 2: held
    put(p, b"grp:g", body=b"b")  # 3
    put(p, b"aft:g")  # 4: held
    p.begin_parts(1)
    assert not p.step()  # job 1's part
    assert p.lh.send(p.c, b"put 0 0 60 1 grp:g\r\nx\r\n") == b"INSERTED 5\r\n"
    assert p.lh.send(p.c, b"delete 3\r\n") == b"DELETED\r\n"
    assert p.lh.send(p.c, b"delete 1\r\n") == b"DELETED\r\n"
    assert held(lq, 2) and held(lq, 4)
    if not led:
        while not p.step():
            pass
        assert state_of(fq) == state_of(lq)
        same(p)
        return
    _gap(p)
    assert sorted(fq.ext.groups[b"g"].members) == [1, 3]
    assert held(fq, 2) and held(fq, 4)
    assert p.fh.e.q.store.body(fq.jobs[3]) == b"b\r\n"


def test_the_parts_watch_changes_only_until_they_are_read_or_closed(pair):
    """A member deleted after its part was read is not kept (the follower
    has it, and the delete follows); once the parts are read to their end,
    or closed (their link failed), no change is watched for them."""
    p = pair
    lq = p.lh.e.q
    p.send(b"use a\r\n")
    for _ in range(3):
        put(p, b"grp:g")
    parts = snapshot_parts(lq, p.lwal.wall_offset, 1)
    assert len(lq.changing) == 1
    next(parts)  # job 1's part
    assert p.lh.send(p.c, b"delete 1\r\n") == b"DELETED\r\n"
    assert not parts.kept
    assert p.lh.send(p.c, b"delete 2\r\n") == b"DELETED\r\n"
    assert list(parts.kept) == [2]
    assert len(list(parts)) == 3 and not parts.kept  # (jobs 2 and 3, the last part empty)
    assert not lq.changing
    parts = snapshot_parts(lq, p.lwal.wall_offset, 1)
    parts.close()
    assert not lq.changing
    parts = snapshot_parts(lq, p.lwal.wall_offset, 1)
    del parts  # (dropped unclosed: freed with its generator, a cycle)
    gc.collect()
    assert not lq.changing
    p.send(b"delete 3\r\n")  # no group left: nothing to watch
    assert not snapshot_parts(lq, p.lwal.wall_offset, 1).watching and not lq.changing


def test_a_link_that_fails_during_its_snapshot_stops_watching_changes(tmp_path):
    """The follower goes while its snapshot's parts go out: the leader's
    changes are not watched for it any more (nor records kept)."""
    lh, lwal = ext_node(str(tmp_path / "leader"))
    fh, fwal = ext_node(str(tmp_path / "follower"))
    c = lh.conn()
    lh.send(c, b"use a\r\n")
    for _ in range(200):
        lh.send(c, b"put 0 0 60 1 grp:g\r\nx\r\n")
    lq = lh.e.q

    async def main():
        f = FollowerNode(fh.e.q, fwal, fh.e.max_job_size, SECRET, "f", refusals_s=0)
        srv = await f.serve("127.0.0.1", 0)
        rep = Replicator(lq, lwal, 7, SECRET, "leader", eager=False)
        rep.part_bytes = 1
        link = await rep.connect("f", "127.0.0.1", srv.sockets[0].getsockname()[1])
        assert len(lq.changing) == 1
        srv.close()
        for conn in list(f.conns):
            conn.transport.abort()
        await asyncio.wait_for(link.task, 10)
        assert "f" not in rep.links
        assert not lq.changing
    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_record_that_cannot_be_kept_fails_the_snapshot_not_the_delete(pair, monkeypatch):
    """Keeping a deleted member's record fails (its body cannot be read
    back, say): the delete goes on, and the snapshot fails at its next
    part (its link is closed, and the follower's next starts again)."""
    from pybeanstalkd.cluster.apply import Parts
    p = pair
    lq = p.lh.e.q
    p.send(b"use a\r\n")
    put(p, b"grp:g")
    put(p, b"grp:g")
    parts = snapshot_parts(lq, p.lwal.wall_offset, 1)
    next(parts)

    def fails(self, j):
        raise ValueError("no body")
    monkeypatch.setattr(Parts, "_record", fails)
    assert p.lh.send(p.c, b"delete 2\r\n") == b"DELETED\r\n"
    assert 2 not in lq.jobs
    with pytest.raises(OSError, match="job 2's record could not be kept"):
        next(parts)
    assert not lq.changing


@pytest.mark.parametrize("led", [False, True], ids=["batches-come", "leads-first"])
def test_a_held_job_released_then_deleted_goes_out_held(pair, led):
    """Job 3, held when listed, is released (job 2, g's member, deleted),
    reserved and deleted before its part is read: its part has it held,
    as when released (the first change kept its record; the delete keeps
    that one). With the batches that follow, both are gone."""
    p = pair
    lq, fq = p.lh.e.q, p.fh.e.q
    p.send(b"watch a\r\n")
    _listed_with_a_held_job(p)
    assert p.lh.send(p.c, b"delete 2\r\n") == b"DELETED\r\n"
    assert p.lh.send(p.c, b"reserve-with-timeout 0\r\n").startswith(b"RESERVED 1 ")
    assert p.lh.send(p.c, b"reserve-with-timeout 0\r\n").startswith(b"RESERVED 3 ")
    assert p.lh.send(p.c, b"delete 3\r\n") == b"DELETED\r\n"
    assert sorted(p.parts.kept) == [2, 3]
    if led:
        _gap(p)
        assert held(fq, 3) and 2 in fq.jobs
        return
    while not p.step():
        pass
    assert sorted(fq.jobs) == sorted(lq.jobs) == [1]
    assert state_of(fq) == state_of(lq)


@pytest.mark.parametrize("led", [False, True], ids=["batches-come", "leads-first"])
def test_a_held_job_kicked_after_the_listing_goes_out_held(pair, led):
    """kick-job takes job 3, held when listed, out of its hold before its
    part is read: its part has it held, as before the kick (a node that
    leads before the batches came holds it, as the leader did at the
    listing); with the batches, it is ready, as on the leader."""
    p = pair
    lq, fq = p.lh.e.q, p.fh.e.q
    _listed_with_a_held_job(p)
    assert p.lh.send(p.c, b"kick-job 3\r\n") == b"KICKED\r\n"
    assert not held(lq, 3) and 3 in lq.jobs
    if led:
        _gap(p)
        assert held(fq, 3)
        assert sorted(fq.ext.groups[b"g"].members) == [2]
        return
    while not p.step():
        pass
    assert fq.jobs[3].state == lq.jobs[3].state
    assert state_of(fq) == state_of(lq)
    same(p)


def test_a_held_job_reserved_by_id_while_its_group_releases_goes_out_held(pair):
    """A group that completes with more held jobs than a slice releases
    them a slice a step: one not released yet may be reserved by id
    (reserve-job) meanwhile, which takes it out of its hold as a release
    does; its part has it held, as when listed."""
    from pybeanstalkd.core.slices import SLICE
    p = pair
    lq, fq = p.lh.e.q, p.fh.e.q
    p.send(b"use a\r\n")
    put(p, b"")
    put(p, b"grp:g")
    for _ in range(SLICE + 1):
        put(p, b"aft:g")  # 3...: held
    p.begin_parts(1)
    assert not p.step()  # job 1's part
    p.lh.auto = False  # the leader's background work: a slice a pass
    assert p.lh.send(p.c, b"delete 2\r\n") == b"DELETED\r\n"
    last = 2 + SLICE + 1
    if not held(lq, last):  # (the slices release from either end)
        last = 3
    assert held(lq, last)
    assert p.lh.send(p.c, b"reserve-job %d\r\n" % last).startswith(b"RESERVED %d " % last)
    _gap(p)
    assert held(fq, last)



@pytest.mark.parametrize("led", [False, True], ids=["batches-come", "leads-first"])
def test_a_job_with_a_key_deleted_after_the_listing_goes_out_as_listed(pair, led):
    """Job 2 holds idp: key k; its delete starts k's cooldown. Deleted
    after the listing and before its part is read, it was in no part and
    its cooldown in none (the cooldowns were listed when it was alive): a
    node that leads before the batches came took a put with k for a new
    job, where the leader answers that it is job 2's. Its part now has it
    as before the delete; the batches bring the delete and the cooldown."""
    p = pair
    lq, fq = p.lh.e.q, p.fh.e.q
    p.send(b"use a\r\n")
    put(p, b"")
    put(p, b"idp:k:3600")  # 2
    p.begin_parts(1)
    assert not p.step()  # job 1's part
    assert p.lh.send(p.c, b"delete 2\r\n") == b"DELETED\r\n"
    if led:
        _gap(p)
        assert fq.ext.keys[b"a"][b"k"].id == 2
        c = p.fh.conn()
        p.fh.send(c, b"use a\r\n")
        assert p.fh.send(c, b"put 0 0 60 1 idp:k\r\nb\r\n") == b"INSERTED 2 READY\r\n"
        return
    while not p.step():
        pass
    assert 2 not in fq.jobs and (b"a", b"k") in state_of(fq)[1]
    assert state_of(fq) == state_of(lq)
    c = p.fh.conn()
    p.fh.send(c, b"use a\r\n")
    assert p.fh.send(c, b"put 0 0 60 1 idp:k\r\nb\r\n") == b"INSERTED 2 DELETED\r\n"


def test_the_parts_keep_a_keys_holder_only_until_its_part_is_read(pair):
    """With no group, the parts watch the deletes for the jobs that hold
    an idp: key with a TTL: one deleted after its part was read is not
    kept, nor one whose key leaves no cooldown (no TTL); one deleted
    before its part is read is kept until that part goes out."""
    p = pair
    lq = p.lh.e.q
    p.send(b"use a\r\n")
    put(p, b"idp:k1:3600")
    put(p, b"idp:k2")  # (no TTL: its delete lets k2 go at once)
    put(p, b"idp:k3:3600")
    put(p, b"")
    parts = snapshot_parts(lq, p.lwal.wall_offset, 1)
    assert parts.watching and len(lq.changing) == 1
    next(parts)  # job 1's part
    assert p.lh.send(p.c, b"delete 1\r\n") == b"DELETED\r\n"
    assert p.lh.send(p.c, b"delete 2\r\n") == b"DELETED\r\n"
    assert p.lh.send(p.c, b"delete 4\r\n") == b"DELETED\r\n"
    assert not parts.kept
    assert p.lh.send(p.c, b"delete 3\r\n") == b"DELETED\r\n"
    assert list(parts.kept) == [3]
    assert len(list(parts)) == 2 and not parts.kept  # (job 3, the last part empty)
    assert not parts.sent and not lq.changing

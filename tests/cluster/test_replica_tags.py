"""A follower of a leader with --extensions gets the put tags' state in the
shipped records (binlog/ext.py), through batches and snapshots alike, and
keeps it when it takes over: a key, a cooldown, a held aft: job."""
import os

import pytest

from fakeclock import OPEN_WALS, Harness, tag_state
from pybeanstalkd.binlog.bodies import DiskBodies
from pybeanstalkd.binlog.codec import TaggedCodec
from pybeanstalkd.binlog.files import Wal
from pybeanstalkd.binlog.recovery import recover
from test_replica import Pair, quiet


def ext_node(path, now=None, ram_min=None):
    """ram_min: --bodies-on-disk, as in test_replica.node."""
    os.makedirs(path, exist_ok=True)
    st = tag_state()
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
    return ({t: dict(k) for t, k in ext.keys.items()},
            {(t, k): c.orig for t, m in ext.cools.items() for k, c in m.items()},
            {n: (sorted(g.members), g.buried, sorted(g.waiting)) for n, g in ext.groups.items()},
            dict(ext.held), {key: k.limit for key, k in ext.cons.items() if k.limit},
            dict(ext.jobs))


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
    fq.ext.jobs.clear()
    for cd in list(fq.ext.cool_ids.values()):
        fq.tags._uncool(fq, cd)
    for id_ in list(fq.jobs):
        fq.delete(None, id_, p.fh.now, count=False)
    fq.ext.groups.clear()
    p.resnap()
    assert state_of(fq) == state_of(p.lh.e.q)

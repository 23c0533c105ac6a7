"""A follower's key maps (brought(): the maps hold the job) against the
leader's, over random sequences of keyed and tagged puts, deletes with
cooldowns, flush-tube, reserves, buries and kicks, with snapshots in
parts now and then; and the follower, taking over, answers a keyed put
as the leader would."""
import random

import pytest

from test_replica_tags import away, back, pair, state_of  # noqa: F401 (the fixture)


@pytest.mark.parametrize("seed", range(30))
def test_follower_keys_match_the_leaders(pair, seed):  # noqa: F811
    p = pair
    r = random.Random(seed)
    p.send(b"use a\r\n")
    lq, fq = p.lh.e.q, p.fh.e.q
    for step in range(150):
        ids = list(lq.jobs) + [max(lq.jobs, default=0) + 1]
        op = r.random()
        if op < 0.4:
            tags = b"idp:" + r.choice([b"a", b"b", b"c"]) + r.choice([b"", b":5"])
            if r.random() < 0.4:
                tags += r.choice([b" con:x", b" grp:g", b" aft:g", b" try:2", b" con:x:2"])
            p.send(b"put %d 0 10 1 %s\r\nx\r\n" % (r.choice([0, 5]), tags))
        elif op < 0.55:
            p.send(b"delete %d\r\n" % r.choice(ids))
        elif op < 0.62:
            p.send(b"reserve-with-timeout 0\r\n")
        elif op < 0.66:
            p.send(b"bury %d 1\r\n" % r.choice(ids))
        elif op < 0.7:
            p.send(b"kick 3\r\n")
        elif op < 0.73:
            p.send(b"flush-tube a\r\n")
        elif op < 0.78:
            p.send(b"release %d 0 0\r\n" % r.choice(ids))
        elif op < 0.83 and p.parts is None:
            away(p)
            for _ in range(r.randint(1, 4)):
                p.send(b"put 0 0 10 1 idp:%s\r\nx\r\n" % r.choice([b"a", b"b", b"d"]))
                p.send(b"delete %d\r\n" % r.choice(ids))
            back(p)
        elif p.parts is not None:
            p.step()
        if p.parts is None:
            assert state_of(fq)[:2] == state_of(lq)[:2], (seed, step)
            assert fq.ext.nkeys == lq.ext.nkeys, (seed, step)
            for q in (lq, fq):
                for hand, entries in ((q.ext.group_at_hand, q.ext.groups),
                                      (q.ext.con_at_hand, q.ext.cons)):
                    assert hand.value is None or entries.get(hand.name) is hand.value, (seed, step)
            for t, m in fq.ext.keys.items():
                for k, j in m.items():
                    assert fq.jobs.get(j.id) is j, (seed, step, t, k, j.id)
    while p.parts is not None:
        p.step()
    assert state_of(fq) == state_of(lq)
    for t, m in fq.ext.keys.items():
        for k, j in m.items():
            assert fq.jobs.get(j.id) is j, (seed, t, k, j.id)

"""A follower's id map (core/jobmap.py's blocks) under random leader
commands whose ids cross block boundaries and jump as a leader's new
block of ids makes them: the map's invariants hold on both nodes, the
follower holds the leader's jobs, and snapshots (in parts) agree."""
import os
import random

import pytest

from jobmaptools import check_map
from test_replica import Pair, buried_order, jobs
from pybeanstalkd.core.jobmap import BITS, THIN

SIZE = 1 << BITS


def live_ids(q):
    return set(q.jobs)


@pytest.mark.parametrize("seed", range(int(os.environ.get("JOBMAP_SEEDS", 6))))
def test_random_leader_commands_keep_the_follower_map_sound(tmp_path, seed):
    rnd = random.Random(seed)
    p = Pair(str(tmp_path))
    lq, fq = p.lh.e.q, p.fh.e.q
    lq.ids.next = rnd.choice([1, SIZE - 5, 3 * SIZE - 40])
    assert p.send(b"use a\r\n") == b"USING a\r\n"
    held = set()
    for step in range(300):
        op = rnd.random()
        if op < 0.3:
            for _ in range(rnd.randint(1, 30)):
                delay = rnd.choice([0, 0, 0, 5])
                out = p.send(b"put %d %d 2 1\r\nx\r\n" % (rnd.randint(0, 3), delay))
                assert out.startswith(b"INSERTED"), out
        elif op < 0.35:  # a new block of ids from etcd, further on
            target = (((lq.ids.next >> BITS) + rnd.randint(1, 3)) << BITS) - rnd.randint(0, 10)
            lq.ids.next = max(lq.ids.next, target)
        elif op < 0.5:
            ids = sorted(lq.jobs)
            if ids:
                k = rnd.choice(ids) >> BITS
                mine = [i for i in ids if i >> BITS == k]
                rnd.shuffle(mine)
                keep = rnd.choice([0, 1, THIN, THIN + 1, 30])
                for i in mine[keep:]:
                    out = p.send(b"delete %d\r\n" % i)
                    assert out in (b"DELETED\r\n", b"NOT_FOUND\r\n")
                    held.discard(i)
        elif op < 0.65:
            out = p.send(b"reserve-with-timeout 0\r\n")
            if out.startswith(b"RESERVED"):
                i = int(out.split()[1])
                held.add(i)
                what = rnd.choice([b"bury %d 0", b"release %d 0 3", b"release %d 0 0",
                                   b"delete %d", None])
                if what is not None:
                    assert p.send((what % i) + b"\r\n") != b""
                    held.discard(i)
        elif op < 0.72:
            p.send(b"kick %d\r\n" % rnd.randint(1, 20))
        elif op < 0.8:
            ids = sorted(lq.jobs)
            if ids:
                p.send(b"kick-job %d\r\n" % rnd.choice(ids))
        elif op < 0.9:
            p.advance(rnd.choice([1, 3, 6]))
            held.clear()
        elif op < 0.95:
            p.resnap()
        else:
            p.begin_parts(rnd.choice([1, 200, 5000]))
            while not p.step():
                if rnd.random() < 0.3:
                    p.lh.send(p.c, b"put 0 0 2 1\r\ny\r\n")
                if rnd.random() < 0.3 and lq.jobs:
                    p.lh.send(p.c, b"delete %d\r\n" % rnd.choice(sorted(lq.jobs)))
        check_map(lq)
        check_map(fq)
        assert live_ids(fq) == live_ids(lq), step
    # (same() but next_id: a jump with no put after it reaches no follower)
    assert jobs(fq) == jobs(lq)
    assert buried_order(fq) == buried_order(lq)
    # every job deleted on the leader: the follower's map empties
    for i in sorted(lq.jobs):
        p.send(b"delete %d\r\n" % i)
    p.advance(10)
    for i in sorted(lq.jobs):
        p.send(b"delete %d\r\n" % i)
    check_map(fq)
    assert not lq.jobs.blocks and not fq.jobs.blocks
    assert jobs(fq) == jobs(lq) == {}

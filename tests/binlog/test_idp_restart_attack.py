"""idp: keys (claimed at a put's tags' stage, the key maps holding the
job) across restarts from the binlog, with small files (compaction),
bodies on disk, cooldowns and flush-tube: after each recovery the keys,
their count and the tags match the jobs, and a keyed put answers its
holder."""
import random

import pytest

from fakeclock import with_binlog
from tagtools import check, holder_id


@pytest.mark.parametrize("ram_min", [None, 0])
@pytest.mark.parametrize("seed", range(25))
def test_keys_across_restarts(tmp_path, seed, ram_min):
    r = random.Random(seed)
    kw = dict(extensions=True)
    h, wal = with_binlog(tmp_path, 10240, ram_min=ram_min, **kw)
    c = h.conn()
    for step in range(300):
        jobs = check(h, [c], f"seed {seed} step {step}")
        ids = list(jobs) + [max(jobs, default=0) + 1]
        op = r.random()
        if op < 0.4:
            key = r.choice([b"a", b"b", b"c", b"d"])
            tube = c.use.name
            tags = b"idp:" + key + r.choice([b"", b":3"])
            if r.random() < 0.3:
                tags += r.choice([b" con:x", b" grp:g", b" aft:g", b" try:2"])
            exp = holder_id(h, tube, key)
            out = h.send(c, b"put 0 %d 10 40 %s\r\n%s\r\n" % (r.choice([0, 0, 2]), tags, b"y" * 40))
            if exp is not None:
                assert out.startswith(b"INSERTED %d " % exp), (step, exp, out)
        elif op < 0.55:
            h.send(c, b"delete %d\r\n" % r.choice(ids))
        elif op < 0.62:
            h.send(c, b"reserve-with-timeout 0\r\n")
        elif op < 0.66:
            h.send(c, b"bury %d 1\r\n" % r.choice(ids))
        elif op < 0.7:
            h.send(c, b"kick 3\r\n")
        elif op < 0.73:
            h.send(c, b"flush-tube %s\r\n" % c.use.name)
        elif op < 0.8:
            h.advance(r.choice([1, 2, 4]))
        elif op < 0.85:
            h.send(c, b"use %s\r\n" % r.choice([b"default", b"t2"]))
        else:
            wal.flush()
            h, wal = with_binlog(tmp_path, 10240, ram_min=ram_min, **kw)
            c = h.conn()
    check(h, [c], f"seed {seed} end")

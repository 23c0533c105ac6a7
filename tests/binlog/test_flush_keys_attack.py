"""A flush-tube in slices over keyed jobs while keyed puts come in between
its slices; held aft: jobs keep their jobs but lose their keys at its
end; a restart from the binlog brings the same keys back."""
import random

import pytest

from fakeclock import with_binlog
from tagtools import check


def keys_of(h):
    return {(t, k): j.id for t, m in h.e.q.ext.keys.items() for k, j in m.items()}


@pytest.mark.parametrize("seed", range(4))
def test_keyed_puts_between_a_flushs_slices(tmp_path, seed):
    r = random.Random(seed)
    h, wal = with_binlog(tmp_path, extensions=True)
    h.auto = False
    c, d = h.conn(), h.conn()
    h.send(d, b"use t2\r\n")
    assert h.send(d, b"put 0 0 60 1 grp:g\r\nx\r\n") == b"INSERTED 1\r\n"
    for n in range(3000):
        tags = b"idp:k%d" % n + (b" aft:g" if n % 100 == 0 else b"")
        h.send(c, b"put 0 0 60 1 %s\r\nx\r\n" % tags)
    h.send(c, b"flush-tube default\r\n")
    for _ in range(200):
        if r.random() < 0.5:
            h.step()
        n = r.randrange(3100)
        e = h.conn()
        out = h.send(e, b"put 0 0 60 1 idp:k%d\r\nx\r\n" % n)
        assert out.startswith(b"INSERTED"), out
        h.close(e)
    while h.step():
        pass
    jobs = check(h, [c, d], f"seed {seed}")
    before = keys_of(h)
    wal.flush()
    h2, wal2 = with_binlog(tmp_path, extensions=True)
    check(h2, [h2.conn()], f"seed {seed} after restart")
    assert keys_of(h2) == before
    assert sorted(h2.e.q.jobs) == sorted(jobs)

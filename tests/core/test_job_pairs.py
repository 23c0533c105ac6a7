"""A job's (delay, ttr) pair is shared between the jobs that have it
(job.py: Times), and a job stays in pymalloc's 128-byte class when
compiled: the pair is referenced (8 bytes), not held in place (16)."""
import sys

import pytest

from fakeclock import Harness
from pybeanstalkd.core import job as J
from pybeanstalkd.core.protocol import NS


def test_jobs_put_with_one_delay_and_ttr_share_one_pair():
    h = Harness()
    c = h.conn()
    for body in (b"a", b"b", b"c"):
        assert h.send(c, b"put 0 0 60 1\r\n%s\r\n" % body).startswith(b"INSERTED")
    assert h.send(c, b"put 0 5 30 1\r\nd\r\n").startswith(b"INSERTED")
    a, b, cc, d = (h.e.q.jobs.get(i) for i in (1, 2, 3, 4))
    assert a.times is b.times is cc.times
    assert (a.delay, a.ttr) == (0, 60 * NS)
    assert d.times is not a.times and (d.delay, d.ttr) == (5 * NS, 30 * NS)


def test_a_release_with_a_new_delay_gets_that_pair_and_keeps_the_ttr():
    h = Harness()
    c = h.conn()
    h.send(c, b"put 0 0 60 1\r\nx\r\n")
    assert h.send(c, b"reserve\r\n").startswith(b"RESERVED 1 ")
    assert h.send(c, b"release 1 0 7\r\n") == b"RELEASED\r\n"
    j = h.e.q.jobs.get(1)
    assert (j.delay, j.ttr) == (7 * NS, 60 * NS)
    assert j.times is J.TIMES.pair(7 * NS, 60 * NS)


def test_the_shared_pairs_are_bounded():
    t = J.Times()
    for ttr in range(5000):
        p = t.pair(0, ttr)
        assert (p.delay, p.ttr) == (0, ttr)
    assert len(t.shared) == 4096
    assert t.pair(0, 4999) is t.last  # (the pair asked last, past the bound too)


def test_a_compiled_job_fits_128_bytes():
    if not J.__file__.endswith(".so"):
        pytest.skip("pure: a job's layout is the interpreter's (the compiled run checks it)")
    assert J.Job.__basicsize__ <= 128, J.Job.__basicsize__
    assert sys.getsizeof(J.TIMES.pair(0, NS)) < 64

"""Jobs are left untracked by the cyclic collector (compiled: Job is
acyclic=True), which is safe only while no reference cycle runs through a
job once the queue is done with it (its holder's block, its tube's
buried, its binlog file). Run pure (PYBEANSTALKD_PURE=1, make test-pure),
where Job is tracked: a cycle would show as a Job that only gc.collect()
frees. Compiled, the test has nothing to see and is skipped."""
import gc

import pytest

from fakeclock import Harness, with_binlog


def put(h, s, body=b"x", pri=0, delay=0, ttr=60, tags=b""):
    line = b"put %d %d %d %d" % (pri, delay, ttr, len(body))
    return h.send(s, line + (b" " + tags if tags else b"") + b"\r\n" + body + b"\r\n")


def _work(h, tags):
    for _ in range(3):
        p, w = h.conn(), h.conn()
        ids = []
        for i in range(50):
            r = put(h, p, b"b%d" % i, pri=i % 3, delay=1 if i % 5 == 0 else 0,
                    ttr=0 if i % 7 == 0 else 2, tags=tags[i % len(tags)])
            ids.append(int(r.split()[1]))
        for i in range(30):
            r = h.send(w, b"reserve-with-timeout 0\r\n")
            if not r.startswith(b"RESERVED"):
                break
            jid = int(r.split()[1])
            h.send(w, [b"delete %d\r\n", b"release %d 0 1\r\n", b"bury %d 0\r\n",
                       b"touch %d\r\n", b"peek %d\r\n"][i % 5] % jid)  # (the last: kept)
        h.advance(3)  # TTRs expire
        h.send(p, b"kick 100\r\n")
        w2 = h.conn()
        for _ in range(10):
            h.send(w2, b"reserve-with-timeout 0\r\n")
        h.close(w2)  # its reservations go back
        h.close(w)
        for jid in ids:
            h.send(p, b"delete %d\r\n" % jid)
        h.close(p)
        h.advance(5)


@pytest.mark.parametrize("kind", ["plain", "extensions", "binlog"])
def test_no_job_is_left_in_a_reference_cycle(kind, tmp_path):
    probe = Harness()
    c = probe.conn()
    put(probe, c)
    job = probe.e.q.jobs.get(1)
    if not gc.is_tracked(job):
        pytest.skip("compiled: jobs are not tracked (run pure to check)")
    if kind == "binlog":
        h, _wal = with_binlog(tmp_path)
    else:
        h = Harness(extensions=kind == "extensions")
    tags = [b"", b"con:k", b"idp:i%d" % id(h), b"grp:g aft:f"] if kind == "extensions" else [b""]
    was = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        _work(h, tags)
        assert len(h.e.q.jobs) == 0
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        cyclic = [o for o in gc.garbage if type(o).__name__ == "Job"]
        assert not cyclic, [(j.id, j.state) for j in cyclic[:5]]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()

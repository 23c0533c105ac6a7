"""Put tags against a model: random sequences of every command (tagged
puts, reserves, batches, releases, buries, kicks, deletes, flushes, TTR
expiries, disconnects) with the queue's counts, keys, groups, holds and
concurrency slots recounted from the jobs after each step, and each
reserve's job predicted: the best ready job whose key has room."""

import random

import pytest

from fakeclock import Harness
from pybeanstalkd.core.job import RESERVED
from tagtools import TUBES, check, expected_reserve, logged, rand_tags


def run(seed, steps=300, make=None, verbose=False):
    r = random.Random(seed)
    h = make() if make else Harness(extensions=True)
    conns = [h.conn() for _ in range(3)]
    log = []
    send = logged(h, conns, log)
    for c in conns:
        if r.random() < 0.5:
            send(c, b"watch t2\r\n")
    for step in range(steps):
        jobs = check(h, conns, f"seed {seed} step {step}")
        ids = list(jobs) + [max(jobs, default=0) + 1]
        c = r.choice(conns)
        op = r.random()
        try:
            if op < 0.3:
                tags = rand_tags(r)
                line = b"put %d %d %d 1" % (
                    r.choice([0, 5, 2000]),
                    r.choice([0, 0, 0, 1, 3]),
                    r.choice([1, 2, 10]),
                )
                if tags:
                    line += b" " + tags
                send(c, line + b"\r\nx\r\n")
            elif op < 0.42:
                exp = expected_reserve(h, c, jobs)
                out = send(c, b"reserve-with-timeout 0\r\n")
                if exp is None:
                    assert not out.startswith(b"RESERVED"), (exp, out)
                else:
                    assert out.startswith(b"RESERVED %d " % exp.id), (
                        f"seed {seed} step {step} want {exp.id}",
                        out,
                    )
            elif op < 0.46:
                send(c, b"reserve-batch %d\r\n" % r.randint(1, 4))
            elif op < 0.54:
                send(
                    c, b"release %d %d %d\r\n" % (r.choice(ids), r.choice([0, 5, 2000]), r.choice([0, 0, 1]))
                )
            elif op < 0.58:
                send(c, b"bury %d 1\r\n" % r.choice(ids))
            elif op < 0.61:
                send(c, b"kick %d\r\n" % r.randint(1, 3))
            elif op < 0.65:
                send(c, b"kick-job %d\r\n" % r.choice(ids))
            elif op < 0.69:
                send(c, b"reserve-job %d\r\n" % r.choice(ids))
            elif op < 0.77:
                send(c, b"delete %d\r\n" % r.choice(ids))
            elif op < 0.80:
                send(c, b"delete-batch %s\r\n" % b" ".join(b"%d" % r.choice(ids) for _ in range(3)))
            elif op < 0.82:
                send(c, b"flush-tube %s\r\n" % r.choice(TUBES))
            elif op < 0.85:
                send(c, b"touch %d\r\n" % r.choice(ids))
            elif op < 0.91:
                log.append(("advance",))
                h.advance(r.choice([0.5, 1, 1.5, 3]))
            elif op < 0.93:
                log.append(("close", conns.index(c)))
                i = conns.index(c)
                h.close(c)
                conns[i] = h.conn()
                if r.random() < 0.5:
                    send(conns[i], b"watch t2\r\n")
            elif op < 0.97:
                send(c, b"use %s\r\n" % r.choice(TUBES))
            else:
                send(c, b"stats-group %s\r\n" % r.choice([b"g", b"h"]))
                send(c, b"peek-ready\r\n")
                mine = [j.id for j in jobs.values() if j.state == RESERVED and j.tube is c.use]
                out = send(c, b"peek-reserved\r\n")
                assert out == (b"FOUND %d 1\r\nx\r\n" % min(mine) if mine else b"NOT_FOUND\r\n"), (
                    f"seed {seed} step {step}", out)
        except Exception:
            if verbose:
                for x in log[-40:]:
                    print(x)
            raise
    check(h, conns, f"seed {seed} end")
    return h, conns, log


@pytest.mark.parametrize("seed", range(40))
def test_random_sequences_keep_every_invariant(seed):
    run(seed)

"""idp: keys claimed at a put's tags' stage, attacked: random sequences
with a binlog that may have no room, bodies that arrive in pieces on
several connections, and each keyed put's reply predicted (a duplicate
answers its holder's id and state)."""
import random

import pytest

from fakeclock import Harness
from pybeanstalkd.core.store import Store

from tagtools import TUBES, check, holder_id, logged, rand_tags

WORDS = {0: b"INVALID"}


class Refusing(Store):
    full = False

    def reserve_put(self, j):
        return not self.full


def run(seed, steps=400):
    r = random.Random(seed)
    h = Harness(extensions=True)
    h.e.q.store = store = Refusing()
    conns = [h.conn() for _ in range(3)]
    pending = {}  # conn index -> (tube, idp, rest of body)
    log = []
    send = logged(h, conns, log)

    try:
        for step in range(steps):
            jobs = check(h, conns, f"seed {seed} step {step}")
            ids = list(jobs) + [max(jobs, default=0) + 1]
            i = r.randrange(3)
            c = conns[i]
            op = r.random()
            if i in pending:
                tube, idp, rest = pending.pop(i)
                exp = holder_id(h, tube, idp) if idp else None
                out = send(c, rest)
                if store.full and exp is None and not (idp and h.e.q.ext.cooldown(tube, idp)):
                    assert out == b"OUT_OF_MEMORY\r\n", out
                elif exp is not None:
                    assert out.startswith(b"INSERTED %d " % exp), (exp, out)
                continue
            if op < 0.35:
                tags = rand_tags(r)
                if r.random() < 0.5:
                    tags = b"idp:" + r.choice([b"a", b"b", b"c"])
                line = b"put %d %d 10 1" % (r.choice([0, 5, 2000]), r.choice([0, 0, 1]))
                if tags:
                    line += b" " + tags
                idp = None
                for w in tags.split():
                    if w.startswith(b"idp:"):
                        idp = w[4:].split(b":")[0]
                if r.random() < 0.3:
                    send(c, line + b"\r\n")
                    pending[i] = (c.use.name, idp, b"x\r\n")
                    continue
                exp = holder_id(h, c.use.name, idp) if idp else None
                out = send(c, line + b"\r\nx\r\n")
                if exp is not None:
                    assert out.startswith(b"INSERTED %d " % exp), (exp, out)
            elif op < 0.42:
                store.full = not store.full
            elif op < 0.5:
                send(c, b"reserve-with-timeout 0\r\n")
            elif op < 0.56:
                send(c, b"release %d %d 0\r\n" % (r.choice(ids), r.choice([0, 5])))
            elif op < 0.6:
                send(c, b"bury %d 1\r\n" % r.choice(ids))
            elif op < 0.63:
                send(c, b"kick 2\r\n")
            elif op < 0.72:
                send(c, b"delete %d\r\n" % r.choice(ids))
            elif op < 0.75:
                send(c, b"flush-tube %s\r\n" % r.choice(TUBES))
            elif op < 0.85:
                h.advance(r.choice([0.5, 1, 3]))
            elif op < 0.9:
                send(c, b"use %s\r\n" % r.choice(TUBES))
            else:
                send(c, b"watch t2\r\n")
        store.full = False
        for i, (_tube, _idp, rest) in list(pending.items()):
            send(conns[i], rest)
        check(h, conns, f"seed {seed} end")
    except Exception:
        for x in log[-30:]:
            print(x)
        raise


@pytest.mark.parametrize("seed", range(200))
def test_keys_with_no_room_and_split_bodies(seed):
    run(seed)

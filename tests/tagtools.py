"""The put tags' queue state recounted from its jobs (core/tags.py,
core/tagged.py), and the pieces of a random sequence of tagged commands:
the model test (tests/core/test_tags_model.py) and the attacks on the
tags, in core/ and binlog/, share them."""
from pybeanstalkd.core.job import BURIED, DELAYED, READY, RESERVED
from pybeanstalkd.core.tags import HELD

TUBES = [b"default", b"t2"]


def check(h, conns, where):  # noqa: C901 (one recount of everything)
    q = h.e.q
    ext = q.ext
    jobs = {j.id: j for j in q.jobs.values()}
    # counts
    ready = [j for j in jobs.values() if j.state == READY]
    held = [j for j in jobs.values() if j.state == DELAYED and j.deadline == HELD]
    delayed = [j for j in jobs.values() if j.state == DELAYED and j.deadline != HELD]
    reserved = [j for j in jobs.values() if j.state == RESERVED]
    buried = [j for j in jobs.values() if j.state == BURIED]
    errs = []

    def eq(a, b, what):
        if a != b:
            errs.append(f"{what}: {a} != {b}")

    eq(q.ready_ct, len(ready), "ready_ct")
    eq(q.delayed_ct, len(delayed), "delayed_ct")
    eq(q.reserved_ct, len(reserved), "reserved_ct")
    eq(q.buried_ct, len(buried), "buried_ct")
    eq(ext.nheld, len(held), "nheld")
    for t in q.tubes.named.values():
        eq(t.nready, sum(1 for j in ready if j.tube is t), f"{t.name} nready")
        eq(t.ndelayed, sum(1 for j in delayed if j.tube is t), f"{t.name} ndelayed")
        eq(t.nreserved, sum(1 for j in reserved if j.tube is t), f"{t.name} nreserved")
        eq(len(t.buried), sum(1 for j in buried if j.tube is t), f"{t.name} buried")
        eq(t.urgent, sum(1 for j in ready if j.tube is t and j.pri < 1024), f"{t.name} urgent")
        eq(ext.held.get(t.name, 0), sum(1 for j in held if j.tube is t), f"{t.name} held")
        eq(
            ext.blocked.get(t.name, 0),
            sum(1 for i in ext.parked_ids if jobs[i].tube is t),
            f"{t.name} blocked",
        )
    for j in jobs.values():
        if j.tube.name not in q.tubes.named or q.tubes.named[j.tube.name] is not j.tube:
            errs.append(f"job {j.id} tube {j.tube.name} not alive")
    eq(q.urgent_ct, sum(1 for j in ready if j.pri < 1024), "urgent_ct")
    # parked
    for t in q.tubes.named.values():  # every hidden job is in its tube's heap of them
        hid = {i for i in ext.parked_ids if i in jobs and jobs[i].tube is t}
        stale = ext.hidden.get(t)
        heap = {k & ((1 << 64) - 1) for k in ([] if stale is None else stale.entries)}
        if not hid <= heap:
            errs.append(f"{t.name} hidden {sorted(hid - heap)} not in its heap")
    for i in ext.parked_ids:
        j = jobs.get(i)
        if j is None or j.state != READY:
            errs.append(f"parked {i} not ready")
    # con counts
    cc = {}
    for j in reserved:
        tg = j.tags
        if tg and tg.con:
            cc[tg.con] = cc.get(tg.con, 0) + 1
    eq({key: k.held for key, k in ext.cons.items() if k.held}, cc, "held by key")
    eq(ext.con_keys, len(cc), "con_keys")
    # live jobs by con: key and by aft: name (what they keep goes with the last)
    cj, aj = {}, {}
    for j in jobs.values():
        tg = j.tags
        if tg and tg.con:
            cj[tg.con] = cj.get(tg.con, 0) + 1
        if tg and tg.aft:
            aj[tg.aft] = aj.get(tg.aft, 0) + 1
    eq({key: k.jobs for key, k in ext.cons.items() if k.jobs}, cj, "jobs by key")
    # (counted in the name's group, or while it has none in aft_left)
    afts = {name: g.afts for name, g in ext.groups.items() if g.afts}
    eq({**afts, **ext.aft_left}, aj, "aft: jobs by name")
    eq(ext.groups.keys() & ext.aft_left.keys(), set(), "aft: jobs counted twice")
    for what, hand, entries in (("group", ext.group_at_hand, ext.groups),
                                ("con key", ext.con_at_hand, ext.cons)):
        if hand.value is not None and (hand.name is None or entries.get(hand.name) is not hand.value):
            errs.append(f"the {what} at hand ({hand.name!r}) is not its name's")
    for key, k in ext.cons.items():
        if key not in cj and key not in cc:
            errs.append(f"con key {key} kept with no job")
        for t, heap in k.parked.items():
            if not heap.entries:
                errs.append(f"con key {key} keeps an empty heap for {t.name}")
    for name, g in ext.groups.items():
        if g.complete() and not g.waiting and name not in aj:
            errs.append(f"group {name} kept with no job")
    # the tagged jobs' count (their memory), and no tags left waiting for a job
    eq(ext.tagged, sum(1 for j in jobs.values() if j.tags is not None), "tagged")
    eq(ext.pending, {}, "pending tags")
    # keys
    keys = {}
    for j in jobs.values():
        tg = j.tags
        if tg and tg.idp and tg.idp[:1] != b":":  # (":": a key flush-tube voided)
            keys[(j.tube.name, tg.idp)] = j.id
    eq({(t, k): j.id for t, m in ext.keys.items() for k, j in m.items()}, keys, "keys")
    eq(ext.nkeys, len(keys), "nkeys")
    eq(ext.ncools, sum(len(m) for m in ext.cools.values()), "ncools")
    eq(ext.ncools, len(ext.cool_ids), "cool_ids")
    # groups
    for name, g in ext.groups.items():
        mem = {j.id for j in jobs.values() if j.tags and j.tags.grp == name}
        eq(set(g.members), mem, f"group {name} members")
        eq(g.buried, sum(1 for i in mem if jobs[i].state == BURIED), f"group {name} buried")
    for j in jobs.values():
        tg = j.tags
        if tg and tg.grp and tg.grp not in ext.groups:
            errs.append(f"member {j.id} group {tg.grp} missing")
    for j in held:
        tg = j.tags
        g = ext.groups.get(tg.aft) if tg else None
        if g is None or j.id not in g.waiting:
            errs.append(f"held {j.id} not in waiting")
        elif g.complete():
            errs.append(f"held {j.id} but group {tg.aft} complete")
    if errs:
        raise AssertionError(where + ": " + "; ".join(errs))
    return jobs


def expected_reserve(h, c, jobs):
    q = h.e.q
    ext = q.ext
    best = None
    for j in jobs.values():
        if j.state != READY or j.tube not in c.watch:
            continue
        tg = j.tags
        if tg and tg.con and ext.blocked_key(tg.con):
            continue
        if best is None or (j.pri, j.id) < (best.pri, best.id):
            best = j
    return best


def rand_tags(r):
    tags = []
    if r.random() < 0.4:
        tags.append(b"idp:" + r.choice([b"a", b"b", b"c"]) + r.choice([b"", b":0", b":2", b":5"]))
    if r.random() < 0.4:
        tags.append(b"con:" + r.choice([b"x", b"y"]) + r.choice([b"", b":1", b":2", b":3"]))
    if r.random() < 0.3:
        tags.append(b"grp:" + r.choice([b"g", b"h"]))
    if r.random() < 0.3:
        tags.append(b"aft:" + r.choice([b"g", b"h"]))
    if r.random() < 0.15:
        tags.append(b"try:" + str(r.randint(1, 3)).encode())
    return b" ".join(tags)


def holder_id(h, tube, idp):
    """The id of the live job of tube that holds idp: key idp, or None:
    what a duplicate put answers."""
    for j in h.e.q.jobs.values():
        tg = j.tags
        if tg and tg.idp == idp and j.tube.name == tube:
            return j.id
    return None


def logged(h, conns, log):
    """A send that records each command and its reply in log (printed
    when a sequence fails)."""
    def send(c, data):
        log.append((conns.index(c), data))
        out = h.send(c, data)
        log.append(("->", out))
        return out
    return send

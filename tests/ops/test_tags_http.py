"""The put tags' state (--extensions) on the HTTP side: /metrics' per-tube
and server-wide families, GET /api/v1/groups and /api/v1/keys (bounded,
sorted, capped), the tags' counts in the tube JSON; and none of it without
--extensions. In-process, as test_http_api.py: a real Engine and the real
transport.Server beside the app."""
from __future__ import annotations

import asyncio
import base64
from time import monotonic_ns

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pybeanstalkd.core.protocol import NS
from pybeanstalkd.ops import api, metrics
from pybeanstalkd.core.slices import SLICE
from test_http_api import World, get, http_test, post, served_during

EXT_TUBE = ("pybeanstalkd_tube_dedup_hits", "pybeanstalkd_tube_held_jobs",
            "pybeanstalkd_tube_concurrency_blocked_jobs")
EXT_SERVER = ("pybeanstalkd_groups", "pybeanstalkd_idempotency_keys",
              "pybeanstalkd_idempotency_cooldowns", "pybeanstalkd_concurrency_keys")
TUBE_KEYS = ("dedup-hits", "held-jobs", "blocked-jobs")


def put(w, s, tube: bytes, tags: bytes = b"", body: bytes = b"x", pri: int = 0) -> bytes:
    w.send(s, b"use %s\r\n" % tube)
    tail = b" " + tags if tags else b""  # (a blank tail is the reference's BAD_FORMAT)
    return w.send(s, b"put %d 0 60 %d%s\r\n%s\r\n" % (pri, len(body), tail, body))


def tagged(w) -> dict:
    """In tube a: a key twice (one duplicate answered), a key deleted with
    a TTL (a cooldown), two jobs of group g (one buried) and an aft:g job
    held; in tube b: two jobs with con:k:1, one reserved, the other hidden."""
    s, worker = w.conn(), w.conn()
    ids = {}
    ids["keyed"] = int(put(w, s, b"a", b"idp:one").split()[1])
    assert put(w, s, b"a", b"idp:one") == b"INSERTED %d READY\r\n" % ids["keyed"]
    gone = int(put(w, s, b"a", b"idp:two:30").split()[1])
    assert w.send(s, b"delete %d\r\n" % gone) == b"DELETED\r\n"
    ids["gone"] = gone
    ids["g1"] = int(put(w, s, b"a", b"grp:g").split()[1])
    ids["g2"] = int(put(w, s, b"a", b"grp:g", pri=1).split()[1])
    ids["held"] = int(put(w, s, b"a", b"aft:g").split()[1])
    w.send(worker, b"watch a\r\nignore default\r\n")
    assert w.send(worker, b"reserve-job %d\r\n" % ids["g2"]).startswith(b"RESERVED")
    assert w.send(worker, b"bury %d 0\r\n" % ids["g2"]) == b"BURIED\r\n"
    ids["c1"] = int(put(w, s, b"b", b"con:k:1").split()[1])
    ids["c2"] = int(put(w, s, b"b", b"con:k:1").split()[1])
    w.send(worker, b"watch b\r\nignore a\r\n")
    assert w.send(worker, b"reserve-with-timeout 0\r\n").startswith(b"RESERVED %d " % ids["c1"])
    # (c2 is hidden once a reserve finds it at the top of its tube)
    assert w.send(worker, b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"
    ids["worker"] = worker
    return ids


# -- /metrics ------------------------------------------------------------------


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def families(w) -> dict:
    text = metrics.render_all(w.srv, monotonic_ns).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(fams, name: str, **labels) -> float:
    f = fams[name]
    got = [s.value for s in f.samples if s.labels == labels and not s.name.endswith("_created")]
    assert len(got) == 1, (name, labels, f.samples)
    return got[0]


def test_metrics_without_extensions_have_none_of_the_tags_families(loop):
    w = World(loop)
    s = w.conn()
    put(w, s, b"a")
    fams = families(w)
    assert not set(EXT_TUBE + EXT_SERVER) & set(fams)
    assert sample(fams, "pybeanstalkd_tube_tries_used_up", tube="a") == 0


def test_metrics_with_extensions(loop):
    w = World(loop, extensions=True)
    tagged(w)
    fams = families(w)
    assert fams["pybeanstalkd_tube_dedup_hits"].type == "counter"
    assert sample(fams, "pybeanstalkd_tube_dedup_hits", tube="a") == 1
    assert sample(fams, "pybeanstalkd_tube_dedup_hits", tube="b") == 0
    assert sample(fams, "pybeanstalkd_tube_held_jobs", tube="a") == 1
    assert sample(fams, "pybeanstalkd_tube_held_jobs", tube="b") == 0
    assert sample(fams, "pybeanstalkd_tube_concurrency_blocked_jobs", tube="b") == 1
    assert sample(fams, "pybeanstalkd_tube_concurrency_blocked_jobs", tube="default") == 0
    for name in EXT_TUBE[1:] + EXT_SERVER:
        assert fams[name].type == "gauge", name
    assert sample(fams, "pybeanstalkd_groups") == 1
    assert sample(fams, "pybeanstalkd_idempotency_keys") == 1
    assert sample(fams, "pybeanstalkd_idempotency_cooldowns") == 1
    assert sample(fams, "pybeanstalkd_concurrency_keys") == 1
    # The existing ones are all there; stats' current-concurrency-keys is
    # pybeanstalkd_concurrency_keys, under no beanstalkd_* name.
    assert sample(fams, "pybeanstalkd_tube_tries_used_up", tube="a") == 0
    assert sample(fams, "beanstalkd_tube_current_jobs_buried_count", tube="a") == 1
    assert not [n for n in fams if "concurrency" in n and n.startswith("beanstalkd_")]


def test_metrics_with_extensions_rendered_in_parts_equal_one_rendering(loop):
    w = World(loop, extensions=True)
    s = w.conn()
    for i in range(30):
        put(w, s, b"t%02d" % i, b"idp:k")
        put(w, s, b"t%02d" % i, b"idp:k")
    text = metrics.render_all(w.srv, monotonic_ns).decode()
    helps = [line for line in text.splitlines() if line.startswith("# HELP ")]
    assert len(helps) == len(set(helps))
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    dedup = {smp.labels["tube"]: smp.value for smp in fams["pybeanstalkd_tube_dedup_hits"].samples
             if smp.name.endswith("_total")}
    assert dedup == {"default": 0, **{"t%02d" % i: 1 for i in range(30)}}
    assert len(fams["pybeanstalkd_tube_held_jobs"].samples) == 31


# -- the JSON API ----------------------------------------------------------------


@http_test()
async def test_groups_and_keys_are_404_without_extensions(w, client):
    for path in ("/api/v1/groups", "/api/v1/keys?tube=a", "/api/v1/keys"):
        r = await client.get(path)
        assert r.status == 404
        assert "--extensions" in (await r.json())["error"]
    s = w.conn()
    put(w, s, b"a")
    one = (await get(client, "/api/v1/tubes/a"))["tube"]
    assert not set(TUBE_KEYS) & set(one)
    listed = (await get(client, "/api/v1/tubes"))["tubes"]
    assert all(not set(TUBE_KEYS) & set(t) for t in listed)


@http_test(extensions=True)
async def test_groups_keys_and_the_tube_counts(w, client):
    ids = tagged(w)
    d = await get(client, "/api/v1/groups")
    assert d == {"groups": [{"name": "g", "members": 2, "buried": 1, "waiting": 1}],
                 "total": 1, "truncated": False}
    d = await get(client, "/api/v1/keys?tube=a")
    assert d["tube"] == "a" and d["truncated"] is False
    assert d["keys"] == [{"key": "one", "job": ids["keyed"]}]
    [cool] = d["cooldowns"]
    assert (cool["key"], cool["job"]) == ("two", ids["gone"]) and 29 <= cool["ends_in_s"] <= 30
    assert await get(client, "/api/v1/keys?tube=b") == {
        "tube": "b", "keys": [], "cooldowns": [], "truncated": False}
    assert (await get(client, "/api/v1/keys?tube=nowhere"))["keys"] == []
    a = (await get(client, "/api/v1/tubes/a"))["tube"]
    b = (await get(client, "/api/v1/tubes/b"))["tube"]
    assert (a["dedup-hits"], a["held-jobs"], a["blocked-jobs"]) == (1, 1, 0)
    assert (b["dedup-hits"], b["held-jobs"], b["blocked-jobs"]) == (0, 0, 1)
    listed = {t["name"]: t for t in (await get(client, "/api/v1/tubes"))["tubes"]}
    assert listed["a"] == dict(a, **{k: listed["a"][k] for k in ("pause", "pause-time-left")})
    assert listed["default"]["dedup-hits"] == 0
    # the last member's delete completes the group: gone, its held job ready
    s = w.conn()
    w.send(s, b"delete %d\r\n" % ids["g1"])
    w.send(s, b"delete %d\r\n" % ids["g2"])
    assert await get(client, "/api/v1/groups") == {"groups": [], "total": 0, "truncated": False}
    assert (await get(client, "/api/v1/tubes/a"))["tube"]["held-jobs"] == 0


@http_test(extensions=True)
async def test_a_cooldown_that_has_ended_is_not_listed(w, client):
    s = w.conn()
    jid = int(put(w, s, b"a", b"idp:k:5").split()[1])
    w.send(s, b"delete %d\r\n" % jid)
    cd = w.engine.q.ext.cools[b"a"][b"k"]
    assert (await get(client, "/api/v1/keys?tube=a"))["cooldowns"][0]["ends_in_s"] == 5
    cd.expires = monotonic_ns() - NS  # (ended, not yet swept by a timer pass)
    assert (await get(client, "/api/v1/keys?tube=a"))["cooldowns"] == []


@http_test(extensions=True)
async def test_keys_needs_a_good_tube_name(w, client):
    for path in ("/api/v1/keys", "/api/v1/keys?tube=", "/api/v1/keys?tube=-x", "/api/v1/keys?tube=%C3%A9"):
        r = await client.get(path)
        assert r.status == 400, path
        assert (await r.json())["error"]


@http_test(extensions=True)
async def test_listings_are_capped_sorted_and_bounded(w, client, monkeypatch):
    s = w.conn()
    names = [b"g%03d" % i for i in range(40)]
    for name in reversed(names):
        put(w, s, b"a", b"grp:" + name + b" idp:" + name)
    monkeypatch.setattr(api, "LIST_MAX", 10)
    d = await get(client, "/api/v1/groups")
    assert [g["name"] for g in d["groups"]] == [n.decode() for n in names[:10]]
    assert d["total"] == 40 and d["truncated"] is True
    d = await get(client, "/api/v1/keys?tube=a")
    assert [k["key"] for k in d["keys"]] == [n.decode() for n in names[:10]] and d["truncated"]
    # A scan looks at SCAN_MAX entries at most: the first ones put (the
    # dicts keep their order), and says the list is not all there is.
    monkeypatch.setattr(api, "LIST_MAX", 100)
    monkeypatch.setattr(api, "SCAN_MAX", 25)
    d = await get(client, "/api/v1/groups")
    assert [g["name"] for g in d["groups"]] == sorted(n.decode() for n in names[15:])
    assert d["total"] == 40 and d["truncated"] is True
    d = await get(client, "/api/v1/keys?tube=a")
    assert len(d["keys"]) == 25 and d["truncated"] is True
    monkeypatch.setattr(api, "SCAN_MAX", 1000)
    d = await get(client, "/api/v1/groups")
    assert len(d["groups"]) == 40 and d["truncated"] is False



# -- POST /tubes/{tube}/flush {"state": "tube"}: flush-tube's jobs -------------


@http_test()
async def test_a_flush_of_the_whole_tube_needs_extensions(w, client):
    s = w.conn()
    assert w.send(s, b"use a\r\nput 0 0 60 1\r\nx\r\n") == b"USING a\r\nINSERTED 1\r\n"
    d = await post(client, "/api/v1/tubes/a/flush", {"state": "tube"}, 400)
    assert "--extensions" in d["error"]
    assert w.engine.q.job_count() == 1


@http_test(extensions=True)
async def test_a_flush_of_the_whole_tube_is_flush_tube(w, client):
    """Every job the tube holds goes: ready, delayed, buried, reserved (its
    holder then gets NOT_FOUND), hidden by a con: key; held aft: jobs stay,
    as with flush-tube; keys and cooldowns go. No cmd-delete is counted."""
    ids = tagged(w)
    worker = ids["worker"]
    s = w.conn()
    put(w, s, b"b", b"", b"later")  # (and a delayed one)
    w.send(s, b"put 0 100 60 1\r\nd\r\n")
    other = put(w, s, b"c")
    before = w.stats(s, b"stats-tube b")
    assert [before[f"current-jobs-{k}"] for k in ("ready", "reserved", "delayed")] == ["2", "1", "1"]
    assert await post(client, "/api/v1/tubes/b/flush", {"state": "tube"}) == {"flushed": 4}
    after = w.stats(s, b"stats-tube b")
    assert [after[f"current-jobs-{k}"] for k in ("ready", "reserved", "delayed", "buried")] == ["0"] * 4
    assert after["cmd-delete"] == "0"
    assert w.send(worker, b"delete %d\r\n" % ids["c1"]) == b"NOT_FOUND\r\n"
    assert (await get(client, "/api/v1/tubes/b"))["tube"]["blocked-jobs"] == 0
    # tube a: a keyed job, a group's two members (one buried), its aft: job held
    assert await post(client, "/api/v1/tubes/a/flush", {"state": "tube"}) == {"flushed": 3}
    assert await get(client, "/api/v1/keys?tube=a") == {
        "tube": "a", "keys": [], "cooldowns": [], "truncated": False}
    assert ids["held"] in w.engine.q.jobs  # (held at the start: in no state, as flush-tube leaves it)
    assert other.startswith(b"INSERTED") and w.stats(s, b"stats-tube c")["current-jobs-ready"] == "1"
    await post(client, "/api/v1/tubes/nope/flush", {"state": "tube"}, 404)


@http_test(extensions=True)
async def test_a_flush_of_the_whole_tube_that_the_binlog_cannot_take_says_so(w, client):
    from pybeanstalkd.core.store import Store

    class Failing(Store):
        writes = 2

        def write(self, j, rec=None):
            self.writes -= 1
            return self.writes >= 0

    s = w.conn()
    for _ in range(5):
        put(w, s, b"f")
    w.engine.q.store = Failing()
    got = await post(client, "/api/v1/tubes/f/flush", {"state": "tube"}, 503)
    assert got == {"error": "the binlog could not record the delete", "flushed": 2}


@http_test(extensions=True)
async def test_a_flush_of_the_whole_tube_runs_in_slices(w, client, monkeypatch):
    from pybeanstalkd.server import transport

    monkeypatch.setattr(transport, "STEP_BUDGET_NS", 0)  # a slice a pass, whatever the speed
    s, worker, other = w.conn(), w.conn(), w.conn()
    n = 10 * SLICE
    w.send(s, b"use big\r\n" + b"put 0 0 60 1\r\nx\r\n" * n)
    w.send(worker, b"watch big\r\n" + b"reserve-with-timeout 0\r\n" * SLICE)
    w.send(other, b"use small\r\n")
    big = w.engine.q.tubes.named[b"big"]
    assert (big.nready, big.nreserved) == (n - SLICE, SLICE)
    d, served, seen = await served_during(w, other, lambda: big.nready + big.nreserved,
                                          post(client, "/api/v1/tubes/big/flush", {"state": "tube"}))
    assert all(r.startswith(b"INSERTED") for r in served)
    assert d == {"flushed": n}
    assert len([x for x in seen if 0 < x < n]) >= 3  # served while the flush was half done
    assert big.nready == big.nreserved == 0


def test_listings_yield_between_slices(monkeypatch, loop):
    """The loop is served between slices of SCAN_SLICE entries."""
    w = World(loop, extensions=True)
    s = w.conn()
    for i in range(50):
        put(w, s, b"a", b"grp:g%02d idp:k%02d" % (i, i))
    monkeypatch.setattr(api, "SCAN_SLICE", 8)

    def run(gen):
        passes = 0
        while True:
            try:
                next(gen)
                passes += 1
            except StopIteration as done:
                return passes, done.value
    ext = w.engine.q.ext
    passes, d = run(api.groups(ext))
    assert passes == 6 and len(d["groups"]) == 50
    passes, d = run(api.keys(ext, b"a", monotonic_ns))
    assert passes == 6 and len(d["keys"]) == 50
    # a group completed between two slices is left out
    gen = api.groups(ext)
    next(gen)
    [member] = ext.groups[b"g49"].members
    w.send(s, b"delete %d\r\n" % member)
    d = run(gen)[1]
    assert len(d["groups"]) == 49 and "g49" not in [g["name"] for g in d["groups"]]


@http_test(auth=("user", "secret"), extensions=True)
async def test_groups_and_keys_need_the_auth_and_a_good_host(w, client):
    good = {"Authorization": "Basic " + base64.b64encode(b"user:secret").decode()}
    for path in ("/api/v1/groups", "/api/v1/keys?tube=a"):
        assert (await client.get(path)).status == 401
        assert (await client.get(path, headers=good)).status == 200
        r = await client.get(path, headers=dict(good, Host="evil.example"))
        assert r.status == 400 and "error" in await r.json()


def test_without_extensions_nothing_reads_ext(loop):
    """q.ext is None: the tube JSON and the scrape are as before."""
    w = World(loop)
    assert w.engine.q.ext is None
    t = w.engine.q.tubes.named[b"default"]
    now = monotonic_ns()
    assert api.tube_json(t, now, w.engine.q.ext) == api.tube(t, now)
    assert not set(TUBE_KEYS) & set(api.tubes(w.engine.q, now)["tubes"][0])

"""Binlog interoperability, black box: one server writes a binlog directory, it is
stopped, and another (or the same kind) reads the directory back.

Every test takes the writer and the reader as parameters in {reference, ours}.
Tests on hand-made files (version 5) take only the reader. The expectations come
from docs section 4 and were checked against the reference (beanstalkd 1.12);
where the reference is knowingly wrong (bug #668) the test asserts the
reference's behaviour for reader == reference and the correct one for ours.
"""
from __future__ import annotations

import os
import stat
import time

import pytest

from binlogtools import (
    JOB_KEYS,
    KINDS,
    NS,
    PAIR_IDS,
    PAIRS,
    SHORT7_SIZE,
    STATE_CODES,
    binlog_files,
    full_record,
    job_state,
    next_id_after_replay,
    normalize_prog,
    parse_binlog,
    parse_dir,
    replay,
    short_record,
    snapshot,
    tube_counts,
    write_binlog,
)

DEFAULT_FILESIZE = 10485760
TOLERANCE = 3  # seconds of slack for age / time-left after a restart

pair = pytest.mark.parametrize("writer,reader", PAIRS, ids=PAIR_IDS)

# How the writer is stopped: the reference only ever dies (it has no shutdown
# path worth the name, and SIGKILL loses nothing it has written); ours is tried
# both ways. -f0 with SIGKILL so every acknowledged write was fsynced.
STOPS = [("reference", "kill"), ("ours", "kill"), ("ours", "term")]
STOP_CASES = [(w, s, r) for (w, s) in STOPS for r in KINDS]
STOP_IDS = [f"{w}-{s}-then-{r}" for (w, s, r) in STOP_CASES]


def stop_writer(srv, how: str):
    ex = srv.kill9() if how == "kill" else srv.term()
    assert b"Traceback" not in ex.stderr, ex.text
    return ex


def writer_flags(how: str) -> tuple:
    return ("-f0",) if how == "kill" else ()


def numbers(d) -> list[int]:
    return [n for n, _ in binlog_files(d)]


# ---------------------------------------------------------------------------
# The big mixed workload

TUBE_LONG = "n" + "x" * 199  # the longest legal tube name (namelen 200)
TUBE_ODD = "t/a;b$c(d)_e+f.g-"  # every punctuation character a name may hold
BODY_ALL = bytes(range(256))
BODY_CRLF = b"\r\nline one\r\nline two\r\n\r\n"
BODY_BIG = bytes(range(256)) * 20  # 5120 bytes


class Workload:
    """Drives a server through a scripted mix of operations and remembers, for
    every job, its state right after its last *logged* change (docs 4.3), and
    the records the binlog should hold, in order."""

    def __init__(self, srv):
        self.c = srv.client()  # does everything
        self.w = srv.client()  # holds reservations at shutdown
        self.tube = "default"
        self.ids: dict[str, int] = {}
        self.logged = {}  # id -> JobState after its last logged change
        self.unlogged: set[int] = set()  # ids changed since (reserve, release 0)
        self.deleted: set[int] = set()
        self.records = []  # (id, full, state, JobState as logged)

    def use(self, tube):
        if tube != self.tube:
            self.c.use(tube)
            self.tube = tube

    def _log(self, jid, full, state, st=None):
        st = st or job_state(self.c, jid)
        self.records.append((jid, full, state, st))
        if state:
            self.logged[jid] = st
            self.unlogged.discard(jid)

    def put(self, label, body, tube="default", pri=0, delay=0, ttr=60):
        self.use(tube)
        jid = self.c.put(body, pri, delay, ttr)
        self.ids[label] = jid
        self._log(jid, True, STATE_CODES["delayed" if delay else "ready"])
        return jid

    def reserve(self, jid, conn=None):
        (conn or self.c).reserve_job(jid)
        self.unlogged.add(jid)

    def bury(self, jid, pri):
        self.c.bury(jid, pri)
        self._log(jid, False, STATE_CODES["buried"])

    def release(self, jid, pri, delay):
        self.c.release(jid, pri, delay)
        if delay:
            self._log(jid, False, STATE_CODES["delayed"])
        else:
            self.unlogged.add(jid)  # release with delay 0 writes nothing

    def kick(self, tube, n, expect):
        self.use(tube)
        assert self.c.kick(n) == len(expect)
        for jid in expect:
            self._log(jid, False, STATE_CODES["ready"])

    def kick_job(self, jid):
        self.c.kick_job(jid)
        self._log(jid, False, STATE_CODES["ready"])

    def delete(self, jid):
        st = job_state(self.c, jid)
        self.c.delete(jid)
        self._log(jid, False, 0, st)
        self.logged.pop(jid, None)
        self.unlogged.discard(jid)
        self.deleted.add(jid)

    @property
    def max_id(self):
        return max(self.ids.values())

    def run(self):
        P = self.put
        # ready jobs, odd bodies, all pri extremes, several tubes
        P("ready-all-bytes", BODY_ALL, pri=0, ttr=0)
        P("ready-crlf", BODY_CRLF, tube="alpha", pri=4294967295, ttr=3600)
        P("ready-empty", b"", tube=TUBE_LONG, pri=1023)
        P("ready-big", BODY_BIG, tube=TUBE_ODD, pri=1024, ttr=7)
        # delayed jobs (long delays, so they stay delayed)
        P("delayed-hour", BODY_ALL, tube="alpha", pri=12, delay=3600)
        P("delayed-day", b"", tube=TUBE_ODD, pri=5, delay=86400, ttr=30)
        # buried with a new pri
        j = P("buried", BODY_CRLF, pri=100)
        self.reserve(j)
        self.bury(j, 7)
        j = P("buried-empty", b"", tube="alpha", pri=3)
        self.reserve(j)
        self.bury(j, 2000)
        # deleted from every state
        self.delete(P("deleted-ready", b"gone"))
        j = P("deleted-buried", b"gone too", tube="alpha")
        self.reserve(j)
        self.bury(j, 1)
        self.delete(j)
        self.delete(P("deleted-delayed", b"later", tube=TUBE_ODD, delay=3600))
        j = P("deleted-reserved", b"taken", tube="gone-tube")
        self.reserve(j)
        self.delete(j)
        # kick (buried, then delayed) and kick-job (buried, delayed)
        j = P("kicked-buried", b"kb\r\n", tube="kick-b", pri=50)
        self.reserve(j)
        self.bury(j, 60)
        self.kick("kick-b", 5, [j])
        j = P("kicked-delayed", b"kd", tube="kick-d", pri=51, delay=3600)
        self.kick("kick-d", 5, [j])
        j = P("kickjob-buried", BODY_ALL, pri=52)
        self.reserve(j)
        self.bury(j, 53)
        self.kick_job(j)
        self.kick_job(P("kickjob-delayed", b"kjd", pri=54, delay=3600))
        # release with a long delay, and with delay 0 (not logged)
        j = P("released-delayed", b"rd", tube="alpha", pri=40)
        self.reserve(j)
        self.release(j, 42, 3600)
        j = P("released-zero", b"r0", tube="alpha", pri=9)
        self.reserve(j)
        self.release(j, 43, 0)
        # many counters on one job, ending delayed
        j = P("counters", BODY_CRLF, tube="beta", pri=1)
        self.reserve(j)
        self.release(j, 2, 3600)
        self.kick_job(j)
        self.reserve(j)
        self.bury(j, 3)
        self.kick_job(j)
        self.reserve(j)
        self.release(j, 4, 3600)
        # reserved at shutdown: from ready, from buried (reserve-job), from delayed
        j = P("reserved-at-exit", b"held", tube="beta", pri=8)
        self.reserve(j, self.w)
        j = P("reserved-from-buried", BODY_ALL, tube="beta", pri=9)
        self.reserve(j)
        self.bury(j, 99)
        self.reserve(j, self.w)
        j = P("reserved-from-delayed", b"dh", tube="beta", pri=10, delay=3600)
        self.reserve(j, self.w)
        # a reserved job released with delay 0 and then reserved again
        j = P("released-zero-reserved", b"rzr", tube="beta")
        self.reserve(j)
        self.release(j, 77, 0)
        self.reserve(j, self.w)
        # the highest id is live
        P("last", b"last")


def check_records_match(files, wl):
    """The writer's binlog holds exactly the records of docs 4.3, in order, with
    the fields the server reported right after each logged change."""
    got = [(r.id, r.full, r.state) for bf in files for r in bf.records]
    want = [(jid, full, state) for jid, full, state, _ in wl.records]
    assert got == want
    recs = [r for bf in files for r in bf.records]
    for r, (jid, _full, state, st) in zip(recs, wl.records):
        f = st.fields
        assert (r.pri, r.delay // NS, r.ttr // NS) == (f["pri"], f["delay"], f["ttr"]), (jid, r)
        counters = (r.reserve_ct, r.timeout_ct, r.release_ct, r.bury_ct, r.kick_ct)
        assert counters == (f["reserves"], f["timeouts"], f["releases"], f["buries"], f["kicks"]), (jid, r)
        assert r.body_size == len(st.body) + 2
        if r.full:
            assert r.tube == f["tube"] and r.body == st.body + b"\r\n", (jid, r)
        else:
            assert r.end - r.offset == SHORT7_SIZE
        if state == STATE_CODES["delayed"]:
            assert abs(r.deadline_at / NS - (st.taken_at + st.time_left)) <= TOLERANCE, (jid, r)


def expected_after_restart(wl, reader):
    out = {}
    for jid, st in wl.logged.items():
        f = dict(st.fields)
        if f["state"] == "buried" and reader == "reference":
            f["buries"] += 1  # reference bug #668: +1 per buried job per restart
        out[jid] = (f, st)
    return out


def check_restored(post, expected):
    for jid, (f, base) in expected.items():
        got = post.jobs[jid]
        assert got is not None, f"job {jid} lost"
        assert got.fields == f, jid
        assert got.body == base.body, jid
        elapsed = got.taken_at - base.taken_at
        assert base.age + elapsed - TOLERANCE <= got.age <= base.age + elapsed + TOLERANCE, (jid, got.age)
        if f["state"] == "delayed":
            want = base.time_left - elapsed
            assert abs(got.time_left - want) <= TOLERANCE, (jid, got.time_left, want)
        else:
            assert got.time_left == 0, jid


@pytest.mark.parametrize("writer,how,reader", STOP_CASES, ids=STOP_IDS)
def test_mixed_workload_survives_restart(servers, wal, writer, how, reader):
    w = servers(writer, wal, *writer_flags(how))
    wl = Workload(w)
    wl.run()
    ids = range(1, wl.max_id + 1)
    pre = snapshot(w, ids)

    # bookkeeping sanity: what the server shows now is what was last logged,
    # except for the jobs changed without a log record
    for jid, st in wl.logged.items():
        if jid not in wl.unlogged:
            assert pre.jobs[jid].fields == st.fields, jid
    for jid in wl.deleted:
        assert pre.jobs[jid] is None
    assert pre.jobs[wl.ids["reserved-at-exit"]].fields["state"] == "reserved"
    assert pre.jobs[wl.ids["reserved-from-buried"]].fields["state"] == "reserved"
    assert pre.jobs[wl.ids["released-zero"]].fields["pri"] == 43
    # one file so far, and every job's latest full record is in it
    assert all(j.fields["file"] == 1 for j in pre.live().values())

    stop_writer(w, how)

    # on disk: binlog.1 only, version 7, preallocated (after SIGKILL), the records of 4.3
    assert numbers(wal) == [1]
    files = parse_dir(wal)
    assert files[0].version == 7
    if how == "kill":
        assert files[0].size == DEFAULT_FILESIZE
        assert files[0].stop == "zeros"
    else:
        assert files[0].stop in ("zeros", "eof")
    check_records_match(files, wl)
    model = replay(files)
    assert set(model) == set(wl.logged)
    for jid, st in wl.logged.items():
        assert model[jid].fields() == st.fields, jid
        assert model[jid].body == st.body

    r = servers(reader, wal)
    post = snapshot(r, ids)
    expected = expected_after_restart(wl, reader)
    check_restored(post, expected)
    for jid in wl.deleted:
        assert post.jobs[jid] is None, f"deleted job {jid} came back"
    # the documented exceptions, spelled out
    f = post.jobs[wl.ids["reserved-at-exit"]].fields
    assert (f["state"], f["reserves"]) == ("ready", 0)
    f = post.jobs[wl.ids["reserved-from-buried"]].fields
    assert (f["state"], f["pri"], f["reserves"]) == ("buried", 99, 1)
    assert f["buries"] == (2 if reader == "reference" else 1)
    f = post.jobs[wl.ids["reserved-from-delayed"]].fields
    assert (f["state"], f["reserves"]) == ("delayed", 0)
    f = post.jobs[wl.ids["released-zero"]].fields
    assert (f["state"], f["pri"], f["reserves"], f["releases"]) == ("ready", 9, 0, 0)
    f = post.jobs[wl.ids["counters"]].fields
    assert (f["state"], f["pri"], f["reserves"], f["releases"], f["kicks"]) == ("delayed", 4, 3, 2, 2)

    # tubes: the ones holding jobs (and default), with the right counts
    want_counts = tube_counts({j: {"fields": f} for j, (f, _) in expected.items()})
    assert set(post.tube_order) == {"default"} | set(want_counts)
    for tube, counts in want_counts.items():
        assert post.tubes[tube] == counts, tube

    # the reader added binlog.2 (preallocated, header only) and wrote nothing in replay
    assert numbers(wal) == [1, 2]
    b2 = parse_binlog(os.path.join(wal, "binlog.2"))
    assert (b2.version, b2.size, b2.records) == (7, DEFAULT_FILESIZE, [])
    # ids continue after the highest id in the log
    c = r.client()
    assert next_id_after_replay(files) == wl.max_id + 1
    assert c.put(b"new") == wl.max_id + 1


# ---------------------------------------------------------------------------
# Many files (-s 4096): the file field across files, compaction, GC


def run_spread(srv, rnd):
    c = srv.client()
    tubes = ["default", "s1", "s2"]
    live = []
    for i in range(70):
        t = tubes[i % 3]
        c.use(t)
        body = rnd.randbytes(rnd.randrange(0, 700))
        delay = 3600 if i % 5 == 1 else 0
        jid = c.put(body, pri=rnd.randrange(0, 3000), delay=delay, ttr=rnd.randrange(1, 500))
        live.append(jid)
        if i % 4 == 2:
            c.reserve_job(jid)
            c.bury(jid, rnd.randrange(0, 3000))
        if i % 7 == 3:
            c.delete(jid)
            live.remove(jid)
        if i % 9 == 5 and i >= 9:
            # touch an older job so short records land in later files
            old = live[len(live) // 3]
            st = c.stats_job(old)
            if st["state"] == "buried" or st["state"] == "delayed":
                c.kick_job(old)
            elif st["state"] == "ready":
                c.reserve_job(old)
                c.bury(old, 5)
    return c


@pair
def test_many_files_file_field_and_counters(servers, wal, writer, reader):
    import random

    rnd = random.Random(4096)
    w = servers(writer, wal, "-s", "4096", "-f0")
    c = run_spread(w, rnd)
    ids = range(1, 71)
    pre = snapshot(c, ids)
    live = pre.live()
    assert len({j.fields["file"] for j in live.values()}) >= 3, "workload did not spread over files"
    w.kill9()

    files = parse_dir(wal)
    assert all(bf.version == 7 for bf in files)
    model = replay(files)
    assert set(model) == set(live)
    for jid, st in live.items():
        assert model[jid].fields() == st.fields, jid
        assert model[jid].body == st.body, jid

    r = servers(reader, wal, "-s", "4096")
    post = snapshot(r, ids)
    expected = {}
    for jid, st in live.items():
        f = dict(st.fields)
        if f["state"] == "buried" and reader == "reference":
            f["buries"] += 1
        expected[jid] = (f, st)
    check_restored(post, expected)
    assert set(post.live()) == set(live)


# ---------------------------------------------------------------------------
# Buried order after a restart


@pair
def test_buried_order_after_restart(servers, wal, writer, reader):
    w = servers(writer, wal, "-f0")
    c = w.client()
    c.use("bo")
    ids = [c.put(b"job %d" % i) for i in range(6)]
    for jid in (4, 2, 5, 1, 3):
        c.reserve_job(jid)
        c.bury(jid, 10 + jid)
    c.kick_job(2)  # and bury it again: it goes to the back
    c.reserve_job(2)
    c.bury(2, 50)
    bury_order = [4, 5, 1, 3, 2]
    assert c.peek_kind("buried") == 4
    w.kill9()

    model = replay(parse_dir(wal))
    first_seen = sorted((m.first_seen, j) for j, m in model.items() if m.rec.state == 3)
    assert [j for _, j in first_seen] == [1, 2, 3, 4, 5]
    by_last_bury = sorted((m.last_bury_at, j) for j, m in model.items() if m.rec.state == 3)
    assert [j for _, j in by_last_bury] == bury_order

    r = servers(reader, wal)
    c = r.client()
    c.use("bo")
    for jid in bury_order:
        st = c.stats_job(jid)
        assert st["state"] == "buried"
        want = 1 + (jid == 2)  # job 2 was buried twice
        assert st["buries"] == want + (reader == "reference"), jid  # bug #668
    order = []
    while (head := c.peek_kind("buried")) is not None:
        order.append(head)
        assert c.kick(1) == 1
        assert len(order) <= 5
    if reader == "reference":
        assert order == [1, 2, 3, 4, 5]  # bug #668: first appearance in the log
    else:
        assert order == bury_order
    assert c.stats_job(ids[5])["state"] == "ready"


# ---------------------------------------------------------------------------
# The reference's own binlog tests (docs section 5, tests 55-60), cross-wise


@pair
def test_binlog_empty_exit(servers, wal, writer, reader):
    w = servers(writer, wal)
    assert numbers(wal) == [1]
    bf = parse_binlog(os.path.join(wal, "binlog.1"))
    assert (bf.version, bf.size, bf.records, bf.stop) == (7, DEFAULT_FILESIZE, [], "zeros")
    lock = os.path.join(wal, "lock")
    assert stat.S_IMODE(os.stat(lock).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.join(wal, "binlog.1")).st_mode) == 0o400
    w.kill9()
    r = servers(reader, wal)
    # binlog.1 held no jobs, so it is collected; a new file is started
    assert numbers(wal) == [2]
    assert r.client().put(b"x") == 1
    r.kill9()
    # every start adds a file
    w2 = servers(writer, wal)
    assert numbers(wal) == [2, 3]
    assert w2.client().stats_job(1)["state"] == "ready"


@pair
def test_preallocation_rounds_up_to_4096(servers, wal, writer, reader):
    w = servers(writer, wal, "-s", "5000")
    assert os.path.getsize(os.path.join(wal, "binlog.1")) == 8192
    c = w.client()
    c.put(b"p" * 3000)
    # the logical limit is the exact -s value: 4 + 7 + 80 + 3002 + 84 = 3177 bytes
    # are reserved by that put, so a second one (3177 more) does not fit in 5000
    assert numbers(wal) == [1]
    c.put(b"q" * 3000)
    assert numbers(wal) == [1, 2]
    assert os.path.getsize(os.path.join(wal, "binlog.2")) == 8192
    w.kill9()
    r = servers(reader, wal, "-s", "4097")
    assert numbers(wal) == [1, 2, 3]
    assert os.path.getsize(os.path.join(wal, "binlog.3")) == 8192
    assert r.client().peek(2) == b"q" * 3000


@pair
def test_binlog_basic(servers, wal, writer, reader):
    w = servers(writer, wal)
    assert w.client().put(b"a") == 1
    w.kill9()
    r = servers(reader, wal)
    c = r.client()
    assert c.peek(1) == b"a"
    c.delete(1)
    assert c.put(b"b") == 2


@pair
def test_binlog_bury(servers, wal, writer, reader):
    w = servers(writer, wal)
    c = w.client()
    assert c.put(b"a", pri=5) == 1
    c.reserve_job(1)
    c.expect(b"bury 1 0\r\n", b"BURIED\r\n")
    w.kill9()
    recs = parse_binlog(os.path.join(wal, "binlog.1")).records
    assert [(r.id, r.full, r.state, r.bury_ct, r.pri) for r in recs] == [(1, True, 1, 0, 5), (1, False, 3, 1, 0)]
    r = servers(reader, wal)
    st = r.client().stats_job(1)
    assert (st["state"], st["pri"], st["reserves"]) == ("buried", 0, 1)
    assert st["buries"] == (2 if reader == "reference" else 1)


@pair
def test_binlog_read(servers, wal, writer, reader):
    w = servers(writer, wal)
    c = w.client()
    c.use("test")
    assert c.put(b"test", 0, 0, 100) == 1
    assert c.put(b"tes1", 0, 0, 100) == 2
    assert c.watch("test") == b"WATCHING 2\r\n"
    assert c.cmd(b"reserve\r\n") == b"RESERVED 1 4\r\ntest\r\n"
    c.release(1, 1, 1)
    assert c.cmd(b"reserve\r\n") == b"RESERVED 2 4\r\ntes1\r\n"
    c.delete(2)
    w.kill9()
    recs = parse_binlog(os.path.join(wal, "binlog.1")).records
    assert [(r.id, r.full, r.state) for r in recs] == [(1, True, 1), (2, True, 1), (1, False, 4), (2, False, 0)]
    r = servers(reader, wal)
    c = r.client()
    assert c.watch("test") == b"WATCHING 2\r\n"
    assert c.cmd(b"reserve\r\n") == b"RESERVED 1 4\r\ntest\r\n"
    c.delete(1)
    assert c.cmd(b"delete 2\r\n") == b"NOT_FOUND\r\n"


@pair
def test_binlog_size_limit(servers, wal, writer, reader):
    w = servers(writer, wal, "-s", "4096", "-f0")
    c = w.client()
    acked = []
    while not os.path.exists(os.path.join(wal, "binlog.2")):
        acked.append(c.put(b"x" * 50))
        assert len(acked) < 100
    sizes = {n: os.path.getsize(p) for n, p in binlog_files(wal)}
    assert sizes == {1: 4096, 2: 4096}
    # 4 + len("default") + 80 + 52 bytes per put, plus 84 reserved for its delete
    assert len(acked) == 19
    w.kill9()
    files = parse_dir(wal)
    assert [len(bf.records) for bf in files] == [19, 0]
    assert all(r.full and r.tube == "default" for r in files[0].records)
    r = servers(reader, wal, "-s", "4096")
    c = r.client()
    for jid in acked:
        assert c.peek(jid) == b"x" * 50
    assert numbers(wal)[-1] == 3


@pair
def test_binlog_allocation(servers, wal, writer, reader):
    w = servers(writer, wal, "-s", "601")
    c = w.client()
    ids = [c.put(b"y" * 22) for _ in range(96)]
    assert ids == list(range(1, 97))
    sizes = [os.path.getsize(p) for _, p in binlog_files(wal)]
    assert len(sizes) > 10
    # closed files are cut to what they hold; open/preallocated ones are 601 rounded up
    assert all(s <= 601 or s == 4096 for s in sizes), sizes
    assert sizes[-1] == 4096
    assert set(replay(parse_dir(wal))) == set(ids)
    for jid in ids:
        c.delete(jid)
    files = parse_dir(wal)
    assert replay(files) == {}
    w.kill9()
    r = servers(reader, wal, "-s", "601")
    c = r.client()
    for jid in ids:
        assert c.stats_job(jid) is None
    # ids are not reused while a full record of them is still on disk
    assert c.put(b"z") == next_id_after_replay(files)


@pair
def test_second_server_on_locked_dir(servers, wal, writer, reader):
    w = servers(writer, wal)
    w.client().put(b"mine")
    other = servers(reader, wal, may_exit=True)
    assert other.exited is not None, "a second server started on a locked binlog dir"
    ex = other.exited
    assert ex.returncode == 10
    assert ex.stdout == b""
    assert normalize_prog(ex.stderr, reader) == (
        "PROG: walg.c:426 in waldirlock: fcntl: Resource temporarily unavailable\n"
        f"PROG: serv.c:24 in srv_acquire_wal: failed to lock wal dir {wal}\n"
    )
    # the first server is unharmed
    assert w.client().peek(1) == b"mine"
    assert numbers(wal) == [1]


# ---------------------------------------------------------------------------
# Version 5 (beanstalkd 1.4.x) files, made by hand from the documented layout


@pytest.mark.parametrize("reader", KINDS)
def test_reads_version5_file(servers, wal, reader):
    now = time.time_ns()
    write_binlog(
        os.path.join(wal, "binlog.1"),
        5,
        full_record(5, "test", b"abc", id=3, pri=1, delay=2 * NS, ttr=3 * NS, state=4,
                    created_at=now - 100 * NS, deadline_at=now + 3600 * NS),
        full_record(5, "test", BODY_ALL, id=5, pri=4, ttr=2 * NS, state=1, created_at=now - 50 * NS,
                    reserve_ct=1, timeout_ct=2, release_ct=3, bury_ct=4, kick_ct=5),
        full_record(5, "other", b"gone", id=6, state=1),
        full_record(5, "other", b"", id=7, pri=70, ttr=60 * NS, state=2, reserve_ct=1),
        short_record(5, id=6, state=0),
        short_record(5, id=5, pri=9, ttr=2 * NS, body_size=len(BODY_ALL) + 2, state=3,
                     created_at=now - 50 * NS, reserve_ct=2, timeout_ct=2, release_ct=3, bury_ct=5, kick_ct=5),
        short_record(5, id=99, state=3),  # a short record for an unknown id is ignored
    )
    parsed = parse_binlog(os.path.join(wal, "binlog.1"))
    assert parsed.version == 5 and len(parsed.records) == 7 and parsed.stop == "eof"

    r = servers(reader, wal)
    c = r.client()
    st = c.stats_job(3)
    assert {k: st[k] for k in ("tube", "state", "pri", "delay", "ttr", "reserves", "buries")} == {
        "tube": "test", "state": "delayed", "pri": 1, "delay": 2, "ttr": 3, "reserves": 0, "buries": 0,
    }
    assert abs(st["time-left"] - 3600) <= TOLERANCE
    assert abs(st["age"] - 100) <= TOLERANCE
    assert c.peek(3) == b"abc"
    st = c.stats_job(5)
    assert {k: st[k] for k in JOB_KEYS} == {
        "id": 5, "tube": "test", "state": "buried", "pri": 9, "delay": 0, "ttr": 2, "file": 1,
        "reserves": 2, "timeouts": 2, "releases": 3, "buries": 5 + (reader == "reference"), "kicks": 5,
    }
    assert c.peek(5) == BODY_ALL
    assert c.stats_job(6) is None
    st = c.stats_job(7)
    assert (st["state"], st["pri"], st["ttr"], st["reserves"]) == ("ready", 70, 60, 1)
    assert c.stats_job(99) is None
    # the reader writes version 7 from now on
    assert numbers(wal) == [1, 2]
    assert parse_binlog(os.path.join(wal, "binlog.2")).version == 7
    assert c.put(b"next") == 8


# ---------------------------------------------------------------------------
# Job ids used up

U64_MAX = (1 << 64) - 1


@pytest.mark.parametrize("reader", KINDS)
def test_a_binlog_holding_the_last_job_id(servers, wal, reader):
    """The binlog holds job 2**64 - 1, so the next id does not fit a record.
    The reference wraps to 0 (INSERTED 0) and logs a record of id 0, which
    reads as the end of its file: at the next start the jobs after it are
    gone. Ours refuses each put with INTERNAL_ERROR (as a put it cannot
    log), its body skipped, and keeps nothing that is not on disk."""
    write_binlog(os.path.join(wal, "binlog.1"), 7, full_record(7, "tb", b"last", id=U64_MAX))
    r = servers(reader, wal, "-f0")
    c = r.client()
    assert c.peek(U64_MAX) == b"last"
    first = c.cmd(b"put 0 0 60 5\r\nhello\r\n")
    second = c.cmd(b"put 0 0 60 5\r\nworld\r\n")
    stats = c.stats()
    used = c.cmd(b"list-tube-used\r\n")  # (the bodies were skipped: this is a command)
    r.kill9()
    again = servers(reader, wal, "-f0")
    c2 = again.client()
    if reader == "reference":
        assert (first, second) == (b"INSERTED 0\r\n", b"INSERTED 1\r\n")
        assert stats["current-jobs-ready"] == 3
        assert c2.peek(1) is None  # acknowledged, then lost at the restart
        return
    assert first == second == b"INTERNAL_ERROR\r\n"
    assert stats["current-jobs-ready"] == 1 and stats["total-jobs"] == 0
    assert stats["cmd-put"] == 2
    assert used == b"USING default\r\n"
    assert c2.peek(U64_MAX) == b"last"
    assert c2.stats()["current-jobs-ready"] == 1
    assert c2.cmd(b"put 0 0 60 1\r\nx\r\n") == b"INTERNAL_ERROR\r\n"


@pytest.mark.parametrize("reader", KINDS)
def test_jobs_of_the_maximum_size_and_one_less_are_recovered(servers, wal, reader):
    """COMPATIBILITY.md: the reference's recovery compares a job's size with
    its CRLF to -z, so it refuses a job of -z bytes and one of -z - 1, and
    reads nothing more of that file (the jobs after them are lost too,
    deletes included). Ours recovers every job a put accepted."""
    w = servers("ours", wal, "-z", "100", "-f0")
    c = w.client()
    ids = [c.put(b"a" * 100), c.put(b"b" * 99), c.put(b"c" * 98), c.put(b"d")]
    w.kill9()
    r = servers(reader, wal, "-z", "100")
    got = [r.client().peek(i) for i in ids]
    if reader == "reference":
        assert got == [None] * 4
    else:
        assert got == [b"a" * 100, b"b" * 99, b"c" * 98, b"d"]


# ---------------------------------------------------------------------------
# A record's ttr under a second

@pytest.mark.parametrize("reader", KINDS)
def test_a_records_ttr_under_a_second_is_kept(servers, wal, reader):
    """A put raises a ttr under a second to a second, so no server writes
    one; but a job read back from a record keeps the record's ttr, as the
    reference's recovery does, whether the job has one full record or a
    later short one too."""
    write_binlog(os.path.join(wal, "binlog.1"), 7,
                 full_record(7, "default", b"a", id=1, ttr=0, state=1),
                 full_record(7, "default", b"b", id=2, ttr=0, state=1),
                 short_record(7, id=2, ttr=0, body_size=3, state=3))
    c = servers(reader, wal).client()
    for id_ in (1, 2):
        assert b"\nttr: 0\n" in c.cmd(b"stats-job %d\r\n" % id_), id_
    assert c.cmd(b"put 0 0 0 1\r\nx\r\n") == b"INSERTED 3\r\n"
    assert b"\nttr: 1\n" in c.cmd(b"stats-job 3\r\n")

"""The put tags' state in the binlog (--extensions; binlog/ext.py): every
kind survives a restart, compaction carries it on, torn records are
dropped, and the reference reads the directory, serves the plain jobs and
skips our records."""
from __future__ import annotations


import pytest

from binlogtools import start
from fakeclock import with_binlog
from pybeanstalkd.binlog import ext as X
from pybeanstalkd.binlog import format as F


def put(h, s, tags=b"", body=b"a", pri=0, delay=0, ttr=60):
    line = b"put %d %d %d %d" % (pri, delay, ttr, len(body))
    if tags:
        line += b" " + tags
    return h.send(s, line + b"\r\n" + body + b"\r\n")


def field(yaml: bytes, key: bytes) -> bytes:
    for line in yaml.split(b"\n"):
        if line.startswith(key + b": "):
            return line[len(key) + 2:]
    raise KeyError(key)


def restart(tmp_path, h, wal, **kw):
    h.e.q.store.flush()
    wal.close()
    h2, wal2 = with_binlog(tmp_path, extensions=True, **kw)
    return h2, wal2


def test_every_kind_of_state_survives_a_restart(tmp_path):
    h, wal = with_binlog(tmp_path, extensions=True)
    s = h.conn()
    assert put(h, s, b"idp:k1 try:3", pri=100) == b"INSERTED 1\r\n"
    put(h, s, b"grp:g con:c:2")  # 2: a member
    put(h, s, b"aft:g idp:k2")  # 3: held
    put(h, s, b"idp:gone:3600")  # 4: deleted, its key cooling down
    h.send(s, b"delete 4\r\n")
    put(h, s, b"grp:g")  # 5: a member, buried
    h.send(s, b"use t2\r\n")
    put(h, s, b"idp:k1")  # 6: the same key in another tube
    h.send(s, b"use default\r\n")
    assert h.send(s, b"reserve-job 5\r\n").startswith(b"RESERVED 5 ")
    assert h.send(s, b"bury 5 0\r\n") == b"BURIED\r\n"
    put(h, s, b"idp:k1", pri=10)  # a ratchet: logged
    h2, _ = restart(tmp_path, h, wal)
    s = h2.conn()
    assert put(h2, s, b"idp:k1", pri=50) == b"INSERTED 1 READY\r\n"
    assert field(h2.send(s, b"stats-job 1\r\n"), b"pri") == b"10"
    assert put(h2, s, b"idp:k2") == b"INSERTED 3 DELAYED\r\n"
    assert put(h2, s, b"idp:gone") == b"INSERTED 4 DELETED\r\n"
    stats = h2.send(s, b"stats-group g\r\n")
    assert (field(stats, b"ready"), field(stats, b"buried"), field(stats, b"waiting-jobs")) == (
        b"1", b"1", b"1")
    job3 = h2.send(s, b"stats-job 3\r\n")
    assert field(job3, b"state") == b"delayed" and field(job3, b"time-left") == b"0"
    assert field(h2.send(s, b"stats-job 2\r\n"), b"concurrency-limit") == b"2"
    assert field(h2.send(s, b"stats-job 1\r\n"), b"max-tries") == b"3"
    # the hold ends when the members go, as before the restart
    assert h2.send(s, b"delete 5\r\n") == b"DELETED\r\n"
    assert h2.send(s, b"reserve-job 2\r\n").startswith(b"RESERVED 2 ")
    assert h2.send(s, b"delete 2\r\n") == b"DELETED\r\n"
    assert field(h2.send(s, b"stats-job 3\r\n"), b"state") == b"ready"
    assert put(h2, s, b"idp:new") == b"INSERTED 7\r\n"  # (ids go on after the last)


def test_cooldowns_end_across_a_restart_and_flush_clears_them(tmp_path):
    h, wal = with_binlog(tmp_path, extensions=True)
    s = h.conn()
    put(h, s, b"idp:a:1")
    put(h, s, b"idp:b:3600")
    h.send(s, b"delete 1\r\n")
    h.send(s, b"delete 2\r\n")
    h.now += 2 * 10**9  # (past a's end; recovery reads the wall clock: ends are stored so)
    h2, wal2 = restart(tmp_path, h, wal)
    s = h2.conn()
    assert put(h2, s, b"idp:b") == b"INSERTED 2 DELETED\r\n"
    assert h2.send(s, b"flush-tube default\r\n") == b"FLUSHED 0\r\n"
    h3, _ = restart(tmp_path, h2, wal2)
    s = h3.conn()
    got = put(h3, s, b"idp:b")  # (a new job: its id depends on which files are left)
    assert got.startswith(b"INSERTED ") and len(got.split()) == 2


def test_a_cooldown_keeps_its_file_and_compaction_carries_it_on(tmp_path):
    h, wal = with_binlog(tmp_path, filesize=4096, extensions=True)
    s = h.conn()
    put(h, s, b"idp:keep:3600")
    h.send(s, b"delete 1\r\n")
    first = wal.head.seq
    body = b"x" * 600
    for _ in range(60):  # churn: files fill, compaction moves live records on
        put(h, s, body=body)
        h.send(s, b"delete %d\r\n" % (h.e.q.ids.next - 1))
    assert wal.head.seq > first  # the first file went: the cooldown was copied on
    h2, _ = restart(tmp_path, h, wal, filesize=4096)
    assert put(h2, h2.conn(), b"idp:keep") == b"INSERTED 1 DELETED\r\n"


def test_a_torn_record_of_ours_is_dropped(tmp_path):
    msg = X.tags_msg(5, X.decode(X.tags_msg(5, _tags()))[1][1])  # type: ignore[index]
    data = X.chunks(msg + b"y" * 200)
    r = X.Reader()
    recs = [F.JobRecord(i, b"", F.JOBREC_C.unpack_from(data, i + 4), None)
            for i in range(0, len(data), 84)]
    assert r.chunk(recs[0]) is None
    assert r.chunk(recs[2]) is None  # (a chunk missing: the message is dropped)
    assert r.chunk(recs[1]) is None
    whole = [r.chunk(x) for x in recs]
    assert whole[-1] is not None and whole[-1].startswith(msg)
    with pytest.raises(ValueError):
        X.decode(b"\x09junk")
    with pytest.raises(ValueError):
        X.decode(msg[:10])


def _tags():
    from pybeanstalkd.core.puttags import parse_tags
    return parse_tags([b"idp:k:5", b"grp:g", b"aft:h", b"con:c:3", b"try:2"])


def test_tags_round_trip():
    t = _tags()
    kind, (id_, back) = X.decode(X.tags_msg(77, t))  # type: ignore[misc]
    assert (kind, id_, back) == (X.TAGS, 77, t)


# -- the reference on our directory ------------------------------------------

def test_the_reference_serves_the_plain_jobs_of_a_directory_with_tags(tmp_path):
    ours = start("ours", tmp_path, "--extensions", "-f0")
    c = ours.client()
    c.expect(b"put 0 0 60 5\r\nplain\r\n", b"INSERTED 1\r\n")
    c.expect(b"put 0 0 60 6 idp:k:3600 grp:g\r\ntagged\r\n", b"INSERTED 2\r\n")
    c.expect(b"put 0 0 60 4 aft:g\r\nheld\r\n", b"INSERTED 3\r\n")
    c.expect(b"put 0 0 60 3 idp:gone:3600\r\nxyz\r\n", b"INSERTED 4\r\n")
    c.expect(b"delete 4\r\n", b"DELETED\r\n")
    ours.kill9()
    ref = start("reference", tmp_path)
    c = ref.client()
    assert c.peek(1) == b"plain" and c.peek(2) == b"tagged"
    assert c.peek(4) is None
    st = c.stats_job(3)
    assert st["state"] == "delayed"  # held: delayed until a kick
    c.expect(b"reserve-with-timeout 0\r\n", b"RESERVED 1 5\r\nplain\r\n")
    c.expect(b"delete 1\r\n", b"DELETED\r\n")
    c.expect(b"reserve-with-timeout 0\r\n", b"RESERVED 2 6\r\ntagged\r\n")
    c.expect(b"kick-job 3\r\n", b"KICKED\r\n")
    assert b"WARN" not in ref.stderr_so_far() and b"missing" not in ref.stderr_so_far()
    ref.kill9()


def _ours_at(data: bytes) -> list[int]:
    """Offsets of the records of ours (binlog/ext.py) in a binlog file's bytes."""
    out, pos = [], 4
    while pos + 84 <= len(data):
        (namelen,) = F.FULL_HEAD.unpack_from(data, pos)
        if namelen:
            r = F.JOBREC.unpack_from(data, pos + 4 + namelen)
            if r[0] == 0:
                break
            pos += 4 + namelen + 80 + r[5]
            continue
        r = F.JobRecord(pos, b"", F.JOBREC_C.unpack_from(data, pos + 4), None)
        if r.id == 0:
            break
        if X.is_ours(r):
            out.append(pos)
        pos += 84
    return out


def _restart_warned(tmp_path):
    """An --extensions harness on the binlog in tmp_path, and what its
    recovery and its binlog said."""
    from fakeclock import OPEN_WALS, Harness
    from pybeanstalkd.core.tags import ExtState
    from pybeanstalkd.binlog.codec import TaggedCodec
    from pybeanstalkd.binlog.files import Wal
    from pybeanstalkd.binlog.recovery import recover

    warnings = []
    st = ExtState()
    wal = Wal(str(tmp_path), 10485760, warn=warnings.append, codec=TaggedCodec(st))
    OPEN_WALS.append(wal)
    h = Harness(store=wal, extensions=True, tag_state=st)
    recover(wal, h.e.q, h.e.max_job_size, h.now, warnings.append)
    return h, warnings


@pytest.mark.parametrize("damage", ["payload", "torn", "kind"])
def test_a_damaged_record_of_ours_loses_only_its_tags(tmp_path, damage):
    h, wal = with_binlog(tmp_path, extensions=True)
    s = h.conn()
    put(h, s, b"idp:" + b"k" * 150 + b" grp:g")  # 1: its tags take 3 chunks
    put(h, s, b"idp:other")  # 2
    h.e.q.store.flush()
    wal.close()
    path = wal.path_of(wal.cur.seq)
    data = bytearray(open(path, "rb").read())
    first = _ours_at(bytes(data))[0]
    if damage == "payload":  # a length byte that runs past the message
        data[first + 4 + 8 + 21] = 0xFF
    elif damage == "torn":  # the second chunk of three lost: its index no longer follows
        data[first + 84 + 4 + 4] = 0x55
    else:  # a kind we do not know
        data[first + 4 + 8] = 0x09
    open(path, "wb").write(bytes(data))
    h2, warnings = _restart_warned(tmp_path)
    c = h2.conn()
    assert h2.send(c, b"peek 1\r\n") == b"FOUND 1 1\r\na\r\n"  # the job itself is there
    assert field(h2.send(c, b"stats-job 1\r\n"), b"group") == b""  # its tags are not
    assert put(h2, c, b"idp:other") == b"INSERTED 2 READY\r\n"  # the next job's are
    assert damage == "torn" or any("a bad record of ours" in w for w in warnings)


class _Wall:
    """A wall clock set to a year (the binlog's times are wall ns)."""

    def __init__(self, year: int):
        self.at = (year - 1970) * 31_556_952 * 10**9

    def time_ns(self):
        return self.at


@pytest.mark.parametrize("year", [2026, 2050, 2120, 2200])
def test_the_longest_times_fit_their_records_in_any_year(tmp_path, year):
    """A held aft: job, a delay and a TTR of 2**32 - 1 s and an idp: TTL
    as long: every record's time is wall ns in an int64. From 2043 a held
    job's deadline (3 << 61 ns past the wall clock) is past 2**63: its
    put raised struct.error. Now its record holds the last int64, which
    recovery takes for a held job's; the other times fit until 2126, and
    past that they too hold the last int64 (due early, never at once)."""
    clock = _Wall(year)
    h, wal = with_binlog(tmp_path, extensions=True, wall=clock)
    s = h.conn()
    top = 4294967295
    assert put(h, s, b"grp:g") == b"INSERTED 1\r\n"
    assert put(h, s, b"aft:g idp:k:%d" % top, delay=top, ttr=top) == b"INSERTED 2\r\n"
    assert put(h, s, b"try:%d" % top, ttr=top) == b"INSERTED 3\r\n"
    assert put(h, s, b"idp:gone:%d" % top) == b"INSERTED 4\r\n"
    assert h.send(s, b"delete 4\r\n") == b"DELETED\r\n"
    assert h.send(s, b"reserve-job 3\r\n").startswith(b"RESERVED 3 ")
    assert h.send(s, b"release 3 0 %d\r\n" % top) == b"RELEASED\r\n"
    h.advance(100)
    assert put(h, s, b"aft:g") == b"INSERTED 5\r\n"  # held
    clock.at += 100 * 10**9  # (the wall clock went on too)
    h2, _ = restart(tmp_path, h, wal, wall=clock)
    s = h2.conn()
    # (from 2126, job 2's deadline too is the last int64: taken for held)
    held = b"1" if year < 2126 else b"2"
    assert field(h2.send(s, b"stats-group g\r\n"), b"waiting-jobs") == held
    assert put(h2, s, b"idp:gone") == b"INSERTED 4 DELETED\r\n"
    assert put(h2, s, b"idp:k") == b"INSERTED 2 DELAYED\r\n"
    for jid in (2, 3) if year < 2126 else (3,):
        left = int(field(h2.send(s, b"stats-job %d\r\n" % jid), b"time-left"))
        if year < 2126:
            assert top - 101 <= left <= top - 99, (jid, left)
        else:  # (the last int64: due before its time, never at once)
            assert 0 < left <= top, (jid, left)
    assert field(h2.send(s, b"stats-job 5\r\n"), b"state") == b"delayed"
    assert h2.send(s, b"delete 1\r\n") == b"DELETED\r\n"  # the group completes
    assert field(h2.send(s, b"stats-job 5\r\n"), b"state") == b"ready"


def _append_ready_job(h, wal, id_):
    """Close the binlog with a ready job's full record of id_ after its
    last record, as no put of ours writes it (an id of the extensions'
    records, or the last id a job may have)."""
    import os

    from pybeanstalkd.core.job import READY, Job

    j = Job(id_, h.e.q.tubes.tube(b"default"), 0, 0, 60 * 10**9, b"b\r\n", h.now)
    j.state = READY
    h.e.q.store.flush()
    at = wal.used(wal.cur)
    path = wal.path_of(wal.cur.seq)
    wal.close()
    os.chmod(path, 0o600)
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(F.encode(j, True, wal.wall_offset))


def test_a_job_record_with_an_id_of_ours_is_skipped_and_puts_go_on(tmp_path):
    """With --extensions, ids from 2**63 on name records of ours: a job's
    full record with one (forged, or its id's top bit changed on disk) is
    skipped, said, and its id is not gone on from: the ids past it are
    beyond the extensions' bound, where every put answered INTERNAL_ERROR."""
    h, wal = with_binlog(tmp_path, extensions=True)
    s = h.conn()
    assert put(h, s) == b"INSERTED 1\r\n"
    _append_ready_job(h, wal, (1 << 63) + 5)
    h2, warnings = _restart_warned(tmp_path)
    s = h2.conn()
    assert put(h2, s, body=b"c") == b"INSERTED 2\r\n"
    assert h2.send(s, b"peek 1\r\n") == b"FOUND 1 1\r\na\r\n"
    assert any("an id of the extensions' records" in w for w in warnings)


def test_flush_tube_at_the_top_of_the_ids_is_logged_and_read_back(tmp_path):
    """With --extensions a job's id stops below 2**63 (higher ones name
    records of ours). A binlog holding the last one: puts are refused, and
    a flush-tube's record, which holds the next id, is written and read
    back (it once could not be packed when the next id passed 2**64 - 1)."""
    from pybeanstalkd.core.tags import EXT_ID

    h, wal = with_binlog(tmp_path, extensions=True)
    s = h.conn()
    assert put(h, s, b"idp:k") == b"INSERTED 1\r\n"
    _append_ready_job(h, wal, EXT_ID - 1)
    h2, warnings = _restart_warned(tmp_path)
    assert h2.e.q.ids.next == EXT_ID and h2.e.q.ids.used_up()
    s = h2.conn()
    assert put(h2, s, body=b"c") == b"INTERNAL_ERROR\r\n"
    assert h2.send(s, b"reserve-with-timeout 0\r\n") == b"RESERVED 1 1\r\na\r\n"
    assert h2.send(s, b"flush-tube default\r\n") == b"FLUSHED 2\r\n"
    assert h2.e.q.ext.keys == {}
    h2.e.q.store.flush()
    h2.e.q.store.close()
    h3, warnings = _restart_warned(tmp_path)
    s = h3.conn()
    assert h3.send(s, b"peek %d\r\n" % (EXT_ID - 1)) == b"NOT_FOUND\r\n"
    assert h3.send(s, b"peek 1\r\n") == b"NOT_FOUND\r\n"
    assert h3.e.q.ids.next == EXT_ID and not any("bad" in w for w in warnings)

"""A put's record (format.encode's fresh path: its packers in a list by
the tube name's length, its last four bytes one constant) is the v7
record the general path writes, for every legal name length and past the
longest; and a -f0 binlog of puts into tubes of names 1 and 200 bytes long
(deletes between them) is read back by our recovery and by the reference."""
from __future__ import annotations

import os
import struct
import pytest

from binlogtools import KINDS, parse_binlog
from fakeclock import synced, with_binlog
from pybeanstalkd.binlog import format as F
from pybeanstalkd.core.job import Job, Tube
from pybeanstalkd.core.protocol import NS


def general(j, wall_offset: int) -> bytes:
    """The record as the general path lays it out (format._FULL's head),
    every field packed: no field left out, the state and mark apart."""
    name, body = j.tube.name, j.body
    head = struct.Struct("<i%ds%s" % (len(name), F.JOBREC_C.format[1:]))
    return head.pack(len(name), name, j.id, j.pri, 0, j.times.delay, j.times.ttr, len(body), 0,
                     j.created + wall_offset, 0, bytes(20), F.READY, F.MARK) + body


def test_a_puts_record_for_each_name_length(tmp_path):
    h, wal = with_binlog(tmp_path)
    s = h.conn()
    off = wal.wall_offset
    # (twice over: the second pass reads each length's packer as kept)
    for n in [*range(1, F.MAX_NAME + 1), *range(F.MAX_NAME, 0, -1)]:
        name = (b"t" * n) if n % 2 else (b"x" + b"-" * (n - 1))
        assert h.send(s, b"use %s\r\n" % name) == b"USING %s\r\n" % name
        out = h.send(s, b"put %d 0 %d 3\r\nb%02d\r\n" % (n * 7, n + 1, n % 100))
        jid = int(out.split()[1])
        j = h.e.q.jobs[jid]
        rec = F.encode(j, True, off)
        assert rec == general(j, off), n
        assert rec[-len(j.body) - 4:-len(j.body)] == b"\x01pyb"
    # (a name past MAX_NAME, never a tube's: the packer is made, not kept)
    long = Job(j.id + 1, Tube(b"z" * (F.MAX_NAME + 1)), 9, 0, 60 * NS, b"long\r\n", h.now)
    long.state = F.READY  # (as a put's)
    assert F.encode(long, True, off) == general(long, off)
    assert len(F._FRESH) == F.MAX_NAME + 1
    # and the file holds those bytes, read as section 4.2 says
    synced(wal)
    recs = parse_binlog(os.path.join(str(tmp_path), "binlog.1")).records
    assert [(r.tube, r.id, r.state, r.body) for r in recs] == [
        (h.e.q.jobs[r.id].tube.name.decode(), r.id, 1, h.e.q.jobs[r.id].body) for r in recs]
    assert len(recs) == 2 * F.MAX_NAME


@pytest.mark.parametrize("reader", KINDS)
def test_a_f0_binlog_of_short_and_longest_names_is_read_back(servers, wal, reader):
    w = servers("ours", wal, "-f0")
    c = w.client()
    tubes = ["a", "n" * 199 + "z", "b", "m" * 200]
    ids, gone = {}, set()
    for i in range(12):
        t = tubes[i % len(tubes)]
        c.use(t)
        ids[c.put(b"job %d" % i, pri=i)] = (t, b"job %d" % i, i)
        if i % 5 == 4:
            jid = min(set(ids) - gone)
            c.delete(jid)
            gone.add(jid)
    w.kill9()
    r = servers(reader, wal)
    rc = r.client()
    for jid, (t, body, pri) in ids.items():
        if jid in gone:
            assert rc.peek(jid) is None, jid
            continue
        assert rc.peek(jid) == body, jid
        st = rc.stats_job(jid)
        assert (st["tube"], st["pri"], st["state"]) == (t, pri, "ready"), jid

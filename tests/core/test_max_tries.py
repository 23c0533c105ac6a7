"""--max-tries N: the release or TTR expiry that makes a job's Nth try
buries it instead of putting it back, logged like a bury; without the flag
nothing changes (stats-job's fields included)."""
from fakeclock import Harness, with_binlog
from pybeanstalkd.core import jobmoves
from pybeanstalkd.core.outcome import Outcome


def reserve(h, s):
    out = h.send(s, b"reserve-with-timeout 0\r\n")
    assert out.startswith(b"RESERVED"), out
    return int(out.split()[1])


def test_the_nth_release_buries_the_job():
    h = Harness(max_tries=3)
    s = h.conn()
    jid = int(h.send(s, b"put 5 0 60 1\r\nx\r\n").split()[1])
    for _ in range(2):
        assert reserve(h, s) == jid
        assert h.send(s, b"release %d 7 0\r\n" % jid) == b"RELEASED\r\n"
    assert reserve(h, s) == jid
    assert h.send(s, b"release %d 9 0\r\n" % jid) == b"BURIED\r\n"  # the third try
    assert h.e.q.tubes.named[b"default"].tries_used_up == 1
    assert h.send(s, b"bury %d 9\r\n" % jid) == b"NOT_FOUND\r\n"  # (buried already)
    st = h.send(s, b"stats-job %d\r\n" % jid)
    assert b"state: buried\n" in st and b"pri: 9\n" in st
    assert b"releases: 3\n" in st and b"buries: 1\n" in st
    assert st.endswith(b"tries: 3\nmax-tries: 3\n\r\n")
    assert h.send(s, b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"
    # A kick gives it one more try.
    assert h.send(s, b"kick 1\r\n") == b"KICKED 1\r\n"
    assert reserve(h, s) == jid
    assert h.send(s, b"release %d 9 0\r\n" % jid) == b"BURIED\r\n"


def test_ttr_expiries_count_as_tries():
    h = Harness(max_tries=2)
    s = h.conn()
    jid = int(h.send(s, b"put 0 0 1 1\r\nx\r\n").split()[1])
    assert reserve(h, s) == jid
    h.advance(2)  # the first expiry: back to ready
    assert b"state: ready\n" in h.send(s, b"stats-job %d\r\n" % jid)
    assert reserve(h, s) == jid
    h.advance(2)  # the second: buried
    st = h.send(s, b"stats-job %d\r\n" % jid)
    assert b"state: buried\n" in st and b"timeouts: 2\n" in st and b"tries: 2\n" in st
    assert b"current-jobs-buried: 1\n" in h.send(s, b"stats\r\n")
    assert h.e.q.tubes.named[b"default"].tries_used_up == 1  # (/metrics: ..._tries_used_up_total)


def test_without_the_flag_nothing_changes():
    h = Harness()
    s = h.conn()
    jid = int(h.send(s, b"put 0 0 60 1\r\nx\r\n").split()[1])
    for _ in range(5):
        reserve(h, s)
        assert h.send(s, b"release %d 0 0\r\n" % jid) == b"RELEASED\r\n"
    assert h.send(s, b"stats-job %d\r\n" % jid).endswith(b"kicks: 0\n\r\n")
    assert jobmoves.release(h.e.q, s, 999, 0, 0, h.now) is Outcome.NOT_FOUND


def test_a_job_buried_for_its_tries_stays_buried_after_a_restart(tmp_path):
    h, wal = with_binlog(tmp_path, max_tries=1)
    s = h.conn()
    a = int(h.send(s, b"put 0 0 1 1\r\na\r\n").split()[1])
    b = int(h.send(s, b"put 0 0 60 1\r\nb\r\n").split()[1])
    assert reserve(h, s) == a
    h.advance(2)  # a: its TTR, its only try
    assert reserve(h, s) == b
    assert h.send(s, b"release %d 0 0\r\n" % b) == b"BURIED\r\n"
    wal.flush()
    h2, _ = with_binlog(tmp_path, max_tries=1)  # (a restart: recovered from the files)
    c = h2.conn()
    for jid in (a, b):
        st = h2.send(c, b"stats-job %d\r\n" % jid)
        assert b"state: buried\n" in st and b"tries: 1\n" in st


def test_the_tries_outlive_a_restart(tmp_path):
    """Releases and TTR expiries are logged with --max-tries (the reference
    logs neither), so a restart does not give a failing job fresh tries."""
    h, wal = with_binlog(tmp_path, max_tries=3)
    s = h.conn()
    jid = int(h.send(s, b"put 0 0 1 1\r\nx\r\n").split()[1])
    reserve(h, s)
    assert h.send(s, b"release %d 0 0\r\n" % jid) == b"RELEASED\r\n"
    reserve(h, s)
    h.advance(2)  # an expiry: the second try
    wal.flush()
    h2, _ = with_binlog(tmp_path, max_tries=3)
    c = h2.conn()
    assert b"tries: 2\n" in h2.send(c, b"stats-job %d\r\n" % jid)
    reserve(h2, c)
    assert h2.send(c, b"release %d 0 0\r\n" % jid) == b"BURIED\r\n"

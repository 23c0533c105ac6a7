"""--extensions on the wire: tuber's transcripts (its tests/integration.rs)
against a real server with the flag, and, without it, the same lines
answered byte for byte as the reference answers them."""
import pytest

from support import Client, Server, ours_argv, require_reference

# Lines the extensions give a meaning to, and a put with a tag.
LINES = [b"reserve-batch 2\r\n", b"reserve-batch\r\n", b"delete-batch 1 2\r\n",
         b"delete-batch\r\n", b"flush-tube default\r\n", b"flush-tube\r\n", b"drain\r\n",
         b"undrain\r\n", b"put 0 0 30 5 idp:x\r\nhello\r\n", b"watch default 5\r\n",
         b"stats-group g\r\n", b"reserve-mode fifo\r\n",
         b"put 0 0 30 5 con:k:2 grp:g aft:h try:3\r\nhello\r\n",
         b"put 0 0 30 5 idp:x:60\r\nhello\r\n", b"put 0 0 30 5 idp:\r\nhello\r\n",
         b"peek-reserved\r\n", b"stats-group\r\n"]


def replies(srv, lines):
    c = Client(srv.connect())
    out = []
    for line in lines:
        c.send(line)
        out.append(c.reply())
        if line.startswith(b"put ") and out[-1] == b"BAD_FORMAT\r\n":
            out.append(c.reply())  # (the body, read as a command line)
    c.send(b"quit\r\n")
    c.close()
    return out


def test_without_the_flag_every_line_is_answered_as_the_reference_answers_it():
    ref = Server([require_reference()])
    ours = Server(ours_argv())
    try:
        assert replies(ours, LINES) == replies(ref, LINES)
    finally:
        ref.stop()
        ours.stop()


@pytest.fixture(scope="module")
def ext():
    srv = Server(ours_argv(), ["--extensions"])
    yield srv
    srv.stop()


def test_tubers_tag_transcripts(ext):
    c = Client(ext.connect())
    assert c.cmd(b"use wire-tags\r\n") == b"USING wire-tags\r\n"
    first = c.cmd(b"put 0 0 60 5 idp:key1\r\nhello\r\n")
    assert first.startswith(b"INSERTED ")
    jid = int(first.split()[1])
    assert c.cmd(b"put 0 0 60 5 idp:key1\r\nworld\r\n") == b"INSERTED %d READY\r\n" % jid
    assert c.cmd(b"put 0 0 60 1 foo:bar\r\na\r\n") == b"BAD_FORMAT\r\n"
    assert c.reply() == b"UNKNOWN_COMMAND\r\n"  # (the body, read as a command line)
    assert c.cmd(b"delete %d\r\n" % jid) == b"DELETED\r\n"
    c.close()


def test_tubers_batch_transcripts(ext):
    c = Client(ext.connect())
    assert c.cmd(b"use batch\r\n") == b"USING batch\r\n"
    ids = [int(c.cmd(b"put 0 0 60 5\r\n%s\r\n" % body).split()[1]) for body in (b"hello", b"world")]
    c.cmd(b"watch batch\r\n")
    c.cmd(b"ignore default\r\n")
    c.send(b"reserve-batch 10\r\n")
    assert c.line() == b"RESERVED_BATCH 2\r\n"
    assert [c.reply() for _ in ids] == [b"RESERVED %d 5\r\nhello\r\n" % ids[0],
                                       b"RESERVED %d 5\r\nworld\r\n" % ids[1]]
    assert c.cmd(b"delete-batch %d %d 99999\r\n" % tuple(ids)) == b"DELETED_BATCH 2 1\r\n"
    assert c.cmd(b"reserve-batch 1\r\n") == b"RESERVED_BATCH 0\r\n"
    assert c.cmd(b"reserve-batch 1001\r\n") == b"BAD_FORMAT\r\n"
    c.close()


def test_tubers_flush_and_drain_transcripts(ext):
    c = Client(ext.connect())
    c.cmd(b"use f\r\n")
    c.cmd(b"put 0 0 60 1\r\na\r\n")
    c.cmd(b"put 0 3600 60 1\r\nb\r\n")
    assert c.cmd(b"flush-tube f\r\n") == b"FLUSHED 2\r\n"
    assert c.cmd(b"flush-tube nonexistent\r\n") == b"NOT_FOUND\r\n"
    assert c.cmd(b"drain\r\n") == b"DRAINING\r\n"
    assert c.cmd(b"put 0 0 60 1\r\na\r\n") == b"DRAINING\r\n"
    assert c.cmd(b"undrain\r\n") == b"NOT_DRAINING\r\n"
    assert c.cmd(b"put 0 0 60 1\r\na\r\n").startswith(b"INSERTED ")
    c.close()


def test_tubers_watch_weight_and_reserve_mode_transcripts(ext):
    c = Client(ext.connect())
    assert c.cmd(b"watch foo 4\r\n") == b"WATCHING 2\r\n"
    assert c.cmd(b"watch foo 2\r\n") == b"WATCHING 2\r\n"
    assert c.cmd(b"watch foo 0\r\n") == b"BAD_FORMAT\r\n"
    assert c.cmd(b"reserve-mode weighted-fair\r\n") == b"USING weighted-fair\r\n"
    assert c.cmd(b"reserve-mode default\r\n") == b"BAD_FORMAT\r\n"
    c.cmd(b"use foo\r\n")
    jid = int(c.cmd(b"put 0 0 60 1\r\nx\r\n").split()[1])
    assert c.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED %d 1\r\nx\r\n" % jid
    c.close()

"""Property-based robustness tests against one long-lived server.

(a) Arbitrary bytes -- NULs, CR/LF fragments, very long lines, huge declared put
    sizes, valid command fragments mixed with garbage, sent in random splits --
    on a throw-away connection that is then closed (normally, abruptly with RST,
    half-closed, or in the middle of a job body).  Afterwards the server must
    still be alive and a pre-existing "witness" connection must still get
    correct answers.
(b) Stream sync: after a garbage prefix of complete CRLF-terminated lines
    (shorter than 224 bytes, no bare CR), every garbage line gets exactly one
    reply and a following valid command gets its correct reply.

Target selection: PYBEANSTALKD_TEST_TARGET=ours (default) or =reference.
"""
from __future__ import annotations

import re
import socket
import struct

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from support import Client, Server, drain_pipes, target_argv


WITNESS_TUBE = "witness-7f3a"

FUZZ_SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)






@pytest.fixture(scope="module")
def server():
    srv = Server(target_argv())
    drain_pipes(srv.proc)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def witness(server):
    w = Client(server.connect(timeout=10))
    assert w.cmd(f"use {WITNESS_TUBE}\r\n".encode()) == f"USING {WITNESS_TUBE}\r\n".encode()
    assert w.cmd(f"watch {WITNESS_TUBE}\r\n".encode()) == b"WATCHING 2\r\n"
    assert w.cmd(b"ignore default\r\n") == b"WATCHING 1\r\n"
    yield w
    w.close()


def check_witness(server, w: Client) -> None:
    assert server.proc.poll() is None, f"server died with status {server.proc.returncode}"
    reply = w.cmd(b"put 0 0 10 7\r\nwitness\r\n")
    m = re.fullmatch(rb"INSERTED (\d+)\r\n", reply)
    assert m, reply
    jid = int(m.group(1))
    assert w.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED %d 7\r\nwitness\r\n" % jid
    assert w.cmd(b"delete %d\r\n" % jid) == b"DELETED\r\n"
    reply = w.cmd(b"stats\r\n")
    head, _, body = reply.partition(b"\r\n")
    assert head.startswith(b"OK ")
    assert int(head[3:]) == len(body) - 2
    assert body.startswith(b"---\n") and body.endswith(b"\n\r\n")
    stats = yaml.safe_load(body[:-2])
    assert isinstance(stats, dict)
    assert stats["current-connections"] >= 1
    assert w.cmd(b"list-tube-used\r\n") == f"USING {WITNESS_TUBE}\r\n".encode()


# --------------------------------------------------------------------------
# (a) garbage, then close


FRAGMENTS = [
    b"put 0 0 0 5\r\nhello\r\n",
    b"put 0 0 0 5\r\n",
    b"put 0 0 0 4294967295\r\n",
    b"put 0 0 0 4294967296\r\n",
    b"put 0 0 0 99999999\r\n",
    b"put 1 2 3 ",
    b"put 4294967295 0 1 0\r\n\r\n",
    b"put 0 0 0 1\r\nab\r\n",
    b"reserve-with-timeout 0\r\n",
    b"reserve-with-timeout 1\r\n",
    b"reserve\r\n",
    b"reserve-job 1\r\n",
    b"use fuzz\r\n",
    b"watch fuzz\r\n",
    b"ignore default\r\n",
    b"ignore fuzz\r\n",
    b"stats\r\n",
    b"stats-tube default\r\n",
    b"stats-job 1\r\n",
    b"list-tubes\r\n",
    b"list-tubes-watched\r\n",
    b"list-tube-used\r\n",
    b"peek-ready\r\n",
    b"peek-delayed\r\n",
    b"peek-buried\r\n",
    b"peek 1\r\n",
    b"kick 10\r\n",
    b"kick -1\r\n",
    b"kick-job 1\r\n",
    b"delete 1\r\n",
    b"release 1 0 0\r\n",
    b"bury 1 0\r\n",
    b"touch 1\r\n",
    b"pause-tube fuzz 1\r\n",
    b"pause-tubefuzz 0\r\n",
    b"quit\r\n",
    b"quitxyz",
    b"\r\n",
    b"\r",
    b"\n",
    b"\x00",
    b" ",
    b"\xff\xfe",
    b"use " + b"a" * 200 + b"\r\n",
    b"use " + b"a" * 201 + b"\r\n",
]

long_lines = st.builds(
    lambda n, c, end: c * n + end,
    st.integers(min_value=200, max_value=20000),
    st.sampled_from([b"x", b"\x00", b" ", b"a\n", b"put "]),
    st.sampled_from([b"", b"\r\n", b"\r", b"\n"]),
)

put_headers = st.builds(
    lambda nums, tail: b"put " + b" ".join(b"%d" % n for n in nums) + tail,
    st.lists(st.integers(min_value=0, max_value=2**64), min_size=0, max_size=5),
    st.sampled_from([b"\r\n", b" \r\n", b"", b"x\r\n"]),
)

piece = st.one_of(
    st.binary(max_size=64),
    st.sampled_from(FRAGMENTS),
    put_headers,
    long_lines,
)


@st.composite
def sessions(draw):
    data = b"".join(draw(st.lists(piece, max_size=12)))
    n_cuts = draw(st.integers(min_value=0, max_value=min(6, len(data))))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), min_size=n_cuts, max_size=n_cuts)))
    parts, prev = [], 0
    for c in cuts + [len(data)]:
        parts.append(data[prev:c])
        prev = c
    mode = draw(st.sampled_from(["close", "abrupt", "half", "midbody", "read"]))
    return parts, mode


def _abort(sock: socket.socket) -> None:
    """Close with RST instead of FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _read_until_eof(sock: socket.socket, limit: float) -> bool:
    sock.settimeout(limit)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except TimeoutError:
        return False
    except OSError:
        return True  # reset by the server counts as closed


@FUZZ_SETTINGS
@given(session=sessions())
def test_garbage_then_close(server, witness, session):
    parts, mode = session
    event(f"close mode: {mode}")
    sock = server.connect(timeout=2)
    try:
        try:
            for p in parts:
                if p:
                    sock.sendall(p)
            if mode == "midbody":
                sock.sendall(b"\r\nput 0 0 10 100\r\n" + b"z" * 37)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            # the server may legitimately stop reading (blocked reserve, quit)
            pass
        if mode == "abrupt":
            _abort(sock)
        elif mode == "half":
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            # after a half-close the server must finish up and close its side
            assert _read_until_eof(sock, 5.0), "server kept a half-closed connection open"
        elif mode == "read":
            sock.settimeout(0.02)
            try:
                while sock.recv(65536):
                    pass
            except (TimeoutError, OSError):
                pass
    finally:
        sock.close()
    check_witness(server, witness)


# --------------------------------------------------------------------------
# (b) stream sync after garbage lines

# Words that start real commands, so some garbage lines reach the argument parsers.
WORDS = [
    b"", b"use ", b"watch ", b"ignore ", b"peek ", b"peek-ready", b"peek-delayed",
    b"peek-buried", b"delete ", b"release ", b"bury ", b"kick ", b"kick-job ",
    b"touch ", b"stats", b"stats-job ", b"stats-tube ", b"list-tubes",
    b"list-tube-used", b"list-tubes-watched", b"reserve-job ", b"PUT ", b"put",
    b"pause-tub", b" ", b"\x00",
]

# Lines that would block, close the connection, consume a body, or pause a shared tube.
EXCLUDED_PREFIXES = (b"quit", b"put ", b"pause-tube")


def _line_ok(line: bytes) -> bool:
    if line.startswith(EXCLUDED_PREFIXES):
        return False
    if line.startswith(b"reserve") and not line.startswith(b"reserve-job "):
        return False
    return True


garbage_line = (
    st.builds(
        lambda w, rest: (w + rest).replace(b"\r", b""),
        st.sampled_from(WORDS),
        st.one_of(
            st.binary(max_size=40),
            st.from_regex(rb"\A[ 0-9a-z\-]{0,30}\Z"),
            st.sampled_from([b"0", b"1", b"18446744073709551616", b"-1", b"default", b"a b"]),
        ),
    )
    .filter(_line_ok)
)


@FUZZ_SETTINGS
@given(lines=st.lists(garbage_line, min_size=1, max_size=6), data=st.data())
def test_stream_sync_after_garbage_lines(server, witness, lines, data):
    prefix = b"".join(line + b"\r\n" for line in lines)
    if len(prefix) >= 224:
        lines = lines[:1]
        prefix = lines[0] + b"\r\n"
    assert len(prefix) < 224 and b"\r" not in prefix.replace(b"\r\n", b"")
    marker = data.draw(st.integers(min_value=0, max_value=10**9), label="marker")
    probe = b"use sync-%d\r\n" % marker
    expected = b"USING sync-%d\r\n" % marker

    c = Client(server.connect(timeout=5))
    try:
        payload = prefix + probe
        cut = data.draw(st.integers(min_value=0, max_value=len(payload)), label="cut")
        c.send(payload[:cut])
        if cut < len(payload):
            c.send(payload[cut:])
        replies = [c.reply() for _ in range(len(lines))]
        for r in replies:
            assert r.endswith(b"\r\n")
            assert r != expected
        assert c.reply() == expected, (prefix, replies)
        # still in sync afterwards
        assert c.cmd(b"list-tube-used\r\n") == expected
    finally:
        c.close()
    check_witness(server, witness)

"""Slices over real sockets: a big pipelined write handled a chunk per loop
pass, and a big kick answered once, in order, after its last slice.

These check replies, not timing (the stall figures are benchmarks). They hold
for the reference too (PYBEANSTALKD_TEST_TARGET=reference).
"""
from __future__ import annotations

import socket
import threading

import pytest

from support import Client, Server, drain_pipes, target_argv

N = 5000  # many slices of the kick, many chunks of the write


@pytest.fixture
def srv():
    s = Server(target_argv())
    drain_pipes(s.proc)
    yield s
    s.stop()


def read_replies(sock: socket.socket, n_lines: int) -> bytes:
    buf = b""
    while buf.count(b"\r\n") < n_lines:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        buf += chunk
    return buf


def test_big_pipeline_then_half_close_gets_every_reply(srv):
    s = srv.connect(timeout=30)
    data = b"put 0 0 60 1\r\nx\r\n" * N + b"list-tube-used\r\n"
    sender = threading.Thread(target=lambda: (s.sendall(data), s.shutdown(socket.SHUT_WR)))
    sender.start()
    got = read_replies(s, N + 1)
    sender.join()
    want = b"".join(b"INSERTED %d\r\n" % i for i in range(1, N + 1)) + b"USING default\r\n"
    assert got == want
    assert s.recv(10) == b""  # and then closed
    s.close()


def test_big_kick_answers_once_in_order_while_others_are_served(srv):
    a = srv.connect(timeout=30)
    a.sendall(b"put 0 1000 60 1\r\nx\r\n" * N)
    assert read_replies(a, N).count(b"INSERTED") == N
    other = Client(srv.connect(timeout=30))
    a.sendall(b"kick %d\r\nlist-tube-used\r\nkick 5\r\n" % N)
    # Served while (or after) the kick runs; never an error.
    assert other.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
    assert read_replies(a, 3) == b"KICKED %d\r\nUSING default\r\nKICKED 0\r\n" % N
    assert other.cmd(b"stats-tube default\r\n").count(b"current-jobs-ready: %d\n" % N) == 1
    a.close()
    other.close()


def test_close_with_many_reservations_returns_them_all(srv):
    a = srv.connect(timeout=30)
    a.sendall(b"put 0 0 60 1\r\nx\r\n" * N)
    assert read_replies(a, N).count(b"INSERTED") == N
    a.sendall(b"reserve-with-timeout 0\r\n" * N)
    assert read_replies(a, 2 * N).count(b"RESERVED") == N
    a.close()
    other = Client(srv.connect(timeout=30))
    for _ in range(200):  # the close is seen, then its slices run
        st = other.cmd(b"stats\r\n")
        if b"current-jobs-ready: %d\n" % N in st:
            break
        threading.Event().wait(0.01)
    assert b"current-jobs-reserved: 0\n" in st and b"current-jobs-ready: %d\n" % N in st
    assert other.cmd(b"reserve-with-timeout 0\r\n").startswith(b"RESERVED 1 1\r\n")
    other.close()

"""The accept loop's pace (server/accept.py): one client a loop pass while
the server is idle, as the reference's epoll order makes it; a burst of
new clients at once while it is busy, so that they do not wait for as
many long passes."""
import socket

import pytest

from pybeanstalkd.server import accept


class Loop:
    """What the Acceptor asks of the event loop: watching its socket."""

    def add_reader(self, fd, cb):
        pass

    def remove_reader(self, fd):
        pass


@pytest.fixture
def pending():
    """A listening socket with 10 clients waiting in its backlog."""
    srv = socket.create_server(("127.0.0.1", 0), backlog=64)
    srv.setblocking(False)
    clients = [socket.create_connection(srv.getsockname()) for _ in range(10)]
    yield srv
    for c in clients:
        c.close()
    srv.close()


def run(srv, monkeypatch, cpu_spent):
    """One readable event, cpu_spent seconds of CPU after the acceptor was
    made: how many clients it accepts."""
    clock = [100.0]
    monkeypatch.setattr(accept.time, "thread_time", lambda: clock[0])
    got = []
    a = accept.Acceptor(Loop(), srv, got.append)
    a.start()
    clock[0] += cpu_spent
    a._on_readable()
    for c in got:
        c.close()
    return len(got)


def test_an_idle_server_accepts_one_client_a_pass(pending, monkeypatch):
    assert run(pending, monkeypatch, 0.0001) == accept.BATCH == 1


def test_a_busy_server_accepts_the_waiting_clients_at_once(pending, monkeypatch):
    assert run(pending, monkeypatch, accept.BUSY_CPU_S * 2) == 10  # (all: under BUSY_BATCH)


def test_max_connections_holds_in_a_burst(pending, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(accept.time, "thread_time", lambda: clock[0])
    got = []
    a = accept.Acceptor(Loop(), pending, got.append, max_conns=4)
    a.start()
    clock[0] += 1.0
    a._on_readable()
    assert len(got) == 4 and not a.reading  # (paused at the limit)
    for c in got:
        c.close()

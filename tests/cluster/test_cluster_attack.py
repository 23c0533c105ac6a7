"""Attacks on the peer link, against real nodes and an etcd, in clear and
with TLS (--tls-cert without --tls-client-ca: the attacker completes a TLS
handshake with a self-signed certificate of its own):

- a process listening on a stopped node's registered peer address gets
  the leader's hello and nothing else: no frame, no job's body; the
  leader's report says why it has no link to that node;
- a relay: a process on a stopped node's (c's) address hands the leader
  b's nonce as c's, and the leader's hello to b, then a forged snapshot:
  b refuses the hello (made for c), and its jobs stay the leader's;
- a connection to a peer port that never sends anything is closed at the
  handshake's limit (link.HANDSHAKE_S);
- a man in the middle of a link (in clear, or ending TLS on both sides
  without --tls-client-ca) that announces a huge frame to the follower is
  dropped at its header: the follower holds no more than a chunk unchecked.
"""
import json
import os
import socket
import ssl
import time
import urllib.error
import urllib.request

import pytest

from fakeclock import Harness
from support import Client
from test_cluster_e2e import etcd, isr, leader_status, start, wait_for  # noqa: F401 (etcd: a fixture)
from tlstools import tls_args, tls_connect
from pybeanstalkd.cluster import frame as F
from pybeanstalkd.cluster.apply import snapshot_parts
from pybeanstalkd.cluster.link import HANDSHAKE_S

MODES = ["plain", "tls"]


class Mode:
    """How the nodes run (in clear, or with TLS), and how to talk to them."""

    def __init__(self, mode: str, certs):
        self.tls = mode == "tls"
        self.certs = certs
        self.extra = tls_args(certs) if self.tls else []
        if self.tls:  # the attacker's own: a self-signed certificate, not the cluster's
            self.server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.server_ctx.load_cert_chain(str(certs / "other-ca.pem"),
                                            str(certs / "other-ca.key"))
            self.client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            self.client_ctx.check_hostname = False
            self.client_ctx.verify_mode = ssl.CERT_NONE

    def cmd(self, srv, line: bytes) -> bytes:
        sock = tls_connect(srv, self.certs) if self.tls else srv.connect()
        with sock:
            return Client(sock).cmd(line)

    def dial(self, port: int) -> socket.socket:
        """The attacker connects to a peer port (TLS done, if TLS)."""
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        return self.client_ctx.wrap_socket(s) if self.tls else s

    def dial_when_up(self, port: int) -> socket.socket:
        """dial(), once the node listens there: a node registers in etcd
        (and so the leader may dial it) before its peer port is open."""
        def up():
            try:
                return self.dial(port)
            except ConnectionRefusedError:
                return None
        return wait_for(up)

    def listen(self, port: int) -> "Listener":
        return Listener(port, self.server_ctx if self.tls else None)


class Listener:
    """A process on a stopped node's peer address."""

    def __init__(self, port: int, ctx=None):
        self.sock = socket.create_server(("127.0.0.1", port))
        self.ctx = ctx

    def accept(self) -> socket.socket:
        """The leader's next connection (TLS done, if TLS)."""
        self.sock.settimeout(10)
        conn, _ = self.sock.accept()
        conn.settimeout(5)
        return self.ctx.wrap_socket(conn, server_side=True) if self.ctx else conn

    def close(self):
        self.sock.close()


def read_message(sock, parse, limit: int, what: str):
    """Bytes from sock until parse (frame.py's) finds a whole message, as a
    node reads it (at most limit bytes): (it, its bytes)."""
    buf = F.HandshakeBuffer(parse, limit)
    raw = b""
    while True:
        data = sock.recv(4096)
        assert data, f"closed before the {what}"
        raw += data
        got = buf.feed(data)
        if got is not None:
            assert got[1] == b"", f"more than the {what}"
            return got[0], raw


def the_rest(sock, seconds: float = 5) -> tuple[bytes, bool]:
    """All sock receives until the peer closes it (or seconds pass): (the
    bytes, whether it was closed)."""
    got = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sock.settimeout(max(0.01, end - time.monotonic()))
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return got, False
        except (ConnectionResetError, ssl.SSLError):  # (closed with our bytes unread, or TLS cut)
            return got, True
        if not data:
            return got, True
        got += data
    return got, False


def get(srv, path: str):
    """(status, JSON) of a GET on the node's HTTP side."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (srv.http, path), timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, None


def link_error(leader, name: str) -> str:
    rows = get(leader, "/api/v1/cluster")[1]["nodes"]
    return next(r for r in rows if r["name"] == name).get("link_error") or ""


def leads(srv) -> bool:
    try:
        return leader_status(srv) == 200
    except OSError:  # (its HTTP side is not up yet)
        return False


def in_isr(etcd, cluster, names):  # noqa: F811
    # (in whatever order the nodes caught up)
    wait_for(lambda: sorted((isr(etcd, cluster) or (0, []))[1]) == sorted(names), timeout=20)


def forged_snapshot(epoch: int) -> bytes:
    """A snapshot of one made-up job (id 4242, body FORGED), as frames are
    laid out, with a made-up tag: the attacker has no session key."""
    h = Harness()
    h.e.q.ids.next = 4242
    assert h.send(h.conn(), b"put 0 0 60 6\r\nFORGED\r\n") == b"INSERTED 4242\r\n"
    records = b"".join(snapshot_parts(h.e.q, 0))
    return F.encode(epoch, 0, records, snapshot=True) + os.urandom(F.TAG)


def stop_all(*nodes):
    for node in nodes:
        if node is not None:
            node.stop()


@pytest.mark.parametrize("mode", MODES)
def test_a_process_on_a_stopped_nodes_address_gets_the_hello_and_nothing_else(
        tmp_path, etcd, certs, mode):  # noqa: F811
    m = Mode(mode, certs)
    cluster = "listen-" + mode
    a = start(tmp_path, etcd, "a", cluster, extra=m.extra)
    b = listener = None
    try:
        wait_for(lambda: leads(a))
        b = start(tmp_path, etcd, "b", cluster, extra=m.extra)
        in_isr(etcd, cluster, ["a", "b"])
        bodies = [b"confidential-%02d" % i for i in range(20)]
        for body in bodies:
            assert m.cmd(a, b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body)).startswith(b"INSERTED")

        b.stop()  # still registered in etcd, at its peer address
        listener = m.listen(b.peer)
        conn = listener.accept()  # the leader's next attempt
        # It says it is b, with a nonce; it cannot make b's proof.
        conn.sendall(F.encode_greeting(os.urandom(32), "b"))
        hello, raw = read_message(conn, F.parse_hello, F.MAX_HELLO, "hello")
        assert (hello.leader, hello.target) == ("a", "b")
        conn.sendall(F.PROOF.pack(F.PROOF_MAGIC, os.urandom(32)))
        rest, closed = the_rest(conn)
        conn.close()
        # The leader's hello, nothing else: no frame, no job's body.
        assert closed and rest == b"", rest[:100]
        assert not any(body in raw for body in bodies)
        why = wait_for(lambda: link_error(a, "b") if "proof" in link_error(a, "b") else None)
        assert why == "its proof is wrong: it does not know the cluster's secret", why
        assert (get(a, "/api/v1/cluster")[1]["nodes"][1]["connected"]) is False
        # The leader goes on; its log said why once.
        assert m.cmd(a, b"put 0 0 60 1\r\nx\r\n").startswith(b"INSERTED")
        lines = wait_for(lambda: [line for line in (tmp_path / "a.log").read_text().splitlines()
                                  if "replication to b: its proof is wrong" in line])
        assert len(lines) == 1, lines
    finally:
        if listener is not None:
            listener.close()
        stop_all(a, b)


@pytest.mark.parametrize("mode", MODES)
def test_a_hello_relayed_to_another_node_is_refused_and_its_forged_snapshot_not_taken(
        tmp_path, etcd, certs, mode):  # noqa: F811
    m = Mode(mode, certs)
    cluster = "relay-" + mode
    a = start(tmp_path, etcd, "a", cluster, extra=m.extra)
    b = c = listener = None
    try:
        wait_for(lambda: leads(a))
        b = start(tmp_path, etcd, "b", cluster, extra=m.extra)
        c = start(tmp_path, etcd, "c", cluster, extra=m.extra)
        in_isr(etcd, cluster, ["a", "b", "c"])
        ids = []
        for i in range(5):
            r = m.cmd(a, b"put 0 0 60 6\r\nreal-%d\r\n" % i)
            assert r.startswith(b"INSERTED")
            ids.append(int(r.split()[1]))
        wait_for(lambda: get(b, "/api/v1/stats")[1]["stats"]["current-jobs-ready"] == 5)

        c.stop()
        listener = m.listen(c.peer)
        to_b = m.dial(b.peer)
        greeting, _ = read_message(to_b, F.parse_greeting, F.MAX_GREETING, "greeting")
        assert greeting.name == "b"
        to_a = listener.accept()
        # b's nonce, handed to the leader as c's; the leader's hello, to b.
        to_a.sendall(F.encode_greeting(greeting.nonce, "c"))
        hello, raw = read_message(to_a, F.parse_hello, F.MAX_HELLO, "hello")
        assert hello.target == "c"
        to_b.sendall(raw)
        try:
            to_b.sendall(forged_snapshot(hello.epoch))
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            pass  # (b closed it already)
        # b sends no proof, and closes the connection.
        rest, closed = the_rest(to_b)
        assert closed and rest == b"", rest
        to_b.close()
        to_a.close()
        assert wait_for(lambda: [line for line in (tmp_path / "b.log").read_text().splitlines()
                                 if "its hello was made for node 'c'" in line]) != []
        # b's jobs are the leader's, still: none forged, none gone.
        assert get(b, "/api/v1/jobs/4242")[0] == 404
        for i in ids:
            assert get(b, "/api/v1/jobs/%d" % i)[0] == 200
        assert get(b, "/api/v1/stats")[1]["stats"]["current-jobs-ready"] == 5
        # And its link to the leader goes on: a new job reaches it.
        assert m.cmd(a, b"put 0 0 60 5\r\nafter\r\n").startswith(b"INSERTED")
        wait_for(lambda: get(b, "/api/v1/stats")[1]["stats"]["current-jobs-ready"] == 6)
        assert get(b, "/api/v1/jobs/4242")[0] == 404
    finally:
        if listener is not None:
            listener.close()
        stop_all(a, b, c)


@pytest.mark.parametrize("mode", MODES)
def test_a_silent_connection_to_a_peer_port_is_closed_at_the_handshakes_limit(
        tmp_path, etcd, certs, mode):  # noqa: F811
    m = Mode(mode, certs)
    cluster = "silent-" + mode
    a = start(tmp_path, etcd, "a", cluster, extra=m.extra)
    b = None
    try:
        wait_for(lambda: leads(a))
        b = start(tmp_path, etcd, "b", cluster, extra=m.extra)
        in_isr(etcd, cluster, ["a", "b"])
        # Connected, then nothing sent: not even a TLS hello, or (TLS done,
        # or in clear) no link hello after the node's greeting.
        # (1.5 s apart: the node says at most one refusal a second)
        silent = [(time.monotonic(), socket.create_connection(("127.0.0.1", b.peer), timeout=5))]
        if m.tls:
            time.sleep(1.5)
            silent.append((time.monotonic(), m.dial(b.peer)))
        for t0, s in silent:
            rest, closed = the_rest(s, HANDSHAKE_S + 3)
            took = time.monotonic() - t0
            assert closed, f"still open after {took:.1f} s"
            assert HANDSHAKE_S - 0.5 < took < HANDSHAKE_S + 1.5, took
            if s is silent[-1][1]:
                assert F.parse_greeting(rest)[0].name == "b"  # (the node's greeting, then nothing)
            s.close()
        # (the log reaches its file through a pump thread: a moment later)
        wait_for(lambda: "did not complete its handshake within 5 s" in (tmp_path / "b.log").read_text(),
                 timeout=5)
        assert (isr(etcd, cluster) or (0, []))[1] == ["a", "b"]  # the real link was not disturbed
    finally:
        stop_all(a, b)


@pytest.mark.parametrize("mode", MODES)
def test_a_man_in_the_middle_cannot_make_a_follower_hold_a_forged_frame(
        tmp_path, etcd, certs, mode):  # noqa: F811
    # b advertises the attacker's address; the attacker relays the
    # handshake (with TLS but no --tls-client-ca, it ends TLS on both
    # sides), then announces a frame of 512 MiB to b and sends it 4 MiB of
    # it: b must drop the link at the header, not hold what no tag vouches for.
    from support import free_port

    m = Mode(mode, certs)
    cluster = "mitm-" + mode
    middle = free_port()
    a = start(tmp_path, etcd, "a", cluster, extra=m.extra)
    b = listener = None
    try:
        wait_for(lambda: leads(a))
        listener = m.listen(middle)
        b = start(tmp_path, etcd, "b", cluster,
                  extra=[*m.extra, "--peer-advertise", "127.0.0.1:%d" % middle])
        to_a = listener.accept()
        to_b = m.dial_when_up(b.peer)
        _, raw = read_message(to_b, F.parse_greeting, F.MAX_GREETING, "greeting")
        to_a.sendall(raw)
        _, raw = read_message(to_a, F.parse_hello, F.MAX_HELLO, "hello")
        to_b.sendall(raw)
        _, raw = read_message(to_b, F.parse_proof, F.PROOF.size, "proof")
        to_a.sendall(raw)  # the link is up: b takes the leader's frames from here
        to_b.sendall(F.HEAD.pack(F.MAGIC, 1 << 40, 1, 512 << 20))
        sent, piece = 0, b"\0" * (64 << 10)
        try:
            while sent < 4 << 20:
                to_b.sendall(piece)
                sent += len(piece)
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            pass  # (b closed it)
        rest, closed = the_rest(to_b, 3)
        assert closed and rest == b"", (sent, rest[:100])
        why = wait_for(lambda: [line for line in (tmp_path / "b.log").read_text().splitlines()
                                if "was dropped" in line])
        assert f"of records, over {F.MAX_CHUNK}" in why[0], why
        assert get(b, "/api/v1/stats")[1]["stats"]["current-jobs-ready"] == 0
    finally:
        if listener is not None:
            listener.close()
        stop_all(a, b)

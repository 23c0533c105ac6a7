"""Replication links over TLS: with --tls-cert a node's peer port
speaks TLS with the node's certificate, and a leader links to it with the
same; with --tls-client-ca each side checks the other's against that CA."""
import re
import signal
import socket
import time

from support import Client
from test_cluster_e2e import etcd, isr, leader_status, start, wait_for  # noqa: F401 (etcd: a fixture)
from tlstools import client_ctx, tls_args, tls_connect


def leads(srv) -> bool:
    try:
        return leader_status(srv) == 200
    except OSError:  # (its HTTP side is not up yet)
        return False


def cmd(srv, certs, line: bytes) -> bytes:
    with tls_connect(srv, certs, "client") as s:
        return Client(s).cmd(line)


def first_bytes(sock) -> bytes:
    sock.settimeout(1)
    try:
        return sock.recv(64)
    except TimeoutError:
        return b""


def test_links_are_tls_and_a_job_survives_the_leader_over_them(tmp_path, etcd, certs):  # noqa: F811
    extra = tls_args(certs, mtls=True)
    a = start(tmp_path, etcd, "a", "tls", extra=extra)
    b = None
    try:
        wait_for(lambda: leads(a))
        b = start(tmp_path, etcd, "b", "tls", extra=extra)
        wait_for(lambda: (isr(etcd, "tls") or (0, []))[1] == ["a", "b"])
        assert cmd(a, certs, b"put 0 0 60 8\r\nover tls\r\n") == b"INSERTED 1\r\n"

        # In clear, b's peer port says nothing (a TLS server waits for a
        # hello); inside TLS, with a certificate of the CA, the link's nonce.
        with socket.create_connection(("127.0.0.1", b.peer), timeout=2) as s:
            assert first_bytes(s) == b""
        with client_ctx(certs, "client").wrap_socket(
                socket.create_connection(("127.0.0.1", b.peer), timeout=2),
                server_hostname="localhost") as s:
            assert first_bytes(s).startswith(b"pbn4")

        # The job reached b over the link: b takes over and has it.
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        wait_for(lambda: leads(b), timeout=20)
        assert cmd(b, certs, b"peek 1\r\n") == b"FOUND 1 8\r\nover tls\r\n"
    finally:
        for node in (a, b):
            if node is not None:
                node.stop()


def test_a_node_whose_certificate_the_other_does_not_trust_gets_no_link_it_is_said_once_and_a_new_ca_file_mends_it(
        tmp_path, etcd, certs):  # noqa: F811
    a = start(tmp_path, etcd, "a", "tls2", extra=tls_args(certs, mtls=True))
    c = None
    c_ca = tmp_path / "c-ca.pem"
    c_ca.write_bytes((certs / "other-ca.pem").read_bytes())
    try:
        wait_for(lambda: leads(a))
        # c trusts another CA only: it refuses a's certificate.
        c = start(tmp_path, etcd, "c", "tls2", extra=tls_args(certs) + ["--tls-client-ca", str(c_ca)])
        a_log, c_log = tmp_path / "a.log", tmp_path / "c.log"
        wait_for(lambda: "replication to c:" in a_log.read_text())
        time.sleep(2)  # many link attempts (one each 0.3 s), each refused
        assert (isr(etcd, "tls2") or (0, []))[1] == ["a"]
        # Each side says why, once (not once per attempt).
        stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "  # (a node's lines say when)
        # (c registers, then opens its port: a link tried in between is
        # refused, a cause of its own, said once too)
        lines = [line for line in a_log.read_text().splitlines()
                 if "replication to c:" in line and "Connection refused" not in line]
        assert len(lines) == 1 and re.fullmatch(
            stamp + r"replication to c: closed before its nonce \(does it trust this node's"
            r" certificate\? see its log\)", lines[0]), lines
        lines = [line for line in c_log.read_text().splitlines() if "TLS handshake" in line]
        assert len(lines) == 1 and re.fullmatch(
            stamp + r"replication: a link from 127\.0\.0\.1:\d+ failed its TLS handshake:"
            r" CERTIFICATE_VERIFY_FAILED", lines[0]), lines
        assert cmd(a, certs, b"put 0 0 60 1\r\nx\r\n") == b"INSERTED 1\r\n"  # a goes on alone

        # c is given the right CA, without a restart: the next link is made.
        c_ca.write_bytes((certs / "ca.pem").read_bytes())
        wait_for(lambda: (isr(etcd, "tls2") or (0, []))[1] == ["a", "c"], timeout=20)
    finally:
        for node in (a, c):
            if node is not None:
                node.stop()

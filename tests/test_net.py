"""Connections, TLS and token auth on the real server: --max-connections,
running out of descriptors, clients that do not read, --tls-cert/--tls-key
(--tls-client-ca for mTLS) and --auth-tokens (beanstalkd-rs's `auth`)."""
import os
import resource
import select
import socket
import ssl
import subprocess
import time

import greenstalk
import pytest

from support import Client, Server, drain_pipes, ours_argv, require_reference, sock_path


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def answered(sock: socket.socket, timeout: float) -> bytes | None:
    """The bytes the server sent within timeout, or None if nothing came."""
    r, _, _ = select.select([sock], [], [], timeout)
    return sock.recv(65536) if r else None


def log_lines(srv: Server) -> list[str]:
    """Stop the server and return its stdout lines."""
    srv.proc.terminate()
    out, err = srv.proc.communicate(timeout=10)
    srv.stderr = err.decode()
    return out.decode().splitlines()


# --- --max-connections -------------------------------------------------------

def test_max_connections_holds_new_clients_until_one_closes():
    srv = Server(ours_argv(), ["-V", "--max-connections", "2"])
    try:
        a, b = Client(srv.connect()), Client(srv.connect())
        assert a.cmd(b"use x\r\n") == b"USING x\r\n"
        # The third connects (the kernel's backlog) but is not served...
        c = srv.connect()
        c.sendall(b"list-tube-used\r\n")
        assert answered(c, 0.5) is None
        # ...while those already in are served as usual.
        assert b.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
        assert a.cmd(b"list-tube-used\r\n") == b"USING x\r\n"
        a.close()
        assert answered(c, 5) == b"USING default\r\n"
        assert b"current-connections: 2\n" in Client(c).cmd(b"stats\r\n")
    finally:
        lines = log_lines(srv)
    assert "max-connections: 2" in lines
    assert "accept paused: 2 connections (--max-connections)" in lines
    assert "accept resumed: 1 connections" in lines


def test_without_the_flag_there_is_no_limit_line():
    srv = Server(ours_argv(), ["-V"])
    conns = [srv.connect() for _ in range(20)]
    for s in conns:
        s.sendall(b"list-tube-used\r\n")
    assert all(answered(s, 5) == b"USING default\r\n" for s in conns)
    assert not any(l.startswith(("max-connections", "accept paused")) for l in log_lines(srv))


# --- out of descriptors --------------------------------------------------------

def test_out_of_descriptors_no_busy_loop_and_accepting_resumes():
    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))

    srv = Server.__new__(Server)
    srv.unix_path = None
    from support import free_port
    srv.port = free_port()
    srv.argv = ours_argv() + ["-V", "-l", "127.0.0.1", "-p", str(srv.port)]
    srv.proc = subprocess.Popen(srv.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=low_limit)
    srv._wait_listening()
    try:
        served, stuck = [], []
        for _ in range(80):
            s = srv.connect()
            s.sendall(b"list-tube-used\r\n")
            if answered(s, 0.3) == b"USING default\r\n":
                served.append(s)
            else:
                stuck.append(s)
                if len(stuck) == 5:
                    break
        assert len(stuck) == 5 and 20 < len(served) < 48
        assert srv.proc.poll() is None
        # At the limit: no busy loop.
        c0 = cpu_seconds(srv.proc.pid)
        time.sleep(1.0)
        assert cpu_seconds(srv.proc.pid) - c0 < 0.1
        # Those in are still served.
        served[0].sendall(b"use a\r\n")
        assert answered(served[0], 5) == b"USING a\r\n"
        # Descriptors freed: the waiting clients are served, and new ones too.
        for s in served[-8:]:
            s.close()
        for s in stuck:
            assert answered(s, 5) == b"USING default\r\n"
        fresh = srv.connect()
        fresh.sendall(b"list-tube-used\r\n")
        assert answered(fresh, 5) == b"USING default\r\n"
    finally:
        lines = log_lines(srv)
    assert srv.stderr == ""
    # One line each way, not one per retry.
    assert sum(l.startswith("accept paused: Too many open files") for l in lines) == 1
    assert sum(l.startswith("accept resumed: descriptors free again") for l in lines) == 1


# --- TLS -------------------------------------------------------------------------

def _make_certs(d):
    """A CA with two server certificates and a client certificate, and a
    client certificate from another CA, written as PEM files into d."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def write(name, key, cert):
        (d / f"{name}.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        (d / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def make(cn, issuer=None, ca=False, san=None):
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        ikey, iname = (key, subject) if issuer is None else issuer
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(iname)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(hours=1))
             .not_valid_after(now + datetime.timedelta(days=2))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            b = b.add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                                critical=False)
        else:
            b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ikey.public_key()), critical=False)
        if san is not None:
            b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
        cert = b.sign(ikey, hashes.SHA256())
        write(cn, key, cert)
        return key, subject

    ca = make("ca", ca=True)
    other = make("other-ca", ca=True)
    for name in ("server", "server2"):  # (server2: its successor, for a rotation)
        make(name, ca, san=[x509.DNSName("localhost"),
                            x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    make("client", ca)
    make("stranger", other)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """Made with the cryptography package for this run, never committed."""
    d = tmp_path_factory.mktemp("certs")
    _make_certs(d)
    return d


def tls_args(certs, mtls=False):
    args = ["--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key")]
    if mtls:
        args += ["--tls-client-ca", str(certs / "ca.pem")]
    return args


def client_ctx(certs, cert=None):
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    if cert is not None:
        ctx.load_cert_chain(str(certs / f"{cert}.pem"), str(certs / f"{cert}.key"))
    return ctx


def tls_connect(srv, certs, cert=None) -> ssl.SSLSocket:
    return client_ctx(certs, cert).wrap_socket(srv.connect(), server_hostname="localhost")


def test_tls_greenstalk_put_reserve_delete(certs):
    srv = Server(ours_argv(), ["-V"] + tls_args(certs))
    try:
        # greenstalk takes an already connected socket: here a TLS one.
        with greenstalk.Client(tls_connect(srv, certs), use="t", watch="t") as c:
            jid = c.put("hello over tls")
            job = c.reserve(timeout=5)
            assert (job.id, job.body) == (jid, "hello over tls")
            c.delete(job)
            assert c.stats_tube("t")["total-jobs"] == 1
    finally:
        lines = log_lines(srv)
    assert f"tls: certificate {certs / 'server.pem'}; no client certificates" in lines
    assert srv.stderr == ""


def test_plaintext_client_on_a_tls_port_costs_one_closed_connection(certs):
    srv = Server(ours_argv(), ["-V"] + tls_args(certs))
    try:
        good = Client(tls_connect(srv, certs))
        assert good.cmd(b"use a\r\n") == b"USING a\r\n"
        plain = srv.connect()
        plain.sendall(b"stats\r\n")
        assert answered(plain, 5) == b""  # closed, nothing sent back
        assert good.cmd(b"list-tube-used\r\n") == b"USING a\r\n"
        stats = good.cmd(b"stats\r\n")
        assert b"current-connections: 1\n" in stats
    finally:
        lines = log_lines(srv)
    assert any(l.startswith("tls ") and "handshake failed" in l for l in lines)
    assert srv.stderr == ""  # no traceback


def test_mtls_accepts_a_client_certificate_from_the_ca(certs):
    srv = Server(ours_argv(), ["-V"] + tls_args(certs, mtls=True))
    try:
        c = Client(tls_connect(srv, certs, "client"))
        assert c.cmd(b"put 0 0 60 2\r\nhi\r\n") == b"INSERTED 1\r\n"
        assert c.cmd(b"reserve\r\n") == b"RESERVED 1 2\r\nhi\r\n"
    finally:
        lines = log_lines(srv)
    assert (f"tls: certificate {certs / 'server.pem'}; client certificates required, "
            f"signed by {certs / 'ca.pem'}") in lines


@pytest.mark.parametrize("cert", [None, "stranger"])
def test_mtls_refuses_no_certificate_and_another_cas(certs, cert):
    srv = Server(ours_argv(), ["-V"] + tls_args(certs, mtls=True))
    try:
        try:
            s = tls_connect(srv, certs, cert)
            # TLS 1.3: the server's verdict arrives after the client's handshake.
            s.sendall(b"stats\r\n")
            s.settimeout(5)
            assert s.recv(100) == b""
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            pass
        ok = Client(tls_connect(srv, certs, "client"))
        assert b"total-connections: 1\n" in ok.cmd(b"stats\r\n")
    finally:
        lines = log_lines(srv)
    assert any("handshake failed" in l for l in lines)
    assert srv.stderr == ""


def test_tls_on_a_unix_socket(certs, tmp_path):
    srv = Server(ours_argv(), tls_args(certs), unix_path=sock_path(tmp_path))
    try:
        s = client_ctx(certs).wrap_socket(srv.connect(), server_hostname="localhost")
        with greenstalk.Client(s) as c:
            jid = c.put("unix")
            assert c.reserve(timeout=5).id == jid
    finally:
        srv.stop()


def test_unusable_certificate_exits_with_a_message(certs):
    p = subprocess.run(ours_argv() + ["-l", "127.0.0.1", "-p", "0", "--tls-cert",
                                      str(certs / "client.pem"), "--tls-key",
                                      str(certs / "server.key")],
                       capture_output=True, timeout=20)
    assert p.returncode == 1
    assert b"--tls-cert" in p.stderr and b"Traceback" not in p.stderr


def test_a_certificate_rotates_without_a_restart(certs, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "cert.key"
    cert.write_bytes((certs / "server.pem").read_bytes())
    key.write_bytes((certs / "server.key").read_bytes())

    def shown(name):  # a new connection gets the certificate of certs/name.pem
        with tls_connect(srv, certs) as s:
            return s.getpeercert(binary_form=True) == ssl.PEM_cert_to_DER_cert(
                (certs / f"{name}.pem").read_text())

    srv = Server(ours_argv(), ["-V", "--tls-cert", str(cert), "--tls-key", str(key)])
    try:
        old = Client(tls_connect(srv, certs))
        assert old.cmd(b"put 0 0 60 1\r\nx\r\n") == b"INSERTED 1\r\n"
        assert shown("server")
        # The new key first: it is not the certificate's, so the pair in
        # use stays, and that is said once, however many handshakes follow.
        key.write_bytes((certs / "server2.key").read_bytes())
        for _ in range(2):
            time.sleep(1.2)  # (the files are looked at once a second at most)
            assert shown("server")
        cert.write_bytes((certs / "server2.pem").read_bytes())
        time.sleep(1.2)
        assert shown("server2")
        assert old.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 1\r\nx\r\n"
    finally:
        lines = log_lines(srv)
    assert srv.stderr.count("what was loaded before stays in use") == 1, srv.stderr
    assert f"--tls-cert {cert} / --tls-key {key}: " in srv.stderr
    assert f"tls: reloaded {cert}, {key}" in lines


# --- --auth-tokens (beanstalkd-rs's `auth`) -------------------------------------

GOOD, OTHER, WRONG = b"s3cr3t-Token-4b1d", b"second-valid-token", b"wr0ng-Token-77aa"


@pytest.fixture
def tokens(tmp_path):
    p = tmp_path / "tokens"
    p.write_bytes(b"# tokens\n\n  " + GOOD + b"  \n" + OTHER + b"\n")
    p.chmod(0o600)
    return str(p)


def closed_after(c: Client, data: bytes, timeout=5.0) -> bytes:
    """Send data; return everything received until the server closes."""
    c.send(data)
    c.sock.settimeout(timeout)
    out = b""
    while True:
        chunk = c.sock.recv(65536)
        if not chunk:
            return out
        out += chunk


def test_auth_is_an_unknown_command_without_the_flag():
    ref = Server([require_reference()])
    ours = Server(ours_argv())
    try:
        for srv in (ref, ours):
            c = Client(srv.connect())
            assert c.cmd(b"auth " + GOOD + b"\r\n") == b"UNKNOWN_COMMAND\r\n"
            assert c.cmd(b"auth\r\n") == b"UNKNOWN_COMMAND\r\n"
            assert c.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
    finally:
        ref.stop()
        ours.stop()


def test_auth_then_commands_pipelined(tokens):
    srv = Server(ours_argv(), ["--auth-tokens", tokens])
    try:
        c = Client(srv.connect())
        c.send(b"auth " + GOOD + b"\r\nput 0 0 60 1\r\nx\r\n")
        assert c.line() == b"AUTHENTICATED\r\n"
        assert c.line() == b"INSERTED 1\r\n"
        o = Client(srv.connect())
        assert o.cmd(b"auth " + OTHER + b"\r\n") == b"AUTHENTICATED\r\n"
        assert o.cmd(b"reserve\r\n") == b"RESERVED 1 1\r\nx\r\n"
    finally:
        srv.stop()


@pytest.mark.parametrize("data", [
    b"auth " + WRONG + b"\r\n", b"auth " + GOOD[:-1] + b"\r\n", b"auth " + GOOD + b"x\r\n",
    b"auth \r\n", b"auth  \r\n", b"auth " + WRONG + b"\r\nstats\r\n",
    b"stats\r\n", b"use foo\r\n", b"no-such-command\r\n", b"\r\n", b"auth\r\n",
    b"put 0 0 60 5\r\nhello\r\n", b"put 0 0 60 100000\r\n", b"a" * 1000 + b"\r\n",
])
def test_anything_but_the_right_token_first_gets_unauthorized_and_a_close(tokens, data):
    srv = Server(ours_argv(), ["--auth-tokens", tokens])
    try:
        assert closed_after(Client(srv.connect()), data) == b"UNAUTHORIZED\r\n"
        ok = Client(srv.connect())
        assert ok.cmd(b"auth " + GOOD + b"\r\n") == b"AUTHENTICATED\r\n"
        stats = ok.cmd(b"stats\r\n")
        # Nothing reached the engine: not the connection, not a command.
        for line in (b"total-connections: 1\n", b"cmd-stats: 1\n", b"cmd-put: 0\n",
                     b"cmd-use: 0\n", b"current-tubes: 1\n", b"total-jobs: 0\n"):
            assert line in stats
    finally:
        srv.stop()


def test_quit_before_auth_closes_silently_and_idle_ones_are_not_counted(tokens):
    srv = Server(ours_argv(), ["--auth-tokens", tokens])
    try:
        assert closed_after(Client(srv.connect()), b"quit\r\n") == b""
        idle = [srv.connect() for _ in range(5)]
        ok = Client(srv.connect())
        assert ok.cmd(b"auth " + GOOD + b"\r\n") == b"AUTHENTICATED\r\n"
        stats = ok.cmd(b"stats\r\n")
        assert b"current-connections: 1\n" in stats and b"total-connections: 1\n" in stats
        for s in idle:
            s.close()
    finally:
        srv.stop()


def test_auth_again_right_changes_nothing_wrong_closes_and_releases(tokens):
    srv = Server(ours_argv(), ["--auth-tokens", tokens])
    try:
        c = Client(srv.connect())
        assert c.cmd(b"auth " + GOOD + b"\r\n") == b"AUTHENTICATED\r\n"
        assert c.cmd(b"auth " + OTHER + b"\r\n") == b"AUTHENTICATED\r\n"
        assert c.cmd(b"put 0 0 60 1\r\nx\r\n") == b"INSERTED 1\r\n"
        assert c.cmd(b"reserve\r\n") == b"RESERVED 1 1\r\nx\r\n"
        assert closed_after(c, b"auth " + WRONG + b"\r\n") == b"UNAUTHORIZED\r\n"
        ok = Client(srv.connect())
        assert ok.cmd(b"auth " + GOOD + b"\r\n") == b"AUTHENTICATED\r\n"
        stats = ok.cmd(b"stats\r\n")
        assert b"current-jobs-ready: 1\n" in stats and b"current-connections: 1\n" in stats
    finally:
        srv.stop()


def test_tokens_never_reach_the_log_and_auth_works_over_tls(tokens, certs):
    srv = Server(ours_argv(), ["-VV", "--auth-tokens", tokens] + tls_args(certs))
    try:
        c = Client(tls_connect(srv, certs))
        assert c.cmd(b"auth " + GOOD + b"\r\n") == b"AUTHENTICATED\r\n"
        assert c.cmd(b"auth " + GOOD + b"\r\n") == b"AUTHENTICATED\r\n"
        assert closed_after(Client(tls_connect(srv, certs)), b"auth " + WRONG + b"\r\n") \
            == b"UNAUTHORIZED\r\n"
        assert closed_after(c, b"auth " + WRONG + b"x\r\n") == b"UNAUTHORIZED\r\n"
    finally:
        lines = log_lines(srv)
    text = "\n".join(lines) + srv.stderr
    for secret in (GOOD, OTHER, WRONG, b"s3cr3t", b"wr0ng"):
        assert secret.decode() not in text
    assert "auth: 2 tokens from %s; only `auth` is served before it" % tokens in lines
    assert any(l.endswith(": authenticated") for l in lines)
    assert any(l.endswith(": failed: wrong token") for l in lines)


@pytest.mark.parametrize("content, message", [
    (b"# nothing\n\n", b"no token in the file"),
    (b"a b\n", b"no white space"),
    (b"x" * 218 + b"\n", b"at most 217 bytes"),
])
def test_unusable_token_files_exit_with_a_message(tmp_path, content, message):
    p = tmp_path / "tokens"
    p.write_bytes(content)
    r = subprocess.run(ours_argv() + ["-l", "127.0.0.1", "-p", "0", "--auth-tokens", str(p)],
                       capture_output=True, timeout=20)
    assert r.returncode == 1 and message in r.stderr


def test_tokens_rotate_without_a_restart(tokens):
    srv = Server(ours_argv(), ["-V", "--auth-tokens", tokens])
    try:
        c = Client(srv.connect())
        assert c.cmd(b"auth " + GOOD + b"\r\n") == b"AUTHENTICATED\r\n"
        with open(tokens, "wb") as f:  # (mode 600 kept)
            f.write(b"new-Token-9c2e\n")
        time.sleep(1.2)  # (the file is looked at once a second at most)
        assert closed_after(Client(srv.connect()), b"auth " + GOOD + b"\r\n") \
            == b"UNAUTHORIZED\r\n"
        assert Client(srv.connect()).cmd(b"auth new-Token-9c2e\r\n") == b"AUTHENTICATED\r\n"
        assert c.cmd(b"put 0 0 60 1\r\nx\r\n") == b"INSERTED 1\r\n"  # its connection goes on
        # A file that does not load keeps the tokens in use.
        with open(tokens, "wb") as f:
            f.write(b"# none yet\n")
        time.sleep(1.2)
        assert Client(srv.connect()).cmd(b"auth new-Token-9c2e\r\n") == b"AUTHENTICATED\r\n"
    finally:
        lines = log_lines(srv)
    assert srv.stderr.count(
        f"--auth-tokens {tokens}: no token in the file; what was loaded before stays in use") == 1
    assert f"auth: reloaded {tokens}" in lines
    assert "new-Token" not in "\n".join(lines) + srv.stderr


def test_a_token_file_others_can_read_gets_a_warning(tmp_path, tokens):
    os.chmod(tokens, 0o644)
    srv = Server(ours_argv(), ["--auth-tokens", tokens])
    assert Client(srv.connect()).cmd(b"auth " + GOOD + b"\r\n") == b"AUTHENTICATED\r\n"
    log_lines(srv)
    assert "readable by group or others; chmod 600 it" in srv.stderr
    assert "tokens travel in clear text" in srv.stderr


# --- clients that do not read --------------------------------------------------

def test_engine_stops_a_read_at_out_limit_and_goes_on_later():
    from pybeanstalkd.core.engine import OUT_LIMIT, Engine

    e = Engine(1)
    s = e.connect()
    body = b"x" * 60000
    e.data(s, b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body), 1)
    s.out.clear()
    e.dirty.clear()
    e.data(s, b"peek 1\r\n" * 1000, 1)
    first = sum(map(len, s.out))
    assert OUT_LIMIT < first < OUT_LIMIT + 3 * 60100  # not 1000 bodies
    assert e.backlog == [s]
    served = len(s.out) // 2
    while e.backlog:
        e.backlog.clear()
        s.out.clear()
        e.more(s, 1)
        served += len(s.out) // 2
    assert served == 1000 and s.plen == 0  # every peek answered, in order, once


def test_a_client_that_never_reads_holds_a_bounded_buffer():
    srv = Server(ours_argv())
    drain_pipes(srv.proc)
    try:
        c = Client(srv.connect())
        body = b"x" * 60000
        assert c.cmd(b"put 0 0 60 60000\r\n" + body + b"\r\n") == b"INSERTED 1\r\n"
        base = rss(srv.proc.pid)
        hog = srv.connect()
        hog.setblocking(False)
        chunk = b"peek 1\r\n" * 8192  # each 8 bytes asks for 60 kB
        sent, idle_since = 0, time.monotonic()
        while time.monotonic() - idle_since < 1.0 and sent < 100 << 20:
            try:
                sent += hog.send(chunk)
                idle_since = time.monotonic()
            except BlockingIOError:
                time.sleep(0.01)
        # The server stopped reading it; others are still served.
        assert c.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
        assert rss(srv.proc.pid) - base < 16 << 20  # before: 470 MB
        assert sent < 64 << 20
    finally:
        srv.stop()


class FakeTransport:
    def __init__(self):
        self.out = b""
        self.closed = False
        self.protocol = None

    def write(self, data):
        self.out += data

    def close(self):
        self.closed = True

    def set_protocol(self, p):
        self.protocol = p

    def get_extra_info(self, name):
        return None


class FakeSrv:
    verbose = 0


def test_auth_gate_byte_by_byte_and_its_timeout():
    import asyncio

    from pybeanstalkd.server.auth import AuthGate, Tokens

    class Recorder:
        def __init__(self):
            self.data = b""

        def connection_made(self, t):
            pass

        def data_received(self, d):
            self.data += d

    async def run():
        released = []
        made = []

        def make():
            made.append(Recorder())
            return made[-1]
        gate = AuthGate(FakeSrv(), Tokens([GOOD]), make, lambda: released.append(1))
        t = FakeTransport()
        gate.connection_made(t)
        for b in b"auth " + GOOD + b"\r\nstats\r\n":  # a byte at a time
            if t.protocol is None:
                gate.data_received(bytes([b]))
            else:
                made[0].data_received(bytes([b]))
        assert t.out == b"AUTHENTICATED\r\n" and not t.closed
        assert made[0].data == b"stats\r\n" and gate.timer is None
        # Another one says nothing: the timer closes it without a reply.
        gate2 = AuthGate(FakeSrv(), Tokens([GOOD]), make, lambda: released.append(2))
        t2 = FakeTransport()
        gate2.connection_made(t2)
        gate2.data_received(b"auth " + GOOD[:3])
        gate2.timer._run()  # as if AUTH_TIMEOUT_S had passed
        assert t2.closed and t2.out == b"" and len(made) == 1
        gate2.connection_lost(None)
        assert released == [2]
    asyncio.run(run())

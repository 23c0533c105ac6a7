"""pybeanstalkd-admin against servers with TLS (--tls-cert/--tls-key, and
--tls-client-ca for mTLS) and tokens (--auth-tokens), each a real server
process: the options work before or after the command, and each way a
server turns a connection away is named, with the option that is
missing, in one line and exit status 3. A token is never taken from the
command line."""
from __future__ import annotations

import socket
import threading

import pytest

from support import Server, ours_argv, require_reference, sock_path
from test_admin import run
from tlstools import tls_args

TOKEN = "s3cret-token"
PROG = "pybeanstalkd-admin"


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    """The server's token file, a client's (the token after comments and a
    blank line, as the server's format allows) and a wrong one."""
    d = tmp_path_factory.mktemp("tokens")
    files = {"server": f"# ops\n{TOKEN}\nanother-one\n", "mine": f"# for the admin CLI\n\n  {TOKEN}  \n",
             "wrong": "not-the-token\n", "empty": "# nothing here\n\n"}
    for name, text in files.items():
        (d / name).write_text(text)
        (d / name).chmod(0o600)
    return d


@pytest.fixture(scope="module")
def servers(certs, tokens):
    """One server of each kind, for the module."""
    made = {}
    try:
        for name, extra in (("tls", tls_args(certs)), ("mtls", tls_args(certs, mtls=True)),
                            ("auth", ["--auth-tokens", str(tokens / "server")]),
                            ("tls+auth", tls_args(certs) + ["--auth-tokens", str(tokens / "server")]),
                            ("plain", []), ("elsewhere", tls_args(certs, name="elsewhere"))):
            made[name] = Server(ours_argv(), extra)
        yield made
    finally:
        for s in made.values():
            s.stop()


def refused(args, srv, message, env=None):
    """The CLI exits 3 with this one line on stderr, nothing on stdout."""
    rc, out, err = run(args, srv, env=env)
    assert (rc, out) == (3, ""), err
    assert err == f"{PROG}: 127.0.0.1:{srv.port}: {message}\n"


def pid(args, srv, env=None) -> None:
    rc, out, err = run(args + ["stats", "pid"], srv, env=env)
    assert (rc, out, err) == (0, f"{srv.proc.pid}\n", "")


WANTS_TLS = "the server closed the connection before answering: it wants TLS (--tls, or --tls-ca FILE for a private CA)"
WANTS_TOKEN = "the server wants a token (--token-file FILE or PYBEANSTALKD_TOKEN)"


# -- TLS


def test_a_tls_server_says_it_wants_tls_and_serves_with_it(servers, certs):
    srv = servers["tls"]
    refused(["stats"], srv, WANTS_TLS)
    refused(["tubes"], srv, WANTS_TLS)
    ca = str(certs / "ca.pem")
    pid(["--tls-ca", ca], srv)  # -H 127.0.0.1: the certificate's IP address is checked
    pid(["-H", "localhost", "--tls-ca", ca], srv)
    rc, out, err = run(["put", "tls-tube", "over tls", "--tls-ca", ca], srv)  # after the command too
    assert rc == 0 and out.strip().isdigit(), err
    rc, out, _ = run(["--tls-ca", ca, "peek", "tls-tube", "--json"], srv)
    assert rc == 0 and '"body": "over tls"' in out


def test_a_certificate_that_fails_verification_says_why(servers, certs):
    refused(["--tls", "stats"], servers["tls"],
            "the server's certificate failed verification: unable to get local issuer certificate "
            "(give the CA that signed it with --tls-ca FILE)")
    other = certs / "other-ca.pem"
    refused(["--tls-ca", str(other), "stats"], servers["tls"],
            "the server's certificate failed verification: unable to get local issuer certificate "
            f"(is it signed by --tls-ca {other}?)")
    refused(["--tls-ca", str(certs / "ca.pem"), "stats"], servers["elsewhere"],
            "the server's certificate failed verification: IP address mismatch, certificate is not "
            "valid for '127.0.0.1' (give -H a name or address the certificate holds)")


def test_client_certificates(servers, certs):
    srv, ca = servers["mtls"], str(certs / "ca.pem")
    refused(["--tls-ca", ca, "stats"], srv,
            "the server closed the TLS connection before answering: it may want a client "
            "certificate (--tls-cert FILE --tls-key FILE)")
    stranger = str(certs / "stranger.pem")
    refused(["--tls-ca", ca, "--tls-cert", stranger, "--tls-key", str(certs / "stranger.key"), "stats"],
            srv, f"the server closed the TLS connection before answering: it may not accept the "
                 f"client certificate {stranger} (one signed by the CA of its --tls-client-ca)")
    client = ["--tls-cert", str(certs / "client.pem"), "--tls-key", str(certs / "client.key")]
    pid(["--tls-ca", ca, *client], srv)
    # The certificate alone implies TLS, checked against the system's CAs (which do not sign it).
    rc, _, err = run([*client, "stats"], srv)
    assert rc == 3 and "certificate failed verification" in err and "--tls-ca FILE" in err


def test_tls_to_a_server_without_it(servers, certs):
    ca = str(certs / "ca.pem")
    # A plaintext server waits for the end of a line the handshake never sends.
    refused(["--tls-ca", ca, "--timeout", "1", "stats"], servers["plain"],
            "no answer to the TLS handshake within 1s: the server may not speak TLS (leave out "
            "--tls, --tls-ca and --tls-cert, or check the port), or it is slow (--timeout)")
    # One with --auth-tokens answers the handshake UNAUTHORIZED, in plaintext.
    refused(["--tls-ca", ca, "stats"], servers["auth"],
            "the server answered in plaintext, not TLS: it does not serve TLS there (leave out "
            "--tls, --tls-ca and --tls-cert, or check the port)")


def test_tls_over_a_unix_socket_checks_the_chain(tmp_path, certs):
    path = sock_path(tmp_path)
    srv = Server(ours_argv(), tls_args(certs), unix_path=path)
    try:
        rc, out, err = run(["-H", "unix:" + path, "--tls-ca", str(certs / "ca.pem"), "stats", "pid"])
        assert (rc, out, err) == (0, f"{srv.proc.pid}\n", "")
        rc, _, err = run(["-H", "unix:" + path, "--tls", "stats"])
        assert rc == 3 and "unable to get local issuer certificate" in err
    finally:
        srv.stop()


# -- tokens


def test_a_server_with_tokens_says_it_wants_one(servers):
    srv = servers["auth"]
    refused(["stats"], srv, WANTS_TOKEN)
    refused(["tubes"], srv, WANTS_TOKEN)  # a pipelined first write
    refused(["delete", *map(str, range(1, 300))], srv, WANTS_TOKEN)  # a long one


def test_the_token_from_a_file_or_the_environment(servers, tokens):
    srv = servers["auth"]
    pid(["--token-file", str(tokens / "mine")], srv)
    pid([], srv, env={"PYBEANSTALKD_TOKEN": TOKEN})
    # The file wins over the environment, as -p over BEANSTALKD_PORT.
    pid(["--token-file", str(tokens / "mine")], srv, env={"PYBEANSTALKD_TOKEN": "wrong"})
    wrong = tokens / "wrong"
    refused(["--token-file", str(wrong), "stats"], srv, f"the server refused the token from --token-file {wrong}",
            env={"PYBEANSTALKD_TOKEN": TOKEN})
    refused(["stats"], srv, "the server refused the token from PYBEANSTALKD_TOKEN",
            env={"PYBEANSTALKD_TOKEN": "wrong"})
    rc, out, err = run(["put", "authed", "x", "--token-file", str(tokens / "mine")], srv)
    assert rc == 0 and out.strip().isdigit(), err
    rc, out, _ = run(["tubes", "--json"], srv, env={"PYBEANSTALKD_TOKEN": TOKEN})
    assert rc == 0 and '"name": "authed"' in out


def test_a_token_is_never_an_argument(servers, tokens):
    for args in (["--token", TOKEN, "stats"], ["stats", f"--token={TOKEN}"]):
        rc, out, err = run(args, servers["auth"])
        assert rc == 2 and out == "" and TOKEN not in err
        assert "there is no --token" in err and "--token-file FILE or set PYBEANSTALKD_TOKEN" in err


def test_token_files_that_hold_no_token(servers, tokens):
    empty = tokens / "empty"
    rc, out, err = run(["--token-file", str(empty), "stats"], servers["auth"])
    assert (rc, out) == (2, "") and f"--token-file {empty}: no token in the file" in err
    rc, _, err = run(["--token-file", str(tokens / "missing"), "stats"], servers["auth"])
    assert rc == 2 and "No such file or directory" in err
    rc, _, err = run(["stats"], servers["auth"], env={"PYBEANSTALKD_TOKEN": "two words"})
    assert rc == 2 and "no white space or control characters" in err


def test_a_token_to_a_server_without_tokens_is_not_needed(servers, tokens):
    pid(["--token-file", str(tokens / "mine")], servers["plain"])
    ref = Server([require_reference()])
    try:
        pid([], ref, env={"PYBEANSTALKD_TOKEN": TOKEN})
    finally:
        ref.stop()


def test_tls_and_a_token_together(servers, certs, tokens):
    srv, ca = servers["tls+auth"], str(certs / "ca.pem")
    pid(["--tls-ca", ca, "--token-file", str(tokens / "mine")], srv)
    refused(["--tls-ca", ca, "stats"], srv, WANTS_TOKEN)
    refused(["--token-file", str(tokens / "mine"), "stats"], srv, WANTS_TLS)


# -- the options themselves


def test_option_errors(servers, certs):
    srv = servers["tls"]
    rc, _, err = run(["--tls-key", str(certs / "client.key"), "stats"], srv)
    assert rc == 2 and err == f"{PROG}: --tls-key needs --tls-cert\n"
    rc, _, err = run(["--tls-ca", str(certs / "missing.pem"), "stats"], srv)
    assert rc == 2 and err == f"{PROG}: --tls-ca {certs / 'missing.pem'}: No such file or directory\n"
    rc, _, err = run(["--tls-cert", str(certs / "client.pem"), "--tls-key", str(certs / "stranger.key"),
                      "stats"], srv)
    assert rc == 2 and "key values mismatch" in err
    # The HTTP side's commands take none of them: refused, not ignored.
    for args in (["--tls", "cluster", "--http", "127.0.0.1:1"],
                 ["--token-file", "f", "keys", "t", "--http", "127.0.0.1:1"]):
        rc, _, err = run(args)
        assert rc == 2 and "for the protocol port" in err and "HTTP side" in err, err


def test_a_close_from_a_server_that_does_not_speak_tls():
    """A listener that accepts and closes at once, as a cluster's follower
    does: the CLI tries a TLS handshake to tell, and does not blame TLS."""
    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]

    def serve():
        while True:
            try:
                conn, _ = lsock.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        rc, out, err = run(["-p", str(port), "stats"])
        assert (rc, out) == (3, "")
        assert err == (f"{PROG}: 127.0.0.1:{port}: the server closed the connection before answering "
                       "(a cluster's follower does: ask the leader)\n")
    finally:
        lsock.close()


def test_the_docs_example_runs(tmp_path, certs, tokens):
    """docs/ADMIN.md's example, a server with TLS and tokens and the CLI
    against it, with this run's files and ports."""
    import pathlib
    import re
    import shlex

    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "ADMIN.md").read_text()
    server_line, admin_line = re.search(r"\$ (pybeanstalkd -b .*?)\n\s+\$ (pybeanstalkd-admin .*?)\n",
                                        doc.replace("\\\n", " "), re.S).groups()
    files = {"server.pem": certs / "server.pem", "server.key": certs / "server.key",
             "/etc/pybeanstalkd/tokens": tokens / "server", "ca.pem": certs / "ca.pem",
             "~/.config/queue-token": tokens / "mine", "/var/lib/queue": tmp_path,
             "queue.example": "localhost"}
    server_args = [str(files.get(a, a)) for a in shlex.split(server_line)[1:]]
    admin_args = [str(files.get(a, a)) for a in shlex.split(admin_line)[1:]]
    assert admin_args[-1] == "stats" and "--token-file" in admin_args and "--tls-ca" in admin_args
    srv = Server(ours_argv(), server_args)
    try:
        rc, out, err = run(admin_args[:-1] + ["stats", "pid"], srv)
        assert (rc, out, err) == (0, f"{srv.proc.pid}\n", "")
    finally:
        srv.stop()

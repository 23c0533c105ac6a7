"""pybeanstalkd-admin's TLS and token options, and what it says when a
server turns a connection away for want of them.

--tls verifies the server's certificate against the system's CAs,
--tls-ca FILE against that CA alone; --tls-cert FILE --tls-key FILE show
a client certificate (mTLS). Either of the last two implies TLS. The name
checked is the host given with -H (an IP address is checked as one); over
a UNIX socket, which names no host, only the chain is. The token, for a
server with --auth-tokens, comes from --token-file FILE (the first line
that is neither blank nor a # comment, as in the server's file) or from
PYBEANSTALKD_TOKEN; never from an argument, which other users can read in
the process list.

A server refuses in different ways, and each is told apart from what the
client sees: a TLS server closes a plaintext connection without a word; a
plaintext server answers a TLS handshake in plaintext (a server with
--auth-tokens: UNAUTHORIZED) or waits for a line that never ends; a server
with --auth-tokens answers UNAUTHORIZED to anything but `auth` and closes;
one asking for client certificates finishes a TLS 1.3 handshake, then
closes before the first reply. ssl is imported only when TLS is asked for
or a failure is explained."""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .admin_errors import ConnectError, UsageError

if TYPE_CHECKING:
    import socket
    import ssl

TOKEN_ENV = "PYBEANSTALKD_TOKEN"
MAX_TOKEN_LEN = 217  # the server's bound: `auth TOKEN\r\n` fits its 224-byte line
FLAGS = ("--tls", "--tls-ca", "--tls-cert", "--tls-key", "--token-file")
WANT_TLS = "--tls, or --tls-ca FILE for a private CA"
WANT_TOKEN = f"--token-file FILE or {TOKEN_ENV}"
WANT_CERT = "--tls-cert FILE --tls-key FILE"
NO_TLS = "leave out --tls, --tls-ca and --tls-cert, or check the port"
# OpenSSL's verify codes for a certificate whose chain does not reach a trusted CA.
UNTRUSTED = {2, 18, 19, 20, 21}
NAME_MISMATCH = {62, 64}  # host name, IP address
# Handshake failures that mean the bytes that came back were not TLS.
NOT_TLS = {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG",
           "HTTP_REQUEST", "UNKNOWN_PROTOCOL"}
# Alerts from a server that wanted, or did not accept, a client certificate.
CERT_ALERTS = {"TLSV13_ALERT_CERTIFICATE_REQUIRED", "SSLV3_ALERT_HANDSHAKE_FAILURE",
               "TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_BAD_CERTIFICATE",
               "SSLV3_ALERT_CERTIFICATE_UNKNOWN", "TLSV1_ALERT_ACCESS_DENIED",
               "SSLV3_ALERT_CERTIFICATE_EXPIRED", "TLSV1_ALERT_DECRYPT_ERROR"}


@dataclass
class Secure:
    """How to reach a server: TLS (context None: plaintext) and a token,
    with where each came from, for the messages."""

    context: ssl.SSLContext | None = None
    server_hostname: str | None = None
    ca: str | None = None
    cert: str | None = None
    token: bytes | None = field(default=None, repr=False)  # (never printed)
    token_from: str = ""

    def wrap(self, sock: socket.socket, where: str, timeout: float) -> ssl.SSLSocket:
        """The TLS handshake on a connected socket; ConnectError saying why it failed."""
        import ssl

        assert self.context is not None
        try:
            return self.context.wrap_socket(sock, server_hostname=self.server_hostname)
        except ssl.SSLCertVerificationError as e:
            sock.close()
            raise ConnectError(f"{where}: {self._unverified(e)}") from None
        except (ssl.SSLError, OSError) as e:
            sock.close()
            raise ConnectError(f"{where}: {self.handshake_failed(e, timeout)}") from None

    def _unverified(self, e: ssl.SSLCertVerificationError) -> str:
        why = (e.verify_message or e.reason or "not valid").rstrip(".")
        msg = f"the server's certificate failed verification: {why}"
        if e.verify_code in NAME_MISMATCH:
            return msg + " (give -H a name or address the certificate holds)"
        if e.verify_code in UNTRUSTED:
            if self.ca is None:
                return msg + " (give the CA that signed it with --tls-ca FILE)"
            return msg + f" (is it signed by --tls-ca {self.ca}?)"
        return msg

    def handshake_failed(self, e: BaseException, timeout: float) -> str:
        """Why a handshake, or the first read after it, failed."""
        import ssl

        reason = getattr(e, "reason", None) or ""
        if isinstance(e, TimeoutError):
            return (f"no answer to the TLS handshake within {timeout:g}s: the server may not speak "
                    f"TLS ({NO_TLS}), or it is slow (--timeout)")
        if reason in NOT_TLS:
            return f"the server answered in plaintext, not TLS: it does not serve TLS there ({NO_TLS})"
        if reason in CERT_ALERTS:
            if self.cert is None:
                return f"the server wants a client certificate ({WANT_CERT})"
            return (f"the server refused the client certificate {self.cert}: "
                    f"{reason.split('ALERT_', 1)[-1].replace('_', ' ').lower()}")
        if isinstance(e, (ssl.SSLEOFError, ConnectionError)) or reason == "UNEXPECTED_EOF_WHILE_READING":
            return "the server closed the connection during the TLS handshake" + self._cert_hint()
        return f"the TLS handshake failed: {reason.replace('_', ' ').lower() or e}"

    def _cert_hint(self) -> str:
        if self.cert is None:
            return f": it may want a client certificate ({WANT_CERT})"
        return (f": it may not accept the client certificate {self.cert} (one signed by the CA "
                "of its --tls-client-ca)")

    def refused(self, e: BaseException | None, address, timeout: float) -> str:
        """Why the server closed (e: None) or reset the connection, or sent
        a TLS alert, before its first reply: over TLS, most likely for the
        client certificate; in plaintext, for TLS (a second connection tries
        a handshake to tell), else a cluster's follower, which serves no client."""
        reason = getattr(e, "reason", None) or ""
        if self.context is not None:
            if e is not None and reason in CERT_ALERTS:
                return self.handshake_failed(e, timeout)
            if reason and reason != "UNEXPECTED_EOF_WHILE_READING":
                return f"TLS failed before the first reply: {reason.replace('_', ' ').lower()}"
            return "the server closed the TLS connection before answering" + self._cert_hint()
        if speaks_tls(address, min(timeout, 5.0)):
            return f"the server closed the connection before answering: it wants TLS ({WANT_TLS})"
        return "the server closed the connection before answering (a cluster's follower does: ask the leader)"

    def unauthorized(self) -> str:
        if self.token is None:
            return f"the server wants a token ({WANT_TOKEN})"
        return f"the server refused the token from {self.token_from}"


def speaks_tls(address, timeout: float) -> bool:
    """Whether a TLS handshake with address gets a TLS answer (any
    certificate, or an alert). Nothing is sent but the handshake."""
    import socket
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        if isinstance(address, str):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(address)
        else:
            sock = socket.create_connection(address, timeout=timeout)
    except OSError:
        return False
    try:
        ctx.wrap_socket(sock).close()
        return True
    except ssl.SSLError as e:
        # An alert is TLS; plaintext or a close is not.
        return e.reason not in NOT_TLS and not isinstance(e, ssl.SSLEOFError) \
            and e.reason != "UNEXPECTED_EOF_WHILE_READING"
    except OSError:
        return False
    finally:
        sock.close()


# -- the options


class NoTokenArgument(argparse.Action):
    """--token: refused, its value never repeated. Without it argparse would
    take --token as short for --token-file, and print the token as a file name."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, default=kw.get("default"))

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"there is no --token: a token on the command line is seen by every user "
                     f"(ps); give --token-file FILE or set {TOKEN_ENV}")


def add_flags(group, default):
    """The TLS and token options, on a parser's connection group."""
    group.add_argument("--tls", action="store_true", default=default,
                       help="connect with TLS, the server's certificate verified against the "
                            "system's CAs and the -H host")
    group.add_argument("--tls-ca", metavar="FILE", default=default,
                       help="verify the server's certificate against this CA (PEM) instead; implies --tls")
    group.add_argument("--tls-cert", metavar="FILE", default=default,
                       help="a client certificate (PEM), for a server with --tls-client-ca; implies --tls")
    group.add_argument("--tls-key", metavar="FILE", default=default,
                       help="its private key (default: in the --tls-cert file)")
    group.add_argument("--token-file", metavar="FILE", default=default,
                       help="send `auth TOKEN` first, for a server with --auth-tokens: the file's "
                            "first line that is neither blank nor a # comment (env "
                            f"{TOKEN_ENV}; never an argument, which others can see)")
    group.add_argument("--token", action=NoTokenArgument, default=default)


def given(args) -> list[str]:
    """The TLS and token options given (for commands that take none)."""
    return [f for f in FLAGS if getattr(args, f[2:].replace("-", "_"), None)]


def from_args(args, address) -> Secure:
    """The Secure of the parsed options; UsageError for files that do not load."""
    s = Secure()
    if args.tls_key and not args.tls_cert:
        raise UsageError("--tls-key needs --tls-cert")
    if args.tls or args.tls_ca or args.tls_cert:
        s.context = context(args.tls_ca, args.tls_cert, args.tls_key)
        s.ca, s.cert = args.tls_ca, args.tls_cert
        # (a UNIX socket names no host: its certificate's chain is checked, not a name)
        s.server_hostname = None if isinstance(address, str) else address[0]
        if s.server_hostname is None:
            s.context.check_hostname = False
    if args.token_file:
        s.token, s.token_from = read_token_file(args.token_file), f"--token-file {args.token_file}"
    elif os.environ.get(TOKEN_ENV, "").strip():
        s.token, s.token_from = check_token(os.environ[TOKEN_ENV].strip().encode(), TOKEN_ENV), TOKEN_ENV
    return s


def context(ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext:
    import ssl

    try:
        ctx = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as e:
        raise UsageError(f"--tls-ca {ca}: {_why(e)}") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None:
        try:
            ctx.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as e:
            what = f"--tls-cert {cert}" + (f" / --tls-key {key}" if key else "")
            raise UsageError(f"{what}: {_why(e)}") from None
    return ctx


def _why(e: Exception) -> str:
    reason = getattr(e, "strerror", None) or getattr(e, "reason", None) or str(e)
    return reason.replace("_", " ").lower() if reason.isupper() else reason


def read_token_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            text = f.read(1 << 20)
    except OSError as e:
        raise UsageError(f"--token-file {path}: {e.strerror}") from None
    for raw in text.split(b"\n"):
        t = raw.strip()
        if t and not t.startswith(b"#"):
            return check_token(t, f"--token-file {path}")
    raise UsageError(f"--token-file {path}: no token in the file (a line neither blank nor # ...)")


def check_token(token: bytes, where: str) -> bytes:
    """A token as the server accepts one: it must fit the `auth` line, and
    white space or a control character would end it or start a command."""
    if len(token) > MAX_TOKEN_LEN:
        raise UsageError(f"{where}: a token is at most {MAX_TOKEN_LEN} bytes")
    if any(c <= 32 or c == 127 for c in token):
        raise UsageError(f"{where}: a token has no white space or control characters")
    return token

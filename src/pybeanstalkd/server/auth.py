"""Token authentication (--auth-tokens FILE), as beanstalkd-rs defines it.

A connection must first send `auth <token>\\r\\n`: the right token gets
`AUTHENTICATED\\r\\n` and the connection is served from then on; a wrong
one, or any other input first, gets `UNAUTHORIZED\\r\\n` and a close;
`quit` closes silently. Until then the engine does not know the connection
(it is not in `stats`), and nothing it sends reaches the engine. A
connection that has not authenticated within AUTH_TIMEOUT_S is closed
without a reply. Tokens are never logged.
"""
from __future__ import annotations

import asyncio
import hmac
import os
import stat

from ..core.cmdtable import CommandTable
from ..core.protocol import LINE_BUF_SIZE, find_line_end, Bad

AUTHENTICATED = b"AUTHENTICATED\r\n"
UNAUTHORIZED = b"UNAUTHORIZED\r\n"
AUTH_TIMEOUT_S = 10.0
MAX_TOKEN_LEN = LINE_BUF_SIZE - len(b"auth \r\n")  # 217: the line must fit
REFERENCE_COMMANDS = CommandTable()  # (quit ends an unauthenticated connection)


class TokenError(Exception):
    pass


def load_tokens(path: str, warn=None) -> list[bytes]:
    """One token per line; blank lines and lines starting with '#' are
    skipped, surrounding white space is trimmed."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            text = f.read()
    except OSError as e:
        raise TokenError(f"--auth-tokens {path}: {e.strerror}") from None
    if warn is not None and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        warn(f"--auth-tokens {path}: readable by group or others; chmod 600 it")
    tokens = []
    for n, raw in enumerate(text.split(b"\n"), 1):
        t = raw.strip()
        if not t or t.startswith(b"#"):
            continue
        if len(t) > MAX_TOKEN_LEN:
            raise TokenError(f"--auth-tokens {path}: line {n}: a token is at most "
                             f"{MAX_TOKEN_LEN} bytes")
        if any(c <= 32 or c == 127 for c in t):
            raise TokenError(f"--auth-tokens {path}: line {n}: a token has no white "
                             f"space or control characters")
        tokens.append(t)
    if not tokens:
        raise TokenError(f"--auth-tokens {path}: no token in the file")
    return tokens


class Tokens:
    def __init__(self, tokens: list[bytes]):
        self.tokens = tokens

    def __repr__(self):
        return f"Tokens({len(self.tokens)})"  # never the tokens themselves

    def verify(self, candidate: bytes) -> bool:
        # Every token is compared, each in constant time.
        ok = False
        for t in self.tokens:
            ok |= hmac.compare_digest(t, candidate)
        return ok


class TokenFile:
    """--auth-tokens FILE: its tokens, read again when it changes (reload.py),
    so tokens rotate without a restart. TokenError at start."""

    def __init__(self, path: str, warn, log=None):
        from ..reload import Reloading

        self.file = Reloading([path], lambda: Tokens(load_tokens(path, warn)), TokenError,
                              warn, log)

    def __repr__(self):
        return repr(self.file.value)

    @property
    def tokens(self) -> list[bytes]:
        return self.file.current().tokens

    def verify(self, candidate: bytes) -> bool:
        return self.file.current().verify(candidate)


class AuthGate(asyncio.Protocol):
    """A connection before `auth`: hands the transport to ``make_client()``
    once the token is right."""

    # Set by connection_made; None only before that and after
    # connection_lost, when nothing that uses it runs.
    transport: asyncio.Transport

    def __init__(self, srv, tokens: Tokens | TokenFile, make_client, released):
        self.srv = srv
        self.tokens = tokens
        self.make_client = make_client
        self.released = released  # called when the connection is gone
        self.buf = b""
        self.transport = None  # type: ignore[assignment]  # (see the class annotation)
        self.timer: asyncio.TimerHandle | None = None
        self.done = False

    def connection_made(self, transport):
        self.transport = transport
        self.timer = asyncio.get_running_loop().call_later(AUTH_TIMEOUT_S, self._timeout)

    def _peer(self) -> str:
        sock = self.transport.get_extra_info("socket")
        return str(sock.fileno()) if sock is not None else "?"

    def _log(self, msg: str):
        if self.srv.verbose:
            self.srv.log(msg)

    def _timeout(self):
        self.timer = None
        self._log("auth %s: timed out" % self._peer())
        self._refuse(b"")

    def _refuse(self, reply: bytes):
        self.done = True
        if reply:
            self.transport.write(reply)
        self.transport.close()

    def data_received(self, data):
        if self.done:
            return
        buf = self.buf + data if self.buf else data
        # Only the first line matters, and only its first LINE_BUF_SIZE
        # bytes are looked at: what is kept between reads stays under that,
        # and a read costs the same however long it is.
        n = find_line_end(buf, 0, min(len(buf), LINE_BUF_SIZE))
        if not n:
            if len(buf) < LINE_BUF_SIZE:
                self.buf = buf
                return
            # An over-long first line cannot be `auth` with a token.
            self._log("auth %s: failed: command before auth" % self._peer())
            return self._refuse(UNAUTHORIZED)
        line, rest = buf[:n - 2], buf[n:]
        if line[:5] == b"auth ":
            if not self.tokens.verify(line[5:]):
                self._log("auth %s: failed: wrong token" % self._peer())
                return self._refuse(UNAUTHORIZED)
            self._log("auth %s: authenticated" % self._peer())
            self.done = True
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            client = self.make_client()
            t = self.transport
            t.set_protocol(client)
            client.connection_made(t)
            t.write(AUTHENTICATED)
            if rest:
                client.data_received(rest)
            return
        try:
            found = REFERENCE_COMMANDS.lookup(line)
        except Bad:
            found = None
        quit = found is not None and found[0].name == "quit"
        if quit:
            self.done = True
            self.transport.close()
            return
        self._log("auth %s: failed: command before auth" % self._peer())
        self._refuse(UNAUTHORIZED)

    def eof_received(self):
        return False  # close

    def connection_lost(self, exc):
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.released()  # once authenticated, the Client gets connection_lost instead
        self.transport = None  # (a cycle with it, never collected once frozen: loop.py)

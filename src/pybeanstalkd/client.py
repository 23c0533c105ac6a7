"""A small typed client for the protocol and its extensions (a server run
with --extensions; tuber speaks the same): put tags (unique jobs,
concurrency keys, groups, tries), batches, flush-tube, drain, weighted
watches and reserve modes, besides the plain commands a worker needs and
an operator's (stats, peek, kick, bury, touch, pause-tube), over TLS and
with a token if the server asks. It imports nothing else of ours, and
nothing outside the standard library.

    from pybeanstalkd.client import Client

    with Client("127.0.0.1", 11300) as c:
        c.use("emails")
        c.put(b"hello")
        c.watch("emails")
        jobs = c.reserve_batch(100)
        ...  # work on them
        c.delete_batch(job.id for job in jobs)

A reply the command does not expect raises CommandError, which carries it
(NOT_FOUND where a job or tube is asked for is None instead).

A server with --tls-cert/--tls-key, --tls-client-ca or --auth-tokens:

    Client("queue.example", 11300, tls_ca="ca.pem", tls_cert="me.pem",
           tls_key="me.key", token=os.environ["PYBEANSTALKD_TOKEN"])

ssl is imported only when TLS is asked for. A failed handshake raises
ssl's own errors (ssl.SSLCertVerificationError says why the certificate
was not trusted); a server that wants a token, or refuses it, AuthError.
"""
from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl
    from collections.abc import Iterable
    from types import TracebackType
    from typing import Literal, Self

DEFAULT_PRI = 1 << 31
MODES = ("fifo", "weighted", "weighted-fair")
MAX_TOKEN_LEN = 217  # `auth TOKEN\r\n` must fit the server's 224-byte line
# stats, stats-tube and stats-job values that stay text even when they look like numbers
TEXT_KEYS = frozenset(("id", "version", "hostname", "os", "platform", "name", "tube", "state",
                       "idempotency-key", "group", "after-group", "concurrency-key"))

Stats = dict[str, int | float | str]  # (a bool, such as `draining`, is an int)


class CommandError(Exception):
    """The server answered something the command does not expect."""

    def __init__(self, command: bytes, reply: bytes) -> None:
        super().__init__(f"{command.split(b' ')[0].decode()}: {reply.decode('latin-1').strip()}")
        self.reply = reply


class AuthError(ConnectionError):
    """The server (--auth-tokens) wants a token, or refused the one given;
    it has closed the connection."""


@dataclass(frozen=True)
class Job:
    id: int
    body: bytes


@dataclass(frozen=True)
class Inserted:
    """A put's answer: the id; for a duplicate idempotency key, the state of
    the job holding it (READY, RESERVED, DELAYED, BURIED, or DELETED in
    its cooldown), and the priority it was lowered to, if it was."""

    id: int
    duplicate: str | None = None
    lowered_to: int | None = None


class Client:
    """One connection. host and port as for beanstalkd; timeout: seconds
    for connecting and for each reply (None: no limit).

    TLS: tls=True verifies the server's certificate against the system's
    CAs, tls_ca against that CA file alone; tls_cert and tls_key (a key
    in the certificate's file if not given) show a client certificate, for
    a server with --tls-client-ca; each implies TLS. tls may also be an
    ssl.SSLContext of your own (then without tls_ca, tls_cert or tls_key).
    The name checked is server_hostname, by default host (an IP address is
    checked as one).

    token: sent first (`auth TOKEN`) to a server with --auth-tokens;
    AuthError if refused. A server without tokens answers UNKNOWN_COMMAND
    to `auth`, and serves the connection anyway."""

    def __init__(self, host: str = "127.0.0.1", port: int = 11300,
                 timeout: float | None = None, *, tls: bool | ssl.SSLContext | None = None,
                 tls_ca: str | None = None, tls_cert: str | None = None,
                 tls_key: str | None = None, token: str | None = None,
                 server_hostname: str | None = None) -> None:
        raw = token.encode() if token is not None else None
        if raw is not None and (not raw or len(raw) > MAX_TOKEN_LEN or any(c <= 32 or c == 127 for c in raw)):
            # (white space would end it, CR LF start another command)
            raise ValueError(f"a token is 1 to {MAX_TOKEN_LEN} bytes, with no white space "
                             "or control characters")
        ctx = _context(tls, tls_ca, tls_cert, tls_key)
        self.tls = ctx is not None
        self.buf = b""
        self.answered = False  # a reply came: a close from then on says nothing of TLS or auth
        self.token_sent = raw is not None
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            if ctx is not None:
                sock = ctx.wrap_socket(sock, server_hostname=server_hostname or host)
            self.sock = sock
            if raw is not None:
                self.sock.sendall(b"auth " + raw + b"\r\n")
                reply = self._line()
                if reply not in (b"AUTHENTICATED", b"UNKNOWN_COMMAND"):
                    raise CommandError(b"auth", reply)
        except BaseException:
            sock.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    # -- the wire -------------------------------------------------------------

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        if line == b"UNAUTHORIZED":  # (--auth-tokens; the server closes the connection)
            raise AuthError("the server refused the token" if self.token_sent
                            else "the server wants a token (token=...)")
        self.answered = True
        return line

    def _data(self, size: int) -> bytes:
        while len(self.buf) < size + 2:
            self._fill()
        data, self.buf = self.buf[:size], self.buf[size + 2:]
        return data

    def _fill(self) -> None:
        try:
            chunk = self.sock.recv(1 << 16)
        except ConnectionResetError:
            chunk = b""
            if self.answered:
                raise
        if chunk:
            self.buf += chunk
        elif self.answered:
            raise ConnectionError("the server closed the connection")
        elif self.tls:
            raise ConnectionError("the server closed the TLS connection before answering: it may "
                                  "want a client certificate (tls_cert=..., tls_key=...)")
        else:
            raise ConnectionError("the server closed the connection before answering: it may "
                                  "want TLS (tls=True, or tls_ca=...), or be a cluster's follower")

    def _cmd(self, command: bytes, *expect: bytes) -> list[bytes]:
        """Send a command; its reply line's words, if its first is expected."""
        self.sock.sendall(command + b"\r\n")
        words = self._line().split(b" ")
        if words[0] not in expect:
            raise CommandError(command, b" ".join(words))
        return words

    def _job(self, words: list[bytes]) -> Job:
        return Job(int(words[1]), self._data(int(words[2])))

    # -- producing ------------------------------------------------------------

    def use(self, tube: str) -> None:
        self._cmd(b"use " + tube.encode(), b"USING")

    def put(self, body: bytes, pri: int = DEFAULT_PRI, delay: int = 0, ttr: int = 60, *,
            idempotency_key: str | None = None, idempotency_ttl: int = 0,
            concurrency_key: str | None = None, concurrency_limit: int = 1,
            group: str | None = None, after: str | None = None,
            tries: int | None = None) -> int:
        """The job's id: a new job's, or, for a duplicate idempotency key,
        the job holding it (put_tagged tells which). CommandError for
        BURIED (the server is out of memory), DRAINING, JOB_TOO_BIG...
        The keyword arguments are put tags (--extensions)."""
        return self.put_tagged(body, pri, delay, ttr, idempotency_key=idempotency_key,
                               idempotency_ttl=idempotency_ttl,
                               concurrency_key=concurrency_key,
                               concurrency_limit=concurrency_limit, group=group, after=after,
                               tries=tries).id

    def put_tagged(self, body: bytes, pri: int = DEFAULT_PRI, delay: int = 0, ttr: int = 60, *,
                   idempotency_key: str | None = None, idempotency_ttl: int = 0,
                   concurrency_key: str | None = None, concurrency_limit: int = 1,
                   group: str | None = None, after: str | None = None,
                   tries: int | None = None) -> Inserted:
        """put, with what the server said of a duplicate:
        idempotency_key: at most one job of the tube with it; a duplicate
            answers that job (and lowers its priority to pri if lower), or
            for idempotency_ttl seconds after its delete, state "DELETED";
        concurrency_key: at most concurrency_limit such jobs reserved at once;
        group: a member of group; after: held until group has no member left;
        tries: buried after this many releases and TTR expiries."""
        tags = []
        if idempotency_key is not None:
            tags.append(b"idp:" + idempotency_key.encode()
                        + (b":%d" % idempotency_ttl if idempotency_ttl else b""))
        if concurrency_key is not None:
            tags.append(b"con:" + concurrency_key.encode()
                        + (b":%d" % concurrency_limit if concurrency_limit != 1 else b""))
        if group is not None:
            tags.append(b"grp:" + group.encode())
        if after is not None:
            tags.append(b"aft:" + after.encode())
        if tries is not None:
            tags.append(b"try:%d" % tries)
        line = b"put %d %d %d %d" % (pri, delay, ttr, len(body))
        self.sock.sendall(b" ".join([line, *tags]) + b"\r\n" + body + b"\r\n")
        words = self._line().split(b" ")
        if words[0] != b"INSERTED":
            raise CommandError(b"put", b" ".join(words))
        return Inserted(int(words[1]), words[2].decode() if len(words) > 2 else None,
                        int(words[3]) if len(words) > 3 else None)

    # -- consuming ------------------------------------------------------------

    def watch(self, tube: str, weight: int | None = None) -> int:
        """Watch tube; with a weight (1..9999, --extensions), its share of
        this connection's weighted reserves. The number of tubes watched."""
        line = b"watch " + tube.encode() + (b" %d" % weight if weight is not None else b"")
        return int(self._cmd(line, b"WATCHING")[1])

    def ignore(self, tube: str) -> int:
        return int(self._cmd(b"ignore " + tube.encode(), b"WATCHING")[1])

    def reserve_mode(self, mode: Literal["fifo", "weighted", "weighted-fair"]) -> None:
        """How this connection's reserves pick among its tubes (--extensions)."""
        if mode not in MODES:
            raise ValueError(f"mode is one of {', '.join(MODES)}")
        self._cmd(b"reserve-mode " + mode.encode(), b"USING")

    def reserve(self, timeout: int | None = None) -> Job | None:
        """The next job; None when the timeout (seconds) passes first."""
        line = b"reserve" if timeout is None else b"reserve-with-timeout %d" % timeout
        words = self._cmd(line, b"RESERVED", b"TIMED_OUT")
        return self._job(words) if words[0] == b"RESERVED" else None

    def reserve_batch(self, n: int) -> list[Job]:
        """Up to n (1..1000) ready jobs at once, never waiting (--extensions)."""
        words = self._cmd(b"reserve-batch %d" % n, b"RESERVED_BATCH")
        jobs = []
        for _ in range(int(words[1])):
            entry = self._line().split(b" ")
            if entry[0] != b"RESERVED":
                raise CommandError(b"reserve-batch", b" ".join(entry))
            jobs.append(self._job(entry))
        return jobs

    def delete(self, job_id: int) -> bool:
        """False if there is no such job (or another connection holds it)."""
        return self._cmd(b"delete %d" % job_id, b"DELETED", b"NOT_FOUND")[0] == b"DELETED"

    def delete_batch(self, ids: Iterable[int]) -> tuple[int, int]:
        """Delete up to 1000 jobs at once (--extensions): (deleted, not found)."""
        words = self._cmd(b"delete-batch " + b" ".join(b"%d" % i for i in ids), b"DELETED_BATCH")
        return int(words[1]), int(words[2])

    def bury(self, job_id: int, pri: int = DEFAULT_PRI) -> bool:
        """Bury a job this connection has reserved, with priority pri;
        False if there is no such job reserved by it."""
        return self._cmd(b"bury %d %d" % (job_id, pri), b"BURIED", b"NOT_FOUND")[0] == b"BURIED"

    def touch(self, job_id: int) -> bool:
        """Give a job this connection has reserved its whole TTR again;
        False if there is no such job reserved by it."""
        return self._cmd(b"touch %d" % job_id, b"TOUCHED", b"NOT_FOUND")[0] == b"TOUCHED"

    def release(self, job_id: int, pri: int = DEFAULT_PRI, delay: int = 0) -> bool:
        """True if released; False if it was buried instead (--max-tries, or
        the server is out of memory)."""
        return self._cmd(b"release %d %d %d" % (job_id, pri, delay),
                         b"RELEASED", b"BURIED")[0] == b"RELEASED"

    # -- looking ----------------------------------------------------------------

    def peek(self, job_id: int) -> Job | None:
        """A job by id, whatever its state; None if there is none."""
        return self._peek(b"peek %d" % job_id)

    def peek_ready(self) -> Job | None:
        """The next ready job of the tube in use (as reserve would take it)."""
        return self._peek(b"peek-ready")

    def peek_delayed(self) -> Job | None:
        """The delayed job of the tube in use that comes due first."""
        return self._peek(b"peek-delayed")

    def peek_buried(self) -> Job | None:
        """The buried job of the tube in use that a kick would take first."""
        return self._peek(b"peek-buried")

    def _peek(self, command: bytes) -> Job | None:
        words = self._cmd(command, b"FOUND", b"NOT_FOUND")
        return self._job(words) if words[0] == b"FOUND" else None

    def stats(self) -> Stats:
        """The server's stats: numbers as int or float, `draining` as bool."""
        return _parse_stats(self._data(int(self._cmd(b"stats", b"OK")[1])))

    def stats_tube(self, name: str) -> Stats | None:
        """A tube's stats; None if there is no such tube."""
        return self._stats(b"stats-tube " + name.encode())

    def stats_job(self, job_id: int) -> Stats | None:
        """A job's stats (tube, state, pri, age, time-left, ...); None if
        there is no such job."""
        return self._stats(b"stats-job %d" % job_id)

    def list_tubes(self) -> list[str]:
        """The names of the tubes that exist."""
        words = self._cmd(b"list-tubes", b"OK")
        return [line[2:] for line in self._data(int(words[1])).decode().splitlines()
                if line.startswith("- ")]

    def _stats(self, command: bytes) -> Stats | None:
        words = self._cmd(command, b"OK", b"NOT_FOUND")
        return _parse_stats(self._data(int(words[1]))) if words[0] == b"OK" else None

    # -- the server -------------------------------------------------------------

    def kick(self, bound: int) -> int:
        """Kick up to bound buried jobs of the tube in use into ready, or if
        it has none buried, delayed ones; how many were kicked."""
        return int(self._cmd(b"kick %d" % bound, b"KICKED")[1])

    def kick_job(self, job_id: int) -> bool:
        """Kick one buried or delayed job; False if there is no such job in
        either state."""
        return self._cmd(b"kick-job %d" % job_id, b"KICKED", b"NOT_FOUND")[0] == b"KICKED"

    def pause_tube(self, name: str, delay: int) -> bool:
        """Reserve nothing from a tube for delay seconds (0 ends a pause);
        False if there is no such tube."""
        return self._cmd(b"pause-tube %s %d" % (name.encode(), delay),
                         b"PAUSED", b"NOT_FOUND")[0] == b"PAUSED"

    def flush_tube(self, tube: str) -> int | None:
        """Delete every job of a tube, reserved ones included (--extensions):
        how many; None if there is no such tube."""
        words = self._cmd(b"flush-tube " + tube.encode(), b"FLUSHED", b"NOT_FOUND")
        return int(words[1]) if words[0] == b"FLUSHED" else None

    def stats_group(self, name: str) -> dict[str, int] | None:
        """A group's jobs by state, and the jobs it holds ("waiting-jobs");
        None if there is no such group (--extensions)."""
        words = self._cmd(b"stats-group " + name.encode(), b"OK", b"NOT_FOUND")
        if words[0] == b"NOT_FOUND":
            return None
        out = {}
        for line in self._data(int(words[1])).decode().splitlines()[1:]:
            key, _, value = line.partition(": ")
            if key != "name":
                out[key] = int(value)
        return out

    def drain(self) -> None:
        """Stop taking new jobs (--extensions; SIGUSR1 does the same)."""
        self._cmd(b"drain", b"DRAINING")

    def undrain(self) -> None:
        self._cmd(b"undrain", b"NOT_DRAINING")


def _context(tls: bool | ssl.SSLContext | None, ca: str | None, cert: str | None,
             key: str | None) -> ssl.SSLContext | None:
    """The TLS context Client's arguments ask for; None for plaintext. ssl
    is imported only here, and only when one is asked for."""
    if tls is None or tls is False:
        if tls is False and (ca or cert or key):
            raise ValueError("tls=False with tls_ca, tls_cert or tls_key")
        if not (ca or cert or key):
            return None
    if key is not None and cert is None:
        raise ValueError("tls_key needs tls_cert")
    if tls is not None and not isinstance(tls, bool):  # an ssl.SSLContext of the caller's
        if ca or cert:
            raise ValueError("tls_ca, tls_cert and tls_key are for a context made here, "
                             "not with tls=SSLContext")
        return tls
    import ssl

    ctx = ssl.create_default_context(cafile=ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


def _parse_stats(body: bytes) -> Stats:
    """A stats reply's YAML: numbers as int or float, true/false as bool,
    quoted strings unquoted; the keys in TEXT_KEYS stay text."""
    out: Stats = {}
    for line in body.decode("utf-8", "replace").splitlines():
        key, sep, raw = line.partition(": ")
        if not sep:
            continue
        value: int | float | str = raw
        if len(raw) >= 2 and raw[0] == raw[-1] == '"':
            value = raw[1:-1]
        elif key in TEXT_KEYS:
            pass
        elif raw in ("true", "false"):
            value = raw == "true"
        elif re.fullmatch(r"-?[0-9]+", raw):
            value = int(raw)
        elif re.fullmatch(r"-?[0-9]+\.[0-9]+", raw):
            value = float(raw)
        out[key] = value
    return out

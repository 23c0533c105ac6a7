"""The small blocking protocol client behind pybeanstalkd-admin: one socket
(TCP or UNIX, over TLS and with a token when admin_tls.py says so),
commands sent one at a time or pipelined, replies read with their bodies,
and the YAML of stats/list replies parsed. It speaks only the beanstalkd
protocol, so it works against any beanstalkd."""
from __future__ import annotations

import re
import socket
from typing import TYPE_CHECKING

from .admin_errors import AdminError, ConnectError, UnexpectedReply, UsageError

if TYPE_CHECKING:
    from .admin_tls import Secure

# Tube names as the server accepts them: 1 to 200 of these, not starting with '-'.
TUBE_NAME = re.compile(r"[A-Za-z0-9+/;.$_()-]{1,200}\Z")
MAX_U32 = 4294967295
MAX_U64 = 18446744073709551615
# Replies whose line is followed by a body of the given byte count.
BODY_REPLIES = {b"FOUND": 2, b"RESERVED": 2, b"OK": 1}
PIPELINE = 256  # commands per write when pipelining
# Values that stay strings even when they look like numbers (a server id, a tube named "123").
STATS_TEXT = ("id", "version", "hostname", "os", "platform")
TUBE_TEXT = ("name",)
# (with --extensions, or tuber: stats-job's tag fields; a key named "123" stays text)
JOB_TEXT = ("tube", "state", "idempotency-key", "group", "after-group", "concurrency-key")
GROUP_TEXT = ("name",)


def check_tube(name: str) -> str:
    if not TUBE_NAME.match(name) or name.startswith("-"):
        raise UsageError(f"invalid tube name {name!r}: 1 to 200 characters from "
                         "A-Z a-z 0-9 - + / ; . $ _ ( ), not starting with '-'")
    return name


def parse_address(host: str, port: int):
    """A (host, port) pair, or a path for a UNIX socket ('unix:/path' or any host with a '/')."""
    if host.startswith("unix:"):
        return host[5:]
    if "/" in host:
        return host
    return (host, port)


def describe(address) -> str:
    if isinstance(address, str):
        return f"unix:{address}"
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _value(raw: str, text: bool):
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return raw[1:-1]
    if text:
        return raw
    if raw in ("true", "false"):
        return raw == "true"
    if re.fullmatch(r"-?[0-9]+", raw):
        return int(raw)
    if re.fullmatch(r"-?[0-9]+\.[0-9]+", raw):
        return float(raw)
    return raw


def parse_dict(body: bytes, text_keys=()) -> dict:
    """A stats reply's YAML: ints, floats and booleans typed, quoted strings unquoted.
    Keys in text_keys stay strings (stats' server `id` is hex that may be all digits)."""
    out = {}
    for line in body.decode("utf-8", "replace").splitlines():
        if line == "---" or ": " not in line:
            continue
        key, _, raw = line.partition(": ")
        out[key] = _value(raw, key in text_keys)
    return out


def parse_list(body: bytes) -> list[str]:
    return [line[2:] for line in body.decode("utf-8", "replace").splitlines() if line.startswith("- ")]


def body_text(body: bytes) -> str | None:
    """A job body as text when it is printable UTF-8 (newlines and tabs allowed), else None."""
    try:
        s = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return s if all(c.isprintable() or c in "\n\t" for c in s) else None


class Reply:
    """One reply: its words (first is the status) and its body, if it has one."""

    __slots__ = ("words", "body")

    def __init__(self, words: list[bytes], body: bytes | None):
        self.words, self.body = words, body

    @property
    def status(self) -> str:
        return self.words[0].decode("ascii", "replace") if self.words else ""

    def int(self, i: int = 1) -> int:
        return int(self.words[i])

    @property
    def data(self) -> bytes:
        """The body of a FOUND, RESERVED or OK reply: read_reply reads one
        for these (None only from a server off the protocol)."""
        return self.body  # type: ignore[return-value]  # (see the docstring)

    def __repr__(self):
        return f"Reply({b' '.join(self.words)!r})"


class Conn:
    """A connection to one server. Every method raises AdminError subclasses only.

    secure (admin_tls.Secure): TLS and a token, when the server asks for them."""

    def __init__(self, address, timeout: float = 10.0, secure: Secure | None = None):
        self.address = address
        self.where = describe(address)
        self.timeout = timeout
        self._buf = b""
        self._answered = False  # a reply came: a close from then on is no refusal
        if secure is None:
            from .admin_tls import Secure

            secure = Secure()
        self.secure = secure
        try:
            if isinstance(address, str):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(timeout)
                try:
                    sock.connect(address)
                except BaseException:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection(address, timeout=timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except socket.gaierror as e:
            raise ConnectError(f"cannot resolve {address[0]!r}: {e.strerror}") from None
        except ConnectionRefusedError:
            raise ConnectError(f"cannot connect to {self.where}: connection refused "
                               "(is the server running?)") from None
        except FileNotFoundError:
            raise ConnectError(f"cannot connect to {self.where}: no such socket file") from None
        except TimeoutError:
            raise ConnectError(f"cannot connect to {self.where}: timed out") from None
        except OSError as e:
            raise ConnectError(f"cannot connect to {self.where}: {e.strerror or e}") from None
        if secure.context is not None:
            sock = secure.wrap(sock, self.where, timeout)
        self.sock = sock
        if secure.token is not None:
            try:
                self._auth(secure.token)
            except BaseException:
                sock.close()
                raise

    def _auth(self, token: bytes):
        """`auth TOKEN` (--auth-tokens): UNAUTHORIZED is a refusal (read_reply);
        a server without tokens answers UNKNOWN_COMMAND and serves anyway."""
        r = self.cmd(b"auth %s\r\n" % token)
        if r.status not in ("AUTHENTICATED", "UNKNOWN_COMMAND"):
            raise UnexpectedReply(b"auth", b" ".join(r.words))

    def close(self):
        try:
            self.sock.sendall(b"quit\r\n")
        except (OSError, ValueError):  # (ValueError: an ssl socket already closed)
            pass
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- raw I/O

    def _io_error(self, e: Exception) -> ConnectError:
        if isinstance(e, TimeoutError):
            return ConnectError(f"{self.where}: no reply (timed out)")
        if not self._answered and (isinstance(e, ConnectionResetError) or type(e).__module__ == "ssl"):
            # (after a TLS 1.3 handshake, a refused client certificate shows here)
            return ConnectError(f"{self.where}: {self.secure.refused(e, self.address, self.timeout)}")
        return ConnectError(f"{self.where}: connection lost ({getattr(e, 'strerror', None) or e})")

    def _closed(self) -> ConnectError:
        if self._answered:
            return ConnectError(f"{self.where}: the server closed the connection")
        return ConnectError(f"{self.where}: {self.secure.refused(None, self.address, self.timeout)}")

    def send(self, data: bytes):
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise self._io_error(e) from None

    def _fill(self):
        try:
            chunk = self.sock.recv(1 << 18)
        except OSError as e:
            raise self._io_error(e) from None
        if not chunk:
            raise self._closed()
        self._buf += chunk

    def read_reply(self) -> Reply:
        while True:
            i = self._buf.find(b"\r\n")
            if i >= 0:
                break
            self._fill()
        line, self._buf = self._buf[:i], self._buf[i + 2:]
        words = line.split()
        body = None
        if words and len(words) == BODY_REPLIES.get(words[0], 0) + 1 and words[-1].isdigit():
            n = int(words[-1])
            while len(self._buf) < n + 2:
                self._fill()
            body, self._buf = self._buf[:n], self._buf[n + 2:]
        if words == [b"UNAUTHORIZED"]:  # (--auth-tokens: the connection is closed after it)
            raise ConnectError(f"{self.where}: {self.secure.unauthorized()}")
        self._answered = True
        return Reply(words, body)

    def pipeline(self, commands: list[bytes]) -> list[Reply]:
        """One reply per command, the commands sent in writes of up to PIPELINE
        commands (and about 16 KiB): each write fits in the socket buffers, so
        it never waits on replies nobody reads yet. The first write of a
        connection holds one command: a server that refuses it (UNAUTHORIZED)
        closes, and a close with input unread would be a reset, which can
        lose the reply that says why."""
        replies = []
        i = 0
        while i < len(commands):
            j, size = i, 0
            limit = PIPELINE if self._answered else 1
            while j < len(commands) and j - i < limit and size < 16384:
                size += len(commands[j])
                j += 1
            self.send(b"".join(commands[i:j]))
            replies += [self.read_reply() for _ in range(j - i)]
            i = j
        return replies

    def cmd(self, command: bytes, *ok: str) -> Reply:
        """One command; a reply whose status is not in ok (when given) is unexpected."""
        r = self.pipeline([command])[0]
        if ok and r.status not in ok:
            raise UnexpectedReply(command, b" ".join(r.words))
        return r

    # -- commands

    def stats(self) -> dict:
        return parse_dict(self.cmd(b"stats\r\n", "OK").data, STATS_TEXT)

    def list_tubes(self) -> list[str]:
        return parse_list(self.cmd(b"list-tubes\r\n", "OK").data)

    def stats_tube(self, tube: str) -> dict | None:
        r = self.cmd(b"stats-tube %s\r\n" % tube.encode(), "OK", "NOT_FOUND")
        return parse_dict(r.data, TUBE_TEXT) if r.status == "OK" else None

    def all_tubes(self) -> tuple[dict, list[dict]]:
        """The server's stats and every tube's stats-tube, in two round trips.
        A tube freed between the two is left out."""
        server, names = self.pipeline([b"stats\r\n", b"list-tubes\r\n"])
        for cmd, r in ((b"stats\r\n", server), (b"list-tubes\r\n", names)):
            if r.status != "OK":
                raise UnexpectedReply(cmd, b" ".join(r.words))
        cmds = [b"stats-tube %s\r\n" % n.encode() for n in parse_list(names.data)]
        tubes = []
        for cmd, r in zip(cmds, self.pipeline(cmds)):
            if r.status == "OK":
                tubes.append(parse_dict(r.data, TUBE_TEXT))
            elif r.status != "NOT_FOUND":
                raise UnexpectedReply(cmd, b" ".join(r.words))
        return parse_dict(server.data, STATS_TEXT), tubes

    def stats_job(self, job_id: int) -> dict | None:
        r = self.cmd(b"stats-job %d\r\n" % job_id, "OK", "NOT_FOUND")
        return parse_dict(r.data, JOB_TEXT) if r.status == "OK" else None

    def stats_groups(self, names: list[str]) -> list[dict | None]:
        """tuber's stats-group (a server with --extensions) for each name,
        pipelined: its stats, or None when there is no such group."""
        cmds = [b"stats-group %s\r\n" % n.encode() for n in names]
        out: list[dict | None] = []
        for cmd, r in zip(cmds, self.pipeline(cmds)):
            # (beanstalkd, and ours without --extensions, answer BAD_FORMAT;
            # the names were checked before)
            if r.status in ("UNKNOWN_COMMAND", "BAD_FORMAT"):
                raise AdminError(f"{self.where} does not know stats-group "
                                 "(pybeanstalkd needs --extensions; tuber has it)")
            if r.status not in ("OK", "NOT_FOUND"):
                raise UnexpectedReply(cmd, b" ".join(r.words))
            out.append(parse_dict(r.data, GROUP_TEXT) if r.status == "OK" else None)
        return out

    def use(self, tube: str):
        self.cmd(b"use %s\r\n" % tube.encode(), "USING")

    def peek_state(self, state: str) -> tuple[int, bytes] | None:
        r = self.cmd(b"peek-%s\r\n" % state.encode(), "FOUND", "NOT_FOUND")
        return (r.int(1), r.data) if r.status == "FOUND" else None

    def peek(self, job_id: int) -> tuple[int, bytes] | None:
        r = self.cmd(b"peek %d\r\n" % job_id, "FOUND", "NOT_FOUND")
        return (r.int(1), r.data) if r.status == "FOUND" else None

    def kick(self, bound: int) -> int:
        return self.cmd(b"kick %d\r\n" % bound, "KICKED").int(1)

    def kick_job(self, job_id: int) -> bool:
        return self.cmd(b"kick-job %d\r\n" % job_id, "KICKED", "NOT_FOUND").status == "KICKED"

    def reserve_job(self, job_id: int) -> bytes | None:
        """reserve-job (beanstalkd 1.12 and later): the job's body, now held by
        this connection; None when there is no such job or another connection
        holds it."""
        r = self.cmd(b"reserve-job %d\r\n" % job_id)
        if r.status == "RESERVED":
            return r.data
        if r.status == "NOT_FOUND":
            return None
        if r.status == "UNKNOWN_COMMAND":
            raise AdminError(f"{self.where} does not know reserve-job (beanstalkd 1.12 or later has it)")
        raise UnexpectedReply(b"reserve-job %d" % job_id, b" ".join(r.words))

    def bury(self, job_id: int, pri: int) -> bool:
        return self.cmd(b"bury %d %d\r\n" % (job_id, pri), "BURIED", "NOT_FOUND").status == "BURIED"

    def release(self, job_id: int, pri: int, delay: int) -> bool:
        r = self.cmd(b"release %d %d %d\r\n" % (job_id, pri, delay), "RELEASED", "BURIED", "NOT_FOUND")
        return r.status != "NOT_FOUND"

    def delete(self, job_id: int) -> bool:
        return self.cmd(b"delete %d\r\n" % job_id, "DELETED", "NOT_FOUND").status == "DELETED"

    def delete_many(self, ids: list[int]) -> list[str]:
        """Each id's reply status (DELETED or NOT_FOUND), pipelined."""
        cmds = [b"delete %d\r\n" % i for i in ids]
        out = []
        for cmd, r in zip(cmds, self.pipeline(cmds)):
            if r.status not in ("DELETED", "NOT_FOUND"):
                raise UnexpectedReply(cmd, b" ".join(r.words))
            out.append(r.status)
        return out

    def put(self, body: bytes, pri: int, delay: int, ttr: int) -> Reply:
        """The reply as is: INSERTED/BURIED id, or JOB_TOO_BIG, DRAINING, ... for the caller."""
        return self.cmd(b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body))

    def pause_tube(self, tube: str, seconds: int) -> bool:
        r = self.cmd(b"pause-tube %s %d\r\n" % (tube.encode(), seconds), "PAUSED", "NOT_FOUND")
        return r.status == "PAUSED"

    def flush(self, tube: str, states: tuple[str, ...], max_window: int = 1024):
        """Delete every job of the given states in tube; yields the counts deleted
        so far ({state: n}) after each batch, and ends when no peek finds one.

        Each round trip peeks the head of each state; the ids just above the
        lowest one found are probed with stats-job (read-only, pipelined) and
        those in this tube and one of the states join the batch, which is then
        deleted in one pipelined write. The probe window doubles while most
        probed ids belong to the batch (jobs put in a row have consecutive ids)
        and shrinks when they do not, down to the peeked jobs alone. A job
        reserved by another connection meanwhile gets NOT_FOUND and stays."""
        self.use(tube)
        peeks = [b"peek-%s\r\n" % s.encode() for s in states]
        deleted = dict.fromkeys(states, 0)
        window = 16
        while True:
            batch = {}
            for cmd, state, r in zip(peeks, states, self.pipeline(peeks)):
                if r.status == "FOUND":
                    batch[r.int(1)] = state
                elif r.status != "NOT_FOUND":
                    raise UnexpectedReply(cmd, b" ".join(r.words))
            if not batch:
                return
            low = min(batch)
            probe = [i for i in range(low + 1, min(low + 1 + window, MAX_U64 + 1)) if i not in batch]
            cmds = [b"stats-job %d\r\n" % i for i in probe]
            hits = 0
            for i, r in zip(probe, self.pipeline(cmds)):
                if r.status == "OK":
                    job = parse_dict(r.data, JOB_TEXT)
                    if job.get("tube") == tube and job.get("state") in states:
                        batch[i] = job["state"]
                        hits += 1
            if probe and hits * 2 >= len(probe):
                window = min(window * 2, max_window)
            elif hits * 8 < len(probe):
                window //= 2
            window = max(window, 1)
            ids = sorted(batch)
            for i, status in zip(ids, self.delete_many(ids)):
                if status == "DELETED":
                    deleted[batch[i]] += 1
            yield dict(deleted)


# -- the HTTP side (--http), for what the protocol does not carry


def http_get_json(addr: str, path: str, auth: str | None, timeout: float) -> dict:
    """GET http://ADDR/PATH as JSON; AdminError subclasses only."""
    return _http_json("GET", addr, path, auth, timeout)


def http_post_json(addr: str, path: str, auth: str | None, timeout: float) -> dict:
    """POST an action (no body) to http://ADDR/PATH; its JSON reply."""
    return _http_json("POST", addr, path, auth, timeout)


def _http_json(method: str, addr: str, path: str, auth: str | None, timeout: float) -> dict:
    import base64
    import json
    import urllib.error
    import urllib.request

    headers = {"X-Pybeanstalkd": "1"} if method == "POST" else {}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    req = urllib.request.Request(f"http://{addr}{path}", headers=headers, method=method,
                                 data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        if e.code == 401:
            raise AdminError(f"{addr}: authorization required (--http-auth USER:PASSWORD)") from None
        try:
            why = json.loads(e.read()).get("error", "")
        except ValueError:
            why = ""
        raise AdminError(f"{addr}: HTTP {e.code}" + (f": {why}" if why else "")) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise ConnectError(f"cannot reach the HTTP side at {addr}: {reason}") from None
    except ValueError:
        raise ConnectError(f"{addr}{path} did not answer JSON") from None


def cluster_report(addr: str, auth: str | None, timeout: float) -> tuple[dict, str, str | None]:
    """The cluster seen by its leader (only it knows each node's lag),
    reached through any node: (report, where it came from, a warning)."""
    st = http_get_json(addr, "/api/v1/cluster", auth, timeout)
    if st.get("role") == "leader":
        return st, addr, None
    leader = next((n for n in st.get("nodes", ()) if n.get("name") == st.get("leader")), None)
    if not st.get("leader"):
        return st, addr, "no node leads now (a failover, or etcd has no quorum)"
    if leader is None or not leader.get("http"):
        return st, addr, f"the leader {st['leader']} has no --http address registered"
    try:
        return http_get_json(leader["http"], "/api/v1/cluster", auth, timeout), leader["http"], None
    except AdminError as e:
        return st, addr, f"the leader {st['leader']}: {e}"


def forget_node(addr: str, name: str, auth: str | None, timeout: float) -> str:
    """Ask the cluster's leader, found through any node, to unregister
    node name; the leader's HTTP address."""
    from urllib.parse import quote

    st, where, warning = cluster_report(addr, auth, timeout)
    if st.get("role") != "leader":
        raise AdminError(f"cannot forget {name}: {warning or 'no leader found'}")
    http_post_json(where, f"/api/v1/cluster/nodes/{quote(name, safe='')}/forget", auth, timeout)
    return where

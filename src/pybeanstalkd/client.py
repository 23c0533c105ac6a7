"""A small typed client for the protocol and its extensions (a server run
with --extensions; tuber speaks the same): put tags (unique jobs,
concurrency keys, groups, tries), batches, flush-tube, drain, weighted
watches and reserve modes, besides the plain commands a worker needs. It imports nothing else of ours, and nothing outside the standard
library.

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
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import TracebackType
    from typing import Literal, Self

DEFAULT_PRI = 1 << 31
MODES = ("fifo", "weighted", "weighted-fair")


class CommandError(Exception):
    """The server answered something the command does not expect."""

    def __init__(self, command: bytes, reply: bytes) -> None:
        super().__init__(f"{command.split(b' ')[0].decode()}: {reply.decode('latin-1').strip()}")
        self.reply = reply


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
    def __init__(self, host: str = "127.0.0.1", port: int = 11300,
                 timeout: float | None = None) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

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
        return line

    def _data(self, size: int) -> bytes:
        while len(self.buf) < size + 2:
            self._fill()
        data, self.buf = self.buf[:size], self.buf[size + 2:]
        return data

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buf += chunk

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

    def release(self, job_id: int, pri: int = DEFAULT_PRI, delay: int = 0) -> bool:
        """True if released; False if it was buried instead (--max-tries, or
        the server is out of memory)."""
        return self._cmd(b"release %d %d %d" % (job_id, pri, delay),
                         b"RELEASED", b"BURIED")[0] == b"RELEASED"

    # -- the server -------------------------------------------------------------

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

"""One client connection as the engine sees it: its framing state, its
pending input and its share of the work."""
from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol

from .replies import RESERVE
from .tube import Conn

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .engine import Engine
    from .job import Job
    from .outcome import Outcome
    from .tags import Tags


class Transport(Protocol):
    """What the engine's callers write replies through: the I/O layer's
    transport (core/ cannot name asyncio's)."""

    def is_closing(self) -> bool: ...
    def write(self, data: bytes, /) -> None: ...
    def writelines(self, data: Iterable[bytes], /) -> None: ...
    def close(self) -> None: ...


# Framing states: a command line next, the rest of an over-long line to
# skip, a put's body, a body to discard (its reply in skip_reply). Typed
# int, not each its literal: a state read again after a call may differ.
LINE: Final[int] = 0
SKIP: Final[int] = 1
BODY: Final[int] = 2
BITBUCKET: Final[int] = 3
BUSY: Final[int] = 4  # a command runs in background slices; later input waits for its reply
# Commands one call may run (Session.budget): the I/O layer lowers it while
# clients take turns.
UNLIMITED: Final = 1 << 62
# A client watching many tubes pays for each in its reserves (waiting in
# each tube's queue, and leaving them): past WIDE tubes, each of its
# commands counts as len(watch) // WIDE of CALL_UNITS, the most one call
# runs of cheap commands (engine.py; a reserve-batch's reserves likewise).
# 340 `reserve-with-timeout 0` from one client watching 20,000 tubes held
# everyone else for 0.8 s when run at once.
WIDE: Final = 16
CALL_UNITS: Final = 4096
# A read's replies stop at about this many bytes (one reply past it at
# most: the size is looked at from the first command on); the rest of the
# read waits until they are written (engine.backlog), so a client that
# pipelines and never reads holds a bounded buffer. A reserve-batch's
# reply stops there too (extensions.py), its bodies read back from disk
# included.
OUT_LIMIT: Final = 64 << 10


def wide_budget(budget: int, watched: int) -> int:
    """How many commands one call may run for a connection watching
    `watched` tubes (more than WIDE), given its budget: never more than
    CALL_UNITS shared among its tubes, never fewer than one."""
    return (budget if budget < CALL_UNITS else CALL_UNITS) // (watched // WIDE) or 1


class Session(Conn):
    """One client connection: framing state plus what the queue tracks, and
    its replies (out) until the I/O layer writes them."""

    __slots__ = ("out", "sink", "engine", "state", "need", "pending", "skip", "plen", "in_job",
                 "in_tags", "skip_reply", "closing", "hup", "fd", "hold", "transport", "budget", "ran")

    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self.out: list[bytes] = []
        self.sink = engine.dirty  # (the engine's list of connections with output)
        self.engine = engine
        self.state = LINE
        self.need = 0  # bytes still wanted in BODY or BITBUCKET state
        # (a view only to hold the start of a big body: Engine._keep)
        self.pending: list[bytes | memoryview] = []  # received; all but pending[0][:skip] not yet parsed
        self.skip = 0
        self.plen = 0  # bytes not yet parsed
        self.in_job: Job | None = None  # a put's job while its body is received
        self.in_tags: Tags | bytes | None = None  # ... its tags, or its idp: key alone (--extensions)
        self.skip_reply = b""
        self.closing = False  # quit: close once the replies are written
        self.hup = False  # the peer half-closed: blocking reserves time out at once
        self.hold = 0  # with -f0: replies wait until the binlog is synced this far
        self.fd = -1
        self.transport: Transport | None = None  # the I/O layer's, while the connection is open
        self.budget = UNLIMITED  # commands a call may run before it stops (backlog)
        self.ran = 0  # commands the last batch of a read ran

    def send(self, data: bytes) -> None:
        if not self.out:
            self.sink.append(self)
        self.out.append(data)

    def send_job(self, word: bytes, job: Job) -> bool:
        """The job's header and body; False if its body is in the binlog
        (--bodies-on-disk: an OnDisk) and could not be read back: then
        the client is answered INTERNAL_ERROR, and a reserved job is
        buried (Engine.unreadable): it stays, and the next reserve gets
        another."""
        body = job.body
        if not isinstance(body, bytes):  # (an OnDisk)
            got = self.engine.q.store.body(job)
            if got is None:
                self.engine.unreadable(self, job, word == b"RESERVED")
                return False
            body = got
        out = self.out
        if not out:
            self.sink.append(self)
        out.append(b"%s %d %d\r\n" % (word, job.id, len(body) - 2))  # (job_header, inline)
        out.append(body)
        return True

    def reserved(self, job: Job) -> None:
        self.send_job(b"RESERVED", job)

    def no_job(self, outcome: Outcome) -> None:
        self.send(RESERVE[outcome])

    def woken(self) -> None:
        self.engine.resume.append(self)


class VerboseSession(Session):
    """-V -V: log every reply line and every job sent, as the reference does."""

    __slots__ = ()

    def send(self, data: bytes) -> None:
        log = self.engine.log
        log(">%d reply %s" % (self.fd, data.split(b"\r\n", 1)[0].decode("latin-1")))
        if data.startswith(b"OK "):
            log(">%d job 0" % self.fd)
        super().send(data)

    def send_job(self, word: bytes, job: Job) -> bool:
        if not super().send_job(word, job):
            return False
        log = self.engine.log
        log(">%d reply %s %d %d" % (self.fd, word.decode(), job.id, len(job.body) - 2))
        log(">%d job %d" % (self.fd, job.id))
        return True

"""One client connection as the engine sees it (Session): its framing
state, its pending input and its share of the work; and the engine's state
as the commands see it (EngineState), which keeps lists of sessions."""
from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol, final

from .. import BEANSTALKD_VERSION
from .job import Conn
from .protocol import INTERNAL_ERROR, NS
from .replies import RESERVE

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterable

    from .job import Job
    from .outcome import Outcome
    from .queue import Queue
    from .puttags import Tags


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


class ReplyLog:
    """-V -V: log every reply line and every job sent, as the reference does."""

    __slots__ = ("log",)

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log

    def reply(self, fd: int, data: bytes) -> None:
        self.log(">%d reply %s" % (fd, data.split(b"\r\n", 1)[0].decode("latin-1")))
        if data.startswith(b"OK "):
            self.log(">%d job 0" % fd)

    def job(self, fd: int, word: bytes, job: Job) -> None:
        self.log(">%d reply %s %d %d" % (fd, word.decode(), job.id, len(job.body) - 2))
        self.log(">%d job %d" % (fd, job.id))


@final
class Session(Conn):
    """One client connection: framing state plus what the queue tracks, and
    its replies (out) until the I/O layer writes them."""

    __slots__ = ("out", "sink", "engine", "state", "need", "pending", "skip", "plen", "in_job",
                 "in_tags", "skip_reply", "closing", "hup", "fd", "hold", "transport", "budget", "ran",
                 "replies")

    def __init__(self, engine: EngineState) -> None:
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
        # -V -V: what logs each reply (None: nothing does)
        self.replies = ReplyLog(engine.log) if engine.verbose >= 2 else None

    def send(self, data: bytes) -> None:
        if self.replies is not None:
            self.replies.reply(self.fd, data)
        if not self.out:
            self.sink.append(self)
        self.out.append(data)

    def send_job(self, word: bytes, job: Job) -> bool:
        """The job's header and body; False if its body is in the binlog
        (--bodies-on-disk: an OnDisk) and could not be read back: then
        the client is answered INTERNAL_ERROR, and a reserved job is
        buried (EngineState.unreadable): it stays, and the next reserve gets
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
        out.append(b"%s %d %d\r\n" % (word, job.id, len(body) - 2))  # (the header)
        out.append(body)
        if self.replies is not None:
            self.replies.job(self.fd, word, job)
        return True

    def reserved(self, job: Job) -> None:
        self.send_job(b"RESERVED", job)

    def no_job(self, outcome: Outcome) -> None:
        self.send(RESERVE[outcome])

    def woken(self) -> None:
        self.engine.resume.append(self)


VERSION: Final = BEANSTALKD_VERSION.encode()  # for stats (EngineState.version)


def no_rusage() -> tuple[float, float]:
    return 0.0, 0.0


class Host:
    """What `stats` says of the process and the machine. The server passes one
    read from the OS (server/loop.py); the pure layer's default is fixed
    values."""

    __slots__ = ("pid", "instance_id", "hostname", "os", "platform", "rusage")

    def __init__(self, pid: int = 0, instance_id: bytes = b"0000000000000000",
                 hostname: bytes = b"", os: bytes = b"", platform: bytes = b"",
                 rusage: Callable[[], tuple[float, float]] = no_rusage) -> None:
        self.pid = pid
        self.instance_id = instance_id
        self.hostname = hostname
        self.os = os
        self.platform = platform
        self.rusage = rusage  # () -> (user, system) CPU seconds


FIXED_HOST: Final = Host()  # Engine's default host (one instance, shared)


class Verifier(Protocol):
    """--auth-tokens: the server's check of a token."""

    def verify(self, candidate: bytes, /) -> bool: ...


class Count:
    """One command's calls: a stats counter (cmd-NAME)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


class Calls:
    """Each command's calls, by its stats name; a counter each, so that a
    call adds to an int in place (a dict of ints made an int object a call).
    The command table's names (cmdtable.py); stats, the metrics and the
    history read them."""

    __slots__ = ("by_name", "shown")

    def __init__(self, names: Iterable[str], shown: tuple[str, ...]) -> None:
        self.by_name = {name: Count() for name in names}
        self.shown = shown  # the counts `stats` shows (cmd-NAME), in its order

    def __getitem__(self, name: str) -> int:
        return self.by_name[name].n

    def add(self, name: str, n: int = 1) -> None:
        self.by_name[name].n += n

    def total(self) -> int:
        return sum(c.n for c in self.by_name.values())

    def as_dict(self) -> dict[str, int]:
        return {name: c.n for name, c in self.by_name.items()}


class EngineState:
    """The engine's state, as the commands (commands.py, extensions.py,
    admin.py) and the sessions see it: the queue, the clock, the counters
    and limits, and the lists of sessions to write, resume or come back to.
    The engine (engine.py), which frames input and decides who runs when,
    is one of these; a session refers to it, and it to its sessions, so
    both are here."""

    __slots__ = ("q", "now", "stamp", "start", "max_job_size", "verbose", "log", "counts",
                 "dirty", "resume", "broken", "bodies_on_disk", "backlog", "conn_ct", "producer_ct",
                 "worker_ct", "total_conn_ct", "draining", "max_memory", "at_cap", "inflight",
                 "said_ids_used_up", "hold", "auth", "host")

    def __init__(self, q: Queue, now: int, counts: Calls, max_job_size: int, verbose: int, log: Callable[[str], None], host: Host,
                 hold: int, max_memory: int | None, auth: Verifier | None,
                 bodies_on_disk: bool) -> None:
        self.q = q
        self.now = now
        # A put's created time: the read's, shared by every job put within
        # STAMP of it (one int for them all, 32 bytes a job less where
        # producers send one put a read). Ages are in seconds, and the wait
        # histogram's first bucket ends at 2**20 ns: 8 times STAMP.
        self.stamp = now
        self.start = now
        self.max_job_size = max_job_size
        self.verbose = verbose
        self.log = log
        self.counts = counts  # each command's calls, by its stats name
        self.dirty: list[Session] = []  # connections with replies to write
        self.resume: list[Session] = []  # connections whose blocking reserve ended
        # --bodies-on-disk: jobs reserved whose body the binlog could not give
        # back, with who reserved them and whether the body is lost: buried
        # (or given back) once the command is done (unreadable()), at the
        # engine's next _resume
        self.broken: list[tuple[Session, Job, bool]] = []
        self.bodies_on_disk = bodies_on_disk  # (stats: body-bytes-in-ram)
        self.backlog: list[Session] = []  # stopped at OUT_LIMIT with commands left
        self.conn_ct = self.producer_ct = self.worker_ct = self.total_conn_ct = 0
        self.draining = False
        self.max_memory = max_memory  # --max-memory: bytes that stored jobs may use
        self.at_cap = False
        # With --max-memory: what the bodies being received will cost once
        # stored (each counted from its put line on, so that puts in flight
        # together cannot pass the cap).
        self.inflight = 0
        self.said_ids_used_up = False
        # Which replies wait for the binlog (Session.hold, for the server's
        # reply gate: server/gate.py): none; those of commands that wrote
        # (-f0); or all (--cluster: no reply, a reserve's job included,
        # tells of a write that is not yet safe).
        self.hold = hold
        self.auth = auth  # --auth-tokens: has verify(token); the server gates new connections
        self.host = host  # (stats reads pid, id, hostname... through it: see below)

    def after_hup(self, s: Session) -> None:
        if s.plen and not s.closing:
            self.backlog.append(s)  # the transport calls more() on a later pass
        else:
            s.closing = True

    def in_slices(self, s: Session, gen: Generator[None, int, int],
                   answer: Callable[[int], bytes]) -> Generator[None, int, None]:
        """Run a command's slices; its reply (answer(value)) goes out after
        the last one, and only then is the session's later input read (the
        engine runs it after the slice: Engine.step)."""
        n = yield from gen
        s.send(answer(n))
        if s.state == BUSY:
            s.state = LINE
            if self.hold:
                s.hold = self.q.store.lsn
            if s.hup:
                if not s.closing:
                    self.after_hup(s)
            elif s.plen and not s.closing:
                self.resume.append(s)  # (its input runs at the driver's next _resume)

    def unreadable(self, s: Session, j: Job, reserving: bool) -> None:
        """j's body is in the binlog and could not be read (the store said
        where): s gets INTERNAL_ERROR. If s was reserving j, j is buried
        when the command that reserved it is done (_resume), so that it
        stays for an operator and is not handed out again and again (a
        peek changes nothing). Unless the read failed for want of
        descriptors or memory (store.transient), which is no fault of the
        job's: then it goes back to ready, as if never reserved."""
        s.send(INTERNAL_ERROR)
        if reserving:
            self.broken.append((s, j, not self.q.store.transient))
            self.resume.append(s)  # (so that _resume runs)

    # -- the memory cap -----------------------------------------------------

    def cap_crossed(self, over: bool) -> None:
        self.at_cap = over
        if self.verbose:
            self.log(self.memory_line("puts refused" if over else "puts accepted again"))

    def memory_line(self, what: str = "memory") -> str:
        """The -V line for the cap and its usage."""
        assert self.max_memory is not None  # (said only with --max-memory)
        return "%s: %d of %d bytes used by %d jobs" % (
            what, self.q.memory_used(), self.max_memory, self.q.job_count())

    # -- for stats ----------------------------------------------------------
    # (what it says of the process is read from self.host)

    @property
    def version(self) -> bytes:
        return VERSION

    def uptime(self) -> int:
        return (self.now - self.start) // NS

    def rusage(self) -> tuple[bytes, ...]:
        return tuple(b"%d.%06d" % divmod(round(t * 1e6), 1000000)
                     for t in self.host.rusage())

    def wal_stats(self) -> tuple[int, int, int, int, int]:
        return self.q.store.stats()

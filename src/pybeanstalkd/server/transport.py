"""asyncio/uvloop transport: feeds the Engine bytes and the monotonic clock.

One write per connection per event, however many replies a read produced.
Background work (a big kick, a close with many reservations...) runs
about 1 ms of slices per pass of the loop (call_soon), so other
connections are served in between.
"""
from __future__ import annotations

import asyncio
import gc
import select
import socket
from collections import deque
from time import monotonic_ns
from typing import TYPE_CHECKING, Final

from ..core.engine import Engine
from ..core.protocol import LINE_BUF_SIZE
from ..core.session import BITBUCKET, BODY, BUSY, UNLIMITED, Session
from .gate import Host, Immediate, Outlet

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..binlog.sync import Syncer
    from ..cluster.node import Node
    from .accept import Acceptor


PENDING_LIMIT: Final = 64 << 10  # bytes buffered from a client blocked in reserve
# Reads and turns. A client is read as uvloop reads (up to 256,000 bytes
# at a time, into the loop's own buffer: the cheapest way, and a command
# and its reply are often all a read holds) until a read comes bigger than
# CHUNK: it streams, pipelines or sends junk. From then on it is read CHUNK
# bytes at a time into our buffer (BoundedClient; uvloop's buffered reads
# cost about 2,300 more instructions a read, which these clients' reads
# amortize), one read a turn, until a read does not fill the buffer. A
# read (or what is left of one), or any while other clients wait for
# their turn, runs as a turn: as many of its commands as TURN_NS, or the
# client's share of ROUND_NS, allows, by what its commands have cost so
# far. The rest waits in the engine (Engine.backlog) for the client's next
# turn, and the client is not read meanwhile: so a round of every busy
# client takes about ROUND_NS.
#
# Passes. The clients waiting for a turn take them in the order they came
# (Server.queue), a pass of the loop running turns for about PASS_NS
# (Server.next_pass); the rest wait for the next pass, the loop polling its
# sockets in between. So a client that sends a command while hundreds
# pipeline or never read waits about a pass, not a round (run in one pass,
# a round of 300 such clients' turns takes about 18 ms). A turn that is a
# read is given in a pass (reading resumes) and runs in the poll after it,
# counted against the pass by what the client's last turn took. A read
# that comes once a pass has run PASS_NS, and is not a turn given, runs
# FLOOR_NS of commands at most (the first always), and what is left of it
# waits for the client's turn: a poll's reads, however many, cannot make
# the pass long either (the reference runs one command of each client a
# pass). Outside turns, a read no bigger than the reference's command
# buffer (LINE_BUF_SIZE: a command or two, as an unpipelined client sends)
# is not timed: it looks at the clock once, for the time the engine is
# given, as before passes were counted.
CHUNK: Final = 1 << 13
# A body (or a refused put's bytes) is read up to its end, BODY_READ at
# most at a time: its bytes are only appended.
BODY_READ: Final = 1 << 18
_READ = memoryview(bytearray(BODY_READ))  # the loop's one buffer for bounded reads
_SMALL = _READ[:CHUNK]
TURN_NS: Final = 1_000_000
ROUND_NS: Final = 10_000_000
PASS_NS: Final = 1_000_000
FLOOR_NS: Final = 20_000
COST_NS: Final = 5_000  # what a command is taken to cost before one is measured
# A young-generation collection every GC_PASSES loop passes, whatever was
# allocated. Serving allocates few GC-tracked objects (a reserve none), so
# collections can be a million commands apart; a list that grew meanwhile
# from nothing (a connection's reservation deadlines, refilled after its
# last reservation ended) is young, and the next collection walks all of
# it: 48 to 66 ms at about 600k entries. Collected this often, a young
# list holds what GC_PASSES bounded passes can add (a turn's commands
# each), and its survivors are frozen (loop.py).
GC_PASSES: Final = 64
# A tick runs timer entries (jobs coming due, TTRs expiring) TICK_CHUNK at a
# time and looks at the clock between chunks, stopping once TICK_BUDGET_NS
# is spent. What one entry costs varies 100-fold: 1M due jobs, 4 us each;
# 6M, 20 us; memory left idle for minutes, up to 400 us (measured: 35
# entries in 14.5 ms). A count alone, however tuned, let such a tick run
# 15-36 ms; a look at the clock costs under 1% of a chunk.
TICK_BUDGET_NS: Final = 1_000_000
TICK_CHUNK: Final = 8
# Background work (a big kick, a close holding many reservations...) runs
# slices of core.queue.SLICE jobs until this is spent, then lets others in.
STEP_BUDGET_NS = 1_000_000  # (not Final: tests set it to 0)


def run_timers(engine: Engine, now: int, clock: Callable[[], int] = monotonic_ns) -> bool:
    """Tick until nothing is due at now or the budget is spent; True if
    something due is left for the next pass."""
    end = clock() + TICK_BUDGET_NS
    while engine.tick(now, TICK_CHUNK):
        if clock() >= end:
            return True
    return False


def run_work(engine: Engine, clock: Callable[[], int] = monotonic_ns) -> bool:
    """Slices of background work until none is left or the budget is
    spent; True if some is left for the next pass."""
    now = clock()
    end = now + STEP_BUDGET_NS
    while engine.step(now):
        now = clock()
        if now >= end:
            return True
    return False


class _Client(asyncio.BaseProtocol):
    """One client connection's I/O. What it may make the server hold is
    bounded: unparsed input by one read, plus PENDING_LIMIT while it waits
    in reserve; replies by the engine's OUT_LIMIT (Engine.backlog) plus one
    reply; the transport's buffer by its high-water mark plus one write.
    Past any of these the connection is not read from until what holds it
    back is gone, as the reference stops reading a client it is still
    writing to. Client reads as uvloop does, BoundedClient in CHUNKs (see
    above); a connection's object changes class between the two."""

    __slots__ = ("srv", "transport", "outlet", "s", "blocked", "backlogged", "cost", "took",
                 "given", "asked", "hung_up")

    # Set by connection_made. It is None only before that and after
    # connection_lost, when only may_read, _read_as and go_on (which check)
    # can still be called: the hot paths use it unchecked.
    transport: asyncio.Transport
    outlet: Outlet  # ... its replies' way out (the session's transport; gate.py)
    srv: Server
    s: Session  # (from connection_made on)

    def __init__(self, srv: Server):
        self.srv = srv
        self.transport = None  # type: ignore[assignment]  # (see the class annotation)
        self.outlet = None  # type: ignore[assignment]  # (likewise)
        self.blocked = False  # its write buffer is over the high-water mark
        self.backlogged = False  # the engine left commands of its input for a later turn
        self.cost = COST_NS  # ns a command of this client costs, lately
        self.took = 0  # ns its last turn took
        self.given = -1  # the pass whose turn its next read is (Server.next_pass)
        self.asked = 0  # the size of the last buffer handed for a bounded read
        self.hung_up = False  # seen gone while not read (HangupWatch)

    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info("socket")
        s = self.s = self.srv.engine.connect()
        s.fd = sock.fileno() if sock is not None else -1
        s.transport = self.outlet = Outlet(transport)
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.srv.clients[s] = self
        if self.srv.verbose:
            self.srv.log("accept %d" % s.fd)

    def _after_read(self, turn_over: bool) -> None:
        srv = self.srv
        s = self.s
        if s.plen > PENDING_LIMIT and (s.waiting or s.state == BUSY) and not self.hung_up:
            self._hold_input()
        srv.flush()
        if s.closing and s not in srv.held:
            self.outlet.close()
        elif turn_over and not self.backlogged:
            # A big read, or a full buffer, ends its turn even when all of
            # it ran (or was skipped, as junk is): the next read waits for
            # its next turn.
            self.transport.pause_reading()
            self.next_turn()

    def _hold_input(self):
        """Blocked in reserve (or in a command still running in slices) with
        PENDING_LIMIT of input behind: stop reading, as the reference does,
        so a client that keeps sending meets TCP backpressure, not our
        memory; and watch for its hang-up meanwhile, as the reference
        does (else a client that sent that much and closed would never be
        seen gone)."""
        srv = self.srv
        self.transport.pause_reading()
        srv.paused.add(self.s)
        if srv.hangups is None:
            srv.hangups = HangupWatch(srv.loop)
        srv.hangups.watch(self)

    def peer_hung_up(self):
        """Seen while not read (_hold_input): read on, to the rest of its
        input and its end (eof_received), as the reference reads on after
        the TIMED_OUT it answers a hang-up with."""
        self.hung_up = True
        self.srv.paused.discard(self.s)
        self.may_read()

    def _read_as(self, cls):
        """Go on reading as Client or BoundedClient (called on a pass of the
        loop of its own, not from a read's callback: the transport changes
        how it reads)."""
        t = self.transport
        if self.__class__ is not cls and t is not None and not t.is_closing():
            self.__class__ = cls
            t.set_protocol(self)

    def _turn(self, run, *args):
        """run(s, *args), an engine call, as one turn: its commands held to
        TURN_NS, or to this client's share of ROUND_NS while others wait for
        their turn, by what its commands have cost so far; a read that is
        not the client's turn, once the pass has run PASS_NS, to FLOOR_NS."""
        s = self.s
        srv = self.srv
        t0 = srv.clock()
        # Its turn only in the poll right after the pass that gave it: a
        # read that comes later (nothing was waiting in its socket then,
        # or reading could not resume) is counted as any other.
        given = self.given == srv.pass_no
        if given or srv.spent < PASS_NS:
            share = ROUND_NS // (len(srv.turns) + 1)
            allowed = share if share < TURN_NS else TURN_NS
        else:
            allowed = FLOOR_NS
        s.budget = allowed // self.cost or 1
        s.ran = 0
        run(s, *args)
        took = srv.clock() - t0
        self.cost = (self.cost + took // (s.ran + 1)) >> 1 or 1
        self.took = took
        s.budget = UNLIMITED
        if given:
            self.given = -1  # (counted when given)
        else:
            srv.spend(took)

    def eof_received(self):
        srv = self.srv
        s = self.s
        srv.engine.eof(s, srv.clock())
        srv.flush()
        # Replies held for an fsync (-f0), due when a command's last slice
        # runs, or of commands still to run (one a pass: Engine.eof) still
        # go out: the transport stays open until they are sent (the gate
        # closes it then).
        return s in srv.held or s.state == BUSY or not s.closing

    def connection_lost(self, exc):
        srv = self.srv
        s = self.s
        del srv.clients[s]
        s.transport = None
        srv.paused.discard(s)
        srv.turns.discard(self)
        if srv.hangups is not None:
            srv.hangups.forget(self)
        if srv.verbose:
            srv.log("close %d" % s.fd)
        srv.engine.close(s, srv.clock())
        srv.flush()
        if srv.acceptor is not None:
            srv.acceptor.released()
        # The transport refers to this protocol: a cycle (with TLS one that
        # the transport keeps), never collected once frozen (loop.py).
        self.transport = None  # type: ignore[assignment]  # (see the class annotation)
        self.outlet = None  # type: ignore[assignment]  # (... and through its outlet)

    # A client that does not read its replies stops being read (as the
    # reference), and the engine stops at OUT_LIMIT bytes of replies per read
    # (Engine.backlog), so what it holds stays bounded (see the class).
    def pause_writing(self):
        self.blocked = True
        self.transport.pause_reading()

    def resume_writing(self):
        self.blocked = False
        if self.backlogged:
            self.next_turn()
        else:
            self.may_read()

    def may_read(self):
        """Read again unless something still holds the client back."""
        t = self.transport
        if (not self.blocked and not self.backlogged and self.s not in self.srv.paused
                and t is not None and not t.is_closing()):
            t.resume_reading()

    def stalled(self):
        """The engine left commands of this client's input for later."""
        self.backlogged = True
        self.transport.pause_reading()
        if not self.blocked:
            self.next_turn()

    def next_turn(self):
        """Wait for its turn (Server.next_pass): its commands left (go_on),
        or its next read."""
        srv = self.srv
        if self not in srv.turns:
            srv.turns.add(self)
            srv.queue.append(self)
            srv.pass_soon()

    def take_turn(self) -> int:
        """Its turn has come (Server.next_pass); returns what it is taken
        to cost there: a read's turn runs when the loop reads it, counted
        as what its last turn took."""
        if self.backlogged:
            self.go_on()
            return 0  # (_turn counted it)
        srv = self.srv
        self.given = srv.pass_no
        self.may_read()
        took = self.took
        share = ROUND_NS // (len(srv.turns) + 1)
        return took if took < share else share

    def go_on(self):
        t = self.transport
        srv = self.srv
        s = self.s
        if not self.backlogged or self.blocked or t is None or t.is_closing() or s in srv.held:
            return  # resume_writing or the gate (answered) calls again
        self.backlogged = False
        self._turn(srv.engine.more, srv.clock())
        srv.flush()  # may find it stalled again
        if s.closing and s not in srv.held:
            self.outlet.close()
        else:
            self.may_read()


class Client(_Client, asyncio.Protocol):
    """Reads as uvloop does: the common case, a command or a few a read."""

    __slots__ = ()

    def data_received(self, data: bytes) -> None:
        srv = self.srv
        now = srv.clock()
        if srv.timer_at is not None and now >= srv.timer_at:
            srv.on_timer(now)  # timers first, as the reference's loop does
        s = self.s
        if len(data) > CHUNK:
            self._turn(srv.engine.data, data, now)
            self._after_read(True)
            srv.loop.call_soon(self._read_as, BoundedClient)
            return
        if srv.turns or srv.spent >= PASS_NS:
            self._turn(srv.engine.data, data, now)
        else:
            srv.engine.data(s, data, now)
            if len(data) > LINE_BUF_SIZE:
                srv.spend(srv.clock() - now)
        self._after_read(False)


class BoundedClient(_Client, asyncio.BufferedProtocol):
    """Reads CHUNK bytes at a time (and a body up to its end), one read a
    turn, while its reads fill the buffer."""

    __slots__ = ()

    def get_buffer(self, sizehint):
        s = self.s
        state = s.state
        if state == BODY or state == BITBUCKET:
            n = s.need - s.plen
            if n > CHUNK:
                buf = _READ[:n] if n < BODY_READ else _READ
                self.asked = len(buf)
                return buf
        self.asked = CHUNK
        return _SMALL

    def buffer_updated(self, n):
        srv = self.srv
        now = srv.clock()
        if srv.timer_at is not None and now >= srv.timer_at:
            srv.on_timer(now)
        full = n == self.asked
        self._turn(srv.engine.data, _READ[:n].tobytes(), now)
        self._after_read(full)
        if not full:
            srv.loop.call_soon(self._read_as, Client)  # it stopped streaming


class HangupWatch:
    """Clients not read while they wait (Client._hold_input), watched for
    a hang-up as the reference watches a waiting client (EPOLLRDHUP): in an
    epoll set of their own, whose descriptor the loop watches. Where there
    is no epoll, they are seen gone only once their wait ends."""

    def __init__(self, loop):
        self.clients: dict[int, _Client] = {}  # fd -> client
        self.ep = select.epoll() if hasattr(select, "epoll") else None
        if self.ep is not None:
            loop.add_reader(self.ep.fileno(), self._ready)

    def watch(self, c: _Client):
        fd = c.s.fd
        if self.ep is None or fd < 0 or self.clients.get(fd) is c:
            return
        try:
            self.ep.register(fd, select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR)
        except OSError:
            return
        self.clients[fd] = c

    def forget(self, c: _Client):
        fd = c.s.fd
        if self.clients.get(fd) is c:
            del self.clients[fd]
            assert self.ep is not None  # (watch() adds none without it)
            try:
                self.ep.unregister(fd)
            except OSError:  # (closed already: epoll dropped it then)
                pass

    def _ready(self):
        assert self.ep is not None  # (the loop watches it only when there is one)
        for fd, _ in self.ep.poll(0):
            c = self.clients.get(fd)
            if c is not None:
                self.forget(c)
                c.peer_hung_up()


class Server(Host):
    """The event loop's side of the engine: clients, timers, background
    slices; its reply gate (gate.py), made here from `gate` (the settings'
    choice: gate.gate_for), says which replies may go out.

    `clock` is the monotonic clock in ns: the time the engine is given,
    and what a turn's commands, a tick and background slices are measured
    by against their budgets. A test passes a fake one, so that what a
    turn runs depends on no machine's speed or load."""

    def __init__(self, loop, engine: Engine, verbose: int = 0,
                 gate: Callable[[Host], Immediate] = Immediate, replaying: bool = False,
                 clock: Callable[[], int] = monotonic_ns):
        self.loop = loop
        self.engine = engine
        self.verbose = verbose
        self.clock = clock
        self.clients: dict = {}  # Session -> Client
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at: int | None = None
        self.paused: set = set()  # sessions not read while blocked in reserve
        self.hangups: HangupWatch | None = None  # ... watched for a hang-up meanwhile
        self.turns: set = set()  # Clients with a turn to come: go_on or their next read
        self.queue: deque[_Client] = deque()  # ... in the order they came (and some gone)
        self.spent = 0  # ns of commands this pass has run (PASS_NS)
        self.pass_no = 0  # passes run (which one gave a client its read's turn)
        self.passing = False  # next_pass is scheduled
        self.stepping = False  # a slice of background work is scheduled
        self.acceptor: Acceptor | None = None  # our accept loop, told of each close
        self.replaying = replaying  # the binlog is being replayed (in a thread; --http only)
        self.passes = 0  # since the last young-generation collection
        self.cluster: Node | None = None  # --cluster: the Node (cluster/node.py), from join()
        self.gate = gate(self)
        self.held = self.gate.held  # sessions whose replies wait for the gate

    def replayed(self) -> None:
        """The binlog's replay, run aside while the HTTP side answered, is done."""
        self.replaying = False

    def join(self, node: Node) -> None:
        """--cluster: the node this server is a member of (made after the
        server, which it drives); the HTTP side and shutdown ask it."""
        self.cluster = node

    @property
    def syncer(self) -> Syncer | None:
        """The fsync thread's side (-b), for the metrics and the cluster."""
        return self.gate.syncer

    @staticmethod
    def log(msg: str):
        print(msg, flush=True)

    def flush(self) -> None:
        engine = self.engine
        self.gate.replies(engine.dirty)
        # The pass's collection, after its replies are written: before
        # them, it (about 12,000 instructions every GC_PASSES passes) was
        # on the round trip of one command in GC_PASSES (with -f0, between
        # the fsync and the reply).
        self.passes += 1
        if self.passes >= GC_PASSES:
            self.passes = 0
            gc.collect(0)
        if engine.q.slices.work and not self.stepping:
            self.stepping = True
            self.loop.call_soon(self.step)
        if self.paused:
            for s in [s for s in self.paused if not s.waiting and s.state != BUSY]:
                self.paused.discard(s)
                c = self.clients.get(s)
                if c is not None:
                    if self.hangups is not None:
                        self.hangups.forget(c)
                    c.may_read()
        backlog = engine.backlog
        if backlog:
            for s in backlog:
                c = self.clients.get(s)
                if c is not None:
                    c.stalled()
            backlog.clear()
        # Most events give no new time: a look at the timers' field, not a
        # call. Asking engine.take_due() at each event cost 38 instructions a
        # put and 36 a reserve+delete command compiled, and 793 and 791
        # pure, which put the pure build past its budget.
        timers = engine.q.timers
        if timers.due is not None:
            due: int = timers.take_due()  # type: ignore[assignment]  # (not None: looked)
            if self.timer_at is None or due < self.timer_at:
                self.arm(due)

    def spend(self, ns: int) -> None:
        """ns of commands a turn or a read ran, counted against this pass
        (PASS_NS). Reads run between passes too, when no one waits for a
        turn: a quarter of PASS_NS of them starts a new pass soon, so that
        the reads of earlier passes of the loop do not count against the
        next one."""
        self.spent += ns
        if self.spent >= PASS_NS >> 2:
            self.pass_soon()

    def pass_soon(self) -> None:
        if not self.passing:
            self.passing = True
            self.loop.call_soon(self.next_pass)

    def next_pass(self) -> None:
        """A pass of the loop: the clients that waited for a turn before it
        take them in order until PASS_NS is spent; the rest wait for the
        next pass, the loop reading its sockets in between."""
        self.spent = 0
        self.pass_no += 1
        queue = self.queue
        turns = self.turns
        n = len(queue)
        try:
            while n and self.spent < PASS_NS:
                n -= 1
                c = queue.popleft()
                if c not in turns:
                    continue  # closed meanwhile
                turns.discard(c)
                took = c.take_turn()  # (before the sum: a turn run adds to it)
                self.spent += took
        finally:  # (a turn that raised leaves the others their passes)
            self.passing = False
            if queue:
                self.pass_soon()

    def step(self):
        """Slices of background work for up to STEP_BUDGET_NS; the rest
        after other events."""
        self.stepping = False
        run_work(self.engine, self.clock)
        self.flush()

    def answered(self, s: Session) -> None:
        """s's held replies went out (gate.advanced): a client stopped with
        commands left goes on."""
        c = self.clients.get(s)
        if c is not None and c.backlogged:
            c.next_turn()

    def arm(self, due: int):
        if self.timer is not None:
            self.timer.cancel()
        self.timer_at = due
        delay = (due - self.clock()) / 1e9
        self.timer = self.loop.call_later(delay if delay > 0 else 0, self.on_timer)

    def on_timer(self, now=None):
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.timer_at = None
        engine = self.engine
        now = self.clock() if now is None else now
        run_timers(engine, now, self.clock)
        engine.take_due()
        self.flush()
        due = engine.next_due()  # (now or earlier if the budget ran out)
        if due is not None and (self.timer_at is None or due < self.timer_at):
            self.arm(due)

"""When a reply may go out: one rule, chosen once from the settings.

A command is answered once what it wrote to the binlog is as safe as the
settings promise:

    no binlog        at once                                    Immediate
    -b, -f MS / -F   once its records are handed to the kernel  Written
                     (before any reply of the same pass of the loop)
    -b, -f0          once an fsync covers them (group commit)   Synced
    --cluster        once they are on this node (fsynced with   Replicated
                     -f0) and every in-sync replica has acked
                     them, while the leader's lease holds

The engine marks each connection with the binlog position its replies wait
for (Session.hold; which commands mark it is the gate's `hold`, given to
the Engine when it is made). Once per pass of the loop the server hands
the gate the connections with replies (`replies`): those within `safe()`
are sent, the others wait in `held` until the gate is told that `safe()`
has moved on (`advanced()`: by the fsync thread, or by a replica's ack).
The HTTP side's actions wait for the same rule (`wait`).

The server makes its gate in its constructor (`make_gate`), and everything
that moves the gate (the Syncer, the cluster's Node) is handed it. What
the gate asks of the server is `Host`, which the Server (transport.py)
derives from: this module does not import the server.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Final, Protocol, final

from ..core.engine import HOLD_ALL, HOLD_NONE, HOLD_WRITES

if TYPE_CHECKING:
    from ..binlog.files import Wal
    from ..binlog.sync import Syncer
    from ..settings import Settings
    from collections.abc import Iterable

    from ..core.session import Session, Transport

SAFE = 1 << 62  # past any binlog position: everything is safe
# Replies holding a job body larger than this are written without joining
# them into one copy (see send).
BIG_BODY: Final = 1 << 14


class Host:
    """What a gate asks of the server it sends the replies of: the Server
    (transport.py) derives from this class and overrides each method, and
    the gate is made by its constructor. A base class, not a Protocol, so
    that in the compiled code the gate's calls to it stay native ones (a
    Protocol's are generic Python calls: with -b -f0, about 250
    instructions more a put, docs/performance/cmd-cost.py)."""

    # The event loop the server runs on (the Syncer hands finished fsyncs
    # back through it)
    loop: asyncio.AbstractEventLoop

    def answered(self, s: Session) -> None:
        """s's held replies went out: a client stopped with commands left
        goes on."""

    def flush(self) -> None:
        """End a pass of the loop now: its replies, its writes."""


@final
class Outlet:
    """A client's transport as its replies are written (Session.transport,
    from the Client's connection_made on). Its write is bound once: a call,
    where `transport.write` was a method looked up by name through the
    interpreter at each reply; and whether the server closed it is kept
    here (`closed`, set by close()), where asking the transport's
    is_closing() each reply was another such call. A transport closed by
    the loop (a failed read or write, an abort) drops what is written to
    it until its connection_lost ends the session's transport."""

    __slots__ = ("t", "write", "closed")

    def __init__(self, t: Transport) -> None:
        self.t = t
        self.write: Callable[[bytes], None] = t.write
        self.closed = False

    def writelines(self, data: Iterable[bytes]) -> None:
        self.t.writelines(data)

    def is_closing(self) -> bool:
        return self.closed or self.t.is_closing()

    def close(self) -> None:
        self.closed = True
        self.t.close()


class Immediate:
    """No binlog: every reply goes out at once."""

    hold = HOLD_NONE
    syncer: Syncer | None = None
    # sync_starting does something (the Syncer calls it only then)
    announces: ClassVar[bool] = False

    def __init__(self, srv: Host) -> None:
        self.srv = srv
        self.held: set[Session] = set()  # sessions whose replies wait for safe()
        self.waiters: list[tuple[int, asyncio.Future[None]]] = []  # (lsn, future): HTTP actions

    def safe(self) -> int:
        """Binlog bytes whose commands may be answered."""
        return SAFE

    def replies(self, dirty: list[Session]) -> None:
        """This pass's connections with replies: send those within safe(),
        hold the others (then clears dirty). Here all are: each session's
        replies are written to its transport (then it is closed if the
        session quit). The other gates send what they let go through
        this too. (Written here, not by a function this calls for each
        session: that cost 16 instructions a put and 25 an rd command
        compiled, 362 and 364 pure.)"""
        for s in dirty:
            out = s.out
            t: Outlet | None = s.transport  # type: ignore[assignment]  # (the Client's outlet, or None)
            if t is not None and not t.closed:
                # Big job bodies are written from the jobs' own bytes, not a
                # copy (a client that does not read holds references to them).
                n = len(out)
                if n == 1:
                    t.write(out[0])
                elif n == 2:  # (one job: its header and body)
                    if len(out[1]) > BIG_BODY:
                        t.writelines(out)
                    else:
                        t.write(out[0] + out[1])
                elif n < 16 and max(map(len, out)) > BIG_BODY:
                    t.writelines(out)
                else:
                    t.write(b"".join(out))
                if s.closing:
                    t.close()
            out.clear()
        dirty.clear()

    def _judge(self, dirty: list[Session], safe: int) -> None:
        held = self.held
        go = []
        for s in dirty:
            if s.hold > safe:
                held.add(s)
            else:
                go.append(s)
        dirty.clear()
        Immediate.replies(self, go)

    def advanced(self) -> int:
        """safe() has moved on: send the held replies and wake the waiters
        it now covers. Returns how many connections were answered."""
        return self._release(self.safe())

    def binlog_failed(self) -> None:
        """The binlog is out of use (the server goes on without it, as the
        reference does): nothing is left to wait for."""
        self._release(SAFE)

    def _release(self, safe: int) -> int:
        if self.waiters:
            waiting = []
            for lsn, fut in self.waiters:
                if lsn > safe:
                    waiting.append((lsn, fut))
                elif not fut.done():
                    fut.set_result(None)
            self.waiters = waiting
        if not self.held:
            return 0
        ready = [s for s in self.held if s.hold <= safe]
        self.held.difference_update(ready)
        Immediate.replies(self, ready[:])
        srv = self.srv
        for s in ready:
            srv.answered(s)
        return len(ready)

    def flush(self) -> None:
        """End a pass of the loop now (the server's flush: replies, writes)."""
        self.srv.flush()

    def _prepare(self) -> None:
        """Make what the binlog buffers as safe as this gate can at once."""

    async def wait(self, lsn: int) -> None:
        """Returns once an action that wrote up to lsn may be answered."""
        self._prepare()
        if self.safe() >= lsn:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append((lsn, fut))
        self.kick()
        await fut

    def kick(self) -> None:
        """Start what moves safe() on (an fsync), if it is not under way."""

    # -- what the fsync thread asks (binlog/sync.py) ---------------------

    def sync_starting(self) -> None:
        """An fsync starts: its records are written."""

    def sync_waits(self) -> bool:
        """Should the next fsync wait (for the last group's acks)?"""
        return False

    def final(self) -> None:
        """At shutdown: write and fsync what the binlog holds."""


class Written(Immediate):
    """-b with -f MS or -F: records reach the kernel before any reply of the
    same pass; the fsync thread syncs them on its own schedule."""

    def __init__(self, srv: Host, wal: Wal, wantsync: bool, rate_ns: int) -> None:
        from ..binlog.sync import Syncer  # (binlog/ is loaded with -b only)

        super().__init__(srv)
        self.wal = wal
        self.syncer = Syncer(srv.loop, wal, self, wantsync, rate_ns, self.announces)

    def safe(self) -> int:
        wal = self.wal
        return wal.written if wal.use else SAFE

    def replies(self, dirty: list[Session]) -> None:
        self.wal.flush()  # (the records first: one write a pass)
        Immediate.replies(self, dirty)  # (no reply is marked: they are all within safe())
        self.syncer.kick()  # type: ignore[union-attr]  # (set in __init__)

    async def wait(self, lsn: int) -> None:
        self.wal.flush()  # (as a protocol reply: after the write, never held)

    def kick(self) -> None:
        self.syncer.kick()  # type: ignore[union-attr]  # (set in __init__)

    def final(self) -> None:
        self.syncer.final()  # type: ignore[union-attr]  # (set in __init__)


class Synced(Written):
    """-b -f0: a command that wrote is answered once an fsync covers its
    records; the records of one pass are written when their fsync starts."""

    hold = HOLD_WRITES

    def safe(self) -> int:
        wal = self.wal
        return wal.synced if wal.use else SAFE

    def replies(self, dirty: list[Session]) -> None:
        if dirty:
            wal = self.wal
            if len(dirty) == 1 and not self.held and wal.use and dirty[0].hold > wal.synced:
                # One client's reply waits for an fsync, and no other: with
                # one client writing, the Syncer syncs here and now, and the
                # reply goes without being held (what kick, advanced and
                # _release would do for it).
                s = dirty[0]
                syncer: Syncer = self.syncer  # type: ignore[assignment]  # (set in __init__)
                if syncer.sync_for(s):
                    Immediate.replies(self, dirty)
                    self.srv.answered(s)
                    syncer.regroup(1 + self._release(wal.synced), syncer.inline_at)
                    return
            self._judge(dirty, self.safe())
        self.syncer.kick()  # type: ignore[union-attr]  # (set in __init__)

    async def wait(self, lsn: int) -> None:
        await Immediate.wait(self, lsn)  # (the fsync writes the records)


class Leader(Protocol):
    """What a Replicated gate asks of the node while it leads (cluster/node.py)."""

    def committed(self) -> int:
        """Binlog bytes on this node and acked by every ISR member (none
        once the lease may have run out)."""

    def ship(self) -> None:
        """Send what the binlog buffers to the followers now (-f0)."""

    def ship_soon(self) -> None:
        """... at the end of this pass of the loop (-f MS)."""

    def in_flight(self) -> bool:
        """Has an ISR member not acked the last batch yet?"""


class Replicated(Synced):
    """--cluster: while this node leads, a reply (of any command: a reserve
    tells of the queue too) waits until what the binlog holds is on this
    node (fsynced with -f0) and on every in-sync replica, and nothing is
    answered once the lease may have run out. Before it leads no client is
    served, and the binlog is written as with Written or Synced."""

    hold = HOLD_ALL
    announces: ClassVar[bool] = True  # (sync_starting ships a -f0 group to the followers)

    def __init__(self, srv: Host, wal: Wal, wantsync: bool, rate_ns: int,
                 each_write: bool) -> None:
        super().__init__(srv, wal, wantsync, rate_ns)
        self.each_write = each_write  # -f0: one batch per group commit
        self.leader: Leader | None = None

    def lead(self, leader: Leader) -> None:
        """This node leads from now on: replies wait for its followers."""
        self.leader = leader

    def safe(self) -> int:
        leader = self.leader
        if leader is None:
            return 0  # (nothing is answered by a follower)
        return leader.committed()

    def replies(self, dirty: list[Session]) -> None:
        leader = self.leader
        if leader is None:
            if not self.each_write:
                self.wal.flush()
        elif not self.each_write and self.wal.buf:
            leader.ship_soon()  # records are written and shipped once a pass
        if dirty:
            self._judge(dirty, 0 if leader is None else leader.committed())
        self.syncer.kick()  # type: ignore[union-attr]  # (set in __init__)

    def _prepare(self) -> None:
        leader = self.leader
        if leader is not None and not self.each_write and self.wal.buf:
            leader.ship_soon()

    def sync_starting(self) -> None:
        leader = self.leader
        if leader is not None and self.each_write:
            leader.ship()

    def sync_waits(self) -> bool:
        leader = self.leader
        return leader is not None and self.each_write and leader.in_flight()


def hold_for(settings: Settings) -> int:
    """Which commands' replies the engine marks, from the settings."""
    if settings.wal_dir is None:
        return HOLD_NONE
    if settings.cluster is not None:
        return HOLD_ALL
    return HOLD_WRITES if settings.fsync_each_write else HOLD_NONE


def gate_for(settings: Settings, wal: Wal | None) -> Callable[[Host], Immediate]:
    """The gate the settings call for, as the Server's constructor makes it."""
    if wal is None:
        return Immediate
    rate_ns = settings.syncrate_ms * 1_000_000
    if settings.cluster is not None:
        return lambda srv: Replicated(srv, wal, settings.wantsync, rate_ns, settings.fsync_each_write)
    if settings.fsync_each_write:
        return lambda srv: Synced(srv, wal, settings.wantsync, rate_ns)
    return lambda srv: Written(srv, wal, settings.wantsync, rate_ns)

"""asyncio/uvloop transport: feeds the Engine bytes and the monotonic clock.

One write per connection per event, however many replies a read produced.
Background work (a big kick, a close with many reservations...) runs
about 1 ms of slices per pass of the loop (call_soon), so other
connections are served in between.
"""
from __future__ import annotations

import asyncio
import gc
import socket
from time import monotonic_ns

from ..core.engine import BUSY, Engine


PENDING_LIMIT = 1 << 20  # bytes buffered from a client blocked in reserve
# A read is handled CHUNK bytes per loop pass (about 400 pipelined puts, a
# few ms): libuv delivers reads of up to 256 KB, and up to 32 of them from
# one socket before it looks at any other, seconds of work for a pipelining
# client with everyone else waiting.
CHUNK = 1 << 13
# A young-generation collection every GC_PASSES loop passes, whatever was
# allocated. Serving allocates few GC-tracked objects (a reserve none), so
# collections can be a million commands apart; a list that grew meanwhile
# from nothing (a connection's reservation deadlines, refilled after its
# last reservation ended) is young, and the next collection walks all of
# it: 48 to 66 ms at about 600k entries. Collected this often, a young
# list holds what GC_PASSES bounded passes can add (CHUNK bytes of
# commands each), and its survivors are frozen (loop.py).
GC_PASSES = 64
# A tick runs timer entries (jobs coming due, TTRs expiring) TICK_CHUNK at a
# time and looks at the clock between chunks, stopping once TICK_BUDGET_NS
# is spent. What one entry costs varies 100-fold: 1M due jobs, 4 us each;
# 6M, 20 us; memory left idle for minutes, up to 400 us (measured: 35
# entries in 14.5 ms). A count alone, however tuned, let such a tick run
# 15-36 ms; a look at the clock costs under 1% of a chunk.
TICK_BUDGET_NS = 1_000_000
TICK_CHUNK = 8
# Background work (a big kick, a close holding many reservations...) runs
# slices of core.queue.SLICE jobs until this is spent, then lets others in.
STEP_BUDGET_NS = 1_000_000


def run_timers(engine: Engine, now: int, clock=monotonic_ns) -> bool:
    """Tick until nothing is due at now or the budget is spent; True if
    something due is left for the next pass."""
    engine.q.tick_slice = TICK_CHUNK
    end = clock() + TICK_BUDGET_NS
    while engine.tick(now):
        if clock() >= end:
            return True
    return False


def run_work(engine: Engine, clock=monotonic_ns) -> bool:
    """Slices of background work until none is left or the budget is
    spent; True if some is left for the next pass."""
    now = clock()
    end = now + STEP_BUDGET_NS
    while engine.step(now):
        now = clock()
        if now >= end:
            return True
    return False


class Client(asyncio.Protocol):
    __slots__ = ("srv", "transport", "s", "blocked", "backlogged", "rest", "eof_late")

    def __init__(self, srv: Server):
        self.srv = srv
        self.transport = None
        self.blocked = False  # its write buffer is over the high-water mark
        self.backlogged = False  # the engine stopped at OUT_LIMIT with commands left
        self.rest = None  # what is left of a big read, handled on later passes
        self.eof_late = False  # the peer half-closed before rest was handled

    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info("socket")
        s = self.s = self.srv.engine.connect()
        s.fd = sock.fileno() if sock is not None else -1
        s.transport = transport
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.srv.clients[s] = self
        if self.srv.verbose:
            self.srv.log("accept %d" % s.fd)

    def data_received(self, data):
        if self.rest is not None or len(data) > CHUNK:
            if self.rest is not None:  # (reading is paused meanwhile; in case)
                self.rest = memoryview(bytes(self.rest) + data)
                return
            self.transport.pause_reading()
            self.rest = memoryview(data)[CHUNK:]
            self.srv.loop.call_soon(self._next_chunk)
            data = data[:CHUNK]
        srv = self.srv
        now = monotonic_ns()
        if srv.timer_at is not None and now >= srv.timer_at:
            srv.on_timer(now)  # timers first, as the reference's loop does
        s = self.s
        srv.engine.data(s, data, now)
        if s.plen > PENDING_LIMIT and (s.waiting or s.state == BUSY):
            # Blocked in reserve (or in a command still running in slices):
            # stop reading, as the reference does, so a client that keeps
            # sending meets TCP backpressure, not our memory.
            self.transport.pause_reading()
            srv.paused.add(s)
        srv.flush()
        if s.closing and s not in srv.held:
            self.transport.close()

    def _next_chunk(self):
        rest, self.rest = self.rest, None
        t = self.transport
        if t.is_closing():
            return
        self.data_received(bytes(rest[:CHUNK]))
        rest = rest[CHUNK:]
        if t.is_closing():
            return
        if rest:
            self.rest = rest
            self.srv.loop.call_soon(self._next_chunk)
        elif self.eof_late:
            if not self.eof_received():
                t.close()
        else:
            self.may_read()

    def eof_received(self):
        if self.rest is not None:
            self.eof_late = True  # handled once the rest of the read is
            return True
        srv = self.srv
        srv.engine.eof(self.s, monotonic_ns())
        srv.flush()
        # Replies held for an fsync (-f0), or due when a command's last slice
        # runs, still go out: the transport stays open until they are sent
        # (Server._send closes it then).
        return self.s in srv.held or self.s.state == BUSY

    def connection_lost(self, exc):
        srv = self.srv
        s = self.s
        del srv.clients[s]
        s.transport = None
        srv.paused.discard(s)
        if srv.verbose:
            srv.log("close %d" % s.fd)
        srv.engine.close(s, monotonic_ns())
        srv.flush()
        if srv.acceptor is not None:
            srv.acceptor.released()

    # A client that does not read its replies stops being read (as the
    # reference), and the engine stops at OUT_LIMIT bytes of replies per read
    # (Engine.backlog): what it holds is bounded by the transport's
    # high-water mark plus OUT_LIMIT (and one reply).
    def pause_writing(self):
        self.blocked = True
        self.transport.pause_reading()

    def resume_writing(self):
        self.blocked = False
        if self.backlogged:
            self.srv.loop.call_soon(self.go_on)
        else:
            self.may_read()

    def may_read(self):
        """Read again unless something still holds the client back."""
        t = self.transport
        if (not self.blocked and not self.backlogged and self.rest is None
                and self.s not in self.srv.paused and t is not None and not t.is_closing()):
            t.resume_reading()

    def stalled(self):
        """The engine left commands of this client's read for later."""
        self.backlogged = True
        self.transport.pause_reading()
        if not self.blocked:
            self.srv.loop.call_soon(self.go_on)

    def go_on(self):
        t = self.transport
        srv = self.srv
        s = self.s
        if not self.backlogged or self.blocked or t is None or t.is_closing() or s in srv.held:
            return  # resume_writing or release_held calls again
        self.backlogged = False
        srv.engine.more(s, monotonic_ns())
        srv.flush()  # may find it stalled again
        if s.closing and s not in srv.held:
            t.close()
        else:
            self.may_read()


class Server:
    def __init__(self, loop, engine: Engine, verbose: int = 0):
        self.loop = loop
        self.engine = engine
        self.verbose = verbose
        self.clients: dict = {}  # Session -> Client
        self.timer = None
        self.timer_at = None
        self.held: set = set()  # sessions whose replies wait for an fsync (-f0)
        self.paused: set = set()  # sessions not read while blocked in reserve
        self.syncer: Syncer | None = None
        self.stepping = False  # a slice of background work is scheduled
        self.acceptor = None  # our accept loop, told of each close
        self.sync_waiters: list = []  # (lsn, future): the HTTP side's actions under -f0
        self.replaying = False  # the binlog is being replayed (in a thread; --http only)
        self.passes = 0  # since the last young-generation collection
        self.commit = None  # --cluster: () -> binlog bytes safe to acknowledge
        self.cluster = None  # --cluster: the Node (cluster/node.py)
        self.replicate = None  # --cluster: () -> None, ships the binlog's buffer soon

    @staticmethod
    def log(msg: str):
        print(msg, flush=True)

    def flush(self):
        self.passes += 1
        if self.passes >= GC_PASSES:
            self.passes = 0
            gc.collect(0)
        engine = self.engine
        syncer = self.syncer
        dirty = engine.dirty
        if syncer is None:
            for s in dirty:
                self._send(s)
            dirty.clear()
        elif self.replicate is not None:
            # --cluster: replies wait for the replicas; records are written
            # and shipped once per pass of the loop.
            if syncer.wal.buf:
                self.replicate()
        elif not engine.hold_writes:
            # Records reach the kernel before any reply goes out. With -f0
            # replies wait for the fsync anyway: one write per group (_start).
            syncer.wal.flush()
        if dirty:  # (with a binlog)
            if not syncer.wal.use:
                synced = 1 << 62
            else:  # committed(), inline: this runs on every event with -b
                synced = syncer.wal.synced if self.commit is None else self.commit()
            for s in dirty:
                if s.hold > synced:
                    self.held.add(s)
                else:
                    self._send(s)
            dirty.clear()
        if syncer is not None:
            syncer.kick()
        if engine.q.work and not self.stepping:
            self.stepping = True
            self.loop.call_soon(self.step)
        if self.paused:
            for s in [s for s in self.paused if not s.waiting and s.state != BUSY]:
                self.paused.discard(s)
                c = self.clients.get(s)
                if c is not None:
                    c.may_read()
        backlog = engine.backlog
        if backlog:
            for s in backlog:
                c = self.clients.get(s)
                if c is not None:
                    c.stalled()
            backlog.clear()
        due = engine.q.due
        if due is not None:
            engine.q.due = None
            if self.timer_at is None or due < self.timer_at:
                self.arm(due)

    def step(self):
        """Slices of background work for up to STEP_BUDGET_NS; the rest
        after other events."""
        self.stepping = False
        run_work(self.engine)
        self.flush()

    @staticmethod
    def _send(s):
        out = s.out
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        t = s.transport
        if t is not None and not t.is_closing():
            t.write(data)
            if s.closing:
                t.close()

    def committed(self) -> int:
        """Binlog bytes whose commands may be answered."""
        return self.syncer.wal.synced if self.commit is None else self.commit()

    def until_synced(self, lsn: int):
        """A future done once the binlog is committed up to lsn (-f0: fsynced;
        in a cluster: also acked by every in-sync replica)."""
        fut = self.loop.create_future()
        self.sync_waiters.append((lsn, fut))
        if self.syncer is not None:
            self.syncer.kick()
        return fut

    def release_held(self, synced: int) -> int:
        if self.sync_waiters:
            waiting = []
            for lsn, fut in self.sync_waiters:
                if lsn > synced:
                    waiting.append((lsn, fut))
                elif not fut.done():
                    fut.set_result(None)
            self.sync_waiters = waiting
        ready = [s for s in self.held if s.hold <= synced]
        for s in ready:
            self.held.discard(s)
            self._send(s)
            c = self.clients.get(s)
            if c is not None and c.backlogged:
                self.loop.call_soon(c.go_on)
        return len(ready)

    def arm(self, due: int):
        if self.timer is not None:
            self.timer.cancel()
        self.timer_at = due
        delay = (due - monotonic_ns()) / 1e9
        self.timer = self.loop.call_later(delay if delay > 0 else 0, self.on_timer)

    def on_timer(self, now=None):
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.timer_at = None
        engine = self.engine
        now = monotonic_ns() if now is None else now
        run_timers(engine, now)
        engine.q.due = None
        self.flush()
        due = engine.next_due()  # (now or earlier if the budget ran out)
        if due is not None and (self.timer_at is None or due < self.timer_at):
            self.arm(due)

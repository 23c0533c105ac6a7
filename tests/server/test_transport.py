"""The transport's bounds on one connection, with a fake event loop and a
fake transport whose peer never reads: what a client may make the server
hold (its unparsed input, its replies, the transport's buffer), and when
the server stops reading it. The server's clock is fake too (CommandClock):
what a turn runs is what its commands are taken to cost, so that no
machine's speed or load changes it."""
from __future__ import annotations

import asyncio

from pybeanstalkd.core.engine import OUT_LIMIT, Engine
from pybeanstalkd.server.transport import (CHUNK, PASS_NS, PENDING_LIMIT, ROUND_NS, TURN_NS,
                                           BoundedClient, Client, Server)

HIGH = 64 << 10  # the transport's high-water mark (uvloop's and asyncio's default)
READ = 256_000  # what uvloop reads at most at a time


class Never:
    """A timer never run (Loop.call_later): only cancelled."""

    def cancel(self):
        pass


class Loop:
    def __init__(self):
        self.soon = []

    def call_soon(self, fn, *args):
        self.soon.append((fn, args))

    def call_later(self, delay, fn, *args):
        return Never()

    def add_reader(self, fd, fn):
        pass

    def run_once(self) -> int:
        """One pass: the callbacks scheduled before it."""
        todo, self.soon = self.soon, []
        for fn, args in todo:
            fn(*args)
        return len(todo)


class StuckTransport:
    """A peer that never reads: everything written stays here."""

    def __init__(self):
        self.protocol = None
        self.held = []  # what was written, as the objects given
        self.reading = True
        self.paused_writing = False
        self.closed = False

    def size(self) -> int:
        return sum(map(len, self.held))

    def write(self, data):
        self.writelines([data])

    def writelines(self, pieces):
        self.held.extend(pieces)
        if self.size() > HIGH and not self.paused_writing:
            self.paused_writing = True
            self.protocol.pause_writing()

    def pause_reading(self):
        self.reading = False

    def resume_reading(self):
        self.reading = True

    def is_closing(self):
        return self.closed

    def close(self):
        self.closed = True

    def get_extra_info(self, name):
        return None

    def set_protocol(self, p):
        self.protocol = p

    def is_reading(self):
        return self.reading


class CommandClock:
    """A monotonic clock that moves `per_command` ns for each command the
    engine has run, and stands still otherwise."""

    def __init__(self, engine: Engine, per_command: int):
        self.engine = engine
        self.per_command = per_command

    def __call__(self) -> int:
        return 1 + self.engine.counts.total() * self.per_command


COST = 10_000  # what a command takes on the fake clock, in ns


def connected():
    loop = Loop()
    engine = Engine(1, log=lambda m: None)
    srv = Server(loop, engine, clock=CommandClock(engine, COST))
    c = Client(srv)
    t = StuckTransport()
    t.protocol = c
    c.connection_made(t)
    return loop, engine, c, t


def read(loop: Loop, c: Client, t: StuckTransport, data: bytes, passes: int = 10000) -> int:
    """What the event loop does while data waits in the socket: hands it to
    the protocol a read at a time whenever reading is on, and runs the
    passes' callbacks; until all is read or nothing more happens."""
    fed = 0
    for _ in range(passes):
        while fed < len(data) and t.reading:
            if isinstance(c, asyncio.BufferedProtocol):
                buf = c.get_buffer(-1)
                n = min(len(buf), len(data) - fed)
                buf[:n] = data[fed:fed + n]
                c.buffer_updated(n)
            else:
                n = min(READ, len(data) - fed)
                c.data_received(data[fed:fed + n])
            fed += n
        if not loop.run_once():
            break
    return fed


def test_a_client_that_never_reads_is_held_to_its_bounds():
    loop, engine, c, t = connected()
    s = c.s
    body = b"x" * 60000
    read(loop, c, t, b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
    assert t.held == [b"INSERTED 1\r\n"]
    t.held.clear()
    stream = b"peek 1\r\n" * (1 << 20)  # 8 MB of commands, each asking for 60 kB
    fed = read(loop, c, t, stream)
    # It stopped reading: the transport is over its mark, nothing is left to run.
    assert not t.reading and c.blocked
    # What it holds: at most one read of input, one reply over the high-water
    # mark in the transport, and the job bodies there are the job's own bytes.
    assert s.plen <= CHUNK and not s.out
    assert t.size() <= HIGH + len(body) + 100
    own = engine.q.jobs[1].body
    assert all(p is own for p in t.held if len(p) > 1000)
    # It sent a big read (its put): it is read a CHUNK at a time since.
    assert isinstance(c, BoundedClient) and fed == CHUNK


def test_replies_stop_at_out_limit_before_the_next_command():
    loop, engine, c, t = connected()
    s = c.s
    body = b"y" * 40000
    read(loop, c, t, b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
    t.held.clear()
    t.paused_writing = True  # (as if over its mark: nothing is sent meanwhile)
    c.blocked = True
    engine.data(s, b"peek 1\r\n" * 100, 1)
    assert len(s.out) == 4  # two replies: the second went past OUT_LIMIT, no third
    assert OUT_LIMIT < sum(map(len, s.out)) <= OUT_LIMIT + len(body) + 100
    assert engine.backlog == [s]


def test_a_client_blocked_in_reserve_is_read_up_to_pending_limit():
    loop, engine, c, t = connected()
    s = c.s
    read(loop, c, t, b"reserve\r\n")
    assert s.waiting and t.reading
    read(loop, c, t, b"stats\r\n" * (1 << 18))
    assert not t.reading and s in c.srv.paused
    assert PENDING_LIMIT < s.plen <= PENDING_LIMIT + READ
    assert engine.counts["stats"] == 0 and not t.held


def test_a_big_read_runs_in_turns():
    # A read of more than CHUNK bytes runs as a turn of about TURN_NS of
    # commands; the rest waits for the next pass, the client not read
    # meanwhile, so that other connections are served between. A command
    # takes COST on the clock, and the client's cost is COST from the start.
    loop, engine, c, t = connected()
    c.cost = COST
    assert len(b"list-tube-used\r\n" * 1000) > CHUNK
    c.data_received(b"list-tube-used\r\n" * 1000)
    # (the first command of a read runs before the batch the budget holds)
    assert c.s.ran == TURN_NS // COST == 100
    assert c.backlogged and not t.reading and c in c.srv.turns
    assert len(t.held) == 1 and t.held[0].count(b"USING") == 101
    passes = 0
    while loop.run_once():
        passes += 1
    # The rest in turns of the same size, a turn a pass, one write a turn.
    turns = [w.count(b"USING") for w in t.held]
    assert sum(turns) == 1000 and len(turns) == passes + 1 == 10
    assert all(abs(n - TURN_NS // COST) <= 1 for n in turns[:-1])
    assert t.reading and not c.srv.turns
    # It sent a big read: it is read CHUNK bytes at a time, one read a pass,
    # until a read does not fill the buffer.
    assert isinstance(c, BoundedClient)
    assert read(loop, c, t, b"list-tube-used\r\n" * 1024, passes=1) == CHUNK  # one a pass
    c.get_buffer(-1)[:16] = b"list-tube-used\r\n"
    c.buffer_updated(16)
    loop.run_once()
    assert type(c) is Client  # back to uvloop's reads
    # A small read, no one else waiting (its own turns over): all of it at once.
    while loop.run_once():
        pass
    assert not c.srv.turns and not c.backlogged
    t.held.clear()
    c.data_received(b"list-tube-used\r\n" * 100)
    assert b"".join(t.held).count(b"USING") == 100 and not c.backlogged


def test_clients_that_take_turns_share_a_round():
    # With others waiting for their turn, one turn runs about its share of
    # ROUND_NS of commands, by what its commands cost: here 100 others and
    # a cost of 10 us, 10 commands.
    loop, engine, c, t = connected()
    c.srv.turns.update(object() for _ in range(99))
    c.cost = COST
    c.data_received(b"list-tube-used\r\n" * 100)
    # (the first command of a read runs before the batch the budget holds)
    assert c.s.ran == ROUND_NS // (100 * COST) == 10
    assert engine.backlog == [] and c.backlogged  # (flushed: its turn is queued)
    assert c in c.srv.turns


def test_input_left_for_a_later_turn_is_not_copied():
    # A turn may run one command of a big read: what is left stays in the
    # read's own bytes, at an offset, rather than copied at every turn.
    loop, engine, c, t = connected()
    c.cost = TURN_NS  # one command a turn
    data = b"list-tube-used\r\n" * 1000
    c.data_received(data)
    s = c.s
    assert s.pending[0] is data and s.skip == 2 * 16 and s.plen == len(data) - 32
    loop.run_once()
    assert s.pending[0] is data and s.skip == 3 * 16


def on(srv: Server) -> tuple[Client, StuckTransport]:
    """One more client of srv."""
    c = Client(srv)
    t = StuckTransport()
    t.protocol = c
    c.connection_made(t)
    return c, t


def poll(socks: list[tuple[Client, StuckTransport, bytearray]], per_read: int = 2 * CHUNK):
    """The loop's poll between passes: one read of each client that is read
    and has bytes waiting (at most per_read of them, as they come), in
    this order."""
    for c, t, waiting in socks:
        if not waiting or not t.reading:
            continue
        if isinstance(c, asyncio.BufferedProtocol):
            buf = c.get_buffer(-1)
            n = min(len(buf), len(waiting))
            buf[:n] = waiting[:n]
            del waiting[:n]
            c.buffer_updated(n)
        else:
            data = bytes(waiting[:per_read])
            del waiting[:len(data)]
            c.data_received(data)


def _crowd(n: int, sent: bytes):
    """A server with n clients that each sent `sent` and never read, and a
    probe client: (loop, clock, [(client, transport, unread)], probe, its
    transport)."""
    loop = Loop()
    engine = Engine(1, log=lambda m: None)
    clock = CommandClock(engine, COST)
    srv = Server(loop, engine, clock=clock)
    socks = []
    for _ in range(n):
        c, t = on(srv)
        c.cost = COST
        socks.append((c, t, bytearray(sent)))
    probe, pt = on(srv)
    return loop, clock, socks, probe, pt


def _probe(loop, clock, socks, probe, pt) -> int:
    """A pass of the loop, a poll's reads, then the probe's one command,
    answered at once: how long it waited."""
    sent = clock()
    pt.held.clear()
    loop.run_once()
    poll(socks)
    probe.data_received(b"list-tube-used\r\n")
    assert pt.held == [b"USING default\r\n"]
    return clock() - sent


def test_a_command_waits_about_a_pass_while_others_pipeline():
    # 50 clients pipeline more than a turn runs, and never read. Another
    # client's command, sent just after a poll of the loop, waits for the
    # pass that follows and for the reads of the next poll before its own:
    # about PASS_NS of the others' commands, however many there are, not
    # a round of a turn of each (ROUND_NS). The busy clients still share
    # the passes evenly.
    loop, clock, socks, probe, pt = _crowd(50, b"list-tube-used\r\n" * 4000)
    poll(socks)
    waits = []
    for _ in range(60):
        waits.append(_probe(loop, clock, socks, probe, pt))
    assert max(waits) <= PASS_NS + PASS_NS // 2  # (a round: 10 ms)
    assert probe.srv.turns and len(probe.srv.turns) >= 45  # (they were still busy)
    ran = [b"".join(t.held).count(b"USING") for c, t, _ in socks]
    assert min(ran) > 0.5 * max(ran)


def test_the_reads_of_a_poll_are_held_to_about_a_pass():
    # 50 clients each send 200 commands between two polls of the loop,
    # and never read: each read alone runs at once, but once a poll's
    # reads have run about PASS_NS, the next runs a few commands and
    # leaves the rest for its turn. So another client's command, read
    # last in the poll, still waits about a pass, not for every read.
    loop, clock, socks, probe, pt = _crowd(50, b"")
    waits = []
    for _ in range(20):
        for _c, _t, waiting in socks:
            waiting += b"list-tube-used\r\n" * 200
        waits.append(_probe(loop, clock, socks, probe, pt))
    assert max(waits) <= 4 * PASS_NS  # (the first poll ran a read in full; with no floor: 50 ms)
    ran = [b"".join(t.held).count(b"USING") for c, t, _ in socks]
    assert min(ran) > 0


def test_an_unpipelined_command_looks_at_the_clock_once():
    # With no one waiting for a turn, a read of a command or two runs
    # untimed: the one look at the clock is the time the engine is given.
    loop = Loop()
    engine = Engine(1, log=lambda m: None)
    clock = CommandClock(engine, COST)
    looks = []

    def counted() -> int:
        looks.append(1)
        return clock()

    srv = Server(loop, engine, clock=counted)
    c, t = on(srv)
    cycle = [b"put 0 0 60 100\r\n" + b"x" * 100 + b"\r\n", b"reserve\r\n", b"delete %d\r\n"]
    for i in range(1, 12):
        if i == 2:
            looks.clear()  # (the first reserve arms the TTR's timer)
        for command in cycle:
            c.data_received(command % i if b"%d" in command else command)
            while loop.run_once():
                pass
    assert len(looks) == 10 * len(cycle)
    assert b"".join(t.held).count(b"DELETED") == 11


class Logged(StuckTransport):
    """A stuck peer that also logs which client each write was for, and
    how many replies it held."""

    def __init__(self, log: list, name: int):
        super().__init__()
        self.log, self.name = log, name

    def writelines(self, pieces):
        self.log.append((self.name, sum(p.count(b"\r\n") for p in pieces)))
        super().writelines(pieces)


def pipeliners(n: int, commands: int):
    """srv and n clients that each sent `commands` list-tube-used in one
    read, and have had their first turn: the rest waits for their turns."""
    loop = Loop()
    engine = Engine(1, log=lambda m: None)
    srv = Server(loop, engine, clock=CommandClock(engine, COST))
    log: list[tuple[int, int]] = []
    clients = []
    for i in range(n):
        c = Client(srv)
        t = Logged(log, i)
        t.protocol = c
        c.connection_made(t)
        c.cost = COST
        clients.append((c, t))
    for c, _t in clients:
        c.data_received(b"list-tube-used\r\n" * commands)
    log.clear()
    return loop, srv, clients, log


def test_the_clients_waiting_take_turns_in_order():
    # 20 clients with 2,000 commands each: a turn each a round, in the
    # order they came, and a pass ends once it has run PASS_NS (here 1 ms:
    # two turns of a twentieth of ROUND_NS, 50 commands of 10 us each).
    loop, srv, clients, log = pipeliners(20, 2000)
    per_pass = []
    while True:
        before = len(log)
        if not loop.run_once():
            break
        per_pass.append(log[before:])
    turns = [name for writes in per_pass for name, _ in writes]
    assert turns[:40] == list(range(20)) * 2
    # No client waits while another takes two turns: between two turns of
    # one, each other has one at most.
    last: dict[int, int] = {}
    for k, name in enumerate(turns):
        if name in last:
            between = turns[last[name] + 1:k]
            assert len(between) == len(set(between))
        last[name] = k
    # A pass stops once it has run PASS_NS: within a turn of it.
    assert all(sum(n for _, n in writes) * COST <= PASS_NS + ROUND_NS // 20
               for writes in per_pass)
    assert len(per_pass) >= 2000 * 20 * COST // (PASS_NS + ROUND_NS // 20)
    assert all(b"".join(t.held).count(b"USING") == 2000 for _c, t in clients)
    assert not srv.turns and not srv.queue


def test_a_client_gone_while_waiting_for_its_turn_is_skipped():
    loop, srv, clients, log = pipeliners(3, 2000)
    gone, gt = clients[1]
    ran = gt.held[:]
    gone.connection_lost(None)
    assert gone not in srv.turns
    while loop.run_once():
        pass
    assert 1 not in [name for name, _ in log] and gt.held == ran
    assert all(b"".join(t.held).count(b"USING") == 2000 for c, t in clients if c is not gone)
    assert not srv.turns and not srv.queue


def test_a_client_that_cannot_be_written_to_waits_out_of_the_passes():
    # Over its transport's high-water mark, a client's turn is skipped and
    # it leaves the queue; once the transport drains it takes turns again.
    loop, srv, clients, log = pipeliners(3, 2000)
    stuck, st = clients[0]
    stuck.pause_writing()
    for _ in range(30):
        loop.run_once()
    names = [name for name, _ in log]
    assert 0 not in names and stuck not in srv.turns and stuck.backlogged
    assert 1 in names and 2 in names
    stuck.resume_writing()
    assert stuck in srv.turns and srv.queue[-1] is stuck
    while loop.run_once():
        pass
    assert all(b"".join(t.held).count(b"USING") == 2000 for _c, t in clients)


def test_a_client_whose_replies_are_held_waits_out_of_the_passes():
    # Replies held by the gate (-f0, --cluster): the client's next turn
    # waits until they went out, and then it goes on in the passes.
    loop, srv, clients, log = pipeliners(3, 2000)
    held, ht = clients[2]
    srv.held.add(held.s)  # (as the gate holds them)
    for _ in range(30):
        loop.run_once()
    names = [name for name, _ in log]
    assert 2 not in names and held not in srv.turns and held.backlogged
    assert 0 in names and 1 in names
    srv.held.discard(held.s)  # (as the gate lets them go: Immediate._release)
    srv.answered(held.s)
    assert held in srv.turns
    while loop.run_once():
        pass
    assert all(b"".join(t.held).count(b"USING") == 2000 for _c, t in clients)


def test_a_client_blocked_in_reserve_leaves_the_passes_to_the_others():
    # A client whose read starts with a reserve waits for a job with the
    # rest of its read behind: its turns are reads (up to PENDING_LIMIT),
    # not commands, and the others' passes go on. A put answers it; its
    # commands then run, and it takes turns again.
    loop, srv, clients, log = pipeliners(3, 2000)
    waiter, wt = on(srv)
    waiter.cost = COST
    waiter.data_received(b"reserve\r\n" + b"list-tube-used\r\n" * 1000)
    for _ in range(20):
        loop.run_once()
    assert waiter.s.waiting and not waiter.backlogged and waiter not in srv.turns
    assert wt.reading and {name for name, _ in log} == {0, 1, 2}  # (read on; the others ran)
    assert not b"".join(wt.held).count(b"RESERVED")
    putter, pt = on(srv)
    putter.data_received(b"put 0 0 60 1\r\nx\r\n")
    assert pt.held[-1] == b"INSERTED 1\r\n" and not waiter.s.waiting
    while loop.run_once():
        pass
    out = b"".join(wt.held)
    assert out.count(b"RESERVED 1 1") == 1 and out.count(b"USING") == 1000
    assert all(b"".join(t.held).count(b"USING") == 2000 for _c, t in clients)
    assert not srv.turns and not srv.queue


def test_a_pass_collects_after_its_replies_are_written():
    """Every GC_PASSES passes the server collects the young generation
    (GC_PASSES: why); it does so once the pass's replies are written, not
    before them, where it was on one command's round trip (with -f0,
    between its fsync and its reply)."""
    import gc

    from pybeanstalkd.server.transport import GC_PASSES

    loop, engine, c, t = connected()
    events = []
    seen = [0]

    def on_gc(phase, info):
        if phase == "start":
            events.append(("gc", len(t.held) - seen[0]))

    enabled = gc.isenabled()
    gc.disable()  # (the server's collection alone: gc.collect runs even so)
    gc.callbacks.append(on_gc)
    try:
        for _ in range(GC_PASSES):
            seen[0] = len(t.held)
            c.data_received(b"put 0 0 60 1\r\nx\r\n")
    finally:
        gc.callbacks.remove(on_gc)
        if enabled:
            gc.enable()
    assert events == [("gc", 1)]  # (the pass's one reply was already written)

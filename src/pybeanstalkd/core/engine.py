"""The server without I/O: connections feed bytes in, replies come out.

Engine.data(conn, bytes, now) parses every complete command a read delivered
and queues the replies on conn.out; the I/O layer then writes each dirty
connection once. Time is always passed in.

This module frames the input and schedules who runs when (the slices, the
backlog, the turns, hang-ups); what each command does is in commands.py
(found through the command table, cmdtable.py), and what the commands see
of the engine, and a connection's state, in session.py (EngineState,
Session): so the commands import nothing of this module.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Final

from . import protocol as P
from . import extensions as extensions_mod
from .cmdtable import CommandTable
from . import commands, jobmoves, reserving
from .protocol import LINE_BUF_SIZE, NS, Bad, name_ok
from .job import JOB_OVERHEAD, RESERVED
from .outcome import DONE
from .tagged import Tagged
from .queue import NO_TAGS_POLICY, Queue
from .slices import SLICE
from .tick import tick
from .putlines import PutLines
from .tags import ExtState
from .session import (  # noqa: F401 (Session, OUT_LIMIT: re-exported)
    BITBUCKET, BODY, BUSY, CALL_UNITS, FIXED_HOST, LINE, OUT_LIMIT, SKIP, UNLIMITED, WIDE,
    Calls, Count, EngineState, Host, Session, Verifier, wide_budget)

if TYPE_CHECKING:
    from collections.abc import Callable


    from .store import Store
    from .putlines import PutLine

# EngineState.hold: which commands' replies wait for the binlog (Session.hold).
HOLD_NONE: Final = 0
HOLD_WRITES: Final = 1
HOLD_ALL: Final = 2
STAMP: Final = 1 << 17  # ns (131 µs) a put's created time may be shared (EngineState.stamp)
BIG_REST: Final = 4096  # a partial body larger than this is kept as a view, not copied


class Engine(EngineState):
    """The driver: frames each connection's input into commands and runs
    them through the command table, and decides who runs when. What the
    commands see and change is its state (session.py: EngineState)."""

    __slots__ = ("commands", "extensions", "fast", "lines", "line_max", "puts", "reserves",
                 "timed_reserves", "deletes", "releases", "touches")

    def __init__(self, now: int, max_job_size: int = 65535, verbose: int = 0,
                 filesize: int = 10485760, log: Callable[[str], None] = print,
                 host: Host = FIXED_HOST, hold: int = HOLD_NONE, max_memory: int | None = None,
                 auth: Verifier | None = None, store: Store | None = None,
                 extensions: bool = False, max_tries: int = 0,
                 tag_state: ExtState | None = None, bodies_on_disk: bool = False) -> None:
        # tag_state: with --extensions, the tags' state, made before the
        # binlog whose codec writes from it (the server's draws for weighted
        # reserves are seeded from the OS). Made here if not given, with
        # its fixed draws.
        if tag_state is not None and not extensions:
            raise ValueError("the put tags' state is --extensions' own")
        if extensions and tag_state is None:
            tag_state = ExtState(max_tries)
        tags = None if tag_state is None else Tagged(tag_state)
        q = Queue(now, store, max_tries, NO_TAGS_POLICY if tags is None else tags)
        if store is None:
            q.store.filesize = filesize  # shown by stats even without -b
        # what each command line is: its parser, handler and counter (the
        # extensions' bound to the tags' policy)
        table = CommandTable(tags)
        counts = Calls([c.name for c in table.specs], table.shown)
        super().__init__(q, now, counts, max_job_size, verbose, log, host, hold, max_memory, auth,
                         bodies_on_disk)
        self.commands = table
        # The fast paths' counters (command())
        calls = counts.by_name
        self.puts = calls["put"]
        self.reserves = calls["reserve"]
        self.timed_reserves = calls["reserve-with-timeout"]
        self.deletes = calls["delete"]
        self.releases = calls["release"]
        self.touches = calls["touch"]
        self.extensions = extensions  # --extensions: tuber's commands (extensions.py)
        # The hot commands' fast paths (command()); off with -V -V, which
        # logs each command line, and in tests that compare the two paths.
        self.fast = verbose < 2
        self.lines = PutLines()  # the put lines they have parsed
        # The longest command line: the reference's, or a delete-batch's.
        self.line_max = extensions_mod.LINE_MAX if extensions else LINE_BUF_SIZE

    # -- connection lifecycle ---------------------------------------------

    def connect(self) -> Session:
        s = Session(self)
        reserving.attach(self.q, s)
        self.conn_ct += 1
        self.total_conn_ct += 1
        return s

    def _clock(self, now: int) -> None:
        """The time, at each entry point."""
        self.now = now
        if not 0 <= now - self.stamp < STAMP:
            self.stamp = now

    def data(self, s: Session, data: bytes, now: int) -> None:
        self._clock(now)
        if s.plen or s.state or s.waiting or s.closing:
            pending = s.pending
            pending.append(data)
            s.plen += len(data)
            if len(pending) > 32 and s.plen < len(pending) << 10:
                # Many small reads (a body sent a byte at a time): held as
                # one, not as an object each (tens of bytes of memory a byte).
                buf, start = self._input(s)
                s.pending, s.skip = [buf[start:] if start else buf], 0
            state = s.state
            if s.waiting or s.closing or (state and (
                    state == BUSY or (state == BODY and s.plen < s.need))):
                return
            self._run(s, now)
            return
        # The common case, flat: nothing buffered, and the read starts with
        # a whole command line (an unpipelined command, with a put's body).
        size = len(data)
        limit = self.line_max
        line = P.line_in(data if size <= limit else data[:limit])
        if line is None:
            s.pending.append(data)
            s.plen = size
            self._run(s, now)
            return
        pos = len(line) + 2
        hold = self.hold
        if hold:
            lsn = self.q.store.lsn
        self.command(s, line, now)
        if pos != size:
            if s.state == BODY and size - pos == s.need:
                s.state = LINE
                commands.finish_put(self, s, data[pos:], now)
            else:
                pos = self._process_commands(s, data, now, pos)
                if pos != size:
                    self._keep(s, data, pos)
        if hold and (self.q.store.lsn != lsn or hold == HOLD_ALL):
            s.hold = self.q.store.lsn
        if self.resume:
            self._resume(now)

    def eof(self, s: Session, now: int) -> None:
        """The peer half-closed: a blocked reserve gets TIMED_OUT, commands
        already received are still answered, and then the connection closes.

        Those commands run one reply at a time (more(): each pass of the
        loop runs commands until one has a reply), as the reference writes
        each reply before it reads the next command: a peer that closed
        for good makes that write fail, and then nothing more of its input
        runs."""
        self._clock(now)
        s.hup = True
        if s.state == BUSY:
            return  # the command's last slice comes back here (in_slices)
        if s.waiting:
            reserving.hangup(self.q, s)
        self.after_hup(s)

    def close(self, s: Session, now: int) -> None:
        """The connection is gone: release its reservations."""
        self._clock(now)
        s.closing = True
        if s.in_job is not None:  # a body that never came
            s.in_job = None
            if self.max_memory is not None:
                self.inflight -= s.need + JOB_OVERHEAD
        reserving.detach(self.q, s, now)
        s.pending = []
        s.skip = s.plen = 0
        self.conn_ct -= 1
        self.producer_ct -= s.producer
        self.worker_ct -= s.worker
        self._resume(now)

    def tick(self, now: int, n: int = SLICE) -> bool:
        """Run what is due (at most n timer entries); True if more is."""
        self._clock(now)
        more = self.q.tags.tick(self.q, now, tick(self.q, now, n))
        self._resume(now)
        return more

    def next_due(self) -> int | None:
        return self.q.next_due()

    def take_due(self) -> int | None:
        """The earliest time a timer was given since the last call (the I/O
        layer arms its clock for it after each event)."""
        return self.q.timers.take_due()

    def step(self, now: int) -> bool:
        """Run one slice of background work; True while more remains."""
        self._clock(now)
        more = self.q.slices.step(now)
        self._resume(now)
        return more

    def settle(self, now: int) -> None:
        """After a change made outside a command (the HTTP side's actions):
        sessions whose blocked reserve it answered go on with their input."""
        self._clock(now)
        self._resume(now)

    def _resume(self, now: int) -> None:
        if self.broken:
            self.bury_broken(now)
        while self.resume:
            s = self.resume.pop()
            # (one stopped for a later turn waits for it: backlog)
            if not s.waiting and not s.closing and s.plen and s not in self.backlog:
                self._run(s, now)

    def bury_broken(self, now: int) -> None:
        broken, self.broken = self.broken, []
        q = self.q
        for s, j, lost in broken:
            if j.state != RESERVED:
                continue
            if not lost:
                jobmoves.give_back(q, s, j.id, now)
            elif jobmoves.bury(q, s, j.id, j.pri, now) is DONE:
                self.log("job %d buried: its body could not be read" % j.id)

    def more(self, s: Session, now: int) -> None:
        """Go on with the commands a read left at OUT_LIMIT (see backlog),
        or, once the peer hung up, with the next of its commands (eof)."""
        self._clock(now)
        if s.hup:
            if not s.closing and not s.waiting and s.state != BUSY:
                self._hup_step(s, now)
            return
        if s.plen and not s.waiting and not s.closing:
            self._run(s, now)

    def _hup_step(self, s: Session, now: int) -> None:
        """Run the input of a peer that hung up until a command has a
        reply; the rest waits for the next pass (eof)."""
        buf, pos = self._input(s)
        size = len(buf)
        store = self.q.store
        lsn = store.lsn
        while pos < size and not s.out and not s.waiting and not s.closing and s.state != BUSY:
            # One unit at a time: a command line, or the body a put waits for.
            state = s.state
            if state == BODY or state == BITBUCKET:
                end = pos + s.need
            else:
                n = P.find_line_end(buf, pos, min(size, pos + self.line_max))
                end = pos + n if n else size
            new = self._process_commands(s, buf[:end], now, pos)
            if new == pos:
                break  # an unfinished command: the peer sends no more
            pos = new
        if self.hold and (store.lsn != lsn or self.hold == HOLD_ALL):
            s.hold = store.lsn
        self._keep(s, buf, pos)
        if s.state == BUSY or s.waiting or s.closing:
            return  # (in_slices goes on after the command's last slice)
        if s.plen and s.out:
            self.backlog.append(s)
        else:
            s.closing = True
        if self.resume:
            self._resume(now)

    def _run(self, s: Session, now: int) -> None:
        buf, start = self._input(s)
        self._keep(s, buf, self._process(s, buf, now, start))
        if self.resume:
            self._resume(now)

    @staticmethod
    def _input(s: Session) -> tuple[bytes, int]:
        """The input not yet parsed: (buf, where it starts in buf)."""
        pending = s.pending
        if len(pending) == 1:
            buf = pending[0]
            if type(buf) is bytes:
                return buf, s.skip
            return bytes(buf), 0  # a lone view kept below (rare)
        if s.skip:
            pending[0] = pending[0][s.skip:]
        return b"".join(pending), 0

    @staticmethod
    def _keep(s: Session, buf: bytes, pos: int) -> None:
        """Keep what is left of buf after pos for the next read (or turn)."""
        rest = len(buf) - pos
        s.plen = rest
        s.skip = 0
        if not rest:
            s.pending = []
        elif not pos:
            s.pending = [buf]
        elif rest <= BIG_REST:
            s.pending = [buf[pos:]]
        elif s.state == BODY:
            # The start of a big body: keep a view, so that the join that
            # completes it is the body's only copy.
            s.pending = [memoryview(buf)[pos:]]
        else:
            # Commands left for a later turn: kept where they are, not
            # copied (a turn may run one command of a 256 KB read).
            s.pending = [buf]
            s.skip = pos

    # -- framing ------------------------------------------------------------

    def _process(self, s: Session, buf: bytes, now: int, pos: int = 0) -> int:
        """Parse and run commands from buf[pos:]; returns where it stopped."""
        if self.hold:
            store = self.q.store
            lsn = store.lsn
            pos = self._process_commands(s, buf, now, pos)
            if store.lsn != lsn or self.hold == HOLD_ALL:
                s.hold = store.lsn
            return pos
        return self._process_commands(s, buf, now, pos)

    def _process_commands(self, s: Session, buf: bytes, now: int, pos: int = 0) -> int:
        size = len(buf)
        k = 0  # commands run
        check = 0  # when to look at the size of the replies (and k) next
        budget = s.budget
        wide = len(s.watch)
        if wide > WIDE:
            budget = wide_budget(budget, wide)
        # Each command (and put's body) runs a nanosecond after the one
        # before it, as the reference's do, whose clock moves between them:
        # jobs given the same delay in one read come due in command order.
        t = now
        limit = self.line_max  # (LINE_BUF_SIZE, or a delete-batch's with --extensions)
        while pos < size and not s.waiting and not s.closing:
            state = s.state
            if state <= SKIP:
                if k >= check:
                    # Replies this read (or an earlier one) left unsent
                    # stop it before its next command.
                    out = sum(map(len, s.out))
                    if out > OUT_LIMIT or k >= budget:
                        self.backlog.append(s)
                        break
                    # Look again when OUT_LIMIT could be half used, at this average.
                    check = k + (OUT_LIMIT - out) * k // (2 * out + 1) + 1
                    if check > budget:
                        check = budget
                end = pos + limit if size - pos > limit else size
                line = P.line_in(buf[pos:end])
                if line is None:
                    if end - pos == limit:
                        # Over-long: discard a buffer's worth, and at once
                        # each further one with no CR at all (what the
                        # reference's buffer-by-buffer reads would discard).
                        j = buf.find(b"\r", end)
                        pos = end + ((size if j < 0 else j) - end) // limit * limit
                        s.state = SKIP
                        continue
                    break
                pos += len(line) + 2
                if state == SKIP:
                    s.state = LINE
                    s.send(P.BAD_FORMAT)
                else:
                    t += 1
                    self.command(s, line, t)
                    k += 1
            elif state == BODY:
                need = s.need
                if size - pos < need:
                    break
                body = buf[pos:pos + need]
                pos += need
                s.state = LINE
                t += 1
                commands.finish_put(self, s, body, t)
            elif state == BITBUCKET:
                take = min(size - pos, s.need)
                pos += take
                s.need -= take
                if s.need:
                    break
                s.state = LINE
                s.send(s.skip_reply)
            else:  # BUSY
                break
        s.ran = k
        return pos

    def command(self, s: Session, line: bytes, now: int) -> None:
        """Run one command line (CRLF stripped).

        The hot commands in their plain form (single spaces, plain digits
        that fit) take a fast path: no tuple, no handler lookup. Anything
        else, and anything unusual in them, goes through parse(), which
        has every rule of the reference's. Each fast path does only the
        parsing and the counting: what the command then does is the same
        function of commands.py its table handler calls.

        What they save (cmd-cost.py, against self.fast False): about
        12,460 instructions a put compiled (22,054 -> 9,591; put64 the
        same), 16,870 pure (57,800 -> 40,930); and a reserve and its
        delete about 4,040 each compiled (rd 13,571 -> 9,527; rd64
        4,033), 6,900 pure (44,879 -> 37,979)."""
        if self.fast and line:
            c = line[0]
            if c == 114:  # r
                op: Count | None = None
                timeout = None
                # (a worker's reserve first: it sends one each job, a
                # release only for some)
                if line == b"reserve":
                    op = self.reserves
                else:
                    # (a worker's one line, as put's: looked up, not parsed)
                    timeout = self.lines.timeouts.get(line)
                    if timeout is None:
                        if line.startswith(b"reserve-with-timeout "):
                            timeout = self.lines.timeout(line)
                        elif line.startswith(b"release "):
                            args = line[8:].split(b" ")
                            if len(args) == 3:
                                a, b, d = args
                                pri, delay = self.lines.u32(b), self.lines.u32(d)
                                id_ = P.plain_id(a)
                                if (pri | delay | id_) >= 0:
                                    self.releases.n += 1
                                    commands.release(self, s, id_, pri, delay * NS, now)
                                    return
                    if timeout is not None:
                        op = self.timed_reserves
                if op is not None:
                    op.n += 1
                    commands.reserve(self, s, timeout, now)
                    return
            elif c == 100:  # d
                if line.startswith(b"delete "):
                    id_ = P.plain_id(line[7:])
                    if id_ >= 0:
                        self.deletes.n += 1
                        commands.delete(self, s, id_, now)
                        return
            elif c == 112:  # p
                # Each put the fast path parses is counted and run where it is
                # parsed, as delete and touch are: a shared count-and-put step
                # cost 28 instructions a put compiled and 541 pure (put64 over
                # the pure build's budget; docs/performance/2026-11-30-put-step.md).
                lines = self.lines
                # (first the last keyed line's front, which no kept line has:
                # a keyed line, new each put, is then not hashed whole for a
                # lookup bound to miss)
                if self.extensions and line.startswith(lines.keyed_front):
                    key = line[len(lines.keyed_front):]
                    if name_ok(key):  # (so one word, with no TTL)
                        pri, delay, ttr, size = lines.keyed_head
                        self.puts.n += 1
                        commands.put(self, s, pri, delay, ttr, size, True, now, key)
                        return
                kept: PutLine | None = lines.known.get(line)
                if kept is not None:  # (tags only with --extensions)
                    # (unpacked once: compiled, each kept[i] unboxes the tuple)
                    pri, delay, ttr, size, tags = kept
                    self.puts.n += 1
                    commands.put(self, s, pri, delay, ttr, size, True, now, tags)
                    return
                if self.extensions and self._put_keyed(s, line, now):
                    return
                if line.startswith(b"put "):
                    args = line[4:].split(b" ", 4)
                    if len(args) == 5 and self.extensions:  # tags (extensions.py)
                        if self._put_tagged(s, args, now):
                            return
                    elif len(args) == 4:
                        a, b, d, z = args
                        pri, delay, ttr, size = lines.u32(a), lines.u32(b), lines.u32(d), lines.u32(z)
                        if (pri | delay | ttr | size) >= 0:
                            self.puts.n += 1
                            delay *= NS
                            ttr *= NS
                            lines.keep(line, (pri, delay, ttr, size), None)
                            commands.put(self, s, pri, delay, ttr, size, True, now)
                            return
            elif c == 116:  # t
                if line.startswith(b"touch "):
                    id_ = P.plain_id(line[6:])
                    if id_ >= 0:
                        self.touches.n += 1
                        commands.touch(self, s, id_, now)
                        return
        if self.verbose >= 2 and 0 not in line:
            known = self.commands.match(line)[0]
            self.log("<%d command %s" % (s.fd, known.prefix.decode() if known else "<unknown>"))
        try:
            found = self.commands.lookup(line)
        except Bad:
            if self.auth is not None and line[:5] == b"auth ":
                return commands.reauth(self, s, line[5:])
            s.send(P.BAD_FORMAT)
            return
        if found is None:
            if self.auth is not None and line[:5] == b"auth ":
                return commands.reauth(self, s, line[5:])
            s.send(P.UNKNOWN_COMMAND)
            return
        spec, cmd = found
        self.counts.add(spec.name)
        spec.run(self, s, cmd, now)

    def _put_keyed(self, s: Session, line: bytes, now: int) -> bool:
        """A put whose line but for its idp: key the fast path has parsed
        before (no line with a key is kept: keys are unique), and whose
        front is not the last keyed line's (command()): run it (True),
        else False."""
        lines = self.lines
        front, idp, key = line.rpartition(b" idp:")
        if not idp:
            return False
        plain = lines.known.get(front)
        if plain is not None:
            pri, delay, ttr, size, tags = plain
            if tags is None and name_ok(key):
                # The commonest: a known plain put, then idp:KEY (no TTL).
                # The key alone stands for its tags until the put's tags'
                # stage (commands.py).
                lines.keyed_front = front + idp
                lines.keyed_head = (pri, delay, ttr, size)
                self.puts.n += 1
                commands.put(self, s, pri, delay, ttr, size, True, now, key)
                return True
        hdr, keyed = lines.keyed(line, len(front))
        if hdr is None or keyed is None:
            return False
        pri, delay, ttr, size = hdr
        self.puts.n += 1
        commands.put(self, s, pri, delay, ttr, size, True, now, keyed)
        return True

    def _put_tagged(self, s: Session, args: list[bytes], now: int) -> bool:
        """A tagged put in its plain form (single spaces, plain numbers, the
        tags known or well-formed); False: not that, parse() decides."""
        a, b, d, z, tail = args
        lines = self.lines
        pri, delay, ttr, size = lines.u32(a), lines.u32(b), lines.u32(d), lines.u32(z)
        if (pri | delay | ttr | size) < 0:
            return False
        if not tail.strip():  # (no tag, only white space: the reference's put)
            return False
        try:
            tags = lines.tail_tags(tail)
        except Bad:
            return False
        self.puts.n += 1
        delay *= NS
        ttr *= NS
        lines.keep_tagged(args, (pri, delay, ttr, size), tags)
        commands.put(self, s, pri, delay, ttr, size, True, now, tags)
        return True

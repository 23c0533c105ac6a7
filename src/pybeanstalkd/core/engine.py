"""The server without I/O: connections feed bytes in, replies come out.

Engine.data(conn, bytes, now) parses every complete command a read delivered
and queues the replies on conn.out; the I/O layer then writes each dirty
connection once. Time is always passed in.
"""
from __future__ import annotations

from .. import BEANSTALKD_VERSION
from . import protocol as P
from .protocol import INT_MAX, LINE_BUF_SIZE, NS, U32_MAX, Bad, name_ok, parse
from .job import JOB_OVERHEAD, RESERVED_OVERHEAD
from .queue import Conn, Queue
from .stats import CMD_KEYS, job_stats, server_stats, tube_stats

LINE, SKIP, BODY, BITBUCKET = 0, 1, 2, 3
BUSY = 4  # a command runs in background slices; later input waits for its reply
BIG_REST = 4096  # a partial body larger than this is kept as a view, not copied
# A read's replies stop at about this many bytes; the rest of the read waits
# until they are written (engine.backlog), so a client that pipelines and
# never reads holds a bounded buffer. Checked first after OUT_FIRST commands.
OUT_LIMIT = 256 << 10
OUT_FIRST = 4


# The u32 arguments of put and release, by their bytes: most clients send a
# few values (priority, delay, ttr, body size), and a lookup costs half of
# isdigit and int. Only plain digits that fit are ever added.
U32S: dict[bytes, int] = {}


# Whole put lines, parsed: a producer sends the same few (they differ only
# where the body size does). Only lines the fast path took are added.
PUTS: dict[bytes, tuple[int, int, int, int]] = {}


def u32(arg: bytes) -> int:
    """A plain u32 argument's value (cached), or -1: not plain, or too big."""
    if arg.isdigit():
        value = int(arg)
        if value <= U32_MAX:
            if len(U32S) < 4096:
                U32S[arg] = value
            return value
    return -1


class Session(Conn):
    """One client connection: framing state plus what the queue tracks."""

    __slots__ = ("engine", "state", "need", "pending", "plen", "in_job",
                 "skip_reply", "closing", "hup", "fd", "hold", "transport")

    def __init__(self, engine: Engine):
        super().__init__(engine.dirty)
        self.engine = engine
        self.state = LINE
        self.need = 0  # bytes still wanted in BODY or BITBUCKET state
        self.pending: list[bytes] = []  # received, not yet parsed
        self.plen = 0
        self.in_job = None
        self.skip_reply = b""
        self.closing = False  # quit: close once the replies are written
        self.hup = False  # the peer half-closed: blocking reserves time out at once
        self.hold = 0  # with -f0: replies wait until the binlog is synced this far
        self.fd = -1
        self.transport = None  # the I/O layer's, while the connection is open

    def woken(self):
        self.engine.resume.append(self)


class VerboseSession(Session):
    """-V -V: log every reply line and every job sent, as the reference does."""

    __slots__ = ()

    def send(self, data: bytes):
        log = self.engine.log
        log(">%d reply %s" % (self.fd, data.split(b"\r\n", 1)[0].decode("latin-1")))
        if data.startswith(b"OK "):
            log(">%d job 0" % self.fd)
        super().send(data)

    def send_job(self, word: bytes, job):
        super().send_job(word, job)
        log = self.engine.log
        log(">%d reply %s %d %d" % (self.fd, word.decode(), job.id, len(job.body) - 2))
        log(">%d job %d" % (self.fd, job.id))


class Host:
    """What `stats` says of the process and the machine. The server passes one
    read from the OS; the pure layer's default is fixed values."""

    pid = 0
    instance_id = b"0000000000000000"
    hostname = os = platform = b""

    @staticmethod
    def rusage() -> tuple[float, float]:
        """(user, system) CPU seconds."""
        return 0.0, 0.0


class Engine:
    def __init__(self, now: int, max_job_size: int = 65535, verbose: int = 0,
                 filesize: int = 10485760, log=print, host: Host = Host()):
        self.q = Queue(now)
        self.now = now
        self.start = now
        self.max_job_size = max_job_size
        self.verbose = verbose
        # The hot commands' fast paths (command()); off with -V -V, which
        # logs each command line, and in tests that compare the two paths.
        self.fast = verbose < 2
        self.log = log
        self.q.store.filesize = filesize  # shown by stats even without -b
        self.counts = dict.fromkeys(CMD_KEYS, 0)
        for op in ("reserve-job", "kick-job", "quit"):  # counted, never shown
            self.counts[op] = 0
        self.dirty: list[Session] = []  # connections with replies to write
        self.resume: list[Session] = []  # connections whose blocking reserve ended
        self.backlog: list[Session] = []  # stopped at OUT_LIMIT with commands left
        self.conn_ct = self.producer_ct = self.worker_ct = self.total_conn_ct = 0
        self.draining = False
        self.max_memory = None  # --max-memory: bytes that stored jobs may use
        self.at_cap = False
        self.hold_writes = False  # -f0: a command that wrote is answered after fsync
        # --cluster: every command is answered once what the binlog holds is
        # safe, so that no reply (a reserve's job) tells of an unsafe write.
        self.hold_all = False
        self.auth = None  # --auth-tokens: has verify(token); the server gates new connections
        self.host = host
        self.pid = host.pid
        self.version = BEANSTALKD_VERSION.encode()
        self.instance_id = host.instance_id
        self.hostname, self.os, self.platform = host.hostname, host.os, host.platform
        self.handlers = {
            "put": self.c_put, "peek": self.c_peek, "peek-ready": self.c_peek_ready,
            "peek-delayed": self.c_peek_delayed, "peek-buried": self.c_peek_buried,
            "reserve": self.c_reserve, "reserve-with-timeout": self.c_reserve_timeout,
            "reserve-job": self.c_reserve_job, "delete": self.c_delete,
            "release": self.c_release, "bury": self.c_bury, "kick": self.c_kick,
            "kick-job": self.c_kick_job, "touch": self.c_touch, "stats": self.c_stats,
            "stats-job": self.c_stats_job, "stats-tube": self.c_stats_tube,
            "list-tubes": self.c_list_tubes, "list-tube-used": self.c_list_tube_used,
            "list-tubes-watched": self.c_list_tubes_watched, "use": self.c_use,
            "watch": self.c_watch, "ignore": self.c_ignore, "quit": self.c_quit,
            "pause-tube": self.c_pause_tube,
        }

    # -- connection lifecycle ---------------------------------------------

    def connect(self) -> Session:
        s = VerboseSession(self) if self.verbose >= 2 else Session(self)
        self.q.attach(s)
        self.conn_ct += 1
        self.total_conn_ct += 1
        return s

    def data(self, s: Session, data: bytes, now: int):
        self.now = now
        if s.plen or s.state or s.waiting or s.closing:
            s.pending.append(data)
            s.plen += len(data)
            state = s.state
            if s.waiting or s.closing or (state and (
                    state == BUSY or (state == BODY and s.plen < s.need))):
                return
            self._run(s, now)
            return
        # The common case, flat: nothing buffered, and the read starts with
        # a whole command line (an unpipelined command, with a put's body).
        size = len(data)
        i = data.find(b"\r", 0, (size if size < LINE_BUF_SIZE else LINE_BUF_SIZE) - 1)
        if i < 0 or data[i + 1] != 10:
            s.pending.append(data)
            s.plen = size
            self._run(s, now)
            return
        hold = self.hold_writes
        if hold:
            lsn = self.q.store.lsn
        self.command(s, data[:i], now)
        pos = i + 2
        if pos != size:
            if s.state == BODY and size - pos == s.need:
                s.state = LINE
                self.finish_put(s, data[pos:], now)
            else:
                pos = self._process_commands(s, data, now, pos)
                if pos != size:
                    self._keep(s, data, pos)
        if hold and (self.q.store.lsn != lsn or self.hold_all):
            s.hold = self.q.store.lsn
        if self.resume:
            self._resume(now)

    def eof(self, s: Session, now: int):
        """The peer half-closed: a blocked reserve gets TIMED_OUT, commands
        already received are still answered, and then the connection closes."""
        self.now = now
        s.hup = True
        if s.state == BUSY:
            return  # the command's last slice comes back here (_in_slices)
        if s.waiting:
            self.q.hangup(s)
            if s.plen:
                self._run(s, now)
        s.closing = True

    def close(self, s: Session, now: int):
        """The connection is gone: release its reservations."""
        self.now = now
        s.closing = True
        self.q.detach(s, now)
        s.pending = []
        self.conn_ct -= 1
        self.producer_ct -= s.producer
        self.worker_ct -= s.worker
        self._resume(now)

    def tick(self, now: int) -> bool:
        """Run what is due (at most q.tick_slice entries); True if more is."""
        self.now = now
        more = self.q.tick(now)
        self._resume(now)
        return more

    def next_due(self):
        return self.q.next_due()

    def step(self, now: int) -> bool:
        """Run one slice of background work; True while more remains."""
        self.now = now
        more = self.q.step(now)
        self._resume(now)
        return more

    def _in_slices(self, s: Session, gen, reply: bytes):
        """Run a command's slices; its reply (reply % value) goes out after
        the last one, and only then is the session's later input read."""
        n = yield from gen
        s.send(reply % n)
        if s.state == BUSY:
            s.state = LINE
            now = self.now
            if self.hold_writes:
                s.hold = self.q.store.lsn
            if s.plen and not s.closing:
                self._run(s, now)
            if s.hup and not s.closing:
                self.eof(s, now)

    def settle(self, now: int):
        """After a change made outside a command (the HTTP side's actions):
        sessions whose blocked reserve it answered go on with their input."""
        self.now = now
        self._resume(now)

    def _resume(self, now: int):
        while self.resume:
            s = self.resume.pop()
            if not s.waiting and not s.closing and s.plen:
                self._run(s, now)

    def more(self, s: Session, now: int):
        """Go on with the commands a read left at OUT_LIMIT (see backlog)."""
        self.now = now
        if s.plen and not s.waiting and not s.closing:
            self._run(s, now)

    def _run(self, s: Session, now: int):
        buf = s.pending[0] if len(s.pending) == 1 else b"".join(s.pending)
        if type(buf) is not bytes:  # a lone view kept below (rare)
            buf = bytes(buf)
        self._keep(s, buf, self._process(s, buf, now))
        if self.resume:
            self._resume(now)

    @staticmethod
    def _keep(s: Session, buf: bytes, pos: int):
        """Keep what is left of buf after pos for the next read."""
        if not pos:
            rest = buf
        elif s.state == BODY and len(buf) - pos > BIG_REST:
            # The start of a big body: keep a view, so that the join that
            # completes it is the body's only copy.
            rest = memoryview(buf)[pos:]
        else:
            rest = buf[pos:]
        s.pending = [rest] if rest else []
        s.plen = len(rest)

    # -- framing ------------------------------------------------------------

    def _process(self, s: Session, buf: bytes, now: int) -> int:
        """Parse and run commands from buf; returns how much was consumed."""
        if self.hold_writes:
            store = self.q.store
            lsn = store.lsn
            pos = self._process_commands(s, buf, now)
            if store.lsn != lsn or self.hold_all:
                s.hold = store.lsn
            return pos
        return self._process_commands(s, buf, now)

    def _process_commands(self, s: Session, buf: bytes, now: int, pos: int = 0) -> int:
        size = len(buf)
        k = 0  # commands run
        check = 4  # OUT_FIRST; when to look at the size of the replies next
        while pos < size and not s.waiting and not s.closing:
            state = s.state
            if state <= SKIP:
                end = pos + LINE_BUF_SIZE if size - pos > LINE_BUF_SIZE else size
                # (protocol.find_line_end, inline)
                i = buf.find(b"\r", pos, end - 1)
                if i < 0 or buf[i + 1] != 10:
                    if end - pos == LINE_BUF_SIZE:  # over-long: discard a buffer's worth
                        pos = end
                        s.state = SKIP
                        continue
                    break
                line = buf[pos:i]
                pos = i + 2
                if state == SKIP:
                    s.state = LINE
                    s.send(P.BAD_FORMAT)
                else:
                    self.command(s, line, now)
                    k += 1
                    if k > check:
                        out = sum(map(len, s.out))
                        if out > OUT_LIMIT:
                            if pos < size:
                                self.backlog.append(s)
                            break
                        # Look again when the budget could be half used, at this average.
                        check = k + (OUT_LIMIT - out) * k // (2 * out + 1) + 1
            elif state == BODY:
                need = s.need
                if size - pos < need:
                    break
                body = buf[pos:pos + need]
                pos += need
                s.state = LINE
                self.finish_put(s, body, now)
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
        return pos

    def command(self, s: Session, line: bytes, now: int):
        """Run one command line (CRLF stripped).

        The hot commands in their plain form (single spaces, plain digits
        that fit) take a fast path: no tuple, no handler lookup. Anything
        else, and anything unusual in them, goes through parse(), which
        has every rule of the reference's."""
        if self.fast and line:
            reply = None  # what a fast path answers, if it took the line
            c = line[0]
            if c == 114:  # r
                op = timeout = None
                if line == b"reserve":
                    op = "reserve"
                elif line[:8] == b"release ":
                    args = line[8:].split(b" ")
                    if len(args) == 3:
                        a, b, d = args
                        pri, delay = U32S.get(b, -1), U32S.get(d, -1)
                        if (pri | delay) < 0:  # not both known: look closer
                            pri, delay = u32(b), u32(d)
                        if (pri | delay) >= 0 and a.isdigit() and len(a) < 20:
                            self.counts["release"] += 1
                            reply = self.q.release(s, int(a), pri, delay * NS, now)
                elif line[:21] == b"reserve-with-timeout ":
                    arg = line[21:]
                    if arg.isdigit() and len(arg) < 11:
                        timeout = int(arg)
                        if timeout <= INT_MAX:
                            op = "reserve-with-timeout"
                            timeout *= NS
                if op is not None:
                    self.counts[op] += 1
                    if not s.worker:
                        s.worker = True
                        self.worker_ct += 1
                    self.q.reserve(s, timeout, now)
                    if s.waiting and s.hup:
                        self.q.hangup(s)
                    return
            elif c == 100:  # d
                if line[:7] == b"delete ":
                    arg = line[7:]
                    if arg.isdigit() and len(arg) < 20:
                        self.counts["delete"] += 1
                        reply = self.q.delete(s, int(arg), now)
            elif c == 112:  # p
                hdr = PUTS.get(line)
                if hdr is not None:
                    self.counts["put"] += 1
                    self.put(s, hdr[0], hdr[1], hdr[2], hdr[3], True, now)
                    return
                if line[:4] == b"put ":
                    args = line[4:].split(b" ")
                    if len(args) == 4:
                        a, b, d, z = args
                        get = U32S.get
                        pri, delay, ttr, size = get(a, -1), get(b, -1), get(d, -1), get(z, -1)
                        if (pri | delay | ttr | size) < 0:  # not all known: look closer
                            pri, delay, ttr, size = u32(a), u32(b), u32(d), u32(z)
                        if (pri | delay | ttr | size) >= 0:
                            self.counts["put"] += 1
                            delay *= NS
                            ttr *= NS
                            if len(PUTS) < 4096:
                                PUTS[line] = (pri, delay, ttr, size)
                            self.put(s, pri, delay, ttr, size, True, now)
                            return
            elif c == 116:  # t
                if line[:6] == b"touch ":
                    arg = line[6:]
                    if arg.isdigit() and len(arg) < 20:
                        self.counts["touch"] += 1
                        reply = P.TOUCHED if self.q.touch(s, int(arg), now) else P.NOT_FOUND
            if reply is not None:
                out = s.out  # (s.send, inline)
                if not out:
                    self.dirty.append(s)
                out.append(reply)
                return
        if self.verbose >= 2 and b"\0" not in line:
            prefix = P.match_prefix(line)[2]
            self.log("<%d command %s" % (s.fd, prefix.decode() if prefix else "<unknown>"))
        try:
            cmd = parse(line)
        except Bad:
            if self.auth is not None and line[:5] == b"auth ":
                return self.reauth(s, line[5:])
            s.send(P.BAD_FORMAT)
            return
        op = cmd[0]
        if op == "unknown":
            if self.auth is not None and line[:5] == b"auth ":
                return self.reauth(s, line[5:])
            s.send(P.UNKNOWN_COMMAND)
            return
        self.counts[op] += 1
        self.handlers[op](s, cmd, now)
        if s.waiting and s.hup:
            self.q.hangup(s)

    # -- commands -----------------------------------------------------------

    def c_put(self, s, cmd, now):
        self.put(s, *cmd[1:], now)

    def put(self, s, pri, delay, ttr, size, clean, now):
        """put's command line; its body comes next (finish_put)."""
        if size > self.max_job_size:
            s.state = BITBUCKET
            s.need = size + 2
            s.skip_reply = P.JOB_TOO_BIG
            return
        if not clean:
            s.send(P.BAD_FORMAT)
            return
        if not s.producer:
            s.producer = True
            self.producer_ct += 1
        cap = self.max_memory
        if cap is not None:  # inline: this is every put's path
            q = self.q  # (memory_used(), inline; len(q.jobs) is a call)
            over = (q.body_bytes + size + 2
                    + (q.ready_ct + q.delayed_ct + q.buried_ct + 1) * JOB_OVERHEAD
                    + q.reserved_ct * (JOB_OVERHEAD + RESERVED_OVERHEAD) > cap)
            if over is not self.at_cap:
                self._cap_crossed(over)
            if over:
                # As the reference when it cannot allocate a job: the body is
                # skipped, the reply is OUT_OF_MEMORY and no id is used up.
                s.state = BITBUCKET
                s.need = size + 2
                s.skip_reply = P.OUT_OF_MEMORY
                return
        # (ids come from the queue alone: one place hands them out)
        s.in_job = self.q.new_job(s.use, pri, delay, ttr if ttr > NS else NS, now)
        s.state = BODY
        s.need = size + 2

    def finish_put(self, s, body, now):
        j, s.in_job = s.in_job, None
        if body[-2:] != b"\r\n":
            s.send(P.EXPECTED_CRLF)
            return
        if self.verbose >= 2:
            self.log("<%d job %d" % (s.fd, j.id))
        if self.draining:
            s.send(P.DRAINING)
            return
        j.body = body
        if not self.q.store.reserve_put(j):
            s.send(P.OUT_OF_MEMORY)  # the disk is full; the id stays used
            return
        self.q.insert(j, now)
        s.send(b"INSERTED %d\r\n" % j.id)

    def _found(self, s, j):
        if j is None:
            s.send(P.NOT_FOUND)
        else:
            s.send_job(b"FOUND", j)

    def c_peek(self, s, cmd, now):
        self._found(s, self.q.jobs.get(cmd[1]))

    def c_peek_ready(self, s, cmd, now):
        self._found(s, self.q.ready_top(s.use))

    def c_peek_delayed(self, s, cmd, now):
        self._found(s, self.q.delayed_top(s.use))

    def c_peek_buried(self, s, cmd, now):
        self._found(s, self.q.buried_top(s.use))

    def _worker(self, s):
        if not s.worker:
            s.worker = True
            self.worker_ct += 1

    def c_reserve(self, s, cmd, now):
        self._worker(s)
        self.q.reserve(s, None, now)

    def c_reserve_timeout(self, s, cmd, now):
        self._worker(s)
        self.q.reserve(s, cmd[1] * NS, now)

    def c_reserve_job(self, s, cmd, now):
        if not self.q.reserve_job(s, cmd[1], now):
            s.send(P.NOT_FOUND)
            return
        self._worker(s)

    def c_delete(self, s, cmd, now):
        s.send(self.q.delete(s, cmd[1], now))

    def c_release(self, s, cmd, now):
        _, id_, pri, delay = cmd
        s.send(self.q.release(s, id_, pri, delay, now))

    def c_bury(self, s, cmd, now):
        s.send(self.q.bury(s, cmd[1], cmd[2], now))

    def c_kick(self, s, cmd, now):
        if not self.q.spawn(self._in_slices(s, self.q.kick(s.use, cmd[1], now),
                                            b"KICKED %d\r\n")):
            s.state = BUSY

    def c_kick_job(self, s, cmd, now):
        s.send(P.KICKED if self.q.kick_job(cmd[1], now) else P.NOT_FOUND)

    def c_touch(self, s, cmd, now):
        s.send(P.TOUCHED if self.q.touch(s, cmd[1], now) else P.NOT_FOUND)

    def c_stats(self, s, cmd, now):
        s.send(P.yaml_reply(server_stats(self.q, self.counts, self)))

    def c_stats_job(self, s, cmd, now):
        j = self.q.jobs.get(cmd[1])
        s.send(P.NOT_FOUND if j is None else P.yaml_reply(job_stats(j, now)))

    def c_stats_tube(self, s, cmd, now):
        t = self.q.tubes.get(cmd[1])
        s.send(P.NOT_FOUND if t is None else P.yaml_reply(tube_stats(t, now)))

    def c_list_tubes(self, s, cmd, now):
        s.send(P.yaml_list(t.name for t in self.q.tube_list))

    def c_list_tube_used(self, s, cmd, now):
        s.send(b"USING %s\r\n" % s.use.name)

    def c_list_tubes_watched(self, s, cmd, now):
        s.send(P.yaml_list(t.name for t in s.watch))

    def c_use(self, s, cmd, now):
        self.q.use(s, cmd[1])
        s.send(b"USING %s\r\n" % s.use.name)

    def c_watch(self, s, cmd, now):
        s.send(b"WATCHING %d\r\n" % self.q.watch(s, cmd[1]))

    def c_ignore(self, s, cmd, now):
        n = self.q.ignore(s, cmd[1])
        s.send(P.NOT_IGNORED if n is None else b"WATCHING %d\r\n" % n)

    def c_quit(self, s, cmd, now):
        s.closing = True

    def c_pause_tube(self, s, cmd, now):
        _, name, delay = cmd
        t = self.q.tubes.get(name) if name_ok(name) else False
        if t is False:
            s.send(P.BAD_FORMAT)  # counted already: the reference checks the name late
        elif t is None:
            s.send(P.NOT_FOUND)
        else:
            self.q.pause_tube(t, delay, now)
            s.send(P.PAUSED)

    def reauth(self, s, token: bytes):
        """`auth` again on an authenticated connection (beanstalkd-rs): the
        right token changes nothing, a wrong one closes the connection."""
        if self.auth.verify(token):
            s.send(b"AUTHENTICATED\r\n")
        else:
            s.send(b"UNAUTHORIZED\r\n")
            s.closing = True

    # -- the memory cap -----------------------------------------------------

    def over_cap(self, size: int) -> bool:
        """Would a put of `size` body bytes pass --max-memory? A crossing is
        logged with -V. (c_put inlines the same test: it is every put's path.)"""
        cap = self.max_memory
        if cap is None:
            return False
        over = self.q.memory_used() + size + 2 + JOB_OVERHEAD > cap
        if over is not self.at_cap:
            self._cap_crossed(over)
        return over

    def _cap_crossed(self, over: bool):
        self.at_cap = over
        if self.verbose:
            self.log(self.memory_line("puts refused" if over else "puts accepted again"))

    def memory_line(self, what: str = "memory") -> str:
        """The -V line for the cap and its usage."""
        return "%s: %d of %d bytes used by %d jobs" % (
            what, self.q.memory_used(), self.max_memory, len(self.q.jobs))

    # -- for stats ----------------------------------------------------------

    def uptime(self) -> int:
        return (self.now - self.start) // NS

    def rusage(self):
        return tuple(b"%d.%06d" % divmod(round(t * 1e6), 1000000)
                     for t in self.host.rusage())

    def wal_stats(self):
        return self.q.store.stats()

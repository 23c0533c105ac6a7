"""Per-connection state machines for pybeanstalkd-bench.

A Driver is handed everything its connection has received so far and answers
with (bytes consumed, bytes to send next). It never touches the socket; the
worker loop in client.py does that. Commands are built once and sliced,
and replies are parsed with bytes.find/count/startswith, never line by line
through a file object.

  budget    how many more operations the driver may start (stop() sets it to 0)
  inflight  commands sent and not yet answered
  ops       completed operations (what the tables count)
  done      nothing in flight and nothing left to start
"""
from __future__ import annotations

from array import array
from time import monotonic_ns

PRI_DELAY_TTR = b"1024 0 60"  # as the team's C load generator, bsload
RESERVE0 = b"reserve-with-timeout 0\r\n"
RESERVE1 = b"reserve-with-timeout 1\r\n"
UNLIMITED = 1 << 62
STAMP = 20  # digits of monotonic_ns() at the start of a timestamped body


class BenchError(Exception):
    """The server answered something the workload does not expect."""


def unexpected(buf: bytes, pos: int = 0) -> BenchError:
    end = buf.find(b"\r\n", pos)
    line = buf[pos:end if end >= 0 else pos + 80]
    return BenchError(f"unexpected reply {line[:80]!r}")


def put_command(size: int, delay: int = 0, ttr: int = 60, tags: bytes = b"") -> bytes:
    """A put; tags: put tags after the size (--extensions), as b" aft:g"."""
    head = PRI_DELAY_TTR if not delay and ttr == 60 else b"1024 %d %d" % (delay, ttr)
    return b"put %s %d%s\r\n%s\r\n" % (head, size, tags, b"x" * size)


def tube_setup(tube: str, watch=None) -> tuple[bytes, int]:
    """Commands (and how many reply lines) to use `tube` and watch only `watch`."""
    if watch is None:
        watch = [tube]
    cmds = [] if tube == "default" else [b"use %s\r\n" % tube.encode()]
    cmds += [b"watch %s\r\n" % t.encode() for t in watch if t != "default"]
    if "default" not in watch:
        cmds.append(b"ignore default\r\n")
    return b"".join(cmds), len(cmds)


class Driver:
    setup = b""
    setup_replies = 0

    def __init__(self, budget: int, tube: str = "default", watch=None):
        self.budget = budget
        self.inflight = 0
        self.ops = 0
        self.setup, self.setup_replies = tube_setup(tube, watch)

    @property
    def done(self) -> bool:
        return self.inflight == 0 and self.budget <= 0

    def stop(self):
        self.budget = 0


class Put(Driver):
    """put with up to `depth` commands in flight (depth 1: unpipelined)."""

    def __init__(self, budget, size, depth, tube="default", delay=0, ttr=60, tags=b""):
        super().__init__(budget, tube)
        self.cmd = put_command(size, delay, ttr, tags)
        self.depth = depth
        self.batch = self.cmd * depth

    def _more(self, k):
        k = min(k, self.budget)
        if k <= 0:
            return b""
        self.budget -= k
        self.inflight += k
        return self.batch if k == self.depth else self.cmd * k

    def start(self):
        return self._more(self.depth)

    def feed(self, buf):
        end = buf.rfind(b"\r\n") + 2
        if end < 2:
            return 0, b""
        k = buf.count(b"\r\n", 0, end)
        if buf.count(b"INSERTED ", 0, end) != k:
            pos = 0
            while buf.startswith(b"INSERTED ", pos):
                pos = buf.find(b"\r\n", pos) + 2
            raise unexpected(buf, pos)
        self.ops += k
        self.inflight -= k
        return end, self._more(k)


class ReserveDelete(Driver):
    """reserve-with-timeout 0 then delete, `depth` commands in flight, until the
    tube is empty (TIMED_OUT). Each reply frees a slot; a RESERVED reply's slot
    goes to its delete, a DELETED reply's slot to the next reserve."""

    def __init__(self, depth, tube="default", watch=None, budget=UNLIMITED):
        super().__init__(budget, tube, watch)
        self.depth = depth
        self.empty = False

    @property
    def done(self):
        return self.inflight == 0 and (self.empty or self.budget <= 0)

    def start(self):
        k = min(self.depth, self.budget)
        self.budget -= k
        self.inflight = k
        return RESERVE0 * k

    def feed(self, buf):
        pos, n, out, deleted = 0, len(buf), [], 0
        find, startswith = buf.find, buf.startswith
        while True:
            e = find(b"\r\n", pos)
            if e < 0:
                break
            if startswith(b"DELETED\r\n", pos):
                deleted += 1
                pos = e + 2
            elif startswith(b"RESERVED ", pos):
                sp = buf.rfind(b" ", pos, e)
                end = e + 4 + int(buf[sp + 1:e])
                if end > n:
                    break
                out.append(b"delete %s\r\n" % buf[pos + 9:sp])
                pos = end
            elif startswith(b"TIMED_OUT\r\n", pos):
                self.empty = True
                self.inflight -= 1
                pos = e + 2
            else:
                raise unexpected(buf, pos)
        if deleted:
            self.ops += deleted
            self.inflight -= deleted
            k = 0 if self.empty else min(deleted, self.budget)
            if k > 0:
                self.budget -= k
                self.inflight += k
                out.append(RESERVE0 * k)
        return pos, b"".join(out)


class Cycle(Driver):
    """put, reserve, delete on the connection's own tube, one command in flight.
    Each of the three replies counts as one operation (as bsload's pingpong)."""

    def __init__(self, budget, size, tube):
        super().__init__(budget, tube)
        self.cmd = put_command(size)
        self.state = 0  # awaiting 0: INSERTED, 1: RESERVED, 2: DELETED

    def start(self):
        if self.budget <= 0:
            return b""
        self.budget -= 1
        self.inflight = 1
        return self.cmd

    def feed(self, buf):
        e = buf.find(b"\r\n")
        if e < 0:
            return 0, b""
        if self.state == 0:
            if not buf.startswith(b"INSERTED "):
                raise unexpected(buf)
            self.ops += 1
            self.state = 1
            return e + 2, b"reserve\r\n"
        if self.state == 1:
            if not buf.startswith(b"RESERVED "):
                raise unexpected(buf)
            sp = buf.rfind(b" ", 0, e)
            end = e + 4 + int(buf[sp + 1:e])
            if end > len(buf):
                return 0, b""
            self.ops += 1
            self.state = 2
            return end, b"delete %s\r\n" % buf[9:sp]
        if not buf.startswith(b"DELETED\r\n"):
            raise unexpected(buf)
        self.ops += 1
        self.state = 0
        self.inflight = 0
        return e + 2, self.start()


class Pacer:
    """Spreads a process's producers' puts evenly over time (jobs/s)."""

    def __init__(self, rate: float):
        self.rate = rate
        self.waiting: list = []  # (connection, driver) ready to put
        self.t0 = 0
        self.sent = 0

    def due(self, now_ns: int) -> int:
        return int((now_ns - self.t0) * self.rate / 1e9) - self.sent


class Producer(Driver):
    """Unpipelined put whose body starts with the send time (monotonic ns)."""

    def __init__(self, budget, size, tube="default", pacer: Pacer | None = None):
        super().__init__(budget, tube)
        size = max(size, STAMP)
        self.head = b"put %s %d\r\n" % (PRI_DELAY_TTR, size)
        self.tail = b"x" * (size - STAMP) + b"\r\n"
        self.pacer = pacer
        self.conn = None  # set by the worker loop when paced

    def put(self):
        self.budget -= 1
        self.inflight = 1
        return b"%s%020d%s" % (self.head, monotonic_ns(), self.tail)

    def start(self):
        if self.budget <= 0:
            return b""
        if self.pacer is not None:
            self.pacer.waiting.append(self)
            return b""
        return self.put()

    def feed(self, buf):
        e = buf.find(b"\r\n")
        if e < 0:
            return 0, b""
        if not buf.startswith(b"INSERTED "):
            raise unexpected(buf)
        self.ops += 1
        self.inflight = 0
        return e + 2, self.start()


class Consumer(Driver):
    """reserve-with-timeout 1, delete, and the put->reserve latency of each job.
    Stopping abandons the reserve in flight (it may wait up to a second)."""

    def __init__(self, tube="default"):
        super().__init__(UNLIMITED, tube)
        self.lat = array("q")

    def stop(self):
        self.budget = 0
        self.inflight = 0

    def start(self):
        self.inflight = 1
        return RESERVE1

    def feed(self, buf):
        e = buf.find(b"\r\n")
        if e < 0:
            return 0, b""
        if buf.startswith(b"RESERVED "):
            sp = buf.rfind(b" ", 0, e)
            end = e + 4 + int(buf[sp + 1:e])
            if end > len(buf):
                return 0, b""
            self.lat.append(monotonic_ns() - int(buf[e + 2:e + 2 + STAMP]))
            return end, b"delete %s\r\n" % buf[9:sp]
        if buf.startswith(b"DELETED\r\n"):
            self.ops += 1
        elif not buf.startswith(b"TIMED_OUT\r\n"):
            raise unexpected(buf)
        if self.budget <= 0:
            self.inflight = 0
            return e + 2, b""
        return e + 2, RESERVE1

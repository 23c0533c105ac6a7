"""--micro: each hot command's Python cost in-process, by layer, no sockets.

Each command runs N times on a fresh Engine, as one command per read (the
unpipelined path without the transport): cycles of put, reserve, release,
reserve, touch and delete on batches of BATCH jobs, each phase timed as a
whole (the queue stays small, as in steady service). Then the same cycles
run one layer down, and each layer alone on the same inputs:

- command: `Engine.command` on the line already framed (a put's body
  handed to `finish_put`), with the same flush;
- queue: the Queue call the handler makes (put: new_job and insert);
- reply: formatting the reply and queueing it on the connection, and the
  join a flush does.

framing is total less command (Engine.data: buffering, line splitting);
dispatch is command less queue and reply (the fast path's parsing, the
counts, the handler's own lines).

Budgets are the goals for Python per command: a microsecond of Python per
command costs about 10% of throughput.
"""
from __future__ import annotations

import gc
from time import perf_counter_ns

from ..core import jobmoves, reserving
from ..core.commands import finish_put
from ..core.engine import Engine
from ..core.protocol import NS

COMMANDS = ["put", "reserve", "release", "touch", "delete"]
BUDGET_US = {"put": 1.5, "reserve": 1.5, "delete": 1.0}
ROUNDS = 5
BODY = b"x" * 100
LINES = {"put": b"put 0 0 60 100", "reserve": b"reserve", "release": b"release %d 0 0",
         "touch": b"touch %d", "delete": b"delete %d"}


BATCH = 10  # jobs a cycle: a small queue, a worker holding a few jobs


def _timed(fn, n: int) -> float:
    """ns per call of fn(i) for i in range(n), the loop's own cost taken off."""
    t0 = perf_counter_ns()
    for i in range(n):
        fn(i)
    t1 = perf_counter_ns()
    for _i in range(n):  # (the same loop, binding its variable too)
        pass
    # (a preempted empty loop could make a fast fn come out below 0)
    return max(0, t1 - t0 - (perf_counter_ns() - t1)) / n


def _engine():
    now = 1_000 * NS
    e = Engine(now, log=lambda m: None)
    c = e.connect()
    return e, c, now


def _flush(e, c):
    # What Server.flush does with a connection's replies, less the write.
    out = c.out
    if out:
        out[0] if len(out) == 1 else b"".join(out)
        out.clear()
    e.dirty.clear()


def _cycles(n: int, phases) -> dict:
    """Run the phases (name, fn(i) for the i-th job of a batch) over batches
    of BATCH jobs until n of each; ns per call of each phase."""
    spent = dict.fromkeys([name for name, _ in phases], 0.0)
    for _ in range(max(1, n // BATCH)):
        for name, fn in phases:
            spent[name] += _timed(fn, BATCH) * BATCH
    return {name: ns / (max(1, n // BATCH) * BATCH) for name, ns in spent.items()}


class _Lines:
    """Each command's lines for the current batch's ids, made before the
    batch (in place), so that no phase times the formatting of its line."""

    def __init__(self, end: bytes, put: bytes | None = None):
        self.end = end
        self.put = put  # what a put sends, if not its line and end
        self.first = 1
        self.by_cmd = {name: [b""] * BATCH for name in LINES}
        self._fill()

    def _fill(self):
        for name, line in LINES.items():
            self.by_cmd[name][:] = [
                self.put if name == "put" and self.put is not None
                else (line % (self.first + i) if b"%d" in line else line) + self.end
                for i in range(BATCH)]

    def next_batch(self, i):
        if i == BATCH - 1:
            self.first += BATCH
            self._fill()


def _through(n: int, feed, lines: _Lines, e, c, put=None) -> dict:
    """ns per command of each phase, each line handed to feed(c, line, now)
    (put: its own phase function, if not that)."""
    now = e.now

    def cmd(name):
        batch = lines.by_cmd[name]

        def one(i):
            feed(c, batch[i], now)
            _flush(e, c)
        return one
    res = _cycles(n, [
        ("put", put or cmd("put")), ("reserve", cmd("reserve")), ("release", cmd("release")),
        ("reserve again", cmd("reserve")), ("touch", cmd("touch")),
        ("delete", cmd("delete")), ("next", lines.next_batch)])
    assert not e.q.jobs and e.q.ids.next == lines.first, "every job was deleted"
    return res


def totals(n: int) -> tuple[dict, list[int]]:
    """ns per command through Engine.data, and the ids of one batch."""
    e, c, now = _engine()
    lines = _Lines(b"\r\n", put=LINES["put"] + b"\r\n" + BODY + b"\r\n")
    return _through(n, e.data, lines, e, c), list(range(1, BATCH + 1))


def commands(n: int) -> dict:
    """ns per command through Engine.command, the line already framed."""
    e, c, now = _engine()
    command = e.command
    body = BODY + b"\r\n"
    put_line = LINES["put"]

    def put(i):
        command(c, put_line, now)
        c.state = 0  # (LINE: the framing's part, as Engine.data does it)
        finish_put(e, c, body, now)
        _flush(e, c)
    return _through(n, command, _Lines(b""), e, c, put)


def queues(n: int, ids: list[int]) -> dict:
    e, c, now = _engine()
    q = e.q
    t = c.use
    first = [1]

    def put(i):
        j = q.new_job(t, 0, 0, 60 * NS, now)
        j.body = BODY + b"\r\n"
        q.store.reserve_put(j)
        q.insert(j, now)

    def reserve(i):
        reserving.reserve(q, c, None, now)
        if i == BATCH - 1:
            c.out.clear()
            e.dirty.clear()

    def next_batch(i):
        if i == BATCH - 1:
            first[0] += BATCH
    return _cycles(n, [
        ("put", put), ("reserve", reserve),
        ("release", lambda i: jobmoves.release(q, c, first[0] + i, 0, 0, now)),
        ("reserve again", reserve),
        ("touch", lambda i: jobmoves.touch(q, c, first[0] + i, now)),
        ("delete", lambda i: q.delete(c, first[0] + i, now)),
        ("next", next_batch)])


def replies(n: int, ids: list[int]) -> dict:
    ids = [ids[i % BATCH] for i in range(n)]
    e, c, now = _engine()
    body = BODY + b"\r\n"
    res = {}

    def send(reply):
        def one(i):
            c.send(reply(i))
            _flush(e, c)
        return one

    header = b"RESERVED 1 100\r\n"

    def reserved(i):
        # Queue._reserve makes and queues the header itself (in "queue"):
        # only the flush's join is left here.
        c.out.extend((header, body))
        _flush(e, c)
    res["put"] = _timed(send(lambda i: b"INSERTED %d\r\n" % ids[i]), n)
    res["reserve"] = _timed(reserved, n)
    res["release"] = _timed(send(lambda i: b"RELEASED\r\n"), n)
    res["touch"] = _timed(send(lambda i: b"TOUCHED\r\n"), n)
    res["delete"] = _timed(send(lambda i: b"DELETED\r\n"), n)
    return res


def micro(n: int = 200_000, rounds: int = ROUNDS) -> list[dict]:
    """A row per command: µs per command, total and by layer (the best of
    `rounds` for each, as timing noise only ever adds)."""
    best: dict = {}
    gc.disable()  # (the server freezes its survivors; a collection here is noise)
    try:
        for _ in range(rounds):
            total, ids = totals(n)
            layers = {"total": total, "command": commands(n), "queue": queues(n, ids),
                      "reply": replies(n, ids)}
            for layer, res in layers.items():
                for cmd, ns in res.items():
                    key = (cmd, layer)
                    best[key] = min(best.get(key, ns), ns)
    finally:
        gc.enable()
    rows = []
    for cmd in COMMANDS:
        us = {layer: best[(cmd, layer)] / 1000 for layer in ("total", "command", "queue", "reply")}
        us["framing"] = us["total"] - us["command"]
        us["dispatch"] = us.pop("command") - us["queue"] - us["reply"]
        rows.append({"command": cmd, **us, "budget": BUDGET_US.get(cmd)})
    return rows

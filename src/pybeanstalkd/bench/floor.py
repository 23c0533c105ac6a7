"""The pure-Python floor: the least an asyncio+uvloop server can do per
command, run beside the reference and ours by `pybeanstalkd-bench --floor`.

It answers what the workloads send (use, watch, ignore, put, reserve,
reserve-with-timeout, delete, list-tube-used) and nothing else: no delays,
no TTR, no priorities (FIFO per tube), no timeouts (a reserve with nothing
ready waits for a put, unless its timeout is 0), no stats, no checks of
the input. What ours spends above it is the cost of being beanstalkd;
what the floor spends above the reference is the cost of Python and the
event loop on this machine.

    python -m pybeanstalkd.bench.floor -l 127.0.0.1 -p PORT [-b DIR -f0]

With -b DIR it appends each put's body to one file there (preallocated, no
format), and with -f0 also fdatasyncs it before the replies of the read
that put: the least a durable put costs.
"""
from __future__ import annotations

import argparse
import asyncio
import os
from collections import deque

bodies: dict[int, bytes] = {}
tubes: dict[bytes, deque] = {}  # ready job ids, FIFO
waiting: dict[bytes, deque] = {}  # connections blocked in a reserve
last_id = 0
log_fd = -1  # -b: where puts' bodies go
log_sync = False  # -f0: fdatasync them before the replies


class Conn(asyncio.Protocol):
    def connection_made(self, transport):
        self.t = transport
        self.buf = b""
        self.use = b"default"
        self.watch = [b"default"]
        self.blocked = False

    def connection_lost(self, exc):
        for w in waiting.values():
            if self in w:
                w.remove(self)

    def data_received(self, data):
        global last_id
        buf = self.buf + data if self.buf else data
        out = []
        logged: list[bytes] = []
        pos = 0
        while not self.blocked:
            e = buf.find(b"\r\n", pos)
            if e < 0:
                break
            line = buf[pos:e]
            if line[:4] == b"put ":
                n = int(line[line.rfind(b" ") + 1:])
                if len(buf) < e + n + 4:
                    break
                last_id += 1
                bodies[last_id] = buf[e + 2:e + 2 + n]
                if log_fd >= 0:
                    logged.append(bodies[last_id])
                pos = e + n + 4
                out.append(b"INSERTED %d\r\n" % last_id)
                w = waiting.get(self.use)
                if w:
                    w.popleft().wake(last_id)
                else:
                    tubes.setdefault(self.use, deque()).append(last_id)
                continue
            pos = e + 2
            if line[:7] == b"reserve":
                i = self.take()
                if i:
                    out.append(self.job(i))
                elif line == b"reserve-with-timeout 0":
                    out.append(b"TIMED_OUT\r\n")
                else:
                    for t in self.watch:
                        waiting.setdefault(t, deque()).append(self)
                    self.blocked = True
            elif line[:7] == b"delete ":
                out.append(b"DELETED\r\n" if bodies.pop(int(line[7:]), None) is not None
                           else b"NOT_FOUND\r\n")
            elif line[:4] == b"use ":
                self.use = line[4:]
                out.append(b"USING %s\r\n" % self.use)
            elif line[:6] == b"watch ":
                if line[6:] not in self.watch:
                    self.watch.append(line[6:])
                out.append(b"WATCHING %d\r\n" % len(self.watch))
            elif line[:7] == b"ignore ":
                if line[7:] in self.watch and len(self.watch) > 1:
                    self.watch.remove(line[7:])
                out.append(b"WATCHING %d\r\n" % len(self.watch))
            elif line == b"list-tube-used":
                out.append(b"USING %s\r\n" % self.use)
            else:
                out.append(b"UNKNOWN_COMMAND\r\n")
        self.buf = buf[pos:]
        if logged:
            os.write(log_fd, b"".join(logged))
            if log_sync:
                os.fdatasync(log_fd)
        if out:
            self.t.write(out[0] if len(out) == 1 else b"".join(out))

    def take(self) -> int:
        for t in self.watch:
            q = tubes.get(t)
            if q:
                return q.popleft()
        return 0

    def job(self, i: int) -> bytes:
        b = bodies[i]
        return b"RESERVED %d %d\r\n%s\r\n" % (i, len(b), b)

    def wake(self, i: int):
        for t in self.watch:
            w = waiting.get(t)
            if w and self in w:
                w.remove(self)
        self.blocked = False
        self.t.write(self.job(i))
        if self.buf:
            self.data_received(b"")


async def serve(host: str, port: int):
    server = await asyncio.get_running_loop().create_server(Conn, host, port)
    await server.serve_forever()


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m pybeanstalkd.bench.floor")
    p.add_argument("-l", default="127.0.0.1")
    p.add_argument("-p", type=int, default=11300)
    p.add_argument("-b", help="append puts' bodies to a file in this directory")
    p.add_argument("-f", type=int, help="0: fdatasync them before the replies (-f0)")
    p.add_argument("-F", action="store_true", help="never fdatasync (the default)")
    args = p.parse_args(argv)
    global log_fd, log_sync
    if args.b is not None:
        log_fd = os.open(os.path.join(args.b, "floor.log"), os.O_WRONLY | os.O_CREAT, 0o600)
        os.posix_fallocate(log_fd, 0, 1 << 30)
        log_sync = args.f == 0 and not args.F
    try:
        from uvloop import run
    except ImportError:
        run = asyncio.run
    try:
        run(serve(args.l, args.p))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()

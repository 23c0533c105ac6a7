"""Python bytecodes per command, pipelined 64 to a read: ours against the floor.

    PYTHONPATH=src python docs/performance/pipelined-bytecodes.py

One read of 64 puts (100-byte bodies), then one read of 64 reserves and 64
deletes, run in process under sys.settrace with opcode events: ours through
Engine.data and the join a flush does, the floor (bench/floor.py) through
Conn.data_received. Three rounds warm the caches first. The counts are
exact, whatever the machine's noise; they leave out the event loop and the
kernel, which cost both servers the same per read.
"""
import collections
import sys

from pybeanstalkd.bench import floor
from pybeanstalkd.core.engine import Engine
from pybeanstalkd.core.protocol import NS

BODY = b"x" * 100
ops: collections.Counter = collections.Counter()


def tracer(frame, event, arg):
    frame.f_trace_opcodes = True

    def local(frame, event, arg):
        if event == "opcode":
            ops[frame.f_code.co_name] += 1
        return local
    return local


def counted(fn, data) -> int:
    ops.clear()
    sys.settrace(tracer)
    fn(data)
    sys.settrace(None)
    return sum(ops.values())


class Transport:
    def write(self, data):
        pass


def puts(first):
    return b"".join(b"put 0 0 60 100\r\n" + BODY + b"\r\n" for _ in range(64))


def reserves_and_deletes(first):
    return b"reserve\r\n" * 64 + b"".join(b"delete %d\r\n" % (first + i) for i in range(64))


now = 1000 * NS
engine = Engine(now, log=lambda m: None)
conn = engine.connect()


def ours(data):
    engine.data(conn, data, now)
    out = conn.out
    b"".join(out)
    out.clear()
    engine.dirty.clear()


minimal = floor.Conn()
minimal.connection_made(Transport())
for name, fn in (("ours", ours), ("floor", minimal.data_received)):
    first = 1
    for _ in range(3):
        fn(puts(first))
        fn(reserves_and_deletes(first))
        first += 64
    for what, data in (("put", puts(first)), ("reserve+delete", reserves_and_deletes(first))):
        n = counted(fn, data)
        top = ", ".join(f"{k} {v / 64:.1f}" for k, v in ops.most_common(8))
        print(f"{name:5s} {what:14s} {n / 64:6.1f} bytecodes a job  ({top})")

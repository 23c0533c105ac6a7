"""Python bytecodes and calls per put, by function, in ours or the floor.

    PYTHONPATH=src python docs/performance/f0-bytecodes.py ours OUT -l 127.0.0.1 -p PORT -b DIR -f0
    PYTHONPATH=src python docs/performance/f0-bytecodes.py floor OUT -l 127.0.0.1 -p PORT -b DIR -f0

Each read (Client.data_received, or the floor's Conn.data_received) runs
under sys.settrace with opcode events, and sys.setprofile counts the C
calls. Send it unpipelined puts (one a read), stop it with SIGTERM, and
OUT holds the counts per read. The counts are exact, whatever the
machine's noise; the tracing makes the server some 50 times slower.
"""
import collections
import os
import signal
import sys

which, out_path = sys.argv.pop(1), sys.argv.pop(1)
ops: collections.Counter = collections.Counter()
calls: collections.Counter = collections.Counter()
ccalls: collections.Counter = collections.Counter()
reads = 0


def tracer(frame, event, arg):
    key = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}"
    calls[key] += 1
    frame.f_trace_opcodes = True

    def local(frame, event, arg):
        if event == "opcode":
            ops[key] += 1
        return local
    return local


def profiler(frame, event, arg):
    if event == "c_call":
        ccalls[getattr(arg, "__qualname__", str(arg))] += 1


def report():
    n = reads or 1
    lines = [f"{which}: reads {reads}  bytecodes/read {sum(ops.values()) / n:.1f}  "
             f"Python calls/read {sum(calls.values()) / n:.1f}  C calls/read {sum(ccalls.values()) / n:.1f}"]
    lines += [f"  {v / n:7.1f} bytecodes {calls[k] / n:5.2f} calls  {k}" for k, v in ops.most_common(45)]
    lines.append(" C calls:")
    lines += [f"  {v / n:6.2f} {k}" for k, v in ccalls.most_common(30)]
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")


def counted(cls, name):
    orig = getattr(cls, name)

    def run(self, *a):
        global reads
        reads += 1
        sys.settrace(tracer)
        sys.setprofile(profiler)
        try:
            return orig(self, *a)
        finally:
            sys.settrace(None)
            sys.setprofile(None)
    setattr(cls, name, run)


signal.signal(signal.SIGTERM, lambda *_: (report(), os._exit(0)))  # (the floor's end)
if which == "floor":
    from pybeanstalkd.bench import floor

    counted(floor.Conn, "data_received")
    floor.main()
else:
    from pybeanstalkd.cli import main
    from pybeanstalkd.server import transport

    counted(transport.Client, "data_received")
    code = main()  # (its own SIGTERM handler: it returns)
    report()
    sys.exit(code)

#!/usr/bin/env python3
"""The pure build's Python calls and bytecodes per command, by function:
the slope between a run of N1 and one of N2 commands (cmd-cost.py's
workloads and driver), so that start-up and shut-down do not count.

    docs/performance/py-calls.py [--src DIR] [-n N1 N2] [--top K] WORKLOAD...

--src: the source tree (PYTHONPATH; another checkout's, to compare).
The server runs with PYBEANSTALKD_PURE=1 under sys.settrace with opcode
events: exact counts, whatever the machine's load. Where callgrind on
the pure build names the interpreter's C functions, this names ours: an
interpreted call costs its frame (about 250 instructions with its
CALL, RESUME and RETURN), a bytecode about 25.
"""
from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def serve() -> None:
    """(--serve-to PATH ARGS...) The server, traced; the counts to PATH at exit."""
    import atexit
    import runpy
    import signal
    import threading

    out = sys.argv[2]
    calls: collections.Counter[str] = collections.Counter()
    ops: collections.Counter[str] = collections.Counter()

    def tracer(frame, event, arg):
        if event != "call":
            return None
        code = frame.f_code
        key = f"{code.co_filename.split('src/')[-1]}:{code.co_firstlineno}:{code.co_qualname}"
        calls[key] += 1
        frame.f_trace_opcodes = True

        def local(frame, event, arg):
            if event == "opcode":
                ops[key] += 1
            return local
        return local

    def dump() -> None:
        sys.settrace(None)
        with open(out, "w") as f:
            json.dump({"calls": calls, "ops": ops}, f)

    def term(*_) -> None:
        raise SystemExit(0)

    atexit.register(dump)
    signal.signal(signal.SIGTERM, term)
    sys.settrace(tracer)
    threading.settrace(tracer)
    sys.argv = ["pybeanstalkd", *sys.argv[3:]]
    runpy.run_module("pybeanstalkd", run_name="__main__", alter_sys=True)


def main() -> int:
    if sys.argv[1:2] == ["--serve-to"]:
        serve()
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", help="the source tree (PYTHONPATH)")
    ap.add_argument("-n", type=int, nargs=2, default=(1000, 3000))
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("work", nargs="*", default=["put", "put64", "rd", "rd64"])
    a = ap.parse_args()
    sys.path.insert(0, HERE)
    cc = importlib.import_module("cmd-cost")
    env = dict(os.environ, PYTHONHASHSEED="0", PYBEANSTALKD_PURE="1")
    if a.src:
        env["PYTHONPATH"] = a.src
    n1, n2 = a.n
    for work in a.work:
        got = []
        for n in (n1, n2):
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                port = cc.free_port()
                proc = subprocess.Popen([sys.executable, __file__, "--serve-to", out.name,
                                         "-l", "127.0.0.1", "-p", str(port)], env=env)
                try:
                    cc.drive(port, work, n, n2 if work.startswith("rd") else 0)
                finally:
                    proc.terminate()
                    proc.wait()
                got.append(json.load(open(out.name)))
        per = (n2 - n1) * (2 if work.startswith("rd") else 1)  # (commands)
        diff = {kind: {k: (got[1][kind].get(k, 0) - got[0][kind].get(k, 0)) / per
                       for k in set(got[0][kind]) | set(got[1][kind])} for kind in ("calls", "ops")}
        print(f"{work}: {sum(diff['calls'].values()):,.2f} calls, "
              f"{sum(diff['ops'].values()):,.1f} bytecodes a command")
        for k, v in sorted(diff["ops"].items(), key=lambda kv: -kv[1])[:a.top]:
            print(f"  {diff['calls'].get(k, 0):6.2f} {v:8.1f}  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

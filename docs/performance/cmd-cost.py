#!/usr/bin/env python3
"""The server's user-space instructions per command, under callgrind: the
slope between two runs of N1 and N2 commands, so that start-up and
shut-down do not count. Deterministic: a noisy machine gives the same
counts.

    docs/performance/cmd-cost.py [--python PY] [--src DIR | --ref] [--flags '...']
                                 [--profile N] [WORKLOAD...]

--flags: the server's flags; {tmpdir} in them is a fresh directory each
run (`--flags '-b {tmpdir} -f0'`: each run's binlog starts empty). With
--ref, the flags go to the reference too.

Workloads: put, put64 (64 pipelined), rd (a reserve and its delete, each
its own round trip), rd64 (64 of each pipelined), rdh and rdh64 (as rd
and rd64, the jobs put at mixed priorities: served from the tube's ready
heap, not from its run of jobs put in order), any put tag as
put:TAG (%d in TAG: the put's number), and any other command as cmd:LINE
(one at a time; `cmd:use foo`). An rd pair is two commands: the
figure given is per command (half a pair), as for the others.

--profile N: also the N functions, and the objects (libpython, uvloop,
the compiled module...), that cost the most per command, from
callgrind_annotate's self costs of the two runs.
"""
from __future__ import annotations

import argparse
import os
import shlex
import socket
import subprocess
import sys
import tempfile

from firstreply import first_reply

BODY = b"x" * 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def recv_replies(s: socket.socket, n: int, buf: bytearray) -> None:
    """Read n replies (a RESERVED's body included)."""
    got = 0
    while got < n:
        while True:
            i = buf.find(b"\r\n")
            if i >= 0:
                break
            buf += s.recv(1 << 16)
        line = bytes(buf[:i])
        need = i + 2
        if line.startswith((b"RESERVED", b"FOUND", b"OK ")):
            need += int(line.split()[-1]) + 2
            while len(buf) < need:
                buf += s.recv(1 << 16)
        del buf[:need]
        assert not line.startswith((b"NOT_FOUND", b"BAD", b"UNKNOWN", b"INTERNAL", b"OUT_")), line
        got += 1


def pri(j: int) -> int:
    """The priority of an rdh workload's j-th job of a batch: mixed, so
    that few follow their tube's run (which takes one priority, in order)."""
    return (j * 7919) % 1000


def drive(port: int, work: str, n: int, fill: int) -> None:
    s = first_reply(port, pause=0.1, give_up=600)  # (one more command in each run: cancels out)
    buf = bytearray()
    if work.startswith("rd"):
        k = 64
        for _ in range(0, fill, k):  # the jobs, pipelined (not measured: same count both runs)
            s.sendall(b"".join(b"put %d 0 60 100\r\n" % (pri(j) if work.startswith("rdh") else 0)
                               + BODY + b"\r\n" for j in range(k)))
            recv_replies(s, k, buf)
    batch = 64 if work.endswith("64") and not work.startswith("cmd:") else 1
    for i in range(0, n, batch):
        if work.startswith("cmd:"):
            s.sendall((work[4:] + "\r\n").encode() * batch)
            recv_replies(s, batch, buf)
        elif work.startswith("put"):
            tag = work[4:] if work.startswith("put:") else ""
            lines = []
            for j in range(i, i + batch):
                t = (" " + (tag % j if "%" in tag else tag)).encode() if tag else b""
                lines.append(b"put 0 0 60 100" + t + b"\r\n" + BODY + b"\r\n")
            s.sendall(b"".join(lines))
            recv_replies(s, batch, buf)
        else:
            s.sendall(b"reserve-with-timeout 0\r\n" * batch)
            ids = []
            for _ in range(batch):
                while b"\r\n" not in buf:
                    buf += s.recv(1 << 16)
                i2 = buf.find(b"\r\n")
                line = bytes(buf[:i2])
                assert line.startswith(b"RESERVED"), line
                need = i2 + 2 + int(line.split()[2]) + 2
                while len(buf) < need:
                    buf += s.recv(1 << 16)
                del buf[:need]
                ids.append(int(line.split()[1]))
            s.sendall(b"".join(b"delete %d\r\n" % j for j in ids))
            recv_replies(s, batch, buf)
    s.close()


def run(argv: list[str], env: dict, work: str, n: int, fill: int, dump: str = "/dev/null") -> int:
    port = free_port()
    with tempfile.NamedTemporaryFile("r", suffix=".log") as out, tempfile.TemporaryDirectory() as tmp:
        argv = [a.replace("{tmpdir}", tmp) for a in argv]  # (a fresh binlog directory each run)
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={dump}",
                                 *argv, "-l", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=open(out.name, "w"), env=env)
        try:
            drive(port, work, n, fill)
        finally:
            proc.terminate()
            proc.wait()
        for line in open(out.name):
            if "Collected" in line:
                return int(line.split()[-1])
    raise RuntimeError("no count")


def self_costs(path: str) -> dict[str, int]:
    """Each function's self cost, as callgrind_annotate reads the dump."""
    import re

    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--auto=no", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    costs: dict[str, int] = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(.*)$", line)
        if m and "PROGRAM TOTALS" not in m.group(2):
            costs[m.group(2)] = costs.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
    return costs


def profile(a: dict[str, int], b: dict[str, int], per: float, top: int) -> None:
    import re

    diff = {k: (b.get(k, 0) - a.get(k, 0)) / per for k in set(a) | set(b)}
    objs: dict[str, float] = {}
    for k, v in diff.items():
        o = re.search(r"\[([^]]*)\]$", k)
        obj = o.group(1).rsplit("/", 1)[-1] if o else "(inlined)"
        objs[obj] = objs.get(obj, 0) + v
    for name, v in sorted(objs.items(), key=lambda kv: -kv[1])[:8]:
        print(f"    {v:9,.0f}  {name}")
    for name, v in sorted(diff.items(), key=lambda kv: -kv[1])[:top]:
        short = re.sub(r" \[.*\]$", "", name)[-110:]
        print(f"    {v:9,.0f}  {short}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--src", help="the source tree (PYTHONPATH)")
    ap.add_argument("--ref", action="store_true", help="the reference beanstalkd")
    ap.add_argument("--flags", default="")
    ap.add_argument("-n", type=int, nargs=2, default=(2000, 6000))
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("work", nargs="*", default=["put", "put64", "rd", "rd64"])
    a = ap.parse_args()
    env = dict(os.environ, PYTHONHASHSEED="0")
    if a.ref:
        argv = ["beanstalkd", *shlex.split(a.flags)]
    else:
        argv = [a.python, "-m", "pybeanstalkd", *shlex.split(a.flags)]
        if a.src:
            env["PYTHONPATH"] = a.src
    n1, n2 = a.n
    for work in a.work:
        fill = n2 if work.startswith("rd") else 0
        per = (n2 - n1) * (2 if work.startswith("rd") else 1)  # (commands)
        with tempfile.TemporaryDirectory() as tmp:
            dumps = [os.path.join(tmp, "1"), os.path.join(tmp, "2")] if a.profile else ["/dev/null"] * 2
            c1 = run(argv, env, work, n1, fill, dumps[0])
            c2 = run(argv, env, work, n2, fill, dumps[1])
            print(f"{work}: {(c2 - c1) / per:,.0f} instructions a command", flush=True)
            if a.profile:
                profile(self_costs(dumps[0]), self_costs(dumps[1]), per, a.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())

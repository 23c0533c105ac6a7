#!/usr/bin/env python3
"""The server's user-space instructions per command, under callgrind: the
slope between two runs of N1 and N2 commands, so that start-up and
shut-down do not count. Deterministic: a noisy machine gives the same
counts.

    docs/performance/cmd-cost.py [--python PY] [--src DIR | --ref | --argv '...']
                                 [--flags '...'] [--conns N] [--profile N] [WORKLOAD...]

--argv: any other server's command line, the address flags added (the
floor: `--argv "$PY -m pybeanstalkd.bench.floor"`).

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

--conns N: N connections, as the bench's load processes drive them: each
step of the workload is sent on every connection, then every connection's
replies are read, so that each pass of the server's loop has N reads
(under callgrind the server is so much slower than its client that all
N have sent before it polls).
A run's commands are rounded up to whole rounds of N; the figure is
still per command. The rd workloads' jobs are put on the first.

--sim: also callgrind's cache and branch simulation, per command: first-
level instruction and data misses (I1, D1), last-level data misses (the
last level simulated as 2 MiB, 16-way: one core's L2 on the machine these
figures were taken on, whose L3 is too big to miss), and mispredicted
branches. What time an instruction takes, which the count alone hides.

--profile N: also the N functions, and the objects (libpython, uvloop,
the compiled module...), that cost the most per command, from
callgrind_annotate's self costs of the two runs; --event EV: ranked by
EV, callgrind's event names, comma-separated for their sum (with
--sim: D1mr,D1mw for first-level data misses...), in place of
instructions (Ir).
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


def put_lines(work: str, i: int, batch: int) -> bytes:
    """A put workload's batch of puts, the i-th first."""
    tag = work[4:] if work.startswith("put:") else ""
    lines = []
    for j in range(i, i + batch):
        t = (" " + (tag % j if "%" in tag else tag)).encode() if tag else b""
        lines.append(b"put 0 0 60 100" + t + b"\r\n" + BODY + b"\r\n")
    return b"".join(lines)


def recv_reserved(s: socket.socket, n: int, buf: bytearray) -> list[int]:
    """Read n RESERVED replies, bodies included; their ids."""
    ids = []
    for _ in range(n):
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
    return ids


def drive(port: int, work: str, n: int, fill: int, conns: int = 1) -> int:
    """Run n commands of work (rounded up to whole rounds of the
    connections); returns how many ran."""
    s = first_reply(port, pause=0.1, give_up=600)  # (one more command in each run: cancels out)
    socks = [s]
    for _ in range(conns - 1):  # (each answers one command first: the same in both runs)
        socks.append(first_reply(port, pause=0.1, give_up=600))
    bufs = [bytearray() for _ in socks]
    buf = bufs[0]
    if work.startswith("rd"):
        k = 64
        for _ in range(0, fill, k):  # the jobs, pipelined (not measured: same count both runs)
            s.sendall(b"".join(b"put %d 0 60 100\r\n" % (pri(j) if work.startswith("rdh") else 0)
                               + BODY + b"\r\n" for j in range(k)))
            recv_replies(s, k, buf)
    batch = 64 if work.endswith("64") and not work.startswith("cmd:") else 1
    ran = 0
    pairs = list(zip(socks, bufs))
    for i in range(0, n, batch * conns):
        if work.startswith("cmd:"):
            for c, _ in pairs:
                c.sendall((work[4:] + "\r\n").encode() * batch)
            for c, b in pairs:
                recv_replies(c, batch, b)
        elif work.startswith("put"):
            for k, (c, _) in enumerate(pairs):
                c.sendall(put_lines(work, i + k * batch, batch))
            for c, b in pairs:
                recv_replies(c, batch, b)
        else:
            for c, _ in pairs:
                c.sendall(b"reserve-with-timeout 0\r\n" * batch)
            ids = [recv_reserved(c, batch, b) for c, b in pairs]
            for (c, _), got in zip(pairs, ids):
                c.sendall(b"".join(b"delete %d\r\n" % j for j in got))
            for c, b in pairs:
                recv_replies(c, batch, b)
        ran += batch * conns
    for c in socks:
        c.close()
    return ran


SIM = ["--cache-sim=yes", "--branch-sim=yes", "--LL=2097152,16,64"]


def run(argv: list[str], env: dict, work: str, n: int, fill: int, dump: str = "/dev/null",
        conns: int = 1, sim: bool = False) -> tuple[dict[str, int], int]:
    """The server's events over a run of the workload (Ir: instructions;
    with sim, the misses too), and the commands it ran."""
    port = free_port()
    with tempfile.NamedTemporaryFile("r", suffix=".log") as out, tempfile.TemporaryDirectory() as tmp:
        argv = [a.replace("{tmpdir}", tmp) for a in argv]  # (a fresh binlog directory each run)
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={dump}",
                                 *(SIM if sim else []), *argv, "-l", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=open(out.name, "w"), env=env)
        try:
            ran = drive(port, work, n, fill, conns)
        finally:
            proc.terminate()
            proc.wait()
        names: list[str] = []
        for line in open(out.name):
            if "Events    :" in line:
                names = line.split(":", 1)[1].split()
            elif "Collected" in line:
                return dict(zip(names, map(int, line.split(":", 1)[1].split()))), ran
    raise RuntimeError("no count")


def self_costs(path: str, event: str = "Ir") -> dict[str, int]:
    """Each function's self cost in event (events, comma-separated: their
    sum), as callgrind_annotate reads the dump."""
    import re

    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--auto=no", "--threshold=100",
                          f"--show={event}", f"--sort={event}", path],
                         capture_output=True, text=True, check=True).stdout
    costs: dict[str, int] = {}
    for line in out.splitlines():
        m = re.match(r"\s*((?:(?:[\d,]+(?: \([ \d.]+%\))?|\.)\s+)+)(\D.*)$", line)
        if m and "PROGRAM TOTALS" not in m.group(2):
            n = sum(int(v.replace(",", "")) for v in re.findall(r"([\d,]+)(?: \([ \d.]+%\))?", m.group(1)))
            costs[m.group(2)] = costs.get(m.group(2), 0) + n
    return costs


def profile(a: dict[str, int], b: dict[str, int], per: float, top: int, digits: int = 0) -> None:
    import re

    diff = {k: (b.get(k, 0) - a.get(k, 0)) / per for k in set(a) | set(b)}
    objs: dict[str, float] = {}
    for k, v in diff.items():
        o = re.search(r"\[([^]]*)\]$", k)
        obj = o.group(1).rsplit("/", 1)[-1] if o else "(inlined)"
        objs[obj] = objs.get(obj, 0) + v
    for name, v in sorted(objs.items(), key=lambda kv: -kv[1])[:8]:
        print(f"    {v:9,.{digits}f}  {name}")
    for name, v in sorted(diff.items(), key=lambda kv: -kv[1])[:top]:
        short = re.sub(r" \[.*\]$", "", name)[-110:]
        print(f"    {v:9,.{digits}f}  {short}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--src", help="the source tree (PYTHONPATH)")
    ap.add_argument("--ref", action="store_true", help="the reference beanstalkd")
    ap.add_argument("--argv", help="another server's command line (the floor's)")
    ap.add_argument("--conns", type=int, default=1, metavar="N")
    ap.add_argument("--flags", default="")
    ap.add_argument("-n", type=int, nargs=2, default=(2000, 6000))
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--sim", action="store_true", help="cache and branch simulation")
    ap.add_argument("--event", default="Ir", help="what --profile ranks by (with --sim: D1mr...)")
    ap.add_argument("work", nargs="*", default=["put", "put64", "rd", "rd64"])
    a = ap.parse_args()
    env = dict(os.environ, PYTHONHASHSEED="0")
    if a.ref:
        argv = ["beanstalkd", *shlex.split(a.flags)]
    elif a.argv:
        argv = [*shlex.split(a.argv), *shlex.split(a.flags)]
    else:
        argv = [a.python, "-m", "pybeanstalkd", *shlex.split(a.flags)]
        if a.src:
            env["PYTHONPATH"] = a.src
    n1, n2 = a.n
    for work in a.work:
        fill = n2 + 64 * a.conns if work.startswith("rd") else 0  # (n2 rounded up to rounds)
        with tempfile.TemporaryDirectory() as tmp:
            dumps = [os.path.join(tmp, "1"), os.path.join(tmp, "2")] if a.profile else ["/dev/null"] * 2
            c1, r1 = run(argv, env, work, n1, fill, dumps[0], a.conns, a.sim)
            c2, r2 = run(argv, env, work, n2, fill, dumps[1], a.conns, a.sim)
            per = (r2 - r1) * (2 if work.startswith("rd") else 1)  # (commands)
            def d(*events: str, c1=c1, c2=c2, per=per) -> float:
                return sum(c2[e] - c1[e] for e in events) / per
            print(f"{work}: {d('Ir'):,.0f} instructions a command", flush=True)
            if a.sim:
                print(f"    misses a command: I1 {d('I1mr'):,.1f}, D1 {d('D1mr', 'D1mw'):,.1f}, "
                      f"LL data {d('DLmr', 'DLmw'):,.1f}; branches mispredicted "
                      f"{d('Bcm', 'Bim'):,.1f}", flush=True)
            if a.profile:
                profile(self_costs(dumps[0], a.event), self_costs(dumps[1], a.event), per, a.profile,
                        0 if a.event == "Ir" else 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

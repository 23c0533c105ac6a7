# 256 connections: each server's user and system CPU per command (per job for
# reserve: a reserve and a delete), from /proc/PID/stat, 200,000 of each,
# two rounds. Usage: PYTHONPATH=src .venv/bin/python docs/performance/c256-cpu.py
import os

from pybeanstalkd.bench.spawn import Spawned, default_ours
from pybeanstalkd.bench.workloads import Options, fill, run_workload
tick = os.sysconf("SC_CLK_TCK")
def ut(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) / tick, int(f[12]) / tick
o = Options(conns=256, procs=2, size=100, jobs=200_000, tube="bench")
for r in range(2):
    for name, argv in (("reference", ["/usr/bin/beanstalkd"]), ("ours", default_ours())):
        with Spawned(name, argv, "") as s:
            for w in ("put", "reserve"):
                if w == "reserve":  # (filled before the CPU is counted; then it drains)
                    fill(s.addr, o, o.jobs)
                u0, s0 = ut(s.pid)
                res = run_workload(s.addr, w, Options(**{**o.__dict__, "jobs": 0})
                                   if w == "reserve" else o)
                u1, s1 = ut(s.pid)
                n = res.ops
                print(f"round {r + 1} {name:9s} {w:7s} {res.ops_s:9,.0f} ops/s  "
                      f"user {1e6 * (u1 - u0) / n:5.1f} us  sys {1e6 * (s1 - s0) / n:5.1f} us",
                      flush=True)

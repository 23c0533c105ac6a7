"""--bsload PATH: the same workloads driven by an external C load generator,
bsload (one thread per connection; see its header comment), as a yardstick
for this Python client: if the bench gets about the rate bsload gets from the
same server, the bench is not the bottleneck.

bsload only speaks to 127.0.0.1; its cycle mode ("pingpong") uses tubes
pp0, pp1, ... and its mixed mode runs for whole seconds (--duration, else 5).
"""
from __future__ import annotations

import subprocess

from .drivers import BenchError
from .workloads import Options, Result, fill


def bsload_argv(path, port, workload: str, o: Options) -> list[str]:
    argv = [path, "-p", str(port), "-c", str(o.conns), "-s", str(o.size), "-t", o.tube]
    depth = str(o.pipeline) if workload.endswith("-pipelined") else "1"
    if workload.startswith("put"):
        return argv + ["-m", "put", "-n", str(o.jobs), "-P", depth]
    if workload.startswith("reserve"):
        return argv + ["-m", "drain", "-P", depth]
    if workload == "cycle":
        return argv + ["-m", "pingpong", "-n", str(o.jobs)]
    if workload == "mixed":
        return argv + ["-m", "mixed", "-d", str(max(1, round(o.duration or 5)))]
    raise ValueError(workload)


def run_bsload(path, addr, workload: str, o: Options, cpu=None) -> Result:
    if addr[0] not in ("127.0.0.1", "localhost"):
        raise BenchError("bsload only connects to 127.0.0.1")
    if workload.startswith("reserve"):
        fill(addr, o, o.jobs)
    cpu0 = cpu() if cpu else 0.0
    p = subprocess.run(bsload_argv(path, addr[1], workload, o), capture_output=True,
                       text=True, timeout=900)
    cpu1 = cpu() if cpu else 0.0
    if p.returncode:
        raise BenchError(f"bsload exited {p.returncode}: {p.stderr.strip()}")
    kv = dict(w.split("=", 1) for w in p.stdout.split() if "=" in w)
    secs = float(kv["secs"])
    if workload == "mixed":
        res = Result(workload, round(float(kv["consumed/s"]) * secs), secs,
                     produced=round(float(kv["puts/s"]) * secs),
                     p50_us=float(kv["lat_p50_us"]), p99_us=float(kv["lat_p99_us"]),
                     max_us=float(kv["lat_max_us"]))
    else:
        res = Result(workload, int(kv["ops"]), secs)
    if cpu and secs > 0:
        res.notes["server_cpu"] = (cpu1 - cpu0) / secs
    res.notes["tool"] = "bsload"
    return res

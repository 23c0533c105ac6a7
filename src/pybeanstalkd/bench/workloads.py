"""The workloads of pybeanstalkd-bench: how each one is split into
processes and connections (Groups of Drivers), and what it reports.

  put-pipelined      put, --pipeline commands in flight per connection
  put                put, one command in flight
  reserve-pipelined  reserve-with-timeout 0 + delete, --pipeline in flight,
                     on a tube pre-filled with --jobs jobs, until it is empty
  reserve            the same, one command in flight
  cycle              put, reserve, delete on each connection's own tube
                     (ops counts commands: three per cycle)
  mixed              half the connections put (unpipelined, optionally paced
                     with --rate), half reserve+delete; ops counts consumed
                     jobs, and put->reserve latency comes from the send time
                     written at the start of each body
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .client import Group, run_phase
from .drivers import UNLIMITED, Consumer, Cycle, Pacer, Producer, Put, ReserveDelete

WORKLOADS = ["put-pipelined", "reserve-pipelined", "put", "reserve", "cycle", "mixed"]


@dataclass
class Options:
    conns: int = 4
    procs: int = 2
    pipeline: int = 64
    size: int = 100
    jobs: int = 100_000
    duration: float | None = None
    tube: str = "bench"
    rate: float | None = None  # mixed: total puts per second


@dataclass
class Result:
    workload: str
    ops: int
    seconds: float
    produced: int | None = None  # mixed only
    p50_us: float | None = None
    p99_us: float | None = None
    max_us: float | None = None
    notes: dict = field(default_factory=dict)

    @property
    def ops_s(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (i < total % parts) for i in range(parts)]


def _groups(role, n_conns, n_procs, make):
    """n_conns drivers made by make(global_index), spread over n_procs groups."""
    groups, i = [], 0
    for k in split(n_conns, max(1, min(n_procs, n_conns))):
        groups.append(Group(role, [make(j) for j in range(i, i + k)]))
        i += k
    return groups


def plan(workload: str, o: Options) -> list[Group]:
    budget = split(o.jobs, o.conns) if o.duration is None else [UNLIMITED] * o.conns
    if workload in ("put-pipelined", "put"):
        depth = o.pipeline if workload == "put-pipelined" else 1
        return _groups("load", o.conns, o.procs, lambda i: Put(budget[i], o.size, depth, o.tube))
    if workload in ("reserve-pipelined", "reserve"):
        depth = o.pipeline if workload == "reserve-pipelined" else 1
        return _groups("load", o.conns, o.procs, lambda i: ReserveDelete(depth, o.tube))
    if workload == "cycle":
        return _groups("load", o.conns, o.procs, lambda i: Cycle(budget[i], o.size, f"{o.tube}-{i}"))
    if workload == "mixed":
        n_prod = max(1, o.conns // 2)
        n_cons = max(1, o.conns - n_prod)
        p_prod = max(1, o.procs // 2)
        p_cons = max(1, o.procs - p_prod)
        pb = split(o.jobs, n_prod) if o.duration is None else [UNLIMITED] * n_prod
        prods = _groups("producer", n_prod, p_prod, lambda i: Producer(pb[i], o.size, o.tube))
        if o.rate:
            for g in prods:
                g.pacer = Pacer(o.rate * len(g.drivers) / n_prod)
                for d in g.drivers:
                    d.pacer = g.pacer
        return prods + _groups("consumer", n_cons, p_cons, lambda i: Consumer(o.tube))
    raise ValueError(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")


def fill(addr, o: Options, jobs: int, tube: str | None = None, progress=None, delay=0, ttr=60,
         nice=0, tags=b""):
    """Put `jobs` jobs (pipelined, untimed) into the tube, each with `delay`,
    `ttr` and put `tags` (b" aft:g")."""
    budget = split(jobs, o.conns)
    groups = _groups("load", o.conns, o.procs,
                     lambda i: Put(budget[i], o.size, 64, tube or o.tube, delay, ttr, tags))
    for g in groups:
        g.nice = nice
    return run_phase(addr, groups, progress=progress)


def drain(addr, o: Options, watch=None):
    """Delete every ready job in the tube (or the watched tubes), untimed."""
    g = Group("load", [ReserveDelete(64, o.tube, watch=watch)])
    return run_phase(addr, [g]).ops.get("load", 0)


def percentile(sorted_ns, q: float) -> float:
    return sorted_ns[min(len(sorted_ns) - 1, int(len(sorted_ns) * q))] / 1e3


def run_workload(addr, workload: str, o: Options, progress=None, cleanup=False, cpu=None) -> Result:
    """Run one workload; cpu() (the server's CPU seconds, if given) gives the
    server's CPU use during the timed phase, notes["server_cpu"] (1.0 = a core)."""
    if workload.startswith("reserve"):
        fill(addr, o, o.jobs, progress=progress and progress.labelled("prefill"))
    groups = plan(workload, o)
    stop_when = None
    if workload == "mixed" and o.duration is None:
        cons = [i for i, g in enumerate(groups) if g.role == "consumer"]
        stop_when = lambda counts: sum(counts[i] for i in cons) >= o.jobs  # noqa: E731
    cpu0 = cpu() if cpu else 0.0
    r = run_phase(addr, groups, o.duration, stop_when,
                  progress and progress.labelled(workload))
    cpu1 = cpu() if cpu else 0.0
    if workload == "mixed":
        res = Result(workload, r.ops.get("consumer", 0), r.seconds,
                     produced=r.ops.get("producer", 0))
        lat = sorted(r.lat_ns)
        if lat:
            res.p50_us, res.p99_us = percentile(lat, 0.50), percentile(lat, 0.99)
            res.max_us = lat[-1] / 1e3
    else:
        res = Result(workload, r.ops.get("load", 0), r.seconds)
    if cpu and r.seconds > 0:
        res.notes["server_cpu"] = (cpu1 - cpu0) / r.seconds
    if cleanup and workload in ("put-pipelined", "put", "mixed"):
        drain(addr, o)
    return res

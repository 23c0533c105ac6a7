"""What pybeanstalkd-bench measures, each against a list of servers:
throughput workloads, memory per stored job, idle connections, and the
throughput curve as the number of tubes grows.

A server is a factory returning a context manager with .name, .addr and
.rss(): Spawned (spawn.py; fresh for every run, as --compare does) or
Running (the server at --host/--port, whose pid comes from `stats`). With
several servers, runs alternate between them, the order flipping each round.
"""
from __future__ import annotations

import resource
import shutil
import socket
import statistics
import tempfile
import time
from dataclasses import replace

from .client import Group, run_phase
from .cross import run_bsload
from .drivers import UNLIMITED, BenchError, Put, ReserveDelete, put_command
from .spawn import Spawned, cpu_seconds, exchange, rss_bytes, stats
from .workloads import Options, drain, fill, run_workload, split


class Running:
    """The server someone else started (not restarted between runs)."""

    fresh = False

    def __init__(self, addr, name="server"):
        self.addr, self.name = addr, name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    @property
    def pid(self) -> int:
        return int(stats(self.addr)["pid"])

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def cpu(self) -> float:
        return cpu_seconds(self.pid)


def alternate(servers, i):
    return servers if i % 2 == 0 else servers[::-1]


def workloads(servers, names, o: Options, rounds=1, progress=None, bsload=None) -> dict:
    """{workload: {server name: [Result per round]}}; with bsload (a path),
    also {"<server name> bsload": [...]}, each run on a fresh server too."""
    tools = [("", None)] + ([(" bsload", bsload)] if bsload else [])
    out: dict = {}
    for w in names:
        for r in range(rounds):
            for mk in alternate(servers, r):
                for suffix, tool in alternate(tools, r):
                    with mk() as s:
                        if progress:
                            progress.prefix = f"{s.name}{suffix} " + (f"r{r + 1} " if rounds > 1 else "")
                        if tool:
                            res = run_bsload(tool, s.addr, w, o, cpu=s.cpu)
                        else:
                            res = run_workload(s.addr, w, o, progress, cpu=s.cpu,
                                               cleanup=not getattr(s, "fresh", True))
                        d = s.dir_bytes() if hasattr(s, "dir_bytes") else None
                        if d is not None:
                            res.notes["dir_bytes"] = d
                        out.setdefault(w, {}).setdefault(s.name + suffix, []).append(res)
    return out


def variant_rows(res: dict, rounds: int, variant: str, key: str) -> list[dict]:
    """Rows comparing ours with a variant of ours (a flag on), the reference
    beside: per workload the median rates, `<key>_ops_s` for the variant,
    `<key>_over_off` = variant / ours, and every round's rates."""
    rows = []
    for w, per in res.items():
        rate = {name: statistics.median([r.ops_s for r in rs]) for name, rs in per.items()}
        rows.append({"workload": w, "reference_ops_s": rate["reference"],
                     "ours_ops_s": rate["ours"], f"{key}_ops_s": rate[variant],
                     f"{key}_over_off": rate[variant] / rate["ours"],
                     "ours_over_reference": rate["ours"] / rate["reference"],
                     "rounds": [{n: rs[i].ops_s for n, rs in per.items()} for i in range(rounds)]})
    return rows


def settle_rss(s, wait=0.5) -> int:
    time.sleep(wait)
    return s.rss()


def memory(servers, jobs: int, o: Options, progress=None) -> list[dict]:
    rows = []
    for mk in servers:
        with mk() as s:
            before = settle_rss(s)
            if progress:
                progress.prefix = f"{s.name} "
            fill(s.addr, o, jobs, progress=progress and progress.labelled("memory fill"))
            after = settle_rss(s)
            stored = int(stats(s.addr)["current-jobs-ready"])
            rows.append({"server": s.name, "jobs": jobs, "stored": stored, "rss_before": before,
                         "rss_after": after, "bytes_per_job": (after - before) / jobs})
            if not getattr(s, "fresh", True):
                drain(s.addr, o)
    return rows


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def idle_conns(servers, n: int, progress=None) -> list[dict]:
    """Open n idle connections; RSS before/after; does a command still work?"""
    limit = raise_nofile()
    if n + 64 > limit:
        raise BenchError(f"{n} connections need more than the fd limit ({limit})")
    rows = []
    for mk in servers:
        with mk() as s:
            before = settle_rss(s)
            socks, t0 = [], time.monotonic()
            try:
                for i in range(n):
                    socks.append(socket.create_connection(s.addr, timeout=30))
                    if progress and i % 500 == 0:
                        progress.line(f"{s.name} idle connections: {i}")
                deadline = time.monotonic() + 60
                while int(stats(s.addr)["current-connections"]) < n + 1:
                    if time.monotonic() > deadline:
                        raise BenchError(f"{s.name} did not accept {n} connections")
                    time.sleep(0.05)
                took = time.monotonic() - t0
                after = settle_rss(s)
                t1 = time.monotonic()
                r1 = exchange(socks[n // 2], b"use idle\r\nput 0 0 60 2\r\nhi\r\n", 2)
                r2 = exchange(socks[-1], b"watch idle\r\nreserve-with-timeout 0\r\n", 3)
                ok = b"\r\nINSERTED " in r1 and b"\r\nRESERVED " in r2
                rtt = time.monotonic() - t1
            finally:
                for x in socks:
                    x.close()
            if progress:
                progress.clear()
            rows.append({"server": s.name, "conns": n, "rss_before": before, "rss_after": after,
                         "bytes_per_conn": (after - before) / n, "connect_s": took,
                         "command_ok": ok, "command_s": rtt})
    return rows


def _fill_tubes(addr, names, per_tube, size):
    put = put_command(size) * per_tube
    with socket.create_connection(addr, timeout=60) as sock:
        for i in range(0, len(names), 500):
            chunk = names[i:i + 500]
            sock.sendall(b"".join(b"use %s\r\n%s" % (t.encode(), put) for t in chunk))
            want, buf = len(chunk) * (1 + per_tube), b""
            while buf.count(b"\r\n") < want:
                buf += sock.recv(1 << 16)
            if buf.count(b"INSERTED ") != len(chunk) * per_tube:
                raise BenchError("filling the tubes failed")


def tubes_curve(servers, counts, o: Options, per_tube=10, progress=None) -> list[dict]:
    """For each tube count N: N tubes of per_tube jobs each, then pipelined put
    (connection i uses tube i mod N), then reserve+delete watching all N
    tubes; each phase does o.jobs operations, or runs for o.duration."""
    rows = []
    for k, n in enumerate(counts):
        row = {"tubes": n, "jobs_per_tube": per_tube}
        for mk in alternate(servers, k):
            with mk() as s:
                names = [f"{o.tube}-t{i}" for i in range(n)]
                if progress:
                    progress.prefix = f"{s.name} tubes={n} "
                    progress.line(f"{s.name} tubes={n} filling")
                _fill_tubes(s.addr, names, per_tube, o.size)
                budgets = split(o.jobs, o.conns) if o.duration is None else [UNLIMITED] * o.conns
                puts = [Put(budgets[i], o.size, o.pipeline, names[i % n]) for i in range(o.conns)]
                pr = run_phase(s.addr, _spread(puts, o.procs), o.duration,
                               progress=progress and progress.labelled("put"))
                res = [ReserveDelete(o.pipeline, "default", watch=names, budget=budgets[i])
                       for i in range(o.conns)]
                rr = run_phase(s.addr, _spread(res, o.procs), o.duration,
                               progress=progress and progress.labelled("reserve"))
                row[s.name] = {"put_ops": pr.ops["load"], "put_s": pr.seconds,
                               "reserve_ops": rr.ops["load"], "reserve_s": rr.seconds}
                if not getattr(s, "fresh", True):
                    drain(s.addr, replace(o, tube="default"), watch=names)
        rows.append(row)
    return rows


def _spread(drivers, procs):
    procs = max(1, min(procs, len(drivers)))
    return [Group("load", drivers[i::procs]) for i in range(procs)]


def recovery(writer, servers, jobs: int, o: Options, rounds=1, progress=None) -> list[dict]:
    """Seconds from exec to the first `stats` reply for servers restarting on
    a binlog of `jobs` jobs that `writer` wrote (-F, the jobs left ready).

    writer and servers are (name, argv); each run gets its own copy of the
    directory, so every server reads the same files, fresh in the page cache."""
    base = tempfile.mkdtemp(prefix="bench-recovery-")
    try:
        src = f"{base}/written"
        with Spawned(writer[0], writer[1], "-F -b {tmpdir}") as w:
            if progress:
                progress.prefix = f"{w.name} writes "
            fill(w.addr, o, jobs, progress=progress and progress.labelled("binlog fill"))
            shutil.copytree(w.tmpdir, src)
        runs: dict[str, list[float]] = {}
        for r in range(rounds):
            for name, argv in alternate(servers, r):
                if progress:
                    progress.line(f"{name} r{r + 1}: recovering {jobs:,} jobs")
                copy = f"{base}/{name}-{r}"
                shutil.copytree(src, copy)
                t0 = time.monotonic()
                with Spawned(name, argv, f"-b {copy}") as s:
                    ready = int(stats(s.addr)["current-jobs-ready"])
                    took = time.monotonic() - t0
                if ready != jobs:
                    raise BenchError(f"{name} recovered {ready:,} of {jobs:,} jobs")
                runs.setdefault(name, []).append(took)
                shutil.rmtree(copy, ignore_errors=True)
        if progress:
            progress.clear()
        return [{"server": name, "jobs": jobs, "writer": writer[0],
                 "median_s": statistics.median(t), "min_s": min(t), "max_s": max(t), "runs_s": t}
                for name, t in runs.items()]
    finally:
        shutil.rmtree(base, ignore_errors=True)

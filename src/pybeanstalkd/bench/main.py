"""pybeanstalkd-bench: a load generator and benchmark for beanstalkd servers.

    pybeanstalkd-bench -p 11300                     every workload, one server
    pybeanstalkd-bench --compare --rounds 3         reference vs ours, fresh servers
    pybeanstalkd-bench --compare --server-args='-b {tmpdir}'   ... with a binlog
    pybeanstalkd-bench --compare --memory 1000000   RSS per stored job
    pybeanstalkd-bench --compare --idle-conns 10000
    pybeanstalkd-bench --compare --tubes 10000      put/reserve as tubes grow
    pybeanstalkd-bench --compare --recovery 1000000 restart time on a reference binlog
    pybeanstalkd-bench --compare --stalls 1000000,6000000   a probe's waits during big work
    pybeanstalkd-bench --compare --memcap 256M      --max-memory: RSS against the cap, its cost
    pybeanstalkd-bench --compare --http-cost        throughput with --http scraped and browsed
    pybeanstalkd-bench --compare --hostile          junk, clients that never read, bodies in flight
    pybeanstalkd-bench --compare --crowd 300        a probe while 300 clients pipeline, never read
    pybeanstalkd-bench --micro                      each hot command's Python cost, by layer
    pybeanstalkd-bench --compare --disk-bodies      --bodies-on-disk: memory, rates, a storm
    pybeanstalkd-bench --compare --durable          -b -f0 from 1, 8 and 64 producers, and -F
    pybeanstalkd-bench --compare --cluster-cost     CPU per put: 3 nodes + HAProxy, one node
    pybeanstalkd-bench --compare --disk-fill 30     a 30 GiB backlog (bigger than RAM)

This file: the command line, progress on stderr, tables and JSON. The rest:
workloads.py (the workloads), modes.py (memory, idle connections, tubes curve,
recovery), stalls.py (a probe during big work), memcap.py (--max-memory),
hostile.py (what hostile clients cost the others), crowd.py (a probe among
pipelining clients), disk.py (--bodies-on-disk),
durable.py (-f0 puts), clustercost.py (a cluster's CPU per put),
micro.py (in-process cost by layer), cross.py (bsload cross-check), client.py (load processes), drivers.py
(per-connection protocol state machines), spawn.py (starting servers, RSS).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from time import monotonic

from . import hostile as hostile_mod, httpcost, memcap as memcap_mod, micro as micro_mod, modes
from . import batch as batch_mod, clustercost, disk as disk_mod, durable as durable_mod
from . import crowd as crowd_mod, stalls as stalls_mod
from . import workloads as workloads_mod
from .drivers import BenchError
from .spawn import Spawned, default_ours, default_reference, describe
from .workloads import WORKLOADS, Options


class Progress:
    """One status line on stderr, rewritten in place."""

    def __init__(self, stream, enabled: bool):
        self.stream, self.enabled, self.prefix, self.width = stream, enabled, "", 0
        self.last = (0.0, 0)

    def line(self, text: str):
        if self.enabled:
            self.stream.write("\r" + text.ljust(self.width))
            self.width = len(text)
            self.stream.flush()

    def clear(self):
        if self.enabled and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0

    def labelled(self, label: str):
        self.last = (0.0, 0)

        def show(counts, groups, elapsed):
            total = sum(counts)
            t, n = self.last
            rate = (total - n) / (elapsed - t) if elapsed > t else 0.0
            if elapsed - t >= 0.5:
                self.last = (elapsed, total)
            roles = {g.role for g in groups}
            extra = ""
            if "producer" in roles:
                put = sum(counts[i] for i, g in enumerate(groups) if g.role == "producer")
                extra = f" (put {put:,}, consumed {total - put:,})"
            self.line(f"{self.prefix}{label}: {total:,} ops{extra}, {rate:,.0f} ops/s, {elapsed:.1f}s")
        return show


def table(headers, rows) -> str:
    cells = [[str(h) for h in headers]] + [[_fmt(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _ratio(a, b):
    return a / b if a is not None and b else None


def median_result(results):
    """The round with the median rate, its latencies replaced by the medians
    over all rounds (a p99 is noisier than a rate)."""
    by = sorted(results, key=lambda r: r.ops_s)
    mid = by[(len(by) - 1) // 2]
    lat = {k: statistics.median(getattr(r, k) for r in results)
           for k in ("p50_us", "p99_us", "max_us") if mid.p99_us is not None}
    return replace(mid, **lat)


def _cpu(r):
    c = r.notes.get("server_cpu")
    return None if c is None else f"{100 * c:.0f}%"


CPU_NOTE = ("CPU: the server process's user + system CPU time over the run's wall time "
            "(100% = one core)")
LATENCY_NOTE = "p50/p99/max: per-request latency, measured only by the paced workloads"


def _without_empty(headers, rows, first):
    """Drop the columns from `first` on that no row has a value in."""
    keep = [i for i in range(len(headers))
            if i < first or any(r[i] is not None for r in rows)]
    return [headers[i] for i in keep], [[r[i] for i in keep] for r in rows]


def workload_tables(res, names) -> str:
    """The workloads' table, then what its columns mean. Latency columns
    appear only when a workload measured latency (the paced ones)."""
    if len(names) == 1:  # one server: the detailed table
        name = names[0]
        rows = []
        for w, per in res.items():
            r = median_result(per[name])
            rows.append([w, r.ops, r.seconds, r.ops_s, _cpu(r), r.p50_us, r.p99_us, r.max_us])
        headers, rows = _without_empty(["workload", "ops", "seconds", "ops/s", "server CPU",
                                        "p50 us", "p99 us", "max us"], rows, 5)
    elif len(names) == 3:
        return floor_table(res, names)
    else:
        ref, ours = names
        rows = []
        for w, per in res.items():
            a, b = median_result(per[ref]), median_result(per[ours])
            rows.append([w, a.ops_s, b.ops_s, _ratio(b.ops_s, a.ops_s), _cpu(a), _cpu(b),
                         a.p99_us, b.p99_us, _ratio(b.p99_us, a.p99_us)])
        headers, rows = _without_empty(["workload", f"{ref} ops/s", f"{ours} ops/s", "ratio",
                                        f"{ref} CPU", f"{ours} CPU", f"{ref} p99 us",
                                        f"{ours} p99 us", "p99 ratio"], rows, 6)
    notes = [CPU_NOTE] + ([LATENCY_NOTE] if any("p99" in h for h in headers) else [])
    return table(headers, rows) + "".join("\n" + n for n in notes)


def _us_per_op(r):
    c = r.notes.get("server_cpu")
    return None if c is None or not r.ops_s else 1e6 * c / r.ops_s


def floor_table(res, names) -> str:
    """Rates and the server's CPU per op (user + system, us) of the
    reference, ours and the floor; ratios against the reference."""
    ref, ours, floor = names
    rows = []
    for w, per in res.items():
        a, b, f = (median_result(per[n]) for n in names)
        rows.append([w, a.ops_s, b.ops_s, _ratio(b.ops_s, a.ops_s), f.ops_s,
                     _ratio(f.ops_s, a.ops_s), _us_per_op(a), _us_per_op(b), _us_per_op(f),
                     _ratio(b.p99_us, a.p99_us), _ratio(f.p99_us, a.p99_us)])
    return table(["workload", f"{ref} ops/s", f"{ours} ops/s", "ratio", f"{floor} ops/s",
                  f"{floor} ratio", f"{ref} CPU us/op", f"{ours} CPU us/op",
                  f"{floor} CPU us/op", "p99 ratio", f"{floor} p99 ratio"], rows)


def crosscheck_table(res, names) -> str:
    rows = []
    for w, per in res.items():
        for n in names:
            a, b = median_result(per[n]), median_result(per[n + " bsload"])
            rows.append([w, n, a.ops_s, b.ops_s, _ratio(a.ops_s, b.ops_s), _cpu(a), _cpu(b),
                         a.p99_us, b.p99_us])
    return table(["workload", "server", "bench ops/s", "bsload ops/s", "bench/bsload",
                  "CPU (bench)", "CPU (bsload)", "p99 us bench", "p99 us bsload"], rows)


def pair_table(rows, names, keys, headers, ratio_keys=()) -> str:
    """Rows of {"server": name, ...}: a line per server, then ours/reference."""
    out = [[r["server"]] + [r[k] for k in keys] for r in rows]
    if len(names) == 2 and len(rows) == 2:
        by = {r["server"]: r for r in rows}
        out.append(["ratio ours/ref"] + [_ratio(by[names[1]][k], by[names[0]][k])
                                         if k in ratio_keys else None for k in keys])
    return table(["server"] + headers, out)


def tubes_table(rows, names) -> str:
    out = []
    for r in rows:
        line = [r["tubes"]]
        for kind in ("put", "reserve"):
            rates = [r[n][f"{kind}_ops"] / r[n][f"{kind}_s"] for n in names]
            line += rates + ([_ratio(rates[1], rates[0])] if len(names) == 2 else [])
        out.append(line)
    heads = []
    for kind in ("put", "reserve"):
        heads += [f"{n} {kind}/s" for n in names] + (["ratio"] if len(names) == 2 else [])
    return table(["tubes"] + heads, out)


def stalls_table(rows, names) -> str:
    out = []
    for r in rows:
        extra = ""
        if "fill_rate" in r:
            extra = f"{r['fill_rate']:,.0f} puts/s"
        elif "delay_s" in r:
            extra = f"delay {r['delay_s']} s"
        elif "skipped" in r:
            extra = f"skipped: {r['skipped']}"
        out.append([r["jobs"], r["case"], r["server"], r["work_s"], r["samples"], r["p50_ms"],
                    r["p99_ms"], r["p999_ms"], r["max_ms"], r.get("machine_max_ms"),
                    r.get("steal_pct"), extra])
    return table(["jobs", "case", "server", "work s", "probes", "p50", "p99", "p99.9", "worst",
                  "machine", "steal %", ""], out)


def micro_table(rows) -> str:
    return table(["command", "total", "framing", "dispatch", "queue", "reply", "budget"],
                 [[r["command"], f"{r['total']:.2f}", f"{r['framing']:.2f}", f"{r['dispatch']:.2f}",
                   f"{r['queue']:.2f}", f"{r['reply']:.2f}",
                   "" if r["budget"] is None else f"{r['budget']:.1f}"
                   + (" (over)" if r["total"] > r["budget"] else "")] for r in rows])


def variant_table(rows, key: str, name: str, ratio: str) -> str:
    """modes.variant_rows as a table: ours with a flag against ours without."""
    return table(["workload", "reference ops/s", "ours ops/s", f"{name} ops/s", ratio,
                  "ours / reference"],
                 [[r["workload"], r["reference_ops_s"], r["ours_ops_s"], r[f"{key}_ops_s"],
                   r[f"{key}_over_off"], r["ours_over_reference"]] for r in rows])


def parse_bytes(text: str) -> int:
    """BYTES with an optional K, M or G suffix (as the server's --max-memory)."""
    num, unit = (text[:-1], text[-1].upper()) if text[-1:].isalpha() else (text, "")
    if not num.isdigit() or unit not in ("", "K", "M", "G"):
        raise argparse.ArgumentTypeError(f"not a byte count: {text!r}")
    return int(num) << (10 * " KMG".index(unit or " "))


def parse_args(argv):
    p = argparse.ArgumentParser(prog="pybeanstalkd-bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="workloads:\n" + workloads_mod.__doc__.split("\n\n", 1)[1])
    a = p.add_argument
    a("-H", "--host", default="127.0.0.1")
    a("-p", "--port", type=int, default=11300)
    a("-w", "--workloads", help="comma-separated (default: all, unless a mode below is given)")
    a("-c", "--conns", type=int, default=4, help="connections, 1..1000 (default 4)")
    a("--procs", type=int, default=os.cpu_count() or 2, help="load processes (default: CPUs)")
    a("-P", "--pipeline", type=int, default=64, help="commands in flight, pipelined workloads")
    a("-s", "--size", type=int, default=100, help="job body bytes, 0..65536 (default 100)")
    a("-n", "--jobs", type=int, default=100_000, help="jobs (cycles for cycle) per workload")
    a("-d", "--duration", type=float, help="seconds per workload, instead of --jobs")
    a("-t", "--tube", default="bench")
    a("--rate", type=float, help="mixed: producers' total puts per second (default: flat out)")
    a("-q", "--quiet", action="store_true", help="no progress line")
    a("--json", metavar="PATH", help="also write the results as JSON ('-' for stdout only)")
    a("--compare", action="store_true", help="start the reference and ours, alternate between them")
    a("--reference", default=None, help="reference server binary (default: beanstalkd in PATH)")
    a("--ours", default=None, help="our server command (default: this Python -m pybeanstalkd)")
    a("--floor", action="store_true",
      help="with --compare: the workloads also on a minimal pure-Python server (put, "
           "reserve, delete and nothing else), the floor for a Python design")
    a("--server-args", default="", help="extra server flags; {tmpdir} is a fresh dir per server")
    a("--bsload", metavar="PATH", help="also run the C load generator bsload on each workload")
    a("--rounds", type=int, default=1, help="runs of each workload per server (median shown)")
    a("--memory", type=int, nargs="?", const=1_000_000, metavar="JOBS",
      help="RSS per stored job after putting JOBS jobs (default 1,000,000)")
    a("--idle-conns", type=int, metavar="N", help="RSS with N idle connections; a command still works?")
    a("--tubes", metavar="N|LIST", help="put/reserve rate with 1, 10, ... N tubes (or a list)")
    a("--tube-jobs", type=int, default=10, help="jobs in each tube for --tubes (default 10)")
    a("--recovery", type=int, nargs="?", const=1_000_000, metavar="JOBS",
      help="with --compare: exec to first reply on a binlog of JOBS jobs the reference "
           "wrote (default 1,000,000)")
    a("--stalls", metavar="N|LIST", nargs="?", const="1000000",
      help="with --compare: a probe's waits (one command a ms) during big work on N jobs: "
           "a fill, kick N, N jobs due at once, a close holding N reservations")
    a("--memcap", metavar="BYTES", type=parse_bytes,
      help="with --compare: ours with --max-memory BYTES flooded with 100 B, 1 KiB and 64 KiB "
           "puts (RSS against the cap), and put throughput with a cap against without")
    a("--http-cost", action="store_true",
      help="with --compare: throughput of ours with --http (scraped and polled every second) "
           "against without, the reference beside")
    a("--hostile", metavar="N", type=int, nargs="?", const=1000,
      help="with --compare: a probe's waits while 1 and 4 connections send junk without a "
           "CRLF (ours also with --auth-tokens); RSS per connection of N (default 1,000) that "
           "pipeline peek or stats and never read; RSS with 300 1 MB bodies in flight under "
           "--max-memory 64M")
    a("--crowd", metavar="N", type=int, nargs="?", const=300,
      help="with --compare: a probe's round trips (one command at a time) while N (default "
           "300) connections pipeline list-tube-used and never read; -d seconds of probing "
           "(default 5), --rounds alternating servers")
    a("--micro", type=int, nargs="?", const=200_000, metavar="N",
      help="no server: each hot command's Python path in-process, N times (default "
           "200,000), in microseconds by layer (framing, dispatch, queue, reply)")
    a("--batch", type=int, metavar="K", default=None,
      help="with --compare: drain -n jobs one reserve+delete at a time, then (a server "
           "with --extensions) with reserve-batch K + delete-batch, one connection; jobs/s")
    a("--durable", action="store_true",
      help="with --compare: -b -f0 puts from 1, 8 and 64 unpipelined producers (-d seconds "
           "each, default 5), and ours with -F beside; best of --rounds")
    a("--producers", default=",".join(map(str, durable_mod.PRODUCERS)), metavar="LIST",
      help="--durable: the producer counts, comma-separated (default "
           f"{','.join(map(str, durable_mod.PRODUCERS))})")
    a("--baseline", metavar="CMD", default=None,
      help="--durable: also this server command (another build of ours) with -b -f0, "
           "in the same rounds: before and after in one run")
    a("--cluster-cost", type=int, nargs="?", const=40_000, metavar="PUTS",
      help="with --compare: ours as a 3-node cluster (-b -f0) behind HAProxy, then one "
           "node: CPU µs per acknowledged put of each process, PUTS puts (default 40,000) "
           "from -c unpipelined producers (one node also with half as many, and so on, "
           "until slower than the cluster: its cost at the cluster's rate); needs etcd "
           "and haproxy")
    a("--disk-bodies", action="store_true",
      help="with --compare: --bodies-on-disk's RSS per job (100 B, 8 KiB, 64 KiB), "
           "reserve rates of 4 KiB bodies hot and cold, a probe during a cold reserve storm")
    a("--disk-fill", type=float, metavar="GIB",
      help="with --compare: ours with --bodies-on-disk filled with GIB of 4 KiB bodies, "
           "killed, recovered, drained; the reference under --ref-vmem, as far as it goes")
    a("--disk-dir", metavar="DIR", help="where --disk-fill's binlog goes (default: TMPDIR)")
    a("--ref-vmem", type=parse_bytes, default=8 << 30, metavar="BYTES",
      help="--disk-fill: the reference's ulimit -v (default 8G)")
    a("--cases", default=",".join(stalls_mod.CASES),
      help=f"--stalls cases (default {','.join(stalls_mod.CASES)})")
    args = p.parse_args(argv)
    if not 1 <= args.conns <= 1000:
        p.error("--conns must be 1..1000")
    if not 0 <= args.size <= 65536:
        p.error("--size must be 0..65536")
    if args.pipeline < 1 or args.procs < 1 or args.jobs < 1 or args.rounds < 1:
        p.error("--pipeline, --procs, --jobs and --rounds must be at least 1")
    bad = set(args.workloads.split(",")) - set(WORKLOADS) if args.workloads else ()
    if args.recovery and not args.compare:
        p.error("--recovery needs --compare (it starts the servers itself)")
    if args.http_cost and not args.compare:
        p.error("--http-cost needs --compare (it starts the servers with and without --http)")
    if args.memcap and not args.compare:
        p.error("--memcap needs --compare (it starts the servers with and without the cap)")
    if args.floor and not args.compare:
        p.error("--floor needs --compare (it starts the floor server beside the others)")
    if args.hostile and not args.compare:
        p.error("--hostile needs --compare (it starts the servers with its own flags)")
    if args.crowd and not args.compare:
        p.error("--crowd needs --compare (it starts the servers)")
    if args.batch is not None and not (args.compare and 1 <= args.batch <= 1000):
        p.error("--batch K needs --compare and K in 1..1000")
    if (args.disk_bodies or args.disk_fill or args.durable or args.cluster_cost) \
            and not args.compare:
        p.error("--disk-bodies, --disk-fill, --durable and --cluster-cost need --compare "
                "(they start the servers)")
    try:
        args.producers = [int(n) for n in args.producers.split(",")]
    except ValueError:
        p.error("--producers takes counts, comma-separated")
    if not all(1 <= n <= 1000 for n in args.producers):
        p.error("--producers: each count must be 1..1000")
    if args.stalls and not args.compare:
        p.error("--stalls needs --compare (it starts, stops and restarts the servers)")
    bad_cases = set(args.cases.split(",")) - set(stalls_mod.CASES) - set(stalls_mod.OPTIONAL)
    if bad_cases:
        p.error(f"unknown case {', '.join(sorted(bad_cases))}; known: {', '.join(stalls_mod.CASES)}")
    if bad:
        p.error(f"unknown workload {', '.join(sorted(bad))}; known: {', '.join(WORKLOADS)}")
    return args


def tube_counts(spec: str) -> list[int]:
    if "," in spec:
        return [int(x) for x in spec.split(",")]
    n, out, k = int(spec), [], 1
    while k < n:
        out.append(k)
        k *= 10
    return out + [n]


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    o = Options(conns=args.conns, procs=args.procs, pipeline=args.pipeline, size=args.size,
                jobs=args.jobs, duration=args.duration, tube=args.tube, rate=args.rate)
    to_stdout = args.json == "-"
    say = (lambda *a: None) if to_stdout else print
    progress = Progress(sys.stderr, not args.quiet and sys.stderr.isatty())
    servers: list[Callable[[], Spawned | modes.Running]]
    if args.compare:
        ref = [args.reference] if args.reference else default_reference()
        ours = shlex.split(args.ours) if args.ours else default_ours()
        servers = [lambda: Spawned("reference", ref, args.server_args),
                   lambda: Spawned("ours", ours, args.server_args)]
        names = ["reference", "ours"]
        argvs = [("reference", ref), ("ours", ours)]
        for name, argv in argvs:
            say(describe(name, argv))
        if args.floor:
            floor = [sys.executable, "-m", "pybeanstalkd.bench.floor"]
            load_servers = servers + [lambda: Spawned("floor", floor)]
            load_names = names + ["floor"]
    else:
        servers = [lambda: modes.Running((args.host, args.port))]
        names = ["server"]
    if not args.floor:
        load_servers, load_names = servers, names
    special = (args.batch or args.memory or args.idle_conns or args.tubes or args.recovery or args.stalls
               or args.memcap or args.http_cost or args.micro or args.hostile or args.crowd
               or args.disk_bodies or args.disk_fill or args.durable or args.cluster_cost)
    out = {"options": vars(args), "servers": load_names if args.workloads or not special
           else names}
    t0 = monotonic()
    try:
        if args.micro:
            rows = out["micro"] = micro_mod.micro(args.micro)
            say(f"\n--micro: Python per command in-process ({args.micro:,} each, best of "
                f"{micro_mod.ROUNDS}), in microseconds; no sockets, no syscalls")
            say(micro_table(rows))
        if args.idle_conns:  # first: it raises the fd limit the servers inherit
            rows = out["idle_conns"] = modes.idle_conns(servers, args.idle_conns, progress)
            say(f"\n{args.idle_conns:,} idle connections (RSS in bytes)")
            say(pair_table(rows, names, ["rss_before", "rss_after", "bytes_per_conn",
                                         "connect_s", "command_ok"],
                           ["RSS before", "RSS after", "bytes/conn", "connect s", "command ok"],
                           ["rss_before", "rss_after", "bytes_per_conn"]))
        if args.workloads or not special:
            chosen = args.workloads.split(",") if args.workloads else WORKLOADS
            res = modes.workloads(load_servers, chosen, o, args.rounds, progress, args.bsload)
            progress.clear()
            out["workloads"] = {w: {n: [asdict(r) | {"ops_s": r.ops_s} for r in rs]
                                    for n, rs in per.items()} for w, per in res.items()}
            say(f"\n{o.conns} connections, {o.size}-byte bodies, pipeline {o.pipeline}"
                + (f", {args.rounds} rounds (median)" if args.rounds > 1 else "")
                + (f", server flags {args.server_args!r}" if args.server_args else ""))
            say(workload_tables(res, load_names))
            if args.bsload:
                say("\ncross-check: this client against bsload (C, a thread per connection)")
                say(crosscheck_table(res, names))
        if args.memory:
            rows = out["memory"] = modes.memory(servers, args.memory, o, progress)
            progress.clear()
            say(f"\nmemory after {args.memory:,} jobs of {o.size} bytes (RSS in bytes)")
            say(pair_table(rows, names, ["stored", "rss_before", "rss_after", "bytes_per_job"],
                           ["jobs stored", "RSS before", "RSS after", "bytes/job"],
                           ["rss_before", "rss_after", "bytes_per_job"]))
        if args.tubes:
            rows = out["tubes"] = modes.tubes_curve(servers, tube_counts(args.tubes), o,
                                                    args.tube_jobs, progress)
            progress.clear()
            amount = f"{o.duration:g} s" if o.duration else f"{o.jobs:,} jobs"
            say(f"\ntubes curve: N tubes of {args.tube_jobs} jobs; then {amount} of pipelined put "
                f"(connection i uses tube i mod N), then {amount} of reserve+delete watching all N")
            say(tubes_table(rows, names))
        if args.recovery:
            rows = out["recovery"] = modes.recovery(argvs[0], argvs, args.recovery, o,
                                                    args.rounds, progress)
            say(f"\nrecovery: {args.recovery:,} jobs of {o.size} bytes written by the reference "
                f"(-F), exec to the first stats reply, {args.rounds} round(s)")
            say(pair_table(rows, names, ["median_s", "min_s", "max_s"],
                           ["median s", "min s", "max s"], ["median_s", "min_s", "max_s"]))
        if args.batch:
            rows = out["batch"] = batch_mod.batch(servers, args.batch, o, args.rounds, progress)
            progress.clear()
            say(f"\ndraining {o.jobs:,} jobs of {o.size} bytes on one connection, jobs/s: one "
                f"reserve + delete at a time, and reserve-batch {args.batch} + delete-batch")
            say(table(["server", "round", "one at a time", f"batches of {args.batch}",
                       "batch / one"],
                      [[r["server"], r["round"] + 1, r["plain_jobs_s"], r["batch_jobs_s"],
                        _ratio(r["batch_jobs_s"], r["plain_jobs_s"])] for r in rows]))
        if args.stalls:
            rows = out["stalls"] = stalls_mod.stalls(
                servers, tube_counts(args.stalls) if "," in args.stalls else [int(args.stalls)],
                args.cases.split(","), o, progress,
                on_row=lambda r: progress.line(
                    f"{r['server']} {r['case']} {r['jobs']:,}: "
                    + (f"skipped ({r['skipped']})" if r.get("skipped")
                       else f"worst {r['max_ms']:.1f} ms")))
            progress.clear()
            say(f"\nstalls: a probe sends one command a millisecond during big work on N jobs "
                f"of {o.size} bytes; its round trips in ms")
            say(stalls_table(rows, names))
        if args.memcap:
            rows = out["memcap_rss"] = memcap_mod.rss_rows(ours, args.server_args, args.memcap,
                                                           memcap_mod.SIZES, progress)
            progress.clear()
            say(f"\n--max-memory {args.memcap:,}: pipelined puts until the first OUT_OF_MEMORY")
            say(table(["body bytes", "jobs stored", "body bytes stored", "RSS growth",
                       "RSS / cap"], [[r["size"], r["jobs"], r["body_bytes"], r["rss_growth"],
                                       r["rss_over_cap"]] for r in rows]))
            rows = out["memcap_cost"] = memcap_mod.cost_rows(ref, ours, args.server_args, o,
                                                             args.rounds, progress)
            progress.clear()
            say(f"\nthe cap's cost: puts with --max-memory {memcap_mod.NEVER_REACHED:,} (never "
                f"reached) against none; {o.conns} connections, {o.size}-byte bodies, "
                f"{args.rounds} round(s), median")
            say(variant_table(rows, "capped", "ours capped", "capped / uncapped"))
        if args.http_cost:
            rows = out["http_cost"] = httpcost.cost_rows(ref, ours, args.server_args, o,
                                                         args.rounds, progress)
            progress.clear()
            say(f"\n--http's cost: ours with --http while /metrics, /api/v1/stats and "
                f"/api/v1/tubes are fetched every second, against no --http; {o.conns} "
                f"connections, {o.size}-byte bodies, {args.rounds} round(s), median")
            say(variant_table(rows, "http", "ours --http", "--http / off"))
        if args.hostile:
            res = out["hostile"] = hostile_mod.hostile(ref, ours, args.server_args, progress,
                                                       noread_conns=args.hostile)
            progress.clear()
            say("\njunk: connections stream bytes without a CRLF; a probe's put+delete round "
                "trips meanwhile (ms)")
            say(table(["server", "junk conns", "junk MB", "server CPU", "probes", "p50", "p99",
                       "max"], [[r["server"], r["conns"], r["junk_mb"], r["server_cpu"],
                                 r["probes"], r["p50_ms"], r["p99_ms"], r["max_ms"]]
                                for r in res["junk"]]))
            say(f"\nnoread: {args.hostile:,} connections pipeline a command and never read; "
                f"RSS growth per connection once none can send more, and a probe's round trips")
            say(table(["server", "command", "RSS/conn", "sent/conn", "p50 ms", "max ms"],
                      [[r["server"], r["command"], r["rss_per_conn"], r["sent_per_conn"],
                        r["p50_ms"], r["max_ms"]] for r in res["noread"]]))
            h = res["http"]
            say(f"\nhttp: an unfinished request head (in {h['runs']} runs, half of them a byte "
                f"a second): closed after {h['min_s']:.2f} s at least, {h['median_s']:.2f} s "
                f"median, {h['max_s']:.2f} s at most")
            say("\ninflight: each connection sends a put line and all but the last byte of "
                "its body, under --max-memory")
            say(table(["conns", "body", "cap", "RSS growth", "stored", "refused"],
                      [[r["conns"], r["size"], r["cap"], r["rss_growth"], r["stored"],
                        r["refused"]] for r in res["inflight"]]))
        if args.crowd:
            rows = out["crowd"] = crowd_mod.run(ref, ours, args.server_args, args.crowd,
                                                args.duration or 5.0, args.rounds, progress)
            progress.clear()
            crowd_mod.report(rows, args.crowd, say, table)
        if args.disk_bodies or args.disk_fill:
            out["disk"] = disk_mod.run(ref, ours, args, o, progress, say, table)
        if args.cluster_cost:
            r = out["cluster_cost"] = clustercost.cluster_cost(ours, o, args.cluster_cost, progress)
            progress.clear()
            clustercost.report(r, say, table)
        if args.durable:
            rows = out["durable"] = durable_mod.durable(
                ref, ours, o, args.rounds, args.duration or 5.0, producers=args.producers,
                progress=progress,
                floor=[sys.executable, "-m", "pybeanstalkd.bench.floor"] if args.floor else None,
                baseline=shlex.split(args.baseline) if args.baseline else None)
            durable_mod.report(rows, say, table)
    except (BenchError, OSError) as e:
        progress.clear()
        print(f"pybeanstalkd-bench: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        progress.clear()
        return 130
    out["seconds"] = monotonic() - t0
    if args.json:
        text = json.dumps(out, indent=1, default=str)
        if to_stdout:
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

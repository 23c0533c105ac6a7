"""--disk-bodies: what --bodies-on-disk trades, side by side in one run.

memory   RSS per stored job for 100 B, 8 KiB and 64 KiB bodies: the
         reference, ours, and ours with --bodies-on-disk (all with -b)
rates    reserve+delete, unpipelined and pipelined, of 4 KiB bodies: the
         same three; ours with the flag once with a hot page cache and once
         after the kernel dropped it (when this machine lets us: root)
storm    a probe's waits (one command a millisecond) while 4 connections
         reserve and delete pipelined, the bodies cold and read in random
         order (random priorities)

--disk-fill GIB: the backlog bigger than RAM. Ours with --bodies-on-disk
takes GIB of 4 KiB bodies (its RSS and fill rate); it is killed with
SIGKILL and started again (recovery time, RSS); then reserve+delete rates
on that backlog. The reference, under `ulimit -v` (--ref-vmem, 8 GiB),
takes the same fill until it stops.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import tempfile
import time

from .client import connect
from .drivers import BenchError
from .modes import settle_rss
from .spawn import Spawned, exchange, free_port, rss_bytes, stats
from .stalls import Probe, _summary
from .workloads import Options, fill, run_workload

# body bytes, and jobs stored as a multiple of -n (default 100,000: 200,000
# of 100 B, 100,000 of 8 KiB, 20,000 of 64 KiB)
MEMORY_SIZES = [(100, 2.0), (8192, 1.0), (65536, 0.2)]
RATE_SIZE = 4096
# (-z: a 64 KiB body is one byte over the default max-job-size)
DISK = "-z 65536 -b {tmpdir} --bodies-on-disk"


def drop_caches() -> bool:
    """Have the kernel drop clean page-cache pages (root only)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


def _variants(ref, ours):
    return [("reference", lambda: Spawned("reference", ref, "-z 65536 -b {tmpdir}")),
            ("ours", lambda: Spawned("ours", ours, "-z 65536 -b {tmpdir}")),
            ("ours --bodies-on-disk", lambda: Spawned("ours", ours, DISK))]


def memory(ref, ours, o: Options, progress=None, sizes=MEMORY_SIZES) -> list[dict]:
    rows = []
    for size, share in sizes:
        jobs = int(o.jobs * share)
        for name, mk in _variants(ref, ours):
            with mk() as s:
                before = settle_rss(s)
                fill(s.addr, Options(conns=o.conns, procs=o.procs, size=size), jobs,
                     progress=progress and progress.labelled(f"{name} {size} B"))
                after = settle_rss(s, 1.0)
                st = stats(s.addr)
                rows.append({"size": size, "server": name, "jobs": jobs,
                             "bytes_per_job": (after - before) / jobs,
                             "on_disk": int(st.get("body-bytes-on-disk", 0)),
                             "in_ram": int(st["body-bytes-in-ram"]) if "body-bytes-in-ram" in st
                             else None})
                if progress:
                    progress.clear()
    return rows


def rates(ref, ours, o: Options, rounds=1, progress=None) -> list[dict]:
    """reserve (one command in flight) and reserve-pipelined, 4 KiB bodies."""
    rows = []
    oo = Options(conns=o.conns, procs=o.procs, pipeline=o.pipeline, size=RATE_SIZE,
                 jobs=o.jobs, tube=o.tube)
    for r in range(rounds):
        for name, mk in _variants(ref, ours) + [("ours --bodies-on-disk, cold", None)]:
            cold = mk is None
            if cold:
                mk = _variants(ref, ours)[2][1]
            with mk() as s:
                row = {"server": name, "round": r}
                for w in ("reserve", "reserve-pipelined"):
                    fill(s.addr, oo, oo.jobs)
                    if cold:
                        row["cold"] = drop_caches()
                    res = run_workload(s.addr, w, Options(**{**oo.__dict__, "jobs": 0}),
                                       progress)
                    row[w] = res.ops_s
                rows.append(row)
                if progress:
                    progress.clear()
    return rows


def fill_shuffled(addr, tube: str, jobs: int, size: int, seed: int = 1) -> None:
    """Put `jobs` jobs with random priorities, so that reserves read their
    bodies in no order the files have (no readahead helps them)."""
    rnd = random.Random(seed)
    body = b"x" * size
    with connect(addr) as c:
        exchange(c, b"use %s\r\n" % tube.encode(), 1)
        left = jobs
        while left:
            k = min(left, 256)
            c.sendall(b"".join(b"put %d 0 60 %d\r\n%s\r\n" % (rnd.randrange(1 << 31), size, body)
                               for _ in range(k)))
            got = b""
            while got.count(b"\r\n") < k:
                chunk = c.recv(1 << 16)
                if not chunk:
                    raise BenchError("connection closed")
                got += chunk
            if got.count(b"INSERTED ") != k:
                raise BenchError(f"put: {got[:80]!r}")
            left -= k


def storm(ours, o: Options, jobs: int, progress=None) -> dict:
    """The probe's waits while the bodies of `jobs` 4 KiB jobs are read
    cold, in random order."""
    oo = Options(conns=4, procs=o.procs, pipeline=o.pipeline, size=RATE_SIZE, jobs=0,
                 tube=o.tube)
    with Spawned("ours", ours, DISK) as s:
        fill_shuffled(s.addr, o.tube, jobs, RATE_SIZE)
        cold = drop_caches()
        probe = Probe(s.addr)
        try:
            probe.go()
            t0 = time.monotonic()
            res = run_workload(s.addr, "reserve-pipelined", oo, progress)
            took = time.monotonic() - t0
            rtt = probe.stop()
        finally:
            probe.kill()
        if progress:
            progress.clear()
        return {"jobs": jobs, "cold": cold, "seconds": took, "reserve_s": res.ops_s,
                "machine_max_ms": probe.machine_ns / 1e6} | _summary(rtt)


# -- the backlog bigger than RAM ------------------------------------------------

def _wait_first_reply(addr, proc, timeout=3600.0) -> float:
    """Seconds from now until the server answers a stats."""
    t0 = time.monotonic()
    while True:
        if proc.poll() is not None:
            raise BenchError(f"the server exited {proc.returncode} while recovering")
        try:
            stats(addr)
            return time.monotonic() - t0
        except OSError:
            if time.monotonic() - t0 > timeout:
                raise BenchError("no reply within an hour of start") from None
            time.sleep(0.05)


def big_fill(ref, ours, gib: float, o: Options, where: str | None, ref_vmem: int,
             progress=None) -> dict:
    jobs = int(gib * (1 << 30)) // RATE_SIZE
    oo = Options(conns=o.conns, procs=o.procs, pipeline=o.pipeline, size=RATE_SIZE,
                 tube=o.tube)
    out: dict = {"gib": gib, "jobs": jobs, "size": RATE_SIZE}
    d = tempfile.mkdtemp(prefix="bench-disk-fill-", dir=where)
    try:
        with Spawned("ours", ours, f"-b {d} --bodies-on-disk") as s:
            rss0 = s.rss()
            t0 = time.monotonic()
            fill(s.addr, oo, jobs, progress=progress and progress.labelled("fill"))
            took = time.monotonic() - t0
            st = stats(s.addr)
            out["ours"] = {"fill_s": took, "fill_jobs_s": jobs / took,
                           "fill_mb_s": jobs * RATE_SIZE / took / 1e6,
                           "rss_before": rss0, "rss_after": settle_rss(s, 2.0),
                           "stored": int(st["current-jobs-ready"]),
                           "on_disk": int(st["body-bytes-on-disk"]),
                           "binlog_bytes": sum(os.path.getsize(os.path.join(d, f))
                                               for f in os.listdir(d))}
            out["ours"]["rss_per_job"] = ((out["ours"]["rss_after"] - rss0) / jobs)
            s.proc.send_signal(signal.SIGKILL)
            s.proc.wait()
        if progress:
            progress.clear()
        dropped = drop_caches()
        addr = ("127.0.0.1", free_port())
        t0 = time.monotonic()
        proc = subprocess.Popen(ours + ["-l", addr[0], "-p", str(addr[1]), "-b", d,
                                        "--bodies-on-disk"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            rec = _wait_first_reply(addr, proc)
            st = stats(addr)
            out["recovery"] = {"cold_cache": dropped, "seconds": rec,
                               "jobs": int(st["current-jobs-ready"]), "rss": rss_bytes(proc.pid)}
            drop_caches()
            for w, secs in (("reserve", 20.0), ("reserve-pipelined", 10.0)):
                res = run_workload(addr, w, Options(**{**oo.__dict__, "duration": secs}),
                                   progress)
                out["recovery"][w] = res.ops_s
        finally:
            proc.kill()
            proc.wait()
        if progress:
            progress.clear()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    out["reference"] = reference_until_it_stops(ref, jobs, oo, ref_vmem, progress)
    return out


def reference_until_it_stops(ref, jobs: int, o: Options, vmem: int, progress=None) -> dict:
    """The reference (no -b: its bodies are in RAM either way) under
    `ulimit -v vmem`, filled with up to `jobs` jobs: how far it got."""
    wrapped = ["sh", "-c", f'ulimit -v {vmem // 1024}; exec "$0" "$@"', *ref]
    with Spawned("reference", wrapped, "") as s:
        t0 = time.monotonic()
        err = None
        try:
            fill(s.addr, o, jobs, progress=progress and progress.labelled("reference fill"))
        except BenchError as e:
            err = str(e)[:200]
        took = time.monotonic() - t0
        alive = s.proc.poll() is None
        row = {"vmem": vmem, "stopped": err, "alive": alive, "seconds": took}
        if alive:
            st = stats(s.addr)
            row["stored"] = int(st["current-jobs-ready"])
            row["rss"] = s.rss()
        if progress:
            progress.clear()
        return row


# -- the report --------------------------------------------------------------------

def run(ref, ours, args, o: Options, progress, say, table) -> dict:
    """--disk-bodies and --disk-fill: measure, print the tables, return the rows."""
    out: dict = {}
    if args.disk_bodies:
        rows = out["memory"] = memory(ref, ours, o, progress)
        say("\nRSS per stored job (all with -b), and where the bodies are (bytes, from stats)")
        say(table(["body", "server", "jobs", "RSS/job", "on disk", "in RAM"],
                  [[r["size"], r["server"], r["jobs"], r["bytes_per_job"], r["on_disk"],
                    r["in_ram"]] for r in rows]))
        rows = out["rates"] = rates(ref, ours, o, args.rounds, progress)
        say(f"\nreserve+delete of {o.jobs:,} jobs of {RATE_SIZE} bytes, {o.conns} connections, "
            f"jobs/s: one command in flight, and {o.pipeline} pipelined")
        say(table(["server", "round", "reserve", "pipelined", "cache dropped"],
                  [[r["server"], r["round"] + 1, r["reserve"], r["reserve-pipelined"],
                    r.get("cold")] for r in rows]))
        r = out["storm"] = storm(ours, o, max(o.jobs, 200_000), progress)
        say(f"\nstorm: 4 connections reserve+delete {r['jobs']:,} cold bodies of {RATE_SIZE} "
            f"bytes in random order (cache dropped: {r['cold']}), pipelined; a probe's round "
            "trips in ms")
        say(table(["work s", "jobs/s", "probes", "p50", "p99", "p99.9", "worst", "machine worst"],
                  [[r["seconds"], r["reserve_s"], r["samples"], r["p50_ms"], r["p99_ms"],
                    r["p999_ms"], r["max_ms"], r["machine_max_ms"]]]))
    if args.disk_fill:
        r = out["fill"] = big_fill(ref, ours, args.disk_fill, o, args.disk_dir, args.ref_vmem,
                                   progress)
        f, rec, rf = r["ours"], r["recovery"], r["reference"]
        say(f"\na backlog of {args.disk_fill:g} GiB: {r['jobs']:,} jobs of {RATE_SIZE} bytes")
        say(table(["", "value"], [
            ["ours: fill s", f["fill_s"]], ["ours: fill jobs/s", f["fill_jobs_s"]],
            ["ours: fill MB/s", f["fill_mb_s"]], ["ours: jobs stored", f["stored"]],
            ["ours: binlog bytes", f["binlog_bytes"]], ["ours: RSS after", f["rss_after"]],
            ["ours: RSS/job", f["rss_per_job"]],
            ["recovery after kill -9: s to first reply", rec["seconds"]],
            ["recovery: cache dropped first", rec["cold_cache"]],
            ["recovery: jobs", rec["jobs"]], ["recovery: RSS", rec["rss"]],
            ["then reserve+delete jobs/s, cold", rec["reserve"]],
            ["then pipelined jobs/s", rec["reserve-pipelined"]],
            [f"reference under ulimit -v {rf['vmem']:,}: jobs stored", rf.get("stored")],
            ["reference: how it stopped", rf["stopped"] or "it did not"],
            ["reference: alive after", rf["alive"]], ["reference: RSS", rf.get("rss")]]))
    return out

"""--durable: puts that are on disk before their reply (-b -f0), from 1, 8
and 64 unpipelined producers, the reference and ours in one run; and ours
with -F (no fsync) beside, what -f0 costs against it.

Each producer has one put in flight: the rate is what a web process that
enqueues durably gets. Servers start fresh for each row, alternating
first in each round; the best of the rounds is what the table compares
(`--rounds`).
"""
from __future__ import annotations

from .modes import alternate
from .spawn import Spawned
from .workloads import Options, run_workload

PRODUCERS = [1, 8, 64]


def durable(ref, ours, o: Options, rounds: int = 2, seconds: float = 5.0,
            producers=PRODUCERS, progress=None, floor=None, baseline=None) -> list[dict]:
    """A row per producer count: puts/s of each server, every round.
    floor: the pure-Python floor's command (bench/floor.py), run with
    -b -f0 beside them. baseline: another build of ours (its command),
    with -b -f0 in the same rounds, so that a change is measured against
    the build before it and the reference in one run."""
    rows = []
    for n in producers:
        servers = [lambda: Spawned("reference", ref, "-b {tmpdir} -f0"),
                   lambda: Spawned("ours", ours, "-b {tmpdir} -f0"),
                   lambda: Spawned("ours-F", ours, "-b {tmpdir} -F")]  # (no space: a dir name)
        if floor is not None:
            servers.append(lambda: Spawned("floor", floor, "-b {tmpdir} -f0"))
        if baseline is not None:
            servers.append(lambda: Spawned("baseline", baseline, "-b {tmpdir} -f0"))
        got: dict[str, list[float]] = {}
        oo = Options(conns=n, procs=min(o.procs, n), size=o.size, duration=seconds,
                     tube=o.tube)
        for r in range(rounds):
            for mk in alternate(servers, r):
                with mk() as s:
                    res = run_workload(s.addr, "put", oo, progress)
                    got.setdefault(s.name, []).append(res.ops_s)
                    if progress:
                        progress.clear()
        best = {k: max(v) for k, v in got.items()}
        rows.append({"producers": n, "rounds": got, "best": best,
                     "ours_over_reference": best["ours"] / best["reference"],
                     "f0_over_F": best["ours"] / best["ours-F"],
                     "floor_over_reference": best["floor"] / best["reference"]
                     if "floor" in best else None,
                     "baseline_over_reference": best["baseline"] / best["reference"]
                     if "baseline" in best else None})
    return rows


def report(rows, say, table) -> None:
    say("\n-b -f0: unpipelined producers, one put in flight each, puts/s (best of the "
        "rounds; every round in the JSON)")
    say(table(["producers", "reference", "ours", "ours / ref", "ours -F", "-f0 / -F",
               "floor", "floor / ref"],
              [[r["producers"], r["best"]["reference"], r["best"]["ours"],
                r["ours_over_reference"], r["best"]["ours-F"], r["f0_over_F"],
                r["best"].get("floor"), r["floor_over_reference"]] for r in rows]))
    if rows and rows[0].get("baseline_over_reference") is not None:
        say(table(["producers", "reference", "baseline", "baseline / ref", "ours", "ours / ref"],
                  [[r["producers"], r["best"]["reference"], r["best"]["baseline"],
                    r["baseline_over_reference"], r["best"]["ours"],
                    r["ours_over_reference"]] for r in rows]))
        say("baseline: --baseline's build of ours, -b -f0, in the same rounds")
    if rows and rows[0]["floor_over_reference"] is not None:
        say("floor: a minimal asyncio+uvloop server that appends each put's body to a file "
            "and fdatasyncs it before the replies (bench/floor.py -b -f0)")

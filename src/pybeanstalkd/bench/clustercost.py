"""--cluster-cost: CPU time per acknowledged put on each process of a local
3-node cluster behind HAProxy, and on one node alone (all with -b -f0).

A throughput ratio cannot settle what replication costs on one small
machine: three nodes, HAProxy, etcd and the load share its cores. CPU
seconds per put can: they do not depend on how the cores are shared. Each
process's user + system CPU over the puts (from /proc/PID/stat), divided
by the puts acknowledged. The goals this reports against: the leader at
most 1.3x a single node's CPU per put, each follower at most 0.5x the
leader's.

A node's CPU per put falls as its load grows (more puts share each fsync
and each pass of the loop), and the cluster runs at a fraction of one
node's rate here. So the single node is measured with the same producers,
then with half as many, and so on until it is slower than the cluster:
its CPU per put at the cluster's rate, interpolated on that curve, sets
apart what replication costs from what a lighter load costs.

Needs etcd and haproxy in PATH (Debian: etcd-server, haproxy).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

from .drivers import BenchError
from .spawn import cpu_seconds, free_port, stats
from .workloads import Options, run_workload

HAPROXY = """global
    maxconn 4000
defaults
    mode tcp
    timeout connect 2s
    timeout client 1h
    timeout server 1h
frontend beanstalk
    bind 127.0.0.1:{port}
    default_backend leader
backend leader
    option httpchk GET /leader
    http-check expect status 200
    default-server inter 500ms fall 1 rise 1 on-marked-down shutdown-sessions
{servers}
"""


def _wait(what: str, ok, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > end:
            raise BenchError(f"{what} did not come up within {timeout:.0f} s")
        time.sleep(0.1)


def _http_ok(port: int, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def _listening(port: int) -> bool:
    try:
        stats(("127.0.0.1", port))
        return True
    except (OSError, BenchError, ValueError):
        return False


class _Procs:
    """Processes started for one measurement, all stopped at the end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], log: str) -> subprocess.Popen[bytes]:
        with open(log, "wb") as f:
            p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _load(port: int, o: Options, puts: int, progress) -> float:
    """Seconds taken by `puts` unpipelined puts from o.conns producers."""
    r = run_workload(("127.0.0.1", port), "put", Options(**{**o.__dict__, "jobs": puts}),
                     progress)
    if r.ops != puts:
        raise BenchError(f"{r.ops} of {puts} puts answered")
    return r.seconds


def cluster_cost(ours: list[str], o: Options, puts: int, progress=None) -> dict:
    for tool in ("etcd", "haproxy"):
        if shutil.which(tool) is None:
            raise BenchError(f"--cluster-cost needs {tool} in PATH")
    d = tempfile.mkdtemp(prefix="bench-cluster-")
    ps = _Procs()
    out: dict = {"puts": puts, "producers": o.conns}
    try:
        ec, ep = free_port(), free_port()
        ps.start(["etcd", "--name", "e", "--data-dir", os.path.join(d, "etcd"),
                  "--listen-client-urls", f"http://127.0.0.1:{ec}",
                  "--advertise-client-urls", f"http://127.0.0.1:{ec}",
                  "--listen-peer-urls", f"http://127.0.0.1:{ep}",
                  "--initial-advertise-peer-urls", f"http://127.0.0.1:{ep}",
                  "--initial-cluster", f"e=http://127.0.0.1:{ep}"], os.path.join(d, "etcd.log"))
        _wait("etcd", lambda: _http_ok(ec, "/health"))
        nodes: list[dict] = []
        for i in (1, 2, 3):
            port, http, peer = free_port(), free_port(), free_port()
            os.mkdir(os.path.join(d, f"n{i}"))
            p = ps.start(ours + ["-l", "127.0.0.1", "-p", str(port), "-b", os.path.join(d, f"n{i}"),
                                 "-f0", "--http", f"127.0.0.1:{http}", "--cluster", "bench",
                                 "--etcd", f"127.0.0.1:{ec}", "--node", f"node{i}",
                                 "--peer-listen", f"127.0.0.1:{peer}"],
                         os.path.join(d, f"n{i}.log"))
            nodes.append({"name": f"node{i}", "port": port, "http": http, "proc": p})
            _wait(f"node{i}", lambda http=http: _http_ok(http, "/healthz"))
        hp = free_port()
        cfg = os.path.join(d, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write(HAPROXY.format(port=hp, servers="\n".join(
                f"    server {n['name']} 127.0.0.1:{n['port']} check port {n['http']}"
                for n in nodes)))
        haproxy = ps.start(["haproxy", "-db", "-f", cfg], os.path.join(d, "haproxy.log"))
        _wait("a leader", lambda: any(_http_ok(n["http"], "/leader") for n in nodes))
        _wait("the in-sync replicas", lambda: _isr(nodes) == 3, 60)
        # Until HAProxy's first checks, a connection may reach a follower
        # (which closes it): wait for 20 in a row to reach the leader.
        _wait("haproxy to send clients to the leader",
              lambda: all(_listening(hp) for _ in range(20)), 60)
        _load(hp, o, min(puts, 2000), None)  # (warm: connections, first files)
        procs = {n["name"]: n["proc"].pid for n in nodes} | {"haproxy": haproxy.pid}
        leader = next(n["name"] for n in nodes if _http_ok(n["http"], "/leader"))
        before = {k: cpu_seconds(pid) for k, pid in procs.items()}
        secs = _load(hp, o, puts, progress)
        after = {k: cpu_seconds(pid) for k, pid in procs.items()}
        per = {k: (after[k] - before[k]) / puts * 1e6 for k in procs}
        out["cluster"] = {"seconds": secs, "puts_s": puts / secs, "leader": per[leader],
                          "followers": sorted(v for k, v in per.items()
                                              if k not in (leader, "haproxy")),
                          "haproxy": per["haproxy"]}
    finally:
        ps.stop()
    ps = _Procs()
    try:
        port = free_port()
        os.mkdir(os.path.join(d, "single"))
        p = ps.start(ours + ["-l", "127.0.0.1", "-p", str(port), "-b", os.path.join(d, "single"),
                             "-f0"], os.path.join(d, "single.log"))
        _wait("the single node", lambda: _listening(port))
        _load(port, o, min(puts, 2000), None)
        # The same producers first; then fewer, halving, until the node is
        # slower than the cluster was.
        curve = []
        conns = o.conns
        while True:
            c0 = cpu_seconds(p.pid)
            secs = _load(port, Options(**{**o.__dict__, "conns": conns}), puts, progress)
            curve.append({"producers": conns, "puts_s": puts / secs,
                          "cpu_us": (cpu_seconds(p.pid) - c0) / puts * 1e6})
            if conns == 1 or puts / secs <= out["cluster"]["puts_s"]:
                break
            conns //= 2
        out["single"] = {**curve[0], "seconds": puts / curve[0]["puts_s"], "curve": curve}
    finally:
        ps.stop()
        shutil.rmtree(d, ignore_errors=True)
    c = out["cluster"]
    out["leader_over_single"] = c["leader"] / out["single"]["cpu_us"]
    same = at_rate(curve, c["puts_s"])
    if same is not None:
        out["single_at_rate"] = same
        out["leader_over_same_rate"] = c["leader"] / same
    out["follower_over_leader"] = max(c["followers"]) / c["leader"]
    return out


def at_rate(curve: list[dict], rate: float) -> float | None:
    """The single node's CPU per put at `rate` puts/s, interpolated between
    the two points of its curve around it (None if none lies below)."""
    for hi, lo in zip(curve, curve[1:]):
        if lo["puts_s"] <= rate <= hi["puts_s"]:
            if hi["puts_s"] == lo["puts_s"]:
                return float(lo["cpu_us"])
            f = (rate - lo["puts_s"]) / (hi["puts_s"] - lo["puts_s"])
            return float(lo["cpu_us"] + f * (hi["cpu_us"] - lo["cpu_us"]))
    return None


def _isr(nodes) -> int:
    import json
    for n in nodes:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{n['http']}/api/v1/cluster",
                                        timeout=1) as r:
                info = json.load(r)
        except (OSError, ValueError):
            continue
        isr = info.get("isr")
        if info.get("role") == "leader" and isinstance(isr, list):
            return len(isr)
    return 0


def report(r: dict, say, table) -> None:
    c, s = r["cluster"], r["single"]
    say(f"\n--cluster-cost: {r['puts']:,} puts of 100 bytes, -b -f0, {r['producers']} "
        "unpipelined producers; server CPU (user + system) per acknowledged put, in µs")
    rows = [["leader (3 nodes, via haproxy)", c["leader"], c["puts_s"]]]
    rows += [[f"follower {i + 1}", v, None] for i, v in enumerate(c["followers"])]
    rows += [["haproxy", c["haproxy"], None]]
    rows += [[f"single node, {p['producers']} producers", p["cpu_us"], p["puts_s"]]
             for p in s["curve"]]
    if "single_at_rate" in r:
        rows.append(["single node at the cluster's rate", r["single_at_rate"], c["puts_s"]])
    say(table(["process", "CPU µs/put", "puts/s"], rows))
    same = (f"; at the cluster's rate {r['leader_over_same_rate']:.2f}"
            if "leader_over_same_rate" in r else "")
    say(f"leader / single node: {r['leader_over_single']:.2f} with the same producers{same} "
        f"(goal ≤ 1.3); follower / leader: {r['follower_over_leader']:.2f} (goal ≤ 0.5)")


"""Smoke tests of pybeanstalkd-bench: tiny runs against our server. The
numbers must add up; how fast anything is is never asserted."""
import json
import socket
import sys
import time

import pytest

from pybeanstalkd.bench import main as bench, modes as benchmodes
from pybeanstalkd.bench.cross import bsload_argv
from pybeanstalkd.bench.drivers import BenchError
from pybeanstalkd.bench.spawn import Spawned, exchange, stats
from pybeanstalkd.bench.workloads import WORKLOADS, Options, run_workload
from support import REFERENCE, Server, ours_argv, require_reference


@pytest.fixture(scope="module")
def srv():
    s = Server(ours_argv())
    yield s
    s.stop()


def small(**kw):
    base = dict(conns=3, procs=2, pipeline=8, size=100, jobs=300, tube="smoke")
    return Options(**(base | kw))


def sane(r):
    assert r.seconds > 0 and r.ops_s > 0


@pytest.mark.parametrize("workload", WORKLOADS)
def test_each_workload_counts_add_up(srv, workload):
    r = run_workload(srv.address, workload, small(), cleanup=True)
    sane(r)
    assert r.ops == (900 if workload == "cycle" else 300)
    if workload == "mixed":
        assert r.produced == 300
        assert 0 < r.p50_us <= r.p99_us <= r.max_us
    else:
        assert r.p99_us is None
    assert stats(srv.address)["current-jobs-ready"] == "0"  # cleaned up


@pytest.mark.parametrize("size", [0, 65535])
def test_body_sizes(srv, size):
    for w in ("put-pipelined", "reserve-pipelined"):
        assert run_workload(srv.address, w, small(size=size, jobs=50), cleanup=True).ops == 50


def test_one_connection_and_duration(srv):
    r = run_workload(srv.address, "put", small(conns=1, procs=1, duration=0.3), cleanup=True)
    sane(r)
    assert 0.25 < r.seconds < 2
    r = run_workload(srv.address, "mixed", small(conns=2, duration=0.3, rate=200), cleanup=True)
    assert 0 < r.produced <= 200 and r.p99_us is not None


def test_many_connections(srv):
    assert run_workload(srv.address, "put", small(conns=200, jobs=400), cleanup=True).ops == 400


def test_server_errors_are_reported(srv):
    with pytest.raises(BenchError, match="JOB_TOO_BIG"):
        run_workload(srv.address, "put-pipelined", small(size=65536, jobs=10))


def test_cli_prints_table_and_json(srv, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert bench.main(["-p", str(srv.port), "-n", "200", "-c", "2", "-q", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for w in WORKLOADS:
        assert w in text
    assert "ops/s" in text and "p99 us" in text
    data = json.loads(out.read_text())
    assert data["workloads"]["put"]["server"][0]["ops"] == 200


def test_memory_idle_and_tubes_modes(srv, capsys):
    servers = [lambda: benchmodes.Running(srv.address)]
    mem = benchmodes.memory(servers, 2000, small())
    assert mem[0]["stored"] >= 2000 and mem[0]["rss_after"] > 0
    idle = benchmodes.idle_conns(servers, 50)
    assert idle[0]["command_ok"] and idle[0]["rss_after"] > 0
    curve = benchmodes.tubes_curve(servers, [1, 5], small(jobs=100), per_tube=3)
    assert [r["tubes"] for r in curve] == [1, 5]
    assert curve[1]["server"]["put_ops"] == 100 and curve[1]["server"]["reserve_ops"] == 100
    assert bench.tube_counts("1000") == [1, 10, 100, 1000] and bench.tube_counts("3,7") == [3, 7]


@pytest.mark.skipif(not REFERENCE, reason="reference beanstalkd is not installed")
def test_compare_mode(capsys, tmp_path):
    argv = ["--compare", "-n", "200", "-c", "2", "-w", "put,mixed", "-q",
            "--server-args", "-b {tmpdir}", "--json", "-"]
    assert bench.main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    for w in ("put", "mixed"):
        assert set(data["workloads"][w]) == {"reference", "ours"}
    assert data["workloads"]["put"]["reference"][0]["notes"]["dir_bytes"] > 0  # its binlog


def floor_server():
    return Spawned("floor", [sys.executable, "-m", "pybeanstalkd.bench.floor"])


@pytest.mark.parametrize("workload", WORKLOADS)
def test_floor_server_runs_every_workload(workload):
    with floor_server() as f:
        r = run_workload(f.addr, workload, small(), cpu=f.cpu)
        sane(r)
        assert r.ops == (900 if workload == "cycle" else 300)
        assert r.notes["server_cpu"] >= 0


def test_floor_server_answers_what_the_workloads_send():
    with floor_server() as f, socket.create_connection(f.addr, timeout=5) as a, \
            socket.create_connection(f.addr, timeout=5) as b:
        assert exchange(a, b"use t\r\nput 1 0 60 2\r\nhi\r\nput 1 0 60 3\r\nyou\r\n", 3) == \
            b"USING t\r\nINSERTED 1\r\nINSERTED 2\r\n"
        assert exchange(b, b"reserve-with-timeout 0\r\nwatch t\r\nignore default\r\n", 3) == \
            b"TIMED_OUT\r\nWATCHING 2\r\nWATCHING 1\r\n"
        assert exchange(b, b"reserve\r\ndelete 1\r\ndelete 1\r\n", 4) == \
            b"RESERVED 1 2\r\nhi\r\nDELETED\r\nNOT_FOUND\r\n"
        assert exchange(b, b"reserve\r\nreserve-with-timeout 5\r\n", 2) == b"RESERVED 2 3\r\nyou\r\n"
        b.sendall(b"delete 2\r\n")  # behind the waiting reserve: answered after it
        time.sleep(0.2)
        assert exchange(a, b"put 1 0 60 1\r\nx\r\n", 1) == b"INSERTED 3\r\n"
        assert exchange(b, b"", 3) == b"RESERVED 3 1\r\nx\r\nDELETED\r\n"


@pytest.mark.skipif(not REFERENCE, reason="reference beanstalkd is not installed")
def test_compare_with_the_floor(capsys):
    assert bench.main(["--compare", "--floor", "-n", "200", "-c", "2", "-w", "put,reserve",
                       "-q"]) == 0
    out = capsys.readouterr().out
    assert "floor ops/s" in out and "ours CPU us/op" in out
    assert bench.main(["--compare", "--floor", "-n", "200", "-c", "2", "-w", "cycle", "-q",
                       "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["workloads"]["cycle"]) == {"reference", "ours", "floor"}
    assert data["servers"] == ["reference", "ours", "floor"]
    assert data["workloads"]["cycle"]["floor"][0]["ops"] == 600
    with pytest.raises(SystemExit):
        bench.parse_args(["--floor", "-w", "put"])


def test_bsload_arguments():
    o = Options(conns=4, pipeline=64, size=100, jobs=1000, tube="t")
    assert bsload_argv("bsload", 1, "put-pipelined", o)[-6:] == ["-m", "put", "-n", "1000", "-P", "64"]
    assert bsload_argv("bsload", 1, "reserve", o)[-4:] == ["-m", "drain", "-P", "1"]
    assert bsload_argv("bsload", 1, "mixed", o)[-4:] == ["-m", "mixed", "-d", "5"]


def test_recovery_mode_counts_every_job():
    rows = benchmodes.recovery(("ours", ours_argv()), [("a", ours_argv()), ("b", ours_argv())],
                               500, small(), rounds=2)
    assert [r["server"] for r in rows] == ["a", "b"]
    for r in rows:
        assert r["jobs"] == 500 and len(r["runs_s"]) == 2
        assert 0 < r["min_s"] <= r["median_s"] <= r["max_s"]


@pytest.mark.skipif(not REFERENCE, reason="reference beanstalkd is not installed")
def test_compare_recovery_on_a_reference_binlog(capsys):
    assert bench.main(["--compare", "--recovery", "300", "-q", "--json", "-"]) == 0
    rows = json.loads(capsys.readouterr().out)["recovery"]
    assert [(r["server"], r["writer"], r["jobs"]) for r in rows] == [
        ("reference", "reference", 300), ("ours", "reference", 300)]


def test_recovery_needs_compare():
    with pytest.raises(SystemExit):
        bench.parse_args(["--recovery", "10"])


def test_stalls_mode_runs_every_case_and_times_the_probe():
    from pybeanstalkd.bench import stalls
    from pybeanstalkd.bench.spawn import Spawned

    servers = [lambda: Spawned("ours", ours_argv())]
    rows = stalls.stalls(servers, [2000], stalls.CASES, small(conns=2))
    assert [r["case"] for r in rows] == stalls.CASES
    for r in rows:
        # The probe ran while the work did, and its replies were all its own.
        assert r["jobs"] == 2000 and r["work_s"] > 0 and r["samples"] > 0
        assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["p999_ms"] <= r["max_ms"]
        # The sleeper ran too: it wakes late by at least the scheduler's slack.
        assert 0 < r["machine_max_ms"] < r["work_s"] * 1e3 + 1e3
    assert rows[0]["fill_rate"] > 0 and rows[2]["delay_s"] >= 3


def test_stalls_and_memcap_need_compare():
    for argv in (["--stalls", "10"], ["--memcap", "1M"]):
        with pytest.raises(SystemExit):
            bench.parse_args(argv)
    with pytest.raises(SystemExit):
        bench.parse_args(["--compare", "--stalls", "10", "--cases", "fill,nope"])
    assert bench.parse_bytes("3K") == 3072 and bench.parse_bytes("2g") == 2 << 30
    assert bench.parse_bytes("512") == 512


def test_memcap_flood_stops_at_the_cap():
    from pybeanstalkd.bench import memcap

    cap = 8 << 20  # room for over a hundred 64 KiB jobs
    rows = memcap.rss_rows(ours_argv(), "", cap, [100, 65536])
    assert [r["size"] for r in rows] == [100, 65536]
    for r in rows:
        # Stored bodies stay under the cap, and the accounting does not
        # overcharge by more than the measured per-job overhead.
        assert 0 < r["body_bytes"] < cap
        assert r["jobs"] * (r["size"] + 2 + 1024) >= cap
        assert r["rss_growth"] > 0


@pytest.mark.skipif(not REFERENCE, reason="reference beanstalkd is not installed")
def test_compare_memcap(capsys):
    assert bench.main(["--compare", "--memcap", "1M", "-n", "300", "-c", "2", "-q",
                       "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["size"] for r in data["memcap_rss"]] == [100, 1024, 65536]
    cost = {r["workload"]: r for r in data["memcap_cost"]}
    assert set(cost) == {"put-pipelined", "put"}
    for r in cost.values():
        assert r["reference_ops_s"] > 0 and r["ours_ops_s"] > 0 and r["capped_ops_s"] > 0


@pytest.mark.skipif(not REFERENCE, reason="reference beanstalkd is not installed")
def test_compare_http_cost(capsys):
    assert bench.main(["--compare", "--http-cost", "-n", "300", "-c", "2", "-q",
                       "--json", "-"]) == 0
    rows = json.loads(capsys.readouterr().out)["http_cost"]
    assert [r["workload"] for r in rows] == ["put-pipelined", "put", "reserve", "cycle"]
    for r in rows:
        assert r["reference_ops_s"] > 0 and r["ours_ops_s"] > 0 and r["http_ops_s"] > 0


def test_with_http_polls_every_path():
    import time as _time

    from pybeanstalkd.bench.httpcost import WithHttp

    with WithHttp("ours --http", ours_argv()) as s:
        deadline = _time.monotonic() + 20
        while s.fetched < 3 and _time.monotonic() < deadline:
            _time.sleep(0.05)
        assert s.fetched >= 3 and s.error is None


def test_micro_times_each_command_by_layer(tmp_path, capsys):
    from pybeanstalkd.bench import micro

    rows = micro.micro(2000, rounds=1)
    assert [r["command"] for r in rows] == micro.COMMANDS
    for r in rows:
        # (each layer is a time less the timing loop's own: on a loaded
        # machine a fast one can come out at 0, never below)
        assert r["total"] > 0 and r["queue"] >= 0 and r["reply"] >= 0
        assert abs(r["framing"] + r["dispatch"] + r["queue"] + r["reply"] - r["total"]) < 1e-9
    assert {r["command"]: r["budget"] for r in rows}["put"] == 1.5
    out = tmp_path / "m.json"
    assert bench.main(["--micro", "1000", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "framing" in text and "dispatch" in text and "reserve" in text
    assert [r["command"] for r in json.loads(out.read_text())["micro"]] == micro.COMMANDS


def test_the_compare_table_shows_latency_columns_only_when_measured():
    """Throughput workloads measure no latency: their table has no empty p99
    columns, and says what its CPU column means; a paced workload's row
    brings the p99 columns back."""
    from pybeanstalkd.bench.workloads import Result

    def res(p99):
        return [Result("w", 1000, 1.0, p99_us=p99, notes={"server_cpu": 0.5})]

    text = bench.workload_tables({"put": {"reference": res(None), "ours": res(None)}},
                                 ["reference", "ours"])
    assert "p99" not in text and "50%" in text and bench.CPU_NOTE in text
    text = bench.workload_tables({"put": {"reference": res(None), "ours": res(None)},
                                  "mixed": {"reference": res(120.0), "ours": res(150.0)}},
                                 ["reference", "ours"])
    header = text.splitlines()[0]
    assert "reference p99 us" in header and "p99 ratio" in header and bench.LATENCY_NOTE in text


def test_describe_says_which_reference_and_which_python():
    from pybeanstalkd.bench.spawn import describe

    assert describe("ours", [sys.executable, "-m", "pybeanstalkd"]).endswith(
        "(CPython %d.%d.%d)" % sys.version_info[:3])
    assert "(beanstalkd 1." in describe("reference", [require_reference()])


def test_batch_drains_with_and_without_reserve_batch():
    """--batch: a server with --extensions drains in batches; one without
    (ours without the flag, as the reference) has only the plain drain."""
    from pybeanstalkd.bench import batch as batch_mod
    from pybeanstalkd.bench.workloads import fill

    o = small(conns=2, jobs=300)
    for extra, batched in ((["--extensions"], True), ([], False)):
        srv = Server(ours_argv(), extra)
        try:
            fill(srv.address, o, 300)
            assert batch_mod.drain_plain(srv.address, o.tube, 300) > 0
            fill(srv.address, o, 300)
            rate = batch_mod.drain_batches(srv.address, o.tube, 300, 64)
            assert (rate is not None and rate > 0) is batched
            if batched:
                assert stats(srv.address)["current-jobs-ready"] == "0"
        finally:
            srv.stop()


def test_disk_durable_and_cluster_cost_need_compare():
    for argv in (["--disk-bodies"], ["--disk-fill", "1"], ["--durable"], ["--cluster-cost"]):
        with pytest.raises(SystemExit):
            bench.parse_args(argv)


def test_durable_rows_with_the_floor():
    """--durable: each server's -f0 (and our -F) puts/s, the floor beside."""
    from pybeanstalkd.bench import durable

    ours = ours_argv()
    floor = [sys.executable, "-m", "pybeanstalkd.bench.floor"]
    rows = durable.durable([require_reference()], ours, small(), rounds=1, seconds=0.3,
                           producers=[1, 3], floor=floor)
    assert [r["producers"] for r in rows] == [1, 3]
    for r in rows:
        assert set(r["best"]) == {"reference", "ours", "ours-F", "floor"}
        assert all(v > 0 for v in r["best"].values())
        assert r["ours_over_reference"] == r["best"]["ours"] / r["best"]["reference"]


def test_disk_bodies_memory_and_storm():
    """--disk-bodies: with the flag, the bodies are on disk (stats says so)
    and the storm's probe ran; without it, in RAM."""
    from pybeanstalkd.bench import disk

    ours = ours_argv()
    rows = disk.memory([require_reference()], ours, small(jobs=400), sizes=[(2000, 1.0)])
    by = {r["server"]: r for r in rows}
    assert by["ours --bodies-on-disk"]["on_disk"] == 400 * 2002
    assert by["ours --bodies-on-disk"]["in_ram"] == 0 and by["ours"]["on_disk"] == 0
    r = disk.storm(ours, small(), 300)
    assert r["jobs"] == 300 and r["samples"] > 0 and r["max_ms"] >= r["p50_ms"]


def test_cluster_cost_reports_each_process():
    """--cluster-cost: CPU per put of the leader, two followers, HAProxy,
    and one node alone; the ratios are theirs."""
    from pybeanstalkd.bench import clustercost
    from support import require_etcd

    require_etcd()
    r = clustercost.cluster_cost(ours_argv(), small(conns=2), 1000)
    c = r["cluster"]
    # (CPU comes in 10 ms ticks: HAProxy's share of 1,000 puts may be none)
    assert len(c["followers"]) == 2 and c["leader"] > 0 and c["haproxy"] >= 0
    assert r["single"]["cpu_us"] > 0
    assert r["leader_over_single"] == c["leader"] / r["single"]["cpu_us"]
    # the single node's curve: halving the producers until it is slower
    # than the cluster (or down to one)
    curve = r["single"]["curve"]
    assert [p["producers"] for p in curve] == [2, 1][:len(curve)]
    assert curve[-1]["producers"] == 1 or curve[-1]["puts_s"] <= c["puts_s"]
    if "single_at_rate" in r:
        assert r["leader_over_same_rate"] == c["leader"] / r["single_at_rate"]


def test_cluster_cost_interpolates_the_single_node_at_the_cluster_rate():
    from pybeanstalkd.bench.clustercost import at_rate

    curve = [{"puts_s": 50_000, "cpu_us": 18.0}, {"puts_s": 30_000, "cpu_us": 24.0},
             {"puts_s": 10_000, "cpu_us": 54.0}]
    assert at_rate(curve, 20_000) == 39.0 and at_rate(curve, 30_000) == 24.0
    assert at_rate(curve, 40_000) == 21.0
    assert at_rate(curve, 5_000) is None and at_rate(curve, 60_000) is None


def test_crowd_times_a_probe_while_others_pipeline():
    from pybeanstalkd.bench import crowd

    row = crowd.crowd(lambda: Spawned("ours", ours_argv()), 5, 0.5, lead=0.3)
    # The probe ran, and so did the crowd (the server ran its commands).
    assert row["conns"] == 5 and row["probes"] > 0 and row["first_ms"] > 0
    assert 0 < row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]
    assert row["crowd_cmds_per_s"] > 0 and row["crowd_sent_per_s"] > 0
    with pytest.raises(SystemExit):
        bench.parse_args(["--crowd", "10"])

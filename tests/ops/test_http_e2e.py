"""--http end to end, on a real server process: /metrics against `stats` and
`stats-tube` value by value after a workload over the protocol (and a scrape
moves no counter), actions going into the binlog (restart with -b), and
start-up: with --http aiohttp and prometheus_client are loaded (without it
they are not: tests/server/test_startup.py), and without aiohttp installed
--http says what to install."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from support import Server, drain_pipes, free_port, modules_of_a_serving_server, ours_argv

ACT = {"X-Pybeanstalkd": "1", "Content-Type": "application/json"}
NOT_NUMERIC = {"version", "id", "hostname", "os", "platform", "draining"}
MOVES_BY_TIME = {"uptime", "rusage-utime", "rusage-stime"}


# -- a raw protocol client and an HTTP one ----------------------------------------------

class Proto:
    def __init__(self, srv):
        self.sock = srv.connect(timeout=10)
        self.buf = b""

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            data = self.sock.recv(65536)
            assert data, "server closed"
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def cmd(self, line: bytes, body: bytes | None = None) -> bytes:
        self.sock.sendall(line + b"\r\n" + (body + b"\r\n" if body is not None else b""))
        reply = self._line()
        word = reply.split()[0] if reply else b""
        if word in (b"OK", b"RESERVED", b"FOUND"):
            n = int(reply.split()[-1]) + 2
            while len(self.buf) < n:
                self.buf += self.sock.recv(65536)
            reply, self.buf = reply + b"\r\n" + self.buf[:n - 2], self.buf[n:]
        return reply

    def put(self, body=b"x", pri=0, delay=0, ttr=60) -> int:
        r = self.cmd(b"put %d %d %d %d" % (pri, delay, ttr, len(body)), body)
        assert r.startswith(b"INSERTED"), r
        return int(r.split()[1])

    def reserve(self) -> int:
        r = self.cmd(b"reserve-with-timeout 0")
        assert r.startswith(b"RESERVED"), r
        return int(r.split()[1])

    def yaml(self, line: bytes) -> dict:
        body = self.cmd(line).split(b"\r\n", 1)[1].decode()
        return dict(x.split(": ", 1) for x in body.splitlines()[1:])

    def close(self):
        self.sock.close()


def request(port, method, path, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_http(port, proc):
    end = time.monotonic() + 15
    while time.monotonic() < end:
        assert proc.poll() is None
        try:
            if request(port, "GET", "/readyz")[0] == 200:  # (with -b: after the replay)
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError("the HTTP side did not come up")


def start(*extra):
    hport = free_port()
    srv = Server(ours_argv(), extra=["--http", f"127.0.0.1:{hport}", *extra])
    drain_pipes(srv.proc)
    wait_http(hport, srv.proc)
    return srv, hport


def scrape(port) -> dict:
    status, body = request(port, "GET", "/metrics")
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(body.decode()) for s in fam.samples}


# -- /metrics against stats ---------------------------------------------------------------

OURS = {  # stats fields davidtannock's exporter has no name for
    "max-job-size": "beanstalkd_max_job_size_bytes", "pid": "beanstalkd_pid",
    "rusage-utime": "beanstalkd_rusage_utime_seconds_total",
    "rusage-stime": "beanstalkd_rusage_stime_seconds_total", "uptime": "beanstalkd_uptime_seconds",
    "binlog-oldest-index": "beanstalkd_binlog_oldest_index",
    "binlog-current-index": "beanstalkd_binlog_current_index",
    "binlog-records-migrated": "beanstalkd_binlog_records_migrated_total",
    "binlog-records-written": "beanstalkd_binlog_records_written_total",
    "binlog-max-size": "beanstalkd_binlog_max_size_bytes",
}


def server_metric(key: str) -> str:
    """davidtannock/beanstalkd_exporter's name for a `stats` key."""
    if key in OURS:
        return OURS[key]
    snake = key.replace("-", "_")
    if key.startswith("cmd-"):
        return f"beanstalkd_{snake}_total"
    assert key.startswith("current-") or key in ("job-timeouts", "total-jobs", "total-connections"), key
    return f"beanstalkd_{snake}_count"


def tube_metric(key: str) -> str:
    """... and for a `stats-tube` key."""
    snake = key.replace("-", "_")
    if key.startswith("cmd-"):
        return f"beanstalkd_tube_{snake}_total"
    if key.startswith("pause"):
        return f"beanstalkd_tube_{snake}_seconds_total"
    return f"beanstalkd_tube_{snake}_count"


def workload(srv):
    p, w = Proto(srv), Proto(srv)
    p.cmd(b"use a")
    a = [p.put(pri=i % 3) for i in range(10)]
    p.cmd(b"use b")
    for _ in range(5):
        p.put(ttr=1)
    p.cmd(b"use c")
    for _ in range(3):
        p.put(delay=3600)
    p.cmd(b"use default")
    p.put(pri=2000)
    p.put(pri=5)
    w.cmd(b"watch a")
    w.cmd(b"ignore default")
    got = [w.reserve() for _ in range(6)]
    for jid in got[:3]:
        assert w.cmd(b"delete %d" % jid) == b"DELETED"
    assert w.cmd(b"release %d 0 0" % got[3]) == b"RELEASED"
    for jid in got[4:]:
        assert w.cmd(b"bury %d 0" % jid) == b"BURIED"
    p.cmd(b"use a")
    assert p.cmd(b"kick 1") == b"KICKED 1"
    w.cmd(b"watch b")
    w.cmd(b"ignore a")
    for _ in range(5):
        w.reserve()
    time.sleep(1.6)  # every b job's ttr of 1 s runs out
    for _ in range(2):
        assert w.cmd(b"delete %d" % w.reserve()) == b"DELETED"
    w.cmd(b"watch a")
    w.cmd(b"ignore b")
    jid = w.reserve()  # ttr 60: no timeout while the test reads
    assert w.cmd(b"touch %d" % jid) == b"TOUCHED"
    p.cmd(b"pause-tube c 3600")
    p.cmd(b"peek %d" % a[-1])
    p.cmd(b"peek-ready")
    p.cmd(b"stats-job %d" % a[-1])
    p.cmd(b"list-tubes")
    p.cmd(b"list-tube-used")
    p.cmd(b"list-tubes-watched")
    return p, w


def test_metrics_equal_stats_value_by_value():
    srv, hport = start()
    try:
        p, w = workload(srv)
        tubes = [t[2:] for t in p.cmd(b"list-tubes").decode().splitlines()[2:]]
        tube_stats = {t: p.yaml(b"stats-tube " + t.encode()) for t in tubes}
        before = p.yaml(b"stats")
        m = scrape(hport)
        m2 = scrape(hport)
        after = p.yaml(b"stats")
        for k, v in before.items():
            if k in MOVES_BY_TIME:
                continue
            expect = int(v) + 1 if k == "cmd-stats" else v  # our own second stats
            assert after[k] == str(expect), k
        assert {k for k in before if k not in NOT_NUMERIC} == set(OURS) | {
            k for k in before if k.startswith(("cmd-", "current-")) or k in (
                "job-timeouts", "total-jobs", "total-connections")}
        for k, v in before.items():
            if k in NOT_NUMERIC:
                continue
            got = m[(server_metric(k), ())]
            if k in MOVES_BY_TIME:
                assert float(v) <= got <= float(after[k]), k
            else:
                assert got == int(v), k
        assert m[("pybeanstalkd_draining", ())] == (before["draining"] == "true")
        for t, st in tube_stats.items():
            label = (("tube", t),)
            for k, v in st.items():
                if k == "name":
                    continue
                got = m[(tube_metric(k), label)]
                if k == "pause-time-left":
                    assert int(v) - 1 <= got <= int(v), (t, k)
                else:
                    assert got == int(v), (t, k)
        assert sorted(t for (name, lab) in m if name == "beanstalkd_tube_total_jobs_count"
                      for _, t in lab) == sorted(tubes)
        # Ours, from what the workload did.
        assert m[("pybeanstalkd_tube_timeouts_total", (("tube", "b"),))] == 5
        assert m[("pybeanstalkd_tube_timeouts_total", (("tube", "a"),))] == 0
        assert m[("pybeanstalkd_tube_buries_total", (("tube", "a"),))] == 2
        assert m[("pybeanstalkd_tube_job_wait_seconds_count", (("tube", "a"),))] == 7
        assert m[("pybeanstalkd_tube_job_wait_seconds_count", (("tube", "b"),))] == 7
        for outcome, n in (("delete", 3), ("release", 1), ("bury", 2)):
            key = ("pybeanstalkd_tube_job_work_seconds_count", (("outcome", outcome), ("tube", "a")))
            assert m[key] == n, outcome
        # Two b jobs waited from their TTR expiry to their second reserve.
        assert m[("pybeanstalkd_tube_job_wait_seconds_sum", (("tube", "b"),))] > 0
        inf = ("pybeanstalkd_tube_job_wait_seconds_bucket", (("le", "+Inf"), ("tube", "a")))
        assert m[inf] == 7
        assert m[("pybeanstalkd_memory_used_bytes", ())] > 0
        assert m[("pybeanstalkd_memory_cap_bytes", ())] == 0
        assert m[("beanstalkd_up", ())] == 1
        # A scrape moves nothing: the second equals the first but for time.
        timed = {server_metric(k) for k in MOVES_BY_TIME} | {tube_metric("pause-time-left")}
        assert {k: v for k, v in m.items() if k[0] not in timed} == \
               {k: v for k, v in m2.items() if k[0] not in timed}
        p.close()
        w.close()
    finally:
        srv.stop()


def test_metrics_with_a_memory_cap_and_draining():
    srv, hport = start("--max-memory", "1M")
    try:
        os.kill(srv.proc.pid, signal.SIGUSR1)
        time.sleep(0.2)
        m = scrape(hport)
        assert m[("pybeanstalkd_memory_cap_bytes", ())] == 1 << 20
        assert m[("pybeanstalkd_draining", ())] == 1
        assert request(hport, "GET", "/readyz")[0] == 503
    finally:
        srv.stop()


# -- the binlog ------------------------------------------------------------------------------

def test_actions_go_into_the_binlog(tmp_path):
    wal = tmp_path / "wal"
    wal.mkdir()
    srv, hport = start("-b", str(wal))
    try:
        ids = []
        for i in range(4):
            st, body = request(hport, "POST", "/api/v1/tubes/x/put", {"body": f"job{i}", "pri": i}, ACT)
            assert st == 200
            ids.append(json.loads(body)["id"])
        request(hport, "POST", "/api/v1/tubes/x/put", {"body": "later", "delay": 3600}, ACT)
        st, body = request(hport, "POST", "/api/v1/tubes/x/move", {"to": "y", "n": 2}, ACT)
        assert json.loads(body) == {"moved": 2}
        assert request(hport, "POST", "/api/v1/tubes/x/flush", {"state": "delayed"}, ACT)[0] == 200
        assert request(hport, "POST", f"/api/v1/jobs/{ids[3]}/delete", None, ACT)[0] == 200
        time.sleep(0.3)  # -f 50: an fsync has run
        m = scrape(hport)
        assert m[("pybeanstalkd_binlog_bytes_written_total", ())] > 0
        assert m[("pybeanstalkd_binlog_fsync_seconds_count", ())] >= 1
        assert m[("beanstalkd_binlog_records_written_total", ())] > 0
    finally:
        srv.stop()
    assert srv.proc.returncode == 0
    again = Server(ours_argv(), extra=["-b", str(wal)])
    try:
        p = Proto(again)
        x, y = p.yaml(b"stats-tube x"), p.yaml(b"stats-tube y")
        assert (x["current-jobs-ready"], x["current-jobs-delayed"]) == ("1", "0")
        assert (y["current-jobs-ready"], y["current-jobs-delayed"]) == ("2", "0")
        p.cmd(b"use y")
        bodies = []
        for _ in range(2):
            r = p.cmd(b"peek-ready")
            bodies.append(r.split(b"\r\n")[1])
            p.cmd(b"delete %d" % int(r.split()[1]))
        assert bodies == [b"job0", b"job1"]  # moved in serve order, priorities kept
        p.cmd(b"use x")
        assert p.cmd(b"peek-ready").split(b"\r\n")[1] == b"job2"
        p.close()
    finally:
        again.stop()


def test_bodies_on_disk_over_http(tmp_path):
    """--bodies-on-disk: the job browser reads bodies back, a move copies
    them, and /metrics says where the bodies are (as stats does)."""
    wal = tmp_path / "wal"
    wal.mkdir()
    srv, hport = start("-b", str(wal), "--bodies-on-disk", "--body-ram-min", "10")
    try:
        big = "b" * 2000
        for body in ("small", big):
            assert request(hport, "POST", "/api/v1/tubes/x/put", {"body": body}, ACT)[0] == 200
        st, body = request(hport, "GET", "/api/v1/jobs/2")
        job = json.loads(body)["job"]
        assert (job["size"], job["preview"]["text"], job["preview"]["truncated"]) == \
            (2000, big[:1024], True)
        st, body = request(hport, "POST", "/api/v1/tubes/x/move", {"to": "y"}, ACT)
        assert json.loads(body) == {"moved": 2}
        st, body = request(hport, "GET", "/api/v1/tubes/y/jobs")
        assert [j["preview"]["text"][:5] for j in json.loads(body)["jobs"]] == ["small", "bbbbb"]
        time.sleep(0.2)
        m = scrape(hport)
        st = Proto(srv).yaml(b"stats")
        assert m[("pybeanstalkd_body_bytes", (("where", "disk"),))] == \
            int(st["body-bytes-on-disk"]) == 2002
        assert m[("pybeanstalkd_body_bytes", (("where", "ram"),))] == \
            int(st["body-bytes-in-ram"]) == 7
        assert m[("pybeanstalkd_body_read_errors_total", ())] == 0
        assert m[("pybeanstalkd_body_checksum_errors_total", ())] == 0
        # One byte of a body changed on disk: never served as the job's.
        p = Proto(srv)
        p.cmd(b"use z")
        jid = p.put(b"d" * 4096)
        flipped, deadline = False, time.monotonic() + 10
        while not flipped and time.monotonic() < deadline:  # (until its record is in a file)
            for name in sorted(n for n in os.listdir(wal) if n.startswith("binlog.")):
                at = (wal / name).read_bytes().find(b"d" * 4096)
                if at >= 0:
                    os.chmod(wal / name, 0o600)
                    with open(wal / name, "r+b") as f:
                        f.seek(at + 1000)
                        f.write(b"D")
                    flipped = True
        assert flipped
        assert p.cmd(b"peek-ready") == b"INTERNAL_ERROR"
        p.cmd(b"watch z")
        p.cmd(b"ignore default")
        assert p.cmd(b"reserve-with-timeout 0") == b"INTERNAL_ERROR"
        assert p.yaml(b"stats-job %d" % jid)["state"] == "buried"
        m = scrape(hport)
        assert m[("pybeanstalkd_body_checksum_errors_total", ())] == 2
        p.close()
    finally:
        srv.stop()


# -- start-up --------------------------------------------------------------------------------

def test_with_http_aiohttp_and_prometheus_client_are_loaded(tmp_path):
    mods = modules_of_a_serving_server(tmp_path, "--http", f":{free_port()}")
    assert {"aiohttp", "prometheus_client", "pybeanstalkd.ops.http"} <= mods


def test_http_without_aiohttp_says_what_to_install():
    code = ("import sys; sys.modules['aiohttp'] = None\n"
            "from pybeanstalkd.cli import main\nsys.exit(main())")
    res = subprocess.run([sys.executable, "-c", code, "-l", "127.0.0.1", "-p", str(free_port()),
                          "--http", f":{free_port()}"], capture_output=True, timeout=30)
    assert res.returncode == 1
    assert b"pip install 'pybeanstalkd[http]'" in res.stderr
    assert b"aiohttp" in res.stderr


def test_http_port_in_use_exits():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = subprocess.run([*ours_argv(), "-l", "127.0.0.1", "-p", str(free_port()),
                              "--http", f"127.0.0.1:{port}"], capture_output=True, timeout=30)
    assert res.returncode == 111
    assert b"--http 127.0.0.1:%d" % port in res.stderr


def test_readyz_says_replaying_while_a_long_binlog_replays(tmp_path):
    """With --http the HTTP side starts before the replay: /healthz answers,
    /readyz and everything else answer 503 until every job is back."""
    from binlogtools import full_record, write_binlog

    wal = tmp_path / "wal"
    wal.mkdir()
    n, per_file = 300_000, 100_000
    for k in range(n // per_file):
        write_binlog(wal / f"binlog.{k + 1}", 7,
                     *(full_record(7, "default", b"x" * 40, id=i + 1)
                       for i in range(k * per_file, (k + 1) * per_file)), mode=0o600)
    hport = free_port()
    proc = subprocess.Popen(ours_argv() + ["-l", "127.0.0.1", "-p", str(free_port()), "-b", str(wal),
                                           "--http", f"127.0.0.1:{hport}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        seen = []
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                status, body = request(hport, "GET", "/readyz")
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.005)
                continue
            if status == 503:
                if not seen:
                    assert request(hport, "GET", "/healthz") == (200, b"ok\n")
                    status2, body2 = request(hport, "GET", "/api/v1/stats")
                    assert status2 in (503, 200)  # (the replay may end in between)
                    if status2 == 503:
                        assert json.loads(body2) == {"error": "replaying the binlog"}
                seen.append(json.loads(body))
            else:
                assert (status, json.loads(body)) == (200, {"ready": True})
                break
        assert seen and seen[0] == {"ready": False, "reason": "replaying"}, seen
        status, body = request(hport, "GET", "/api/v1/stats")
        assert status == 200 and json.loads(body)["stats"]["current-jobs-ready"] == n
    finally:
        proc.terminate()
        proc.communicate(timeout=10)

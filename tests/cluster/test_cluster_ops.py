"""What an operator sees of a cluster, on two real nodes and an
etcd: GET /api/v1/cluster, /metrics, `pybeanstalkd-admin cluster` and the
dashboard's panel; while both are in sync, while the follower is stopped
(it lags, then leaves the ISR), and once it is back. And how an operator
unregisters a node gone for good."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from test_cluster_e2e import ask, etcd, pair, start, wait_for  # noqa: F401 (etcd: a fixture)
from dashtools import HttpServer, open_page


def get(srv, path: str) -> bytes:
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (srv.http, path), timeout=5) as r:
        return r.read()


def report(srv) -> dict:
    return json.loads(get(srv, "/api/v1/cluster"))


def row(st: dict, name: str) -> dict:
    return next(n for n in st["nodes"] if n["name"] == name)


def metric(srv, sample: str):
    """The value of one /metrics sample (name and labels as exposed), or None."""
    for line in get(srv, "/metrics").decode().splitlines():
        name, _, value = line.rpartition(" ")
        if name == sample:
            return float(value)
    return None


def admin(*args, columns=100) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pybeanstalkd.ops.admin", *args],
                          capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, COLUMNS=str(columns), TERM="dumb"))


class Page:
    """The dashboard of a node, as the test's browser loads it."""

    def __init__(self, srv):
        self.base = "http://127.0.0.1:%d" % srv.http


CLUSTER_JS = """
const rows = [...document.querySelectorAll('#cluster-body tr')].map(tr =>
  [tr.dataset.node, ...[...tr.children].map(td => td.textContent)]);
return {shown: !document.querySelector('#cluster-panel').hidden,
        sub: document.querySelector('#cluster-sub').textContent,
        follower: !document.querySelector('#follower-banner').hidden,
        leader: document.querySelector('#follower-leader').textContent, rows,
        drain: document.querySelector('#btn-drain').offsetParent !== null};
"""


def panel(browser):
    return browser.execute_script(CLUSTER_JS)


def test_without_cluster_there_is_no_cluster_report(tmp_path):
    srv = HttpServer()
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(srv.base + "/api/v1/cluster", timeout=5)
        assert e.value.code == 404
        body = urllib.request.urlopen(srv.base + "/metrics", timeout=5).read()
        assert b"pybeanstalkd_cluster_" not in body
        got = admin("cluster", "--http", "127.0.0.1:%d" % srv.http_port)
        assert got.returncode == 1 and "HTTP 404: not in a cluster" in got.stderr, got.stderr
    finally:
        srv.stop()
    got = admin("cluster", "--http", "127.0.0.1:%d" % srv.http_port)
    assert got.returncode == 3 and "cannot reach the HTTP side" in got.stderr


def test_reports_metrics_admin_and_dashboard_follow_the_cluster(tmp_path, etcd, browser):  # noqa: F811
    with pair(tmp_path, etcd, "ops") as (a, b):
        for _i in range(5):
            assert ask(a, b"put 0 0 60 1\r\nx\r\n").startswith(b"INSERTED")

        # In sync: the leader's view, and the follower's.
        ra = wait_for(lambda: (lambda r: r if row(r, "b")["lag_batches"] == 0 else None)(report(a)))
        assert (ra["role"], ra["leader"], ra["isr"], ra["cluster"]) == ("leader", "a", ["a", "b"], "ops")
        assert ra["seq"] >= 5
        assert row(ra, "b")["connected"] and row(ra, "b")["in_isr"]
        assert row(ra, "b")["acked_seq"] == ra["seq"] and row(ra, "b")["lag_bytes"] == 0
        # The follower reads the ISR from etcd on its own poll, so its view may trail the leader's.
        rb = wait_for(lambda: (lambda r: r if r["applied_seq"] == ra["seq"] and r["leader"]
                               and r["isr"] == ["a", "b"] else None)(report(b)))
        assert (rb["role"], rb["leader"], rb["epoch"]) == ("follower", "a", ra["epoch"])
        assert metric(a, "pybeanstalkd_cluster_is_leader") == 1
        assert metric(a, "pybeanstalkd_cluster_epoch") == ra["epoch"]
        assert metric(a, "pybeanstalkd_cluster_isr_members") == 2
        assert metric(a, 'pybeanstalkd_cluster_replica_in_isr{node="b"}') == 1
        assert metric(a, 'pybeanstalkd_cluster_replica_lag_batches{node="b"}') == 0
        assert metric(b, "pybeanstalkd_cluster_is_leader") == 0
        assert metric(b, "pybeanstalkd_cluster_applied_batch") == ra["seq"]

        # The admin CLI, given the follower, asks the leader for the lag.
        got = admin("cluster", "--http", "127.0.0.1:%d" % b.http, "--json")
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout)["node"] == "a" and json.loads(got.stdout)["isr"] == ["a", "b"]
        text = admin("cluster", "--http", "127.0.0.1:%d" % b.http).stdout
        assert "cluster ops  leader a, epoch %d, ISR a, b" % ra["epoch"] in text
        assert re.search(r"^b\s+follower\s+✓\s+up\s+%d\s+0\s+0 B\s+0\.00 s" % ra["seq"], text, re.M), text

        # The dashboard: the leader's panel; the follower's banner points at the leader.
        open_page(browser, Page(a))
        view = wait_for(lambda: (lambda p: p if p["shown"] and len(p["rows"]) == 2 else None)(panel(browser)))
        assert not view["follower"] and "leader a" in view["sub"]
        assert view["rows"][0][:5] == ["a", "a", "leader", "✓ in sync", "self"]
        assert view["rows"][1][:5] == ["b", "b", "follower", "✓ in sync", "up"]
        assert view["drain"]  # the leader can be drained
        open_page(browser, Page(b))
        view = wait_for(lambda: (lambda p: p if p["follower"] and p["rows"] else None)(panel(browser)))
        assert view["leader"] == "The leader is a: 127.0.0.1:%d." % a.http
        # A follower refuses every action (503): no Drain to press.
        assert not view["drain"]
        req = urllib.request.Request("http://127.0.0.1:%d/api/v1/drain" % b.http, data=b"",
                                     headers={"X-Pybeanstalkd": "1"}, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=5)
        assert refused.value.code == 503

        # The follower stops: a put waits; meanwhile its lag shows, then it leaves the ISR.
        b.proc.send_signal(signal.SIGSTOP)
        put = threading.Thread(target=ask, args=(a, b"put 0 0 60 1\r\ny\r\n", 10))
        put.start()
        lag = wait_for(lambda: (lambda r: r if row(r, "b")["lag_batches"] >= 1 else None)(report(a)))
        assert row(lag, "b")["lag_bytes"] > 0 and row(lag, "b")["lag_seconds"] >= 0
        assert metric(a, 'pybeanstalkd_cluster_replica_lag_batches{node="b"}') >= 1
        put.join()
        out = wait_for(lambda: (lambda r: r if r["isr"] == ["a"] else None)(report(a)))
        assert not row(out, "b")["in_isr"]
        assert metric(a, 'pybeanstalkd_cluster_replica_in_isr{node="b"}') == 0
        text = admin("cluster", "--http", "127.0.0.1:%d" % a.http).stdout
        assert re.search(r"^b\s+follower\s+✗\s+up\s+\d+\s+[1-9]", text, re.M), text
        open_page(browser, Page(a))
        wait_for(lambda: panel(browser)["rows"][1][3] == "✗ out")

        # Back: caught up, in the ISR again.
        b.proc.send_signal(signal.SIGCONT)
        back = wait_for(lambda: (lambda r: r if r["isr"] == ["a", "b"] else None)(report(a)))
        assert row(back, "b")["in_isr"]
        wait_for(lambda: panel(browser)["rows"][1][3] == "✓ in sync")


def leader_body(srv) -> tuple[int, dict]:
    """GET /leader: HAProxy's check (the status) and the node's view (the body)."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/leader" % srv.http, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def views(srv) -> dict:
    """What GET /leader, /api/v1/cluster and /metrics each say of the
    leader and the epoch."""
    status, body = leader_body(srv)
    rep = report(srv)
    info = [line for line in get(srv, "/metrics").decode().splitlines()
            if line.startswith("pybeanstalkd_cluster_leader_info{")]
    return {"status": status,
            "/leader": (body["leader"], body["is_leader"], body["epoch"]),
            "/api/v1/cluster": (rep["leader"], rep["is_leader"], rep["epoch"]),
            "/metrics": (info[0].split('"')[1] if info else "",
                         metric(srv, "pybeanstalkd_cluster_is_leader") == 1,
                         metric(srv, "pybeanstalkd_cluster_epoch"))}


def leader_of(srv) -> str | None:
    """The leader the node names, None until its HTTP side answers."""
    try:
        return report(srv)["leader"]
    except urllib.error.URLError:
        return None


STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")  # (UTC, to the millisecond)


def log_lines(tmp_path, name: str, word: str) -> list[str]:
    """The node's cluster lines with word in them, each without the time
    it begins with."""
    out = []
    for line in (tmp_path / f"{name}.log").read_text().splitlines():
        m = STAMP.match(line)
        if m and line[m.end():].startswith("cluster ") and word in line:
            out.append(line[m.end():])
    return out


def test_every_endpoint_names_the_same_leader_and_epoch_and_the_log_whom_it_follows(
        tmp_path, etcd):  # noqa: F811
    with pair(tmp_path, etcd, "agree") as (a, b):
        epoch = report(a)["epoch"]
        assert epoch > 0
        wait_for(lambda: report(b)["leader"] == "a")
        assert views(a) == {"status": 200, "/leader": ("a", True, epoch),
                            "/api/v1/cluster": ("a", True, epoch), "/metrics": ("a", True, epoch)}
        assert views(b) == {"status": 503, "/leader": ("a", False, epoch),
                            "/api/v1/cluster": ("a", False, epoch), "/metrics": ("a", False, epoch)}
        assert leader_body(b)[1] == dict((k, report(b)[k]) for k in
                                         ("node", "role", "is_leader", "leader", "epoch", "isr"))
        # (the log reaches its file through the test's pump: wait for it)
        assert wait_for(lambda: log_lines(tmp_path, "b", " follows")) == [
            "cluster agree: b follows a, epoch %d" % epoch]

        # The leader hands over (SIGTERM): b leads under a newer epoch; a,
        # back as a follower, follows b and says so; everything agrees again.
        a.stop()
        wait_for(lambda: leader_body(b)[0] == 200)
        later = report(b)["epoch"]
        assert later > epoch
        a2 = start(tmp_path, etcd, "a", "agree")
        try:
            wait_for(lambda: leader_of(a2) == "b")
            assert views(a2) == {"status": 503, "/leader": ("b", False, later),
                                 "/api/v1/cluster": ("b", False, later),
                                 "/metrics": ("b", False, later)}
            assert views(b)["/metrics"] == ("b", True, later)
            assert wait_for(lambda: log_lines(tmp_path, "a", " follows b")) == [
                "cluster agree: a follows b, epoch %d" % later]
            assert ("cluster agree: b: no node leads (the last: a, epoch %d)" % epoch
                    in log_lines(tmp_path, "b", "no node leads"))
        finally:
            a2.stop()


def post(srv, path: str):
    """(status, JSON) of an action on srv's HTTP side."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (srv.http, path), data=b"",
                                 headers={"X-Pybeanstalkd": "1"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_node_gone_for_good_is_forgotten_and_registers_again_if_it_starts(
        tmp_path, etcd, browser):  # noqa: F811
    with pair(tmp_path, etcd, "forget") as (a, b):
        at_a, at_b = "127.0.0.1:%d" % a.http, "127.0.0.1:%d" % b.http
        # Refused: the leader itself, an ISR member, a node never registered.
        # (Through the follower, once its own poll of etcd has seen the leader.)
        wait_for(lambda: report(b)["leader"] == "a")
        got = admin("cluster", "--http", at_b, "--forget", "a")
        assert got.returncode == 1 and "HTTP 409: a leads: stop it" in got.stderr, got.stderr
        got = admin("cluster", "--http", at_a, "--forget", "b")
        assert got.returncode == 1 and "HTTP 409: b is in the ISR: stop it first" in got.stderr
        got = admin("cluster", "--http", at_a, "--forget", "zz")
        assert got.returncode == 1 and "HTTP 404: no node zz is registered" in got.stderr
        assert post(b, "/api/v1/cluster/nodes/a/forget") == (
            503, {"error": "not the cluster's leader"})
        assert [n["name"] for n in report(a)["nodes"]] == ["a", "b"]

        b.proc.kill()
        b.proc.wait()
        wait_for(lambda: report(a)["isr"] == ["a"])
        assert row(report(a), "b")["connected"] is False
        # Why it is down, as the leader last saw it: in the report, the CLI and the dashboard.
        down = wait_for(lambda: row(report(a), "b").get("link_error"))
        assert "refused" in down.lower(), down
        text = admin("cluster", "--http", at_a, columns=160).stdout
        assert "b: no link: " + down in text, text
        open_page(browser, Page(a))
        shown = wait_for(lambda: browser.execute_script(
            "const li = document.querySelector('#cluster-errors li');"
            "return li && !document.querySelector('#cluster-errors').hidden && li.textContent;"))
        assert shown == "b: no link: " + down
        got = admin("cluster", "--http", at_a, "--forget", "b", "--json")
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout) == {"forgot": "b", "leader_http": at_a}
        assert [n["name"] for n in report(a)["nodes"]] == ["a"]
        assert post(a, "/api/v1/cluster/nodes/b/forget")[0] == 404
        assert ask(a, b"put 0 0 60 1\r\nz\r\n").startswith(b"INSERTED")
        text = admin("cluster", "--http", at_a).stdout
        assert not re.search(r"^b\s", text, re.M), text

        # Started again, it registers again and rejoins the ISR.
        b2 = start(tmp_path, etcd, "b", "forget")
        try:
            back = wait_for(lambda: (lambda r: r if r["isr"] == ["a", "b"] else None)(report(a)))
            assert row(back, "b")["in_isr"] and row(back, "b")["connected"]
        finally:
            b2.stop()

"""examples/ha-walkthrough.sh, docs/HA.md's walkthrough of a cluster of
three behind HAProxy, run as written (on free ports, given in the
environment): a job put through HAProxy survives kill -9 of the leader
and the next leader serves; it stops at once when a port it needs is
taken. The systemd unit's command line is one the server takes, with the
environment file docs/HA.md writes for a node."""
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from support import free_port, require_etcd
from test_cluster_haproxy import require_haproxy

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
SCRIPT = os.path.join(ROOT, "examples", "ha-walkthrough.sh")
PORTS = ["BS_PORT", "ETCD_CLIENT_PORT", "ETCD_PEER_PORT",
         *("NODE%d_%s" % (i, kind) for i in (1, 2, 3) for kind in ("PORT", "HTTP", "PEER"))]


def test_the_ha_page_links_the_walkthrough_script():
    script = open(SCRIPT).read()
    page = open(os.path.join(ROOT, "docs", "HA.md")).read()
    assert "[examples/ha-walkthrough.sh](../examples/ha-walkthrough.sh)" in page
    # every port it takes from the environment is one of the variables
    assert set(re.findall(r"\b([A-Z0-9_]+_(?:PORT|HTTP|PEER))=\$\{", script)) == set(PORTS)


def test_the_walkthrough_runs_as_written():
    require_etcd()
    require_haproxy()
    if not shutil.which("curl"):
        pytest.fail("curl is not installed")
    ports: set[int] = set()
    while len(ports) < len(PORTS):
        ports.add(free_port())
    env = dict(os.environ, VENV_BIN=os.path.dirname(sys.executable),
               **{name: str(port) for name, port in zip(PORTS, sorted(ports))})
    # In its own process group: on a timeout the script's trap gets SIGTERM
    # and stops etcd, the nodes and HAProxy (a SIGKILL of sh would leave them).
    proc = subprocess.Popen(["sh", SCRIPT], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        pytest.fail("the walkthrough took over 180 s:\n" + out + err)
    print(out, err)
    assert proc.returncode == 0, out + err
    # node1 led first, with all three in sync; the job went through HAProxy
    assert re.search(r'"leader": "node1", "epoch": \d+, "isr": \["node1", "node\d", "node\d"\]', out)
    job = int(re.search(r"^put job (\d+) through HAProxy$", out, re.M).group(1))
    # after kill -9 of node1: the job is there, another node leads and takes puts
    assert "job %d is still there, through HAProxy" % job in out
    new = re.search(r'"node": "(node[23])", "role": "leader", "is_leader": true, '
                    r'"leader": "node[23]", "epoch": (\d+)', out)
    assert new, out
    assert re.search(r"^put job \d+ through HAProxy, to the new leader$", out, re.M)
    # HAProxy said which nodes were DOWN, and the new leader is UP
    assert "Server leader/%s is UP" % new.group(1) in out
    # the followers said whom they followed, and the new leader that it leads
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "  # (each node line says when)
    follows = re.findall(r"^%scluster jobs: (node[23]) follows node1, epoch (\d+)$" % stamp, out, re.M)
    assert sorted(n for n, _ in follows) == ["node2", "node3"]
    assert "cluster jobs: %s leads, epoch %s" % new.groups() in out
    assert int(new.group(2)) > int(follows[0][1])
    stamps = re.findall(r"^(%s)cluster jobs: " % stamp, out, re.M)
    assert len(stamps) >= 4 and stamps == sorted(stamps)  # both nodes' lines, in time order


def test_the_walkthrough_stops_at_once_when_a_port_it_needs_is_taken():
    """A server left on 11300 (`make run`) would take the walkthrough's
    puts, which HAProxy could not bind for: the script says so and fails
    before it starts anything."""
    import socket

    held = socket.socket()
    try:
        held.bind(("127.0.0.1", 11300))
        held.listen()
    except OSError:
        held.close()  # (11300 is taken already: as good for this test)
        held = None
    try:
        ports: set[int] = set()
        while len(ports) < len(PORTS) - 1:
            ports.add(free_port())
        env = dict(os.environ, VENV_BIN=os.path.dirname(sys.executable),
                   **{name: str(port) for name, port in zip(PORTS[1:], sorted(ports))})
        env.pop("BS_PORT", None)
        proc = subprocess.Popen(["sh", SCRIPT], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)  # (its trap stops what it started)
            out, err = proc.communicate(timeout=30)
    finally:
        if held is not None:
            held.close()
    assert proc.returncode == 1, out + err
    assert "FAILED: BS_PORT=11300: something already listens on 127.0.0.1:11300" in err
    assert "== etcd" not in out  # (nothing was started)


def test_the_systemd_unit_runs_a_node_with_what_its_environment_file_holds():
    from pybeanstalkd.cli import parse_args

    unit = open(os.path.join(ROOT, "examples", "pybeanstalkd@.service")).read()
    exec_start = re.search(r"^ExecStart=(.*?[^\\])$", unit, re.M | re.S).group(1)
    words = exec_start.replace("\\\n", " ").split()
    # The keys docs/HA.md's environment file for node1 sets are the ones the unit reads.
    readme = open(os.path.join(ROOT, "docs", "HA.md")).read()
    env_file = re.search(r"^cat >/etc/pybeanstalkd/node1\.env <<EOF\n(.*?)^EOF$", readme,
                         re.M | re.S).group(1)
    values = dict(line.split("=", 1) for line in env_file.splitlines())
    assert set(re.findall(r"\$\{(\w+)\}", exec_start)) == set(values)
    shell = {"NODE1_PORT": "11301", "NODE1_HTTP": "8001", "NODE1_PEER": "7001",
             "ETCD_CLIENT_PORT": "2379"}
    env = {k: re.sub(r"\$(\w+)", lambda m: shell[m.group(1)], v) for k, v in values.items()}
    argv = [re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], w).replace("%i", "node1")
            for w in words]
    assert argv[0] == "/opt/pybeanstalkd/bin/pybeanstalkd"  # (make install-service)
    opts = parse_args(argv[1:], "pybeanstalkd")
    assert (opts.cluster, opts.node, opts.etcd) == ("jobs", "node1", "127.0.0.1:2379")
    assert opts.http == ("127.0.0.1", 8001) and opts.peer_listen == "127.0.0.1:7001"
    assert opts.port == "11301" and opts.wal_dir == "/var/lib/pybeanstalkd/node1"
    assert opts.fsync_each_write

"""Three nodes behind HAProxy (examples/haproxy.cfg, its ports given in
the environment), one etcd, all on loopback: a producer puts through
HAProxy without pause; the leader is killed (-9); no acknowledged put is
lost, and puts go on through the same address within seconds."""
import os
import shutil
import socket
import subprocess
import threading
import time

import pytest

from history import History
from support import Client, free_port
from test_cluster_e2e import ask, etcd, isr, jobs_on, start, wait_for  # noqa: F401 (etcd: a fixture)

pytest.importorskip("aetcd")
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "haproxy.cfg")


def require_haproxy() -> str:
    path = shutil.which("haproxy") or (os.path.exists("/usr/sbin/haproxy") and "/usr/sbin/haproxy")
    if path:
        return path
    if os.environ.get("CI"):
        pytest.fail("haproxy is not installed (apt-get install haproxy)")
    pytest.skip("haproxy is not installed")


def haproxy_env(front: int, nodes) -> dict:
    """The environment examples/haproxy.cfg takes its ports from."""
    env = dict(os.environ, BS_PORT=str(front))
    for i, n in enumerate(nodes, 1):
        env["NODE%d_PORT" % i], env["NODE%d_HTTP" % i] = str(n.port), str(n.http)
    return env


class Front:
    """HAProxy's address, as ask() wants a server."""

    def __init__(self, port):
        self.port = port

    def connect(self, timeout=5.0):
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)


class Proxy:
    """HAProxy in front of the nodes, on one port for its whole life;
    start() again after nodes come back on new ports (it reloads its
    config)."""

    def __init__(self):
        self.port = free_port()
        self.proc = None

    def start(self, nodes):
        self.stop()
        self.proc = subprocess.Popen([require_haproxy(), "-db", "-f", EXAMPLE],
                                     env=haproxy_env(self.port, nodes),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


class Looping(threading.Thread):
    """A client through HAProxy that reconnects after any break and runs
    step() until stopped."""

    timeout = 5.0

    def __init__(self, port, history):
        super().__init__(daemon=True)
        self.port, self.h = port, history
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.port),
                                              timeout=self.timeout) as sock:
                    c = Client(sock)
                    while not self.stop.is_set():
                        self.step(c)
            except (OSError, EOFError):
                time.sleep(0.05)


class Producer(Looping):
    """Unpipelined puts; each recorded as sent, and as acknowledged when
    INSERTED comes."""

    def __init__(self, port, history):
        super().__init__(port, history)
        self.acks = []  # (monotonic time, id)
        self.n = 0

    def step(self, c):
        self.n += 1
        body = b"p%06d" % self.n
        self.h.put_sent(body)
        r = c.cmd(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
        if not r.startswith(b"INSERTED "):
            raise AssertionError(r)
        i = int(r.split()[1])
        self.h.put_acked(i, body)
        self.acks.append((time.monotonic(), i))


def test_kill_9_of_the_leader_behind_haproxy(tmp_path, etcd):  # noqa: F811
    nodes = [start(tmp_path, etcd, "a", "h1")]
    proxy = Proxy()
    front = proxy.port
    try:
        wait_for(lambda: ask(nodes[0], b"list-tube-used\r\n"))
        nodes += [start(tmp_path, etcd, n, "h1") for n in ("b", "c")]
        wait_for(lambda: sorted((isr(etcd, "h1") or (0, []))[1]) == ["a", "b", "c"])
        proxy.start(nodes)
        wait_for(lambda: ask(Front(front), b"list-tube-used\r\n"))
        h = History()
        p = Producer(front, h)
        p.start()
        wait_for(lambda: len(p.acks) > 200)
        nodes[0].proc.kill()
        nodes[0].proc.wait()
        died = time.monotonic()
        wait_for(lambda: any(t > died for t, _ in p.acks), timeout=20)
        first = min(t for t, _ in p.acks if t > died)
        wait_for(lambda: sum(t > first for t, _ in p.acks) > 200)
        p.stop.set()
        p.join(10)
        failover = first - died
        print(f"failover through HAProxy: {failover:.2f} s; {len(h.acked)} puts acknowledged")
        assert failover < 10
        # Everything acknowledged is on the new leader, once each.
        new = next(n for n in nodes[1:] if ask(n, b"list-tube-used\r\n"))
        assert h.check(jobs_on(new, sorted(h.acked))) == []
    finally:
        proxy.stop()
        for n in nodes:
            n.stop()


def restart_node(tmp_path, etcd, n, name, cluster, kill=False):  # noqa: F811
    """The same node again: same -b directory, same name, new ports;
    stopped with SIGTERM, or kill -9."""
    if kill:
        n.proc.kill()
        n.proc.wait()
    n.stop()
    return start(tmp_path, etcd, name, cluster)


def test_follower_restart_and_a_rolling_restart_lose_nothing(tmp_path, etcd):  # noqa: F811
    names = ["a", "b", "c"]
    nodes = [start(tmp_path, etcd, "a", "r1")]
    proxy = Proxy()
    front = proxy.port
    p = None
    try:
        wait_for(lambda: ask(nodes[0], b"list-tube-used\r\n"))
        nodes += [start(tmp_path, etcd, n, "r1") for n in names[1:]]
        wait_for(lambda: sorted((isr(etcd, "r1") or (0, []))[1]) == names)
        proxy.start(nodes)
        wait_for(lambda: ask(Front(front), b"list-tube-used\r\n"))
        h = History()
        p = Producer(front, h)
        p.start()
        wait_for(lambda: len(p.acks) > 100)
        # kill -9 of a follower: the ISR shrinks, writes go on; it comes back
        # and catches up.
        leader = next(i for i, n in enumerate(nodes) if ask(n, b"list-tube-used\r\n"))
        f = (leader + 1) % 3
        nodes[f] = restart_node(tmp_path, etcd, nodes[f], names[f], "r1", kill=True)
        proxy.start(nodes)  # (new ports)
        before = len(p.acks)
        wait_for(lambda: len(p.acks) > before + 100, timeout=20)
        wait_for(lambda: sorted((isr(etcd, "r1") or (0, []))[1]) == names, timeout=20)
        # A rolling restart: each node in turn, waiting for it to rejoin.
        for i in range(3):
            nodes[i] = restart_node(tmp_path, etcd, nodes[i], names[i], "r1")
            proxy.start(nodes)  # (new ports)
            wait_for(lambda: sorted((isr(etcd, "r1") or (0, []))[1]) == names, timeout=30)
            before = len(p.acks)
            wait_for(lambda before=before: len(p.acks) > before + 50, timeout=20)
        p.stop.set()
        p.join(10)
        leader = next(n for n in nodes if ask(n, b"list-tube-used\r\n"))
        jobs = jobs_on(leader, sorted(h.acked))
        print(f"{len(h.acked)} puts acknowledged through a follower's restart and a rolling restart")
        assert len(h.acked) > 250
        assert h.check(jobs) == []
    finally:
        if p is not None:
            p.stop.set()
        proxy.stop()
        for n in nodes:
            n.stop()

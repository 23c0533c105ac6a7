"""The cluster's randomized fault run, outside CI (pytest does not collect
it): three nodes, three etcd members and HAProxy on loopback, a producer and
a consumer through HAProxy, and a fault every few seconds, chosen by a
seeded random generator:

    kill -9 of the leader or a follower, SIGSTOP of either for 2-6 s,
    SIGTERM of a node, kill -9 of an etcd member; a dead node or member is
    started again a few seconds later, as a supervisor would.

At the end the faults stop, the cluster settles, and the history checker
compares what the clients were told with what the leader holds.

    PYTHONPATH=tests .venv/bin/python tests/cluster/chaos_run.py SEED [SECONDS [-f0 | -f50 ...]] [--tls] [--idp]

With --tls every node has --tls-cert, --tls-key and --tls-client-ca (certificates
made for the run): the replication links are TLS with certificates checked both
ways, and the clients speak TLS through HAProxy.

With --idp the nodes run with --extensions and every put carries an idp:
key of its own (with a TTL of an hour); a put whose reply did not come is
sent again, with the same key, until one does, as a client relying on the
key would. At the end each acknowledged key is put once more on the
leader: it must be a duplicate naming the id first acknowledged for it
(its job, or the job's cooldown once deleted), never a new job.
"""
import random
import signal
import socket
import sys
import tempfile
import threading
import time
import pathlib

# (tests/cluster, the script's own directory, is on the path as for any
# script; PYTHONPATH=tests gives `history` and `support`, as pytest's
# `pythonpath` setting does)
from history import History
from support import Client, EtcdCluster
from test_cluster_e2e import ask, jobs_on, start, wait_for
from test_cluster_haproxy import Front, Looping, Producer, Proxy


class Consumer(Looping):
    """reserve-with-timeout 1 and delete; every step recorded in the history."""

    timeout = 10.0

    def __init__(self, port, h):
        super().__init__(port, h)
        self.deleted = 0

    def step(self, c):
        r = c.cmd(b"reserve-with-timeout 1\r\n")
        if not r.startswith(b"RESERVED "):
            return
        head, body = r.split(b"\r\n")[:2]
        i = int(head.split()[1])
        self.h.reserved(i, body)
        self.h.send_delete(i)
        if c.cmd(b"delete %d\r\n" % i) == b"DELETED\r\n":
            self.h.delete_acked(i)
            self.deleted += 1


class KeyedProducer(Producer):
    """Puts with idp:KEY, the key its body; a put left unanswered by a
    break is sent again with the same key on the next connection."""

    def __init__(self, port, h):
        super().__init__(port, h)
        self.pending: bytes | None = None
        self.keys: dict[bytes, int] = {}  # key -> the id first acknowledged for it
        self.repeated = 0  # puts answered as duplicates (a retry that found its job)

    def step(self, c):
        if self.pending is None:
            self.n += 1
            self.pending = b"k%06d" % self.n
            self.h.put_sent(self.pending)
        body = self.pending
        r = c.cmd(b"put 0 0 60 %d idp:%s:3600\r\n%s\r\n" % (len(body), body, body))
        if not r.startswith(b"INSERTED "):
            raise AssertionError(r)
        self.pending = None
        words = r.split()
        i = int(words[1])
        if len(words) > 2:
            self.repeated += 1
        first = self.keys.setdefault(body, i)
        if first != i:
            self.h.problems.append(f"key {body!r}: acknowledged as job {first}, then as {i}")
        if len(words) == 2 or words[2] != b"DELETED":
            self.h.put_acked(i, body)
        self.acks.append((time.monotonic(), i))


def keys_kept(leader, keys: dict[bytes, int]) -> list[str]:
    """Each acknowledged key put again on the leader: a duplicate naming
    its first id, or a problem."""
    out = []
    items = list(keys.items())
    with leader.connect(timeout=30) as sock:
        c = Client(sock)
        for n in range(0, len(items), 500):
            batch = items[n:n + 500]
            c.send(b"".join(b"put 0 0 60 %d idp:%s:3600\r\n%s\r\n" % (len(k), k, k)
                            for k, _ in batch))
            for k, i in batch:
                words = c.reply().split()
                if len(words) < 3 or words[:2] != [b"INSERTED", b"%d" % i]:
                    out.append(f"key {k!r}: acknowledged as job {i}, put again: {words}")
    return out


def use_tls(tmp):
    """Certificates for the run; the clients through HAProxy wrap their
    sockets in TLS. The node flags that go with them, and what makes a
    started node's connect() TLS too."""
    import types

    import test_cluster_haproxy
    from tlstools import client_ctx, make_certs, tls_args

    d = tmp / "certs"
    d.mkdir()
    make_certs(d)
    ctx = client_ctx(d, "client")

    def wrap(sock):
        return ctx.wrap_socket(sock, server_hostname="localhost")
    shim = types.SimpleNamespace(**{k: getattr(socket, k) for k in dir(socket) if not k.startswith("__")})
    shim.create_connection = lambda *a, **k: wrap(socket.create_connection(*a, **k))
    test_cluster_haproxy.socket = shim

    def node(srv):
        plain = srv.connect  # (start() waited for it to listen in clear)
        srv.connect = lambda timeout=5.0: wrap(plain(timeout))
        return srv
    return tls_args(d, mtls=True), node


def main(seed: int, seconds: float, sync: str = "-f0", tls: bool = False, idp: bool = False) -> int:
    rng = random.Random(seed)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-"))
    extra, tls_node = use_tls(tmp) if tls else ([], lambda srv: srv)
    if idp:
        extra = [*extra, "--extensions"]
    etcd = EtcdCluster(str(tmp / "etcd"))
    endpoints = ",".join("%s:%d" % e for e in etcd.endpoints)
    names = ["a", "b", "c"]
    nodes = {"a": tls_node(start(tmp, endpoints, "a", "chaos", sync, extra))}
    wait_for(lambda: ask(nodes["a"], b"list-tube-used\r\n"), timeout=30)
    for n in names[1:]:
        nodes[n] = tls_node(start(tmp, endpoints, n, "chaos", sync, extra))
    proxy = Proxy()
    front = proxy.port

    def reproxy():
        proxy.start([nodes[n] for n in names])
    reproxy()
    wait_for(lambda: ask(Front(front), b"list-tube-used\r\n"), timeout=30)
    h = History()
    prod, cons = (KeyedProducer if idp else Producer)(front, h), Consumer(front, h)
    prod.start()
    cons.start()
    dead_nodes: dict[str, float] = {}
    dead_etcd: dict[int, float] = {}
    faults = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(rng.uniform(2, 5))
        now = time.monotonic()
        for n, at in list(dead_nodes.items()):
            if now >= at:
                nodes[n].stop()
                nodes[n] = tls_node(start(tmp, endpoints, n, "chaos", sync, extra))
                del dead_nodes[n]
                reproxy()
        for i, at in list(dead_etcd.items()):
            if now >= at:
                etcd.start(i)
                del dead_etcd[i]
        for n in names:  # exited by itself (75: deposed): the supervisor restarts it
            if n not in dead_nodes and nodes[n].proc.poll() is not None:
                dead_nodes[n] = now + 1
        leader = next((n for n in names if n not in dead_nodes
                       and ask(nodes[n], b"list-tube-used\r\n", timeout=0.5)), None)
        followers = [n for n in names if n not in dead_nodes and n != leader]
        kind = rng.choice(["kill-leader", "kill-follower", "stop-leader", "stop-follower",
                           "term", "kill-etcd"])
        who = leader if kind.endswith("leader") else (rng.choice(followers) if followers else None)
        if kind == "term":
            who = rng.choice([n for n in names if n not in dead_nodes] or [None])
        if kind == "kill-etcd":
            if not dead_etcd:
                i = rng.randrange(3)
                etcd.kill(i)
                dead_etcd[i] = now + rng.uniform(3, 8)
                faults.append(f"{now - end + seconds:6.1f}s kill -9 etcd member {i}")
            continue
        if who is None:
            continue
        p = nodes[who].proc
        if kind.startswith("kill"):
            p.kill()
            dead_nodes[who] = now + rng.uniform(2, 6)
            faults.append(f"{now - end + seconds:6.1f}s kill -9 {who} ({kind})")
        elif kind == "term":
            p.terminate()
            dead_nodes[who] = now + rng.uniform(1, 3)
            faults.append(f"{now - end + seconds:6.1f}s SIGTERM {who}")
        else:
            pause = rng.uniform(2, 6)
            p.send_signal(signal.SIGSTOP)
            faults.append(f"{now - end + seconds:6.1f}s SIGSTOP {who} for {pause:.1f}s ({kind})")
            threading.Timer(pause, lambda p=p: p.poll() is None and p.send_signal(signal.SIGCONT)).start()
    # Settle: everything back, then check.
    time.sleep(7)
    for i in list(dead_etcd):
        etcd.start(i)
    for n in names:
        if n in dead_nodes or nodes[n].proc.poll() is not None:
            nodes[n].stop()
            nodes[n] = tls_node(start(tmp, endpoints, n, "chaos", sync, extra))
    reproxy()
    leader = wait_for(lambda: next((nodes[n] for n in names
                                    if ask(nodes[n], b"list-tube-used\r\n")), None), timeout=60)
    prod.stop.set()
    cons.stop.set()
    prod.join(15)
    cons.join(15)
    jobs = jobs_on(leader, sorted(set(h.acked) | h.deleted))
    problems = h.check(jobs)
    if idp:
        problems += keys_kept(leader, prod.keys)
    print(f"seed {seed}, {seconds:.0f} s, {sync}{' --tls' if tls else ''}{' --idp' if idp else ''}, "
          f"{len(faults)} faults:")
    for f in faults:
        print("  " + f)
    print(f"puts acknowledged {len(h.acked)}, deletes acknowledged {len(h.deleted)}, "
          f"jobs on the leader at the end {len(jobs)}; problems: {len(problems)}")
    if idp:
        print(f"keys acknowledged {len(prod.keys)}, of which {prod.repeated} by a put sent again "
              f"that found its job; each put again at the end")
    for p in problems[:20]:
        print("  " + p)
    proxy.stop()
    for n in names:
        nodes[n].proc.send_signal(signal.SIGCONT)
        nodes[n].stop()
    etcd.stop()
    return 1 if problems else 0


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a not in ("--tls", "--idp")]
    sys.exit(main(int(args[0]), float(args[1]) if len(args) > 1 else 90,
                  args[2] if len(args) > 2 else "-f0", tls="--tls" in sys.argv,
                  idp="--idp" in sys.argv))

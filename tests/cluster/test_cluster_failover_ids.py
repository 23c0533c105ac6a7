"""Job ids across a failover, on three nodes and an etcd: producers put
while the leader is killed (-9) and go on with whichever node leads next.
The new leader's first id is close to the old one's last (small blocks:
ids stay dense, as 32-bit columns need), and no id names two jobs."""
import asyncio
import threading
import time

import pytest

from history import History
from support import Client, etcd_server
from test_cluster_e2e import ask, isr, jobs_on, start, wait_for

pytest.importorskip("aetcd")
from pybeanstalkd.cluster.coord import Coordinator  # noqa: E402
from pybeanstalkd.cluster.ids import ID_BLOCK  # noqa: E402

PRODUCERS = 2


@pytest.fixture
def etcd(tmp_path):
    with etcd_server(str(tmp_path / "etcd")) as addr:
        yield addr


def ids_counter(etcd, cluster) -> int:
    """etcd's next free job id: the end of every block leaders took."""
    async def get():
        c = Coordinator(cluster, "test", *etcd)
        try:
            return int((await c._get(c.k_ids)).value)
        finally:
            await c.close()
    return asyncio.run(get())


def test_ids_stay_dense_across_a_failover_and_none_is_used_twice(tmp_path, etcd):
    cluster = "d1"
    nodes = {}
    h = History()
    lock = threading.Lock()
    by: dict[str, list[int]] = {}  # node -> the ids it acknowledged, in order
    stop = threading.Event()

    def produce(k):
        i = 0
        while not stop.is_set():
            for name, srv in list(nodes.items()):
                if srv.proc.poll() is not None:
                    continue
                try:
                    with srv.connect(timeout=5) as sock:
                        c = Client(sock)
                        while not stop.is_set():
                            body = b"p%d-%06d" % (k, i)
                            i += 1
                            with lock:
                                h.put_sent(body)
                            r = c.cmd(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
                            if not r.startswith(b"INSERTED "):
                                break
                            with lock:
                                h.put_acked(int(r.split()[1]), body)
                                by.setdefault(name, []).append(int(r.split()[1]))
                except (OSError, EOFError):  # a follower, or the leader killed
                    pass
            time.sleep(0.02)

    try:
        nodes["a"] = start(tmp_path, etcd, "a", cluster)
        wait_for(lambda: ask(nodes["a"], b"list-tube-used\r\n"))
        for name in "bc":
            nodes[name] = start(tmp_path, etcd, name, cluster)
        wait_for(lambda: sorted((isr(etcd, cluster) or (0, []))[1]) == ["a", "b", "c"],
                 timeout=30)
        threads = [threading.Thread(target=produce, args=(k,), daemon=True)
                   for k in range(PRODUCERS)]
        for t in threads:
            t.start()
        wait_for(lambda: len(by.get("a", ())) >= 300, timeout=30)
        nodes["a"].proc.kill()
        nodes["a"].proc.wait()
        wait_for(lambda: len([n for n in by if n != "a"]) == 1
                 and len(by[next(n for n in by if n != "a")]) >= 100, timeout=30)
        stop.set()
        for t in threads:
            t.join(15)
        new = next(n for n in by if n != "a")
        before, after = by["a"], by[new]
        last, first = max(before), min(after)
        print(f"{len(before)} ids on a up to {last}; {new} leads from {first} "
              f"(+{first - last}); {len(after)} puts there")
        assert 0 < first - last <= 1 << 20
        # Dense on each leader: a gap only where a put's reply never came.
        for got in (before, after):
            got = sorted(got)
            assert got[-1] - got[0] + 1 - len(got) <= PRODUCERS, got
        assert sorted(before)[0] == 1
        acked = before + after
        assert len(acked) == len(set(acked)) == len(h.acked)
        # Every acknowledged put is on the new leader, each id its own job.
        assert h.check(jobs_on(nodes[new], sorted(h.acked))) == []
        # The new leader took one small block, past all a owned.
        assert first <= ids_counter(etcd, cluster) - 1 <= first + ID_BLOCK
    finally:
        stop.set()
        for srv in nodes.values():
            srv.stop()

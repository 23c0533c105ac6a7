"""The cluster on three etcd members: losing one changes nothing; losing two
stops writes, and nothing acknowledged is lost; once etcd is back, so is
the cluster."""
import asyncio

import pytest

from history import History
from support import Client, EtcdCluster
from test_cluster_e2e import ask, exit_status, jobs_on, start, wait_for

pytest.importorskip("aetcd")
from pybeanstalkd.cluster.coord import Coordinator  # noqa: E402


def isr(etcd3, cluster):
    async def get():
        c = Coordinator(cluster, "test", endpoints=etcd3.endpoints)
        try:
            return (await c.isr() or (0, []))[1]
        finally:
            await c.close()
    return asyncio.run(get())


@pytest.fixture
def etcd3(tmp_path):
    c = EtcdCluster(str(tmp_path / "etcd"))
    yield c
    c.stop()


def put(c, h, i):
    body = b"e%04d" % i
    h.put_sent(body)
    r = c.cmd(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
    assert r.startswith(b"INSERTED "), r
    h.put_acked(int(r.split()[1]), body)


def test_one_etcd_member_down_changes_nothing_two_stop_writes(tmp_path, etcd3):
    endpoints = ",".join("%s:%d" % e for e in etcd3.endpoints)
    a = start(tmp_path, endpoints, "a", "x1")
    b = None
    try:
        wait_for(lambda: ask(a, b"list-tube-used\r\n"), timeout=30)
        b = start(tmp_path, endpoints, "b", "x1")
        wait_for(lambda: isr(etcd3, "x1") == ["a", "b"], timeout=30)
        h = History()
        wait_for(lambda: ask(a, b"put 0 0 60 1\r\nw\r\n"))
        with a.connect(timeout=10) as sock:
            c = Client(sock)
            for i in range(20):
                put(c, h, i)
            etcd3.kill(0)  # the first endpoint every node talks to
            for i in range(20, 60):
                put(c, h, i)  # a keeps its lease through another member
        assert a.proc.poll() is None and ask(a, b"list-tube-used\r\n")
        etcd3.kill(1)  # no quorum: no lease can be refreshed, nothing more is acked
        assert exit_status(a, 20) == 75  # the leader steps down at its lease's end
        assert ask(b, b"list-tube-used\r\n") is None  # and no one else leads
        etcd3.start(0)
        etcd3.start(1)
        etcd3.wait_healthy(0)
        etcd3.wait_healthy(1)
        wait_for(lambda: ask(b, b"list-tube-used\r\n"), timeout=30)  # b leads now
        assert h.check(jobs_on(b, sorted(h.acked))) == []
        with b.connect() as sock:
            put(Client(sock), h, 999)
    finally:
        for s in (a, b):
            if s is not None:
                s.stop()

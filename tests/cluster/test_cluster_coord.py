"""What etcd decides (cluster/coord.py), against a real etcd on loopback:
one leader at a time, epochs that only grow, only ISR members may lead, a
deposed leader can write nothing, and job id blocks never overlap."""
import asyncio
import time

import pytest

from support import etcd_server

pytest.importorskip("aetcd")  # the `cluster` extra, which `make install` installs
from pybeanstalkd.cluster.coord import Coordinator  # noqa: E402


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    with etcd_server(str(tmp_path_factory.mktemp("etcd"))) as addr:
        yield addr


_n = 0


def run(etcd, body):
    """body(make) in a fresh cluster name; make(node, ttl=3) -> Coordinator."""
    global _n
    _n += 1
    made = []

    def make(node, ttl=3):
        c = Coordinator(f"t{_n}", node, *etcd, ttl=ttl)
        made.append(c)
        return c

    async def main():
        try:
            return await body(make)
        finally:
            for c in made:
                await c.close()
    return asyncio.run(main())


def test_the_first_to_campaign_leads_and_founds_the_isr(etcd):
    async def body(make):
        a, b = make("a"), make("b")
        assert await a.leader() is None and await a.isr() is None
        epoch = await a.campaign({"peer": "127.0.0.1:1"})
        assert epoch > 0 and a.epoch == epoch
        assert await b.campaign({}) == 0  # held
        assert await b.leader() == ("a", epoch, {"node": "a", "peer": "127.0.0.1:1"})
        assert await b.isr() == (epoch, ["a"])
        assert await a.keepalive() is True
    run(etcd, body)


def test_only_an_isr_member_may_take_the_lead(etcd):
    async def body(make):
        a, b, c = make("a"), make("b"), make("c")
        e1 = await a.campaign({})
        assert await a.set_isr(["a", "b"])
        await a.resign()
        assert await a.leader() is None
        assert await c.campaign({}) == 0  # not in the ISR
        e2 = await b.campaign({})
        assert e2 > e1  # epochs only grow
        assert await c.isr() == (e1, ["a", "b"])  # b leads; the ISR is as a left it
        assert await b.set_isr(["b"])
        assert await c.isr() == (e2, ["b"])
    run(etcd, body)


def test_a_deposed_leader_can_write_nothing(etcd):
    async def body(make):
        a, b = make("a", ttl=1), make("b")
        e1 = await a.campaign({})
        assert await a.set_isr(["a", "b"])
        # a stops refreshing (paused, cut off): its lease runs out.
        end = time.monotonic() + 10
        while await b.leader() is not None:
            assert time.monotonic() < end, "the lease never expired"
            await asyncio.sleep(0.2)
        e2 = await b.campaign({})
        assert e2 > e1
        # a still believes it leads under e1: every write it tries fails.
        assert a.epoch == e1
        assert await a.set_isr(["a"]) is False
        assert await b.isr() == (e1, ["a", "b"])
        assert await a.take_ids(100) is None and a.epoch == 0
        assert await a.keepalive() is False
        assert await b.leader() == ("b", e2, {"node": "b"})
    run(etcd, body)


def test_job_id_blocks_never_overlap_across_leaders(etcd):
    async def body(make):
        a, b = make("a"), make("b")
        await a.campaign({})
        await a.set_isr(["a", "b"])
        blocks = list(await asyncio.gather(*(a.take_ids(1000) for _ in range(5))))
        await a.resign()
        await b.campaign({})
        blocks.append(await b.take_ids(1000))
        ids = [i for r in blocks for i in r]
        assert len(ids) == len(set(ids)) == 6000
        assert blocks[-1] == range(5001, 6001)  # after every block the old leader took
        assert await make("c").take_ids(10) is None  # not a leader
    run(etcd, body)


def test_one_leaders_blocks_follow_one_another_from_at_least(etcd):
    async def body(make):
        a, b = make("a"), make("b")
        await a.campaign({})
        await a.set_isr(["a", "b"])
        assert await a.take_ids(10) == range(1, 11)
        assert await a.take_ids(10) == range(11, 21)  # (ids.py extends its range)
        assert await a.take_ids(10, at_least=500) == range(500, 510)  # a binlog ahead
        assert await a.take_ids(10, at_least=3) == range(510, 520)  # never back
        await a.resign()
        await b.campaign({})
        assert await b.take_ids(10, at_least=400) == range(520, 530)
    run(etcd, body)


def test_nodes_register_themselves(etcd):
    async def body(make):
        a, b = make("a"), make("b")
        await a.register({"peer": "127.0.0.1:7001", "http": "127.0.0.1:8001"})
        await b.register({"peer": "127.0.0.1:7002", "http": "127.0.0.1:8002"})
        assert await a.nodes() == {"a": {"peer": "127.0.0.1:7001", "http": "127.0.0.1:8001"},
                                   "b": {"peer": "127.0.0.1:7002", "http": "127.0.0.1:8002"}}
    run(etcd, body)


def test_the_peer_secret_is_made_once_and_shared(etcd):
    async def body(make):
        a, b = make("a"), make("b")
        first = await asyncio.gather(a.secret(), b.secret())  # both may try to make it
        assert first[0] == first[1] and len(first[0]) == 64
        assert await make("c").secret() == first[0]
        return first[0]
    one = run(etcd, body)
    assert run(etcd, body) != one  # another cluster, another secret


def test_calls_in_flight_on_a_dead_endpoint_all_go_on_to_the_next(etcd):
    # The first endpoint accepts no connection and answers nothing (a
    # member cut off): each call waits for its deadline there. The first
    # to give up moves to the next endpoint and closes its channel, which
    # cancels the calls still waiting on it. They must go on there too:
    # a keepalive that ended with that cancellation ended the leader's
    # duties, and the leader then neither refreshed its lease nor stepped
    # down (it held every reply, and never exited).
    import socket
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)
    try:
        async def body(make):
            a = make("a")
            await a.register({"peer": "127.0.0.1:7001"})
            await a.campaign({})
            c = Coordinator(a.k_leader.decode().split("/")[2], "c", ttl=3, timeout=0.5,
                            endpoints=[hole.getsockname(), etcd, etcd])

            async def later(aw, delay):
                await asyncio.sleep(delay)
                return await aw
            try:
                got = await asyncio.gather(c.nodes(), later(c.leader(), 0.2),
                                           later(c.isr(), 0.3))
            finally:
                await c.close()
            assert got[0] == {"a": {"peer": "127.0.0.1:7001"}}
            assert got[1][0] == "a" and got[2][1] == ["a"]
            assert c.at == 1  # moved once, not once a call
        run(etcd, body)
    finally:
        hole.close()

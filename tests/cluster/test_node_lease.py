"""A leader whose lease cannot be refreshed steps down when the lease ends,
even if the etcd client's call does not end when it is cancelled."""
import asyncio
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("aetcd")
from pybeanstalkd.cluster.node import EXIT_DEPOSED, Node  # noqa: E402


class StuckCoord:
    ttl = 1

    def __init__(self):
        self.calls = 0

    async def keepalive(self):
        self.calls += 1
        try:
            await asyncio.sleep(3600)  # etcd without quorum: no answer
        except asyncio.CancelledError:
            await asyncio.sleep(5)  # ... and slow to give up when cancelled
            raise


class CancellingCoord:
    """A refresh that the etcd client ends by cancelling it (grpc.aio does
    so to the calls on a channel it closes)."""
    ttl = 1

    async def keepalive(self):
        raise asyncio.CancelledError


@pytest.mark.parametrize("coord", [StuckCoord, CancellingCoord])
def test_a_leader_steps_down_at_its_lease_end_while_etcd_calls_hang(coord):
    async def main():
        n = Node.__new__(Node)  # (only what _keepalive and _deposed use)
        n.coord = coord()
        n.lease_until = time.monotonic_ns() + 1_000_000_000
        n.log = lambda m: None
        n.cluster, n.name, n.role = SimpleNamespace(name="c"), "a", "leader"
        n.stop = asyncio.get_running_loop().create_future()
        t0 = time.monotonic()
        task = asyncio.create_task(n._keepalive())
        code = await asyncio.wait_for(asyncio.shield(n.stop), 4)
        took = time.monotonic() - t0
        task.cancel()
        return code, took, n.role

    code, took, role = asyncio.run(main())
    assert (code, role) == (EXIT_DEPOSED, "follower")
    assert 1.0 <= took < 2.5, took  # the lease's end, plus a refresh's timeout at most


@pytest.mark.parametrize("end", ["cancelled", "failed", "stepped down"])
def test_the_server_stops_whenever_the_node_s_work_ends(end, capsys):
    # A cancellation from inside the etcd client once ended the node's work
    # silently: the server went on, with no one keeping the lease.
    from pybeanstalkd.server.loop import node_ended

    async def main():
        stop = asyncio.get_running_loop().create_future()

        async def work():
            if end == "cancelled":
                raise asyncio.CancelledError
            if end == "failed":
                raise RuntimeError("lost")
            stop.set_result(EXIT_DEPOSED)
        task = asyncio.create_task(work())
        task.add_done_callback(lambda t: node_ended(t, stop))
        await asyncio.wait({task})
        await asyncio.sleep(0)  # (the callback)
        return stop.result()
    assert asyncio.run(main()) == (EXIT_DEPOSED if end == "stepped down" else 1)
    said = capsys.readouterr().err
    if end == "stepped down":
        assert said == ""
    else:
        assert "the node's work ended: " + ("cancelled" if end == "cancelled" else "RuntimeError") in said


def test_a_leader_s_duty_cancelled_from_inside_ends_them_all():
    # asyncio.TaskGroup takes a child that ends cancelled for one it was
    # asked to cancel: alone, it would let the other duties go on without
    # the lease's keeper.
    from pybeanstalkd.cluster.node import _failing_if_cancelled

    async def main():
        async def cancelled_from_inside():
            await asyncio.sleep(0.01)
            raise asyncio.CancelledError

        async def forever():
            await asyncio.sleep(3600)
        with pytest.raises(ExceptionGroup) as got:
            async with asyncio.timeout(10):  # (else: the group waits for forever())
                async with asyncio.TaskGroup() as g:
                    g.create_task(_failing_if_cancelled(cancelled_from_inside()))
                    g.create_task(_failing_if_cancelled(forever()))
        assert [type(e) for e in got.value.exceptions] == [RuntimeError]

        outer = asyncio.create_task(_failing_if_cancelled(forever()))
        await asyncio.sleep(0.01)
        outer.cancel()  # asked for: stays a cancellation
        await asyncio.wait({outer})
        assert outer.cancelled()
    asyncio.run(main())


def test_a_link_that_fails_any_way_is_said_and_tried_again():
    # Only OSError was caught: a registered address that does not parse (or
    # any other error) ended the task unretrieved, said nowhere.
    failed = []

    class Rep:
        async def connect(self, name, host, port):
            raise AssertionError("not reached: the address does not parse")

        def failed(self, name, e):
            failed.append((name, type(e)))

    async def main():
        n = Node.__new__(Node)  # (only what _connect uses)
        n.rep, n.forgotten = Rep(), {}
        n.connecting = {}
        n.connecting["b"] = asyncio.get_running_loop().create_task(n._connect("b", "host:port"))
        await n.connecting["b"]
        return n.connecting
    assert asyncio.run(main()) == {}
    assert failed == [("b", ValueError)]


@pytest.mark.parametrize("fails", ["isr", "ids"])
def test_etcd_unreachable_as_a_node_takes_the_lead_steps_it_down(fails):
    # Its campaign won, a node reads the ISR and takes its first block of
    # ids before it serves; etcd failing there ended its work with an
    # error (exit 1), where etcd failing a moment later steps it down (75).
    from aetcd.exceptions import ClientError

    class Coord:
        ttl = 3

        async def isr(self):
            if fails == "isr":
                raise ClientError("deadline exceeded")
            return 7, ["a", "b"]

    class Ids:
        async def refill(self):
            raise ClientError("deadline exceeded")

    closed = []

    async def main():
        n = Node.__new__(Node)  # (only what lead() uses up to its duties)
        n.coord, n.ids = Coord(), Ids()
        n.peer_srv = SimpleNamespace(close=lambda: closed.append("peer"))
        n.follower = SimpleNamespace(conns=set(), settle=lambda: None)
        n.log = lambda m: None
        n.cluster, n.name, n.role = SimpleNamespace(name="c"), "a", "follower"
        n.stop = asyncio.get_running_loop().create_future()
        await asyncio.wait_for(n.lead(7, time.monotonic_ns()), 5)
        return n.stop.result(), n.role, getattr(n, "rep", None)

    code, role, rep = asyncio.run(main())
    assert (code, role, rep, closed) == (EXIT_DEPOSED, "follower", None, ["peer"])

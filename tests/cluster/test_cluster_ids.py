"""The job ids a leader may hand out (cluster/ids.py), with a fake etcd
counter: its blocks extend the range it owns (ids stay dense), the queue
refuses a put past the end of that range until the next block, and a node
that has taken none (a follower) hands out no id."""
import asyncio

import pytest

from fakeclock import Harness
from pybeanstalkd.cluster import ids as ids_mod
from pybeanstalkd.cluster.ids import IdBlocks
from pybeanstalkd.core import admin
from pybeanstalkd.core.outcome import Outcome


class Counter:
    """etcd's ids key, as Coordinator.take_ids moves it."""

    def __init__(self, first=1):
        self.next = first
        self.leading = True

    async def take(self, n, at_least=1):
        if not self.leading:
            return None
        first = max(self.next, at_least)
        self.next = first + n
        return range(first, first + n)


def leader(block=4, first=1, **engine):
    """(harness, ids, counter, log) with blocks of `block` ids."""
    h = Harness(**engine)
    logged = []
    h.e.log = logged.append
    counter = Counter(first)
    ids = IdBlocks(h.e, counter.take, logged.append)
    return h, ids, counter, logged


def put(h, c):
    return h.send(c, b"put 0 0 60 1\r\nx\r\n")


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(ids_mod, "ID_BLOCK", 4)


def test_blocks_extend_the_range_and_a_put_past_it_waits_for_the_next(small):
    h, ids, counter, logged = leader()
    c = h.conn()
    assert put(h, c) == b"INTERNAL_ERROR\r\n"  # no block yet: no id at all
    assert asyncio.run(ids.refill())
    assert h.e.q.ids.last == 4 and ids.left() == 4
    assert logged[-1] == "job ids: puts accepted again (the last is now 4)"
    got = [put(h, c) for _ in range(5)]
    assert got == [b"INSERTED %d\r\n" % i for i in (1, 2, 3, 4)] + [b"INTERNAL_ERROR\r\n"]
    assert admin.put(h.e, b"t", b"z", 0, 0, 0, h.now) == (Outcome.IDS_USED_UP, 0)
    assert ids.low() and h.e.q.ids.next == 5  # the refused puts used no id
    assert asyncio.run(ids.refill())
    # The next block follows the last: the range grows, no id is skipped.
    assert (ids.ids_from, h.e.q.ids.last) == (1, 8)
    assert [put(h, c) for _ in range(2)] == [b"INSERTED 5\r\n", b"INSERTED 6\r\n"]
    assert not ids.low()  # half a block left
    assert put(h, c) == b"INSERTED 7\r\n"
    assert ids.low()  # less: time for the next
    assert asyncio.run(ids.refill())
    assert (ids.ids_from, h.e.q.ids.last, ids.left()) == (1, 12, 5)
    assert not ids.low()
    assert [put(h, c) for _ in range(6)] == [b"INSERTED %d\r\n" % i for i in range(8, 13)] + [
        b"INTERNAL_ERROR\r\n"]
    # Said when refusals begin (once however many) and when they end.
    said = [m for m in logged if "job ids" in m]
    assert said == ["put refused: job ids are used up (the last is 0)",
                    "job ids: puts accepted again (the last is now 4)",
                    "put refused: job ids are used up (the last is 4)",
                    "job ids: puts accepted again (the last is now 8)",
                    "put refused: job ids are used up (the last is 12)"]


def test_a_block_that_does_not_follow_moves_the_next_id_to_its_start(small):
    h, ids, counter, _ = leader()
    c = h.conn()
    asyncio.run(ids.refill())
    assert put(h, c) == b"INSERTED 1\r\n"
    counter.next += 100  # ids lost between two takes (a retried transaction)
    asyncio.run(ids.refill())
    assert (ids.ids_from, h.e.q.ids.last) == (105, 108)
    assert put(h, c) == b"INSERTED 105\r\n"  # 2 to 4 are abandoned, never used


def test_a_new_leader_starts_past_its_queue_and_what_etcd_gave_before(small):
    # What it followed reaches id 40; etcd gave earlier leaders up to 60.
    h, ids, counter, _ = leader(first=61)
    h.e.q.ids.next = 41
    asyncio.run(ids.refill())
    assert put(h, h.conn()) == b"INSERTED 61\r\n"
    # A binlog ahead of etcd (ids etcd never gave): past it.
    h, ids, counter, _ = leader(first=10)
    h.e.q.ids.next = 500
    asyncio.run(ids.refill())
    assert (ids.ids_from, h.e.q.ids.last) == (500, 503)
    assert put(h, h.conn()) == b"INSERTED 500\r\n"


def test_a_deposed_leader_takes_nothing():
    h, ids, counter, _ = leader()
    counter.leading = False
    assert asyncio.run(ids.refill()) is False
    assert h.e.q.ids.used_up() and put(h, h.conn()) == b"INTERNAL_ERROR\r\n"


def test_the_real_block_is_small_and_refilled_with_half_of_it_left():
    h, ids, counter, _ = leader()
    asyncio.run(ids.refill())
    assert h.e.q.ids.last == ids_mod.ID_BLOCK <= 1 << 18
    h.e.q.ids.next = ids_mod.ID_BLOCK // 2 + 1
    assert not ids.low()
    h.e.q.ids.next += 1
    assert ids.low()


def test_ids_never_pass_what_a_binlog_record_holds(small):
    """etcd's counter (or a binlog) near 2**64: the range owned stops at
    2**64 - 1, as a single server's ids do."""
    top = (1 << 64) - 1
    h, ids, counter, _ = leader(first=top - 1)
    asyncio.run(ids.refill())
    assert h.e.q.ids.last == top
    c = h.conn()
    assert put(h, c) == b"INSERTED %d\r\n" % (top - 1)
    assert put(h, c) == b"INSERTED %d\r\n" % top
    assert put(h, c) == b"INTERNAL_ERROR\r\n"


def test_with_extensions_ids_stop_below_those_of_the_tags_records(small):
    """With --extensions the ids from 2**63 on name the tags' records: a
    block past that is cut there, and a flush-tube (whose record holds the
    next id) still answers."""
    from pybeanstalkd.core.tags import EXT_ID

    h, ids, counter, _ = leader(first=EXT_ID - 2, extensions=True)
    asyncio.run(ids.refill())
    assert h.e.q.ids.last == EXT_ID - 1
    c = h.conn()
    assert put(h, c) == b"INSERTED %d\r\n" % (EXT_ID - 2)
    assert put(h, c) == b"INSERTED %d\r\n" % (EXT_ID - 1)
    assert put(h, c) == b"INTERNAL_ERROR\r\n"
    asyncio.run(ids.refill())  # (etcd's counter goes on past 2**63)
    assert h.e.q.ids.last == EXT_ID - 1 and put(h, c) == b"INTERNAL_ERROR\r\n"
    assert h.send(c, b"flush-tube default\r\n") == b"FLUSHED 2\r\n"


def test_metrics_of_a_node_still_becoming_leader():
    """Between winning the election and its replicator (etcd round trips:
    the ISR, the first ids), a node's role is leader but its report is a
    follower's: /metrics renders it as such instead of failing."""
    from pybeanstalkd.ops.metrics import cluster

    st = {"node": "n1", "role": "leader", "is_leader": True, "leader": "n1", "epoch": 3,
          "isr": ["n1"], "cluster": "c", "applied_seq": 0, "nodes": []}
    names = [f.name for f in cluster(st)]
    assert "pybeanstalkd_cluster_applied_batch" in names and "pybeanstalkd_cluster_is_leader" in names

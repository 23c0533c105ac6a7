"""What etcd decides for a cluster (issue 13): who leads, under which epoch,
which nodes are in sync, and which job ids are whose.

Keys, under /pybeanstalkd/<cluster>/:
- leader   the leader's name and addresses (JSON), held under a lease of
           `ttl` seconds. Its create_revision is the **epoch**: a fencing
           number etcd hands out, never we, and never twice.
- isr      the in-sync replicas (JSON: epoch, members). Written only in a
           transaction that checks the writer still holds its epoch.
- ids      the next free job id. A leader takes ids in blocks, each in a
           transaction conditioned on its epoch, so that no id is handed out
           twice across failovers.
- nodes/N  each node's addresses, registered at start (static membership).

Only an ISR member may take the lead: the campaign's transaction checks
that the isr it read (and found itself in) is still the one in etcd. A
fresh cluster has no isr; the first to campaign founds it with itself.

The etcd client is aetcd (asyncio, gRPC), the `cluster` extra; this module
is imported only with --cluster.
"""
from __future__ import annotations

import json

import aetcd


class Coordinator:
    def __init__(self, cluster: str, node: str, host: str = "127.0.0.1", port: int = 2379,
                 ttl: int = 3, timeout: float = 2.0):
        self.node = node
        self.ttl = ttl
        p = f"/pybeanstalkd/{cluster}/"
        self.k_leader, self.k_isr, self.k_ids = (p + "leader").encode(), (p + "isr").encode(), \
            (p + "ids").encode()
        self.k_nodes = (p + "nodes/").encode()
        self.client = aetcd.Client(host, port, timeout=timeout)
        self.lease = None
        self.epoch = 0  # ours while we lead

    async def close(self):
        await self.client.close()

    # -- membership -------------------------------------------------------

    async def register(self, info: dict):
        await self.client.put(self.k_nodes + self.node.encode(), json.dumps(info).encode())

    async def nodes(self) -> dict[str, dict]:
        got = await self.client.get_prefix(self.k_nodes)
        return {kv.key[len(self.k_nodes):].decode(): json.loads(kv.value) for kv in got}

    # -- leadership -------------------------------------------------------

    async def leader(self) -> tuple[str, int, dict] | None:
        """(name, epoch, info) of the current leader, or None."""
        kv = await self.client.get(self.k_leader)
        if kv is None:
            return None
        info = json.loads(kv.value)
        return info["node"], kv.create_revision, info

    async def isr(self) -> tuple[int, list[str]] | None:
        """(epoch that wrote it, members), or None before the first leader."""
        kv = await self.client.get(self.k_isr)
        if kv is None:
            return None
        d = json.loads(kv.value)
        return d["epoch"], d["members"]

    async def campaign(self, info: dict) -> int:
        """Take the lead if nobody holds it and we are in the ISR (or there
        is none yet). The epoch if we lead now, else 0."""
        t = self.client.transactions
        kv = await self.client.get(self.k_isr)
        if kv is not None and self.node not in json.loads(kv.value)["members"]:
            return 0
        lease = await self.client.lease(self.ttl)
        value = json.dumps(dict(info, node=self.node)).encode()
        same_isr = (t.version(self.k_isr) == 0) if kv is None else (t.mod(self.k_isr) == kv.mod_revision)
        ok, _ = await self.client.transaction(
            compare=[t.create(self.k_leader) == 0, same_isr],
            success=[t.put(self.k_leader, value, lease=lease)], failure=[])
        if not ok:
            await lease.revoke()
            return 0
        got = await self.client.get(self.k_leader)
        if got is None or got.lease != lease.id:  # (expired already)
            return 0
        self.lease, self.epoch = lease, got.create_revision
        if kv is None:
            await self.set_isr([self.node])
        return self.epoch

    async def keepalive(self) -> bool:
        """Refresh our lease; False once it is gone (we no longer lead)."""
        if self.lease is None:
            return False
        reply = await self.lease.refresh()
        if reply is None or reply.TTL <= 0:
            self.lease, self.epoch = None, 0
            return False
        return True

    async def resign(self):
        if self.lease is not None:
            lease, self.lease, self.epoch = self.lease, None, 0
            await lease.revoke()

    # -- what only the leader of an epoch may write -------------------------

    def _ours(self):
        return self.client.transactions.create(self.k_leader) == self.epoch

    async def set_isr(self, members: list[str]) -> bool:
        """Write the ISR, if we still lead under our epoch."""
        if not self.epoch:
            return False
        t = self.client.transactions
        value = json.dumps({"epoch": self.epoch, "members": members}).encode()
        ok, _ = await self.client.transaction(compare=[self._ours()],
                                              success=[t.put(self.k_isr, value)], failure=[])
        return ok

    async def take_ids(self, n: int) -> range | None:
        """A block of n job ids no other leader has or will have, or None
        if we no longer lead."""
        t = self.client.transactions
        while self.epoch:
            kv = await self.client.get(self.k_ids)
            first = int(kv.value) if kv is not None else 1
            same = (t.version(self.k_ids) == 0) if kv is None else \
                (t.mod(self.k_ids) == kv.mod_revision)
            ok, _ = await self.client.transaction(
                compare=[self._ours(), same],
                success=[t.put(self.k_ids, str(first + n).encode())], failure=[])
            if ok:
                return range(first, first + n)
            if (await self.leader() or (None, 0))[1] != self.epoch:
                self.lease, self.epoch = None, 0
        return None

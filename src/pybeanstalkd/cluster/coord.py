"""What etcd decides for a cluster: who leads, under which epoch,
which nodes are in sync, and which job ids are whose.

Keys, under /pybeanstalkd/<cluster>/:
- leader   the leader's name and addresses (JSON), held under a lease of
           `ttl` seconds. Its create_revision is the **epoch**: a fencing
           number etcd hands out, never we, and never twice.
- isr      the in-sync replicas (JSON: epoch, members). Written only in a
           transaction that checks the writer still holds its epoch.
- ids      the next free job id. A leader takes ids in small blocks
           (cluster/ids.py), each in a transaction conditioned on its
           epoch, so that no id is handed out twice across failovers.
- nodes/N  each node's addresses, registered at start (static membership);
           the leader deletes one an operator says is gone for good.

Only an ISR member may take the lead: the campaign's transaction checks
that the isr it read (and found itself in) is still the one in etcd. A
fresh cluster has no isr; the first to campaign founds it with itself.

The etcd client is aetcd (asyncio, gRPC), the `cluster` extra; this module
is imported only with --cluster.
"""
from __future__ import annotations

import asyncio
import json
import os

import aetcd
from aetcd.exceptions import ClientError

# An etcd member down, cut off or without quorum ("context deadline
# exceeded" comes as a plain ClientError): try the next endpoint.
UNREACHABLE = (ClientError,)


def asked_to_cancel() -> bool:
    """Was the running task asked to cancel (by its caller: a timeout, a
    TaskGroup)? Else a CancelledError it got came from inside a call: grpc
    cancels the calls on a channel that is closed."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class Coordinator:
    def __init__(self, cluster: str, node: str, host: str = "127.0.0.1", port: int = 2379,
                 ttl: int = 3, timeout: float = 2.0, endpoints=None):
        self.node = node
        self.ttl = ttl
        self.timeout = timeout
        self.endpoints = list(endpoints or [(host, port)])
        self.at = 0  # the endpoint in use
        p = f"/pybeanstalkd/{cluster}/"
        self.k_leader, self.k_isr, self.k_ids = (p + "leader").encode(), (p + "isr").encode(), \
            (p + "ids").encode()
        self.k_nodes = (p + "nodes/").encode()
        self.k_secret = (p + "secret").encode()
        self.client = aetcd.Client(*self.endpoints[0], timeout=timeout)
        self.t = self.client.transactions
        self.lease = None
        self.epoch = 0  # ours while we lead

    async def close(self):
        await self.client.close()

    async def _do(self, op):
        """op(client), on the next endpoint while one is unreachable. (A
        retried transaction that had gone through fails its compare: each
        caller treats that as having lost, which is safe.)

        Calls run side by side on one client (the lease's refresh, the
        nodes' poll, the ISR's writes). The first to find its endpoint
        unreachable moves all of them to the next one: it closes the old
        client, which cancels the calls still waiting there, and those go
        on on the new one. A call cancelled by its own caller (a timeout
        of theirs) stays cancelled."""
        tries = len(self.endpoints)
        while True:
            client = self.client
            try:
                return await op(client)
            except UNREACHABLE:
                tries -= 1
                if tries == 0:
                    raise
                if client is self.client:  # (else another call moved on already)
                    await self._next(client)
            except asyncio.CancelledError:
                if client is self.client or asked_to_cancel():
                    raise

    async def _next(self, old):
        self.at = (self.at + 1) % len(self.endpoints)
        self.client = aetcd.Client(*self.endpoints[self.at], timeout=self.timeout)
        self.t = self.client.transactions
        try:
            await old.close()
        except Exception:  # noqa: BLE001 (it is already broken)
            pass

    async def _get(self, key: bytes):
        return await self._do(lambda c: c.get(key))

    async def _txn(self, compare, success):
        return await self._do(lambda c: c.transaction(compare=compare, success=success,
                                                      failure=[]))

    # -- membership -------------------------------------------------------

    async def register(self, info: dict):
        key, value = self.k_nodes + self.node.encode(), json.dumps(info).encode()
        await self._do(lambda c: c.put(key, value))

    async def secret(self) -> bytes:
        """The cluster's peer secret (links prove it, frame.py): made by the
        first node that asks; whoever can read etcd is trusted anyway."""
        kv = await self._get(self.k_secret)
        if kv is None:
            t = self.t
            value = os.urandom(32).hex().encode()
            await self._txn([t.create(self.k_secret) == 0], [t.put(self.k_secret, value)])
            kv = await self._get(self.k_secret)
        return kv.value

    async def nodes(self) -> dict[str, dict]:
        got = await self._do(lambda c: c.get_prefix(self.k_nodes))
        return {kv.key[len(self.k_nodes):].decode(): json.loads(kv.value) for kv in got}

    # -- leadership -------------------------------------------------------

    async def leader(self) -> tuple[str, int, dict] | None:
        """(name, epoch, info) of the current leader, or None."""
        kv = await self._get(self.k_leader)
        if kv is None:
            return None
        info = json.loads(kv.value)
        return info["node"], kv.create_revision, info

    async def isr(self) -> tuple[int, list[str]] | None:
        """(epoch that wrote it, members), or None before the first leader."""
        kv = await self._get(self.k_isr)
        if kv is None:
            return None
        d = json.loads(kv.value)
        return d["epoch"], d["members"]

    async def campaign(self, info: dict) -> int:
        """Take the lead if nobody holds it and we are in the ISR (or there
        is none yet). The epoch if we lead now, else 0."""
        t = self.t
        kv = await self._get(self.k_isr)
        if kv is not None and self.node not in json.loads(kv.value)["members"]:
            return 0
        lease = await self._do(lambda c: c.lease(self.ttl))
        value = json.dumps(dict(info, node=self.node)).encode()
        same_isr = (t.version(self.k_isr) == 0) if kv is None else (t.mod(self.k_isr) == kv.mod_revision)
        ok, _ = await self._txn([t.create(self.k_leader) == 0, same_isr],
                                [t.put(self.k_leader, value, lease=lease.id)])
        if not ok:
            await self._do(lambda c: c.revoke_lease(lease.id))
            return 0
        got = await self._get(self.k_leader)
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
        lease_id = self.lease.id
        reply = await self._do(lambda c: c.refresh_lease(lease_id))
        if reply is None or reply.TTL <= 0:
            self.lease, self.epoch = None, 0
            return False
        return True

    async def resign(self):
        if self.lease is not None:
            lease, self.lease, self.epoch = self.lease, None, 0
            await self._do(lambda c: c.revoke_lease(lease.id))

    # -- what only the leader of an epoch may write -------------------------

    def _ours(self):
        return self.t.create(self.k_leader) == self.epoch

    async def set_isr(self, members: list[str]) -> bool:
        """Write the ISR, if we still lead under our epoch."""
        if not self.epoch:
            return False
        value = json.dumps({"epoch": self.epoch, "members": members}).encode()
        ok, _ = await self._txn([self._ours()], [self.t.put(self.k_isr, value)])
        return ok

    async def forget(self, node: str) -> bool:
        """Unregister node (gone for good), if we still lead under our epoch."""
        if not self.epoch:
            return False
        ok, _ = await self._txn([self._ours()], [self.t.delete(self.k_nodes + node.encode())])
        return ok

    async def take_ids(self, n: int, at_least: int = 1) -> range | None:
        """A block of n job ids no other leader has or will have, starting
        at at_least or later (what a node's binlog already holds), or None
        if we no longer lead. While we lead, only our own takes move the
        counter: one block follows the last we took (but after a retried
        take that had gone through, which leaves a gap)."""
        t = self.t
        while self.epoch:
            kv = await self._get(self.k_ids)
            first = max(int(kv.value) if kv is not None else 1, at_least)
            same = (t.version(self.k_ids) == 0) if kv is None else \
                (t.mod(self.k_ids) == kv.mod_revision)
            ok, _ = await self._txn([self._ours(), same],
                                    [t.put(self.k_ids, str(first + n).encode())])
            if ok:
                return range(first, first + n)
            if (await self.leader() or (None, 0))[1] != self.epoch:
                self.lease, self.epoch = None, 0
        return None

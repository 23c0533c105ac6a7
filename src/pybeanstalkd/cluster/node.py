"""One node of a cluster: follower until etcd makes it leader.

A follower serves no client (it accepts and closes at once), listens on
its peer address, and applies what the leader ships (link.py). When the
leader key is gone and this node is in the ISR, it campaigns; if it wins,
it leads under the epoch etcd gave it:
- it takes job ids from etcd in small blocks (ids.py), so that no id
  repeats and ids stay dense across a failover; the queue hands out none
  past what it owns (etcd slow or unreachable: puts are refused, not
  given an id another leader may have);
- it ships every batch its binlog writes to each registered node, each
  link starting with a handshake in which the node at the registered
  address proves the cluster's secret and that it is that node (link.py),
  then a snapshot (with -f0 a batch is a group commit: sent as the local
  fsync starts, and the next waits for the ISR's acks);
- a reply to any command waits until what the binlog holds so far is on
  this node (fsynced with -f0, written with -f MS) and acked by every other
  ISR member: a reserve never hands out a job whose put is not yet safe;
- a member that does not ack within LAG_S is removed from the ISR in etcd
  first, and only then is anything acknowledged without it; a node that has
  caught up (acked all that may have been acknowledged) is added back, and
  replies wait for it from before its etcd write;
- if its lease cannot be refreshed in time, it acknowledges nothing more
  and exits (status 75), to come back as a follower and catch up;
- on an operator's request it forgets a node that is gone for good (out of
  the ISR): unregistered in etcd, no link to it from then on.
"""
from __future__ import annotations

import asyncio
import time
from time import monotonic_ns
from typing import TYPE_CHECKING

from .coord import UNREACHABLE, Coordinator, asked_to_cancel
from .frame import MAX_NAME
from .ids import REFILL_S, IdBlocks
from .link import RETRY_S, FollowerNode, Replicator

if TYPE_CHECKING:
    from ..settings import ClusterSettings
    from ..tls import Certs
    from .link import _TlsListener

LAG_S = 2.0  # an ISR member silent this long while batches wait is dropped
MISSING_S = 1.0  # ... and one with no link at all (a new leader's dead peer)
# A link whose follower has acked nothing this long while batches wait is
# closed (it is out of the ISR by then): the batches it holds are not kept
# for it, and the next link starts from a snapshot.
STALL_S = 10.0
POLL_S = 0.3  # how often a follower looks at the leader key, a leader at the nodes
EXIT_DEPOSED = 75


class Refused(Exception):
    """An operator's request the cluster turns down: why, and the kind
    (UNKNOWN: no such node; CONFLICT: not now; UNAVAILABLE: etcd or the lead)."""

    def __init__(self, why: str, kind: str):
        super().__init__(why)
        self.kind = kind


UNKNOWN, CONFLICT, UNAVAILABLE = "unknown", "conflict", "unavailable"
NEVER = 1 << 62


def parse_addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return (host or "127.0.0.1"), int(port)


def stamped(log):
    """log, with each line prefixed by the time it is said (UTC, to the
    millisecond): a node's lines tell a failover's story, and its steps
    are seconds apart. (The reference's -V lines, which ours match, have
    no time: these are the cluster's alone.)"""
    def say(msg: str) -> None:
        now = time.time()
        log(time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%03dZ %s" % (now % 1 * 1000, msg))
    return say


async def within(aw, seconds: float):
    """aw's result, or TimeoutError after `seconds`, whether or not aw ends
    when it is cancelled. (asyncio.wait_for waits for a cancelled call to
    end: an etcd call that does not would hold a leader whose lease ran
    out past its step-down.)"""
    task = asyncio.ensure_future(aw)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # (retrieved: no warning)
        raise TimeoutError
    if task.cancelled():  # (by the etcd client itself: a failed call, not ours to end on)
        raise ConnectionError("the etcd call was cancelled")
    return task.result()


async def _failing_if_cancelled(aw) -> None:
    """aw, whose cancellation from inside (an etcd call's, say) is an
    error: a TaskGroup takes a task that ends cancelled for one it was
    asked to cancel, and would let the others go on without it."""
    try:
        await aw
    except asyncio.CancelledError:
        if asked_to_cancel():
            raise
        raise RuntimeError("cancelled from inside") from None


class Node:
    def __init__(self, loop, srv, engine, wal, cluster: ClusterSettings, certs: Certs | None, sock,
                 serve_clients, stop):
        self.loop, self.srv, self.engine, self.wal = loop, srv, engine, wal
        self.cluster = cluster
        self.certs = certs  # --tls-cert: the links are TLS too
        self.sock = sock  # the protocol's listening socket
        self.serve_clients = serve_clients  # starts accepting clients on it
        self.stop = stop  # the server's stop future
        # (parse_args: --cluster needs --node and --etcd)
        self.name = cluster.node
        self.sync = cluster.fsync_each_write
        self.log = stamped(srv.log)
        self.coord = Coordinator(cluster.name, self.name,
                                 endpoints=[parse_addr(a) for a in cluster.etcd.split(",")])
        self.info = {"peer": cluster.peer_advertise or cluster.peer_listen}
        if cluster.http is not None:
            self.info["http"] = "%s:%d" % cluster.http
        self.follower = FollowerNode(engine.q, wal, engine.max_job_size, b"", self.name,
                                     self.log, sync=self.sync, kick=srv.syncer.kick)
        self.role = "follower"
        self.task: asyncio.Task | None = None  # run()'s (start())
        self.epoch = 0
        self.isr: list[str] = []
        # Whose acks replies wait for: the ISR, and members being added to
        # it (from before their etcd write: nothing is acknowledged without
        # a member once etcd may list it; see _watch_isr).
        self.ackers: list[str] = []
        self.high = 0  # the most committed() has ever allowed: all acknowledged is below
        self.rep: Replicator | None = None
        self.lease_until = 0  # monotonic ns: past it, nothing is acknowledged
        # The job ids this node may hand out: none until it leads.
        self.ids = IdBlocks(engine, self.coord.take_ids, self.log)
        self.peer_srv: asyncio.AbstractServer | _TlsListener | None = None  # while following
        self.missing: dict[str, int] = {}  # ISR member -> since when it has no link
        # The leader as this node last saw it: its name ("" while none
        # leads) and its epoch (the last one known, kept while none leads).
        self.leader = ""
        self.leader_epoch = 0
        self.nodes: dict[str, dict] = {}  # registered nodes, as last read from etcd
        # Nodes unregistered by forget(), until a read of the nodes begun
        # after that (number `fetches`) says whether they registered again.
        self.forgotten: dict[str, int] = {}
        # Nodes a link is being opened to, each with its task (kept here:
        # the loop holds only weak references to tasks).
        self.connecting: dict[str, asyncio.Task] = {}
        self.fetches = 0

    # -- what the server asks ---------------------------------------------

    def committed(self) -> int:
        """Binlog bytes safe to acknowledge: on this node, and on every
        other ISR member (and member-to-be); none once the lease may have
        run out."""
        if self.role != "leader" or monotonic_ns() > self.lease_until:
            return 0
        wal = self.wal
        safe = wal.synced if self.sync else wal.written
        rep = self.rep
        for m in self.ackers:
            if m != self.name:
                # (a leader has its Replicator; no check: this runs on every event)
                acked = rep.acked_lsn(m)  # type: ignore[union-attr]
                if acked < safe:
                    safe = acked
        if safe > self.high:
            self.high = safe
        return safe

    def status(self) -> dict:
        """This node's view, the same in GET /leader, /api/v1/cluster and
        /metrics: `leader` is the leader's name, `is_leader` whether this
        node leads, `epoch` the epoch it leads or the one of the leader it
        knows (from etcd)."""
        leads = self.role == "leader"
        return {"node": self.name, "role": self.role, "is_leader": leads, "leader": self.leader,
                "epoch": self.epoch if leads else self.leader_epoch, "isr": list(self.isr)}

    def report(self) -> dict:
        """The cluster as this node sees it (GET /api/v1/cluster, /metrics,
        `pybeanstalkd-admin cluster`): only the leader knows each
        follower's lag; a follower reports the batch it has applied."""
        st = self.status()
        st.update(cluster=self.cluster.name)
        if self.role != "leader" or self.rep is None:  # (or becoming it)
            f = self.follower.state
            # Batches of that epoch: none yet while the link still carries
            # an older leader's (or the newer one's, before etcd is read).
            st.update(applied_seq=f.seq if f.following == st["epoch"] else 0,
                      nodes=[dict(name=n, **info) for n, info in sorted(self.nodes.items())])
            return st
        rep, now, written = self.rep, monotonic_ns(), self.wal.written
        rows = []
        for name, info in sorted(self.nodes.items()):
            row = dict(name=name, **info, in_isr=name in self.isr)
            if name == self.name:
                row.update(connected=True, acked_seq=rep.seq, lag_batches=0,
                           lag_bytes=0, lag_seconds=0.0)
            else:
                link = rep.links.get(name)
                row["connected"] = link is not None
                if link is None and name in rep.link_errors:
                    row["link_error"] = rep.link_errors[name]  # why it is down
                if link is not None:
                    acked = link.acked if link.snapshot_acked else 0
                    oldest = rep.oldest_unacked(link, now)
                    row.update(acked_seq=acked, lag_batches=rep.seq - acked,
                               lag_bytes=max(0, written - rep.acked_lsn(name)),
                               lag_seconds=0.0 if oldest is None else round((now - oldest) / 1e9, 3))
            rows.append(row)
        st.update(seq=rep.seq, nodes=rows)
        return st

    # -- the life of a node -------------------------------------------------

    def start(self) -> asyncio.Task:
        """run() in a task, kept here: the loop holds only weak references
        to tasks."""
        self.task = self.loop.create_task(self.run())
        return self.task

    async def run(self):
        if not 0 < len(self.name.encode()) <= MAX_NAME:  # (the links carry it: frame.py)
            raise ValueError(f"--node {self.name!r}: a name of 1 to {MAX_NAME} bytes")
        while True:
            try:
                await self.coord.register(self.info)
                self.follower.secret = await self.coord.secret()  # before the peer port opens
                break
            except UNREACHABLE as e:
                self.log(f"cluster {self.cluster.name}: etcd: {e!r}")
                await asyncio.sleep(1)
        host, port = parse_addr(self.cluster.peer_listen)
        # --tls-cert: the links are TLS, with this node's certificate (and
        # with --tls-client-ca each side checks the other's against it).
        self.peer_srv = await self.follower.serve(host, port, self.certs)
        refuse = _refuse_clients(self.loop, self.sock)
        self.log(f"cluster {self.cluster.name}: {self.name} starts as a follower")
        epoch = asked = 0
        polls = 0
        while not epoch:
            await asyncio.sleep(POLL_S)
            try:
                if polls % 4 == 0:  # for the reports only
                    self.nodes = await self.coord.nodes()
                    got = await self.coord.isr()
                    self.isr = got[1] if got else []
                polls += 1
                got = await self.coord.leader()
                self._saw_leader(got)
                if got is None:
                    asked = monotonic_ns()  # (the lease, if granted, runs from no earlier)
                    epoch = await self.coord.campaign(self.info)
            except UNREACHABLE as e:  # etcd down or without quorum: keep following
                self.log(f"cluster {self.cluster.name}: etcd: {e!r}")
                await asyncio.sleep(1)
        refuse()
        await self.lead(epoch, asked)

    def _saw_leader(self, got: tuple[str, int, dict] | None):
        """A follower read the leader key: fence off older epochs, and say
        whom it follows, once each time that changes."""
        name, epoch = (got[0], got[1]) if got else ("", self.leader_epoch)
        if got:
            self.follower.saw_epoch(epoch)  # (older leaders' frames are refused from now on)
        if (name, epoch) == (self.leader, self.leader_epoch):
            return
        c = self.cluster.name
        if name:
            self.log(f"cluster {c}: {self.name} follows {name}, epoch {epoch}")
        else:
            self.log(f"cluster {c}: {self.name}: no node leads (the last: "
                     f"{self.leader}, epoch {self.leader_epoch})")
        self.leader, self.leader_epoch = name, epoch

    async def lead(self, epoch: int, asked: int):
        """Lead under epoch, whose lease was asked for at `asked`
        (monotonic ns): it may end ttl after that, not after now (the
        campaign's calls may have taken seconds)."""
        assert self.peer_srv is not None  # (run() opened it)
        self.peer_srv.close()
        for c in list(self.follower.conns):
            c.transport.close()
        self.follower.settle()  # (a snapshot's end, or what follows it, comes no more)
        self.epoch, self.role, self.leader, self.leader_epoch = epoch, "leader", self.name, epoch
        self.lease_until = asked + self.coord.ttl * 1_000_000_000
        try:
            got = await self.coord.isr()
            self.isr = got[1] if got else [self.name]
            self.ackers = list(self.isr)
            if not await self._take_ids():
                return  # deposed: no replicator, no clients
        except UNREACHABLE as e:
            # (its peer port closed, the node cannot follow again in place:
            # it steps down, as when a duty below meets etcd unreachable)
            self._deposed(f"etcd, before leading: {e!r}")
            return
        # -f0: one batch per group commit (the Syncer ships it as its fsync
        # starts: the gate's sync_starting), one group in flight. -f MS: one
        # batch a pass; a reply needs the write here, not the fsync MS later.
        self.rep = Replicator(self.engine.q, self.wal, epoch, self.follower.secret, self.name,
                              self.log, self.certs, on_ack=self._acked,
                              on_ship=None if self.sync else self._shipped, eager=not self.sync)
        self.srv.gate.lead(self)  # (replies wait for committed() from now on)
        self.log(f"cluster {self.cluster.name}: {self.name} leads, epoch {epoch}, isr {self.isr}")
        self.serve_clients()
        self.srv.flush()
        due = self.engine.next_due()
        if due is not None:
            self.srv.arm(due)
        # One group: if a duty fails, the others end with it (the server
        # then stops: loop.py), never a leader without its lease's keeper.
        try:
            async with asyncio.TaskGroup() as duties:
                for duty in (self._keepalive(), self._links(), self._watch_isr(),
                             self._keep_ids()):
                    duties.create_task(_failing_if_cancelled(duty))
        except* UNREACHABLE as e:
            self._deposed(f"etcd: {e.exceptions[0]!r}")

    async def _keepalive(self):
        ttl_ns = self.coord.ttl * 1_000_000_000
        while True:
            sent = monotonic_ns()
            try:
                ok = await within(self.coord.keepalive(), self.coord.ttl / 3)
            except Exception as e:  # noqa: BLE001 (etcd unreachable, or its reply late)
                self.log(f"cluster: lease refresh failed: {e!r}")
                ok = None
            if ok:
                self.lease_until = sent + ttl_ns
            elif ok is False or monotonic_ns() > self.lease_until:
                self._deposed("the lease is gone")
                return
            await asyncio.sleep(self.coord.ttl / 3)

    def _deposed(self, why: str):
        self.log(f"cluster {self.cluster.name}: {self.name} steps down: {why}")
        self.role = "follower"
        if not self.stop.done():
            self.stop.set_result(EXIT_DEPOSED)

    async def _take_ids(self) -> bool:
        """The next block of job ids; False (and deposed) if the epoch is lost."""
        if await self.ids.refill():
            return True
        self._deposed("lost the epoch while taking job ids")
        return False

    async def _keep_ids(self):
        """Take the next block while half a block is still left. etcd
        unreachable: try again (the lease decides when to step down);
        meanwhile puts past the ids owned are refused."""
        while self.role == "leader":
            if self.ids.low():
                try:
                    if not await self._take_ids():
                        return
                except UNREACHABLE as e:
                    self.log(f"cluster {self.cluster.name}: taking job ids: etcd: {e!r}")
                    await asyncio.sleep(POLL_S)
            await asyncio.sleep(REFILL_S)

    async def _links(self):
        """Keep a link to every other registered node, and none to others."""
        while True:
            fetch = self.fetches
            self.fetches += 1
            nodes = await self.coord.nodes()
            for name, after in list(self.forgotten.items()):
                if fetch >= after:  # read since: what it says holds
                    del self.forgotten[name]
                else:
                    nodes.pop(name, None)
            self.nodes = nodes
            for name in [n for n in self.rep.links if n not in nodes]:
                self.rep.links[name].close()
            for name, info in nodes.items():
                if (name != self.name and name not in self.rep.links and "peer" in info
                        and name not in self.connecting):
                    # Each in its own task: a node that accepts but stalls (a
                    # TLS handshake to a stopped process) delays no other.
                    self.connecting[name] = self.loop.create_task(
                        self._connect(name, info["peer"]))
            await asyncio.sleep(POLL_S)

    async def _connect(self, name: str, peer: str):
        """A link to name, at the address it registered (peer): the node
        there must prove it is name (link.py)."""
        rep = self.rep
        assert rep is not None  # (a leader's)
        try:
            link = await rep.connect(name, *parse_addr(peer))
        except Exception as e:  # noqa: BLE001 (OSError: down, TLS; else a bad address or reply)
            # The ISR watch drops it if it is a member; the next poll tries again.
            rep.failed(name, e)
        else:
            if name in self.forgotten:  # (forgotten while we connected)
                link.close()
        finally:
            self.connecting.pop(name, None)

    async def _watch_isr(self):
        """Drop members that lag (in etcd first), add those caught up."""
        while self.role == "leader":
            rep = self.rep
            now = monotonic_ns()
            isr = list(self.isr)
            for m in self.isr:
                if m == self.name:
                    continue
                link = rep.links.get(m)
                if link is None:
                    if now - self.missing.setdefault(m, now) > MISSING_S * 1e9:
                        isr.remove(m)
                else:
                    self.missing.pop(m, None)
                    if rep.lagging(link, now, LAG_S):
                        isr.remove(m)
            for name, link in list(rep.links.items()):
                if rep.lagging(link, now, STALL_S) and name not in isr:
                    rep.failed(name, ConnectionError(
                        f"it acked nothing for {STALL_S:g} s: the link is closed"))
                    link.close()
            # A node joins once it has all that may have been acknowledged
            # (not necessarily the last batch: under load there is always
            # one in flight). From this moment replies wait for it too, so
            # it still has all of it when etcd lists it.
            self.committed()
            for name, link in rep.links.items():
                if (name not in isr and name in self.nodes  # (a forgotten one is not)
                        and rep.caught_up(name, self.high)
                        and not rep.lagging(link, now, LAG_S)):
                    isr.append(name)
                    if name not in self.ackers:
                        self.ackers.append(name)
            if isr != self.isr:
                if not await self.coord.set_isr(isr):
                    self._deposed("lost the epoch while writing the ISR")
                    return
                self.log(f"cluster {self.cluster.name}: isr {isr}")
                self.isr = isr
                self.ackers = list(isr)
                self._acked()
            await asyncio.sleep(0.1)

    async def forget(self, name: str) -> tuple[str, str] | None:
        """Unregister a node that is gone for good (the leader, on an
        operator's request): it must be out of the ISR, which it leaves
        MISSING_S after its link is gone. A node that starts again
        registers again. None if done, else (UNKNOWN, CONFLICT or
        UNAVAILABLE, why)."""
        try:
            await self._forget(name)
        except Refused as e:
            return e.kind, str(e)
        return None

    async def _forget(self, name: str):
        if self.role != "leader":
            raise Refused("not the cluster's leader", UNAVAILABLE)
        if name == self.name:
            raise Refused(f"{name} leads: stop it, then forget it on the next leader", CONFLICT)
        try:
            nodes = await self.coord.nodes()
        except UNREACHABLE as e:
            raise Refused(f"etcd: {e!r}", UNAVAILABLE) from None
        if name not in nodes:
            raise Refused(f"no node {name} is registered", UNKNOWN)
        if name in self.isr or name in self.ackers:
            raise Refused(f"{name} is in the ISR: stop it first; it leaves the ISR "
                          f"{MISSING_S:g} s after its link is gone", CONFLICT)
        # From here on it gets no link and cannot join (both check these).
        self.forgotten[name] = NEVER
        self.nodes.pop(name, None)
        self.missing.pop(name, None)
        assert self.rep is not None  # (a leader's)
        self.rep.link_errors.pop(name, None)
        link = self.rep.links.get(name)
        if link is not None:
            link.close()
        try:
            ok = await self.coord.forget(name)
        except UNREACHABLE as e:
            del self.forgotten[name]  # still registered: linked again
            raise Refused(f"etcd: {e!r}", UNAVAILABLE) from None
        if not ok:
            self._deposed("lost the epoch while unregistering a node")
            raise Refused("not the cluster's leader any more", UNAVAILABLE)
        self.forgotten[name] = self.fetches  # reads begun from now on see it gone
        self.log(f"cluster {self.cluster.name}: {name} forgotten (unregistered)")

    async def leave(self):
        """At shutdown, after the last reply (none of the held ones went
        out): give up the lease, so that another node leads at once."""
        self.role = "follower"
        try:
            await within(self.coord.resign(), 2)
        except Exception as e:  # noqa: BLE001 (then the lease runs out by itself)
            self.log(f"cluster {self.cluster.name}: resign: {e!r}")

    def _acked(self):
        if self.sync:
            # The next group first, if it waited for this ack: the followers
            # work on it while the replies go out (the cycle's critical path).
            self.srv.gate.kick()
        self.srv.gate.advanced()

    # -- what the reply gate asks of a leader (server/gate.py's Leader) ----

    # (asked only while leading: self.rep is set)

    def ship(self) -> None:
        self.rep.ship()  # type: ignore[union-attr]

    def ship_soon(self) -> None:
        self.rep.kick()  # type: ignore[union-attr]

    def in_flight(self) -> bool:
        return self.rep.in_flight(self.ackers)  # type: ignore[union-attr]

    def _shipped(self):
        if len(self.ackers) <= 1:  # (else the members' acks release the replies)
            self._acked()


def _refuse_clients(loop, sock):
    """Accept and close at once (a follower serves no client); returns the
    function that stops it. Out of descriptors, the socket is not watched
    for RETRY_S (else, readable and never accepted from, it would spin)."""
    if sock is None:
        return lambda: None
    fd = sock.fileno()
    retry = None

    def refuse():
        nonlocal retry
        try:
            conn, _ = sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            loop.remove_reader(fd)
            retry = loop.call_later(RETRY_S, watch)
            return
        conn.close()

    def watch():
        nonlocal retry
        retry = None
        loop.add_reader(fd, refuse)

    def stop():
        if retry is not None:
            retry.cancel()
        loop.remove_reader(fd)
    sock.setblocking(False)
    watch()
    return stop

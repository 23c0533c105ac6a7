"""The peer link: a leader ships frames to each follower over
TCP; a follower applies them and writes them to its own binlog, then acks:
with -f0 once they are fsynced, otherwise at once (they are in its memory;
its own fsync policy covers them, as a single node's).

Every connection starts with a handshake (frame.py) in which each side
proves the cluster's secret, and the follower that it is the node the
leader meant to reach; the leader sends nothing of its jobs before that.
Then a snapshot of its jobs in parts, then the batches its binlog writes
(Wal.tap): with -f0 one batch per group commit, shipped as the leader's
own fsync starts, the next one held until every ISR member has acked it;
with -f MS one per pass of the loop. Every frame goes in chunks of at
most frame.MAX_CHUNK bytes of records, and every chunk and ack carries a
tag under the link's session key: a follower holds no more than one chunk
unchecked. A follower that finds a gap, or a frame of another epoch,
closes the connection: the leader's next one starts with a snapshot
again. Frames that arrive while a follower fsyncs share its next fsync,
and it acks the last of them.

Each side gives the other HANDSHAKE_S (TLS's handshake included) from
the connection's start to complete the handshake, and closes it past
that: a connection to a peer port that sends nothing is not kept.
"""
from __future__ import annotations

import asyncio
import os
import socket
from collections import deque
from collections.abc import Callable
from time import monotonic_ns

from ..binlog.sync import sync_inline
from . import frame as F
from ..core import replica
from .apply import PART_BYTES, ApplyError, Restore, apply_records, snapshot_parts


HANDSHAKE_S = 5.0  # a link's handshake, TLS's included, from the connection's start
# Connections to a peer port that have not completed their handshake, at
# most: one more closes the oldest of them. Only a leader's link is ever
# expected there, so this bounds what whoever reaches the port can hold (a
# flood of silent connections took the descriptors the node's binlog needed
# for its next file), and a leader, whose handshake takes a round trip, still
# gets in.
MAX_HANDSHAKES = 8
REFUSALS_S = 1.0  # a refused link is said at most once a second (and once per cause)
RETRY_S = 0.5  # out of descriptors: accept again this much later
# A link that holds more than this unsent (what its socket has not taken,
# or batches held behind its snapshot) is closed, rather than buffered for
# without end: a follower that stopped reading (stopped, frozen, or a
# stalled path) starts again from a snapshot once it reads again. The first
# frame of more than one chunk among them is not counted: a batch or a
# snapshot's part may be bigger than this (a put may carry 1 GiB), and a
# follower that reads takes it. So a link holds at most this plus one frame.
LINK_BUFFER = 64 << 20


class FollowerNode:
    """What a follower holds: its queue (with its own binlog as the store),
    the fencing state, and the link its leader writes to."""

    def __init__(self, q, wal, max_job_size: int, secret: bytes, name: str,
                 log=lambda m: None, sync: bool = True, kick=lambda: None,
                 handshake_s: float = HANDSHAKE_S, refusals_s: float = REFUSALS_S):
        self.q, self.wal, self.max_job_size, self.log = q, wal, max_job_size, log
        self.secret = secret  # the cluster's, from etcd: a leader must prove it
        self.name = name  # this node's: a leader's hello must be made for it
        self.handshake_s = handshake_s  # a link not through its handshake by then is closed
        self.refusals_s = refusals_s  # refusals are said at most once this often
        self.sync = sync  # -f0: ack only what is fsynced
        self.kick = kick  # otherwise: the server's fsync policy, told of new records
        self.state = F.Follower()
        self.conns: set = set()
        self.restore: Restore | None = None  # a snapshot coming in parts
        # The batch through which the last snapshot's are to be applied
        # before the tags derive from this node's state again (frame.py).
        self.settle_at: int | None = None
        self.said_undurable = False
        self.last_refusal: str | None = None
        self.refused_at = 0  # monotonic ns: when a refusal was last said
        self.unsaid = 0  # refusals not said since (REFUSALS_S)
        self.handshaking: dict = {}  # a connection not through its handshake -> its abort

    async def serve(self, host: str, port: int, certs=None) -> asyncio.AbstractServer | _TlsListener:
        """Listen for the leader's link (TLS with certs: tls.Certs)."""
        loop = asyncio.get_running_loop()
        if certs is None:
            return await loop.create_server(
                lambda: _Receiver(self, loop.time() + self.handshake_s), host, port)
        return _TlsListener(self, host, port, certs)

    def refused(self, why: str, peer: str = "?"):
        """A link was refused or dropped (why: its TLS handshake or the
        link's own failed, or a frame failed a check): said once per cause,
        and once a second at most, with how many were not said meanwhile
        (whoever keeps trying, with what fails each time, fills no log)."""
        if why == self.last_refusal:
            return
        now = monotonic_ns()
        if now - self.refused_at < self.refusals_s * 1e9:
            self.unsaid += 1
            return
        more = f" ({self.unsaid} more refused before it)" if self.unsaid else ""
        self.refused_at, self.unsaid, self.last_refusal = now, 0, why
        self.log(f"replication: a link from {peer} {why}{more}")

    def handshake_begins(self, key, abort):
        """A connection starts its handshake (key: the connection; abort:
        closes it). At MAX_HANDSHAKES already, the oldest is closed."""
        if len(self.handshaking) >= MAX_HANDSHAKES:
            oldest = next(iter(self.handshaking))
            self.handshaking.pop(oldest)()
            self.refused(f"was closed: {MAX_HANDSHAKES} connections to the peer port were "
                         "in their handshakes")
        self.handshaking[key] = abort

    def handshake_ends(self, key):
        self.handshaking.pop(key, None)

    def saw_epoch(self, epoch: int):
        """etcd names the leader of epoch: no frame of an older one is taken
        from now on, and the links that carry one are closed (their leader
        is deposed, and would collect acks until the new one's snapshot)."""
        self.state.promise(epoch)
        newest = self.state.epoch
        for conn in [c for c in self.conns if c.epoch is not None and c.epoch < newest]:
            conn.refuse(f"was closed: its epoch {conn.epoch} is older than {newest}, "
                        "the leader's in etcd")

    def undurable(self):
        if not self.said_undurable:
            self.said_undurable = True
            self.log("replication: this node's binlog is disabled, so it acks nothing"
                     " with -f0 and leaves the ISR; it goes on applying in memory")

    def _applied(self, seq: int, now: int):
        """Batch seq (or a snapshot as of it) is applied: once it is the
        last the leader wrote while the snapshot went out, this node's
        state is the leader's, and its tags derive from it again."""
        if self.settle_at is not None and seq >= self.settle_at:
            self.settle_at = None
            replica.settled(self.q, now)

    def settle(self):
        """This node leads: a snapshot it had not all of, or the batches
        that follow one, will not come; its tags derive from what it has
        (each group with at least the members it had at the snapshot's
        listing, holding what it held then: apply.Parts)."""
        self.restore = self.settle_at = None
        replica.settled(self.q, monotonic_ns())

    def take(self, f: F.Frame, conn=None) -> bool:
        """Apply one frame (not yet on disk). False: drop the connection."""
        verdict = self.state.check(f)
        now = monotonic_ns()
        try:
            if verdict == F.RESTART:
                r = self.restore
                if r is None or r.key != (f.epoch, f.seq, conn):
                    r = self.restore = Restore((f.epoch, f.seq, conn))
                    self.state.promise(f.epoch)  # no older leader's snapshot from now on
                    for other in [c for c in self.conns if c is not conn]:
                        other.transport.close()  # the leader it came from is not followed now
                r.part(self.q, f.records, self.wal.wall_offset, now, self.max_job_size)
                self.wal.flush()  # (a big snapshot's records are not all held in memory)
                if f.last:
                    r.end(self.q, now)
                    self.restore = None
                    self.state.start(f.epoch, f.seq)
                    self.settle_at = f.through
                    self._applied(f.seq, now)
                return True
            if verdict == F.APPLY:
                apply_records(self.q, f.records, self.wal.wall_offset, now, self.max_job_size,
                              snapshot=self.settle_at is not None)
                self.state.applied(f)
                self._applied(f.seq, now)
                return True
        except ApplyError as e:
            self.log(f"replication: {e}; resyncing")
            return False
        self.log(f"replication: frame {f.epoch}/{f.seq}: {verdict}")
        return False


class _TlsListener:
    """The peer port with TLS: each accepted connection's handshake is
    awaited here, so that a failure is said (create_server's TLS would
    drop it without a word); then the link goes to a _Receiver."""

    def __init__(self, node: FollowerNode, host: str, port: int, certs):
        self.node, self.certs = node, certs
        self.loop = asyncio.get_running_loop()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, port), family=family)
        self.sock.setblocking(False)
        self.retry = None
        self.loop.add_reader(self.sock.fileno(), self._accept)

    def _accept(self):
        try:
            conn, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            # Out of descriptors (the leader tries again): not watched for a
            # while, or the readable socket would be accepted from in a spin.
            self.node.refused(f"could not be accepted: {e.strerror}")
            self.loop.remove_reader(self.sock.fileno())
            self.retry = self.loop.call_later(RETRY_S, self._resume)
            return
        task = self.loop.create_task(self._start(conn))
        self.node.handshake_begins(conn, task.cancel)

    def _resume(self):
        self.retry = None
        if self.sock.fileno() >= 0:
            self.loop.add_reader(self.sock.fileno(), self._accept)

    async def _start(self, conn):
        # One limit for both handshakes, TLS's and the link's, from now.
        deadline = self.loop.time() + self.node.handshake_s
        try:
            peer = "%s:%d" % conn.getpeername()[:2]
        except OSError:
            peer = "?"
        try:
            await self.loop.connect_accepted_socket(
                lambda: _Receiver(self.node, deadline, peer), conn, ssl=self.certs.server(),
                ssl_handshake_timeout=self.node.handshake_s)
        except (OSError, TimeoutError) as e:  # (ssl.SSLError is an OSError)
            from ..tls import failure_reason

            self.node.refused(f"failed its TLS handshake: {failure_reason(e)}", peer)
            conn.close()
        except asyncio.CancelledError:  # (closed for a newer one: MAX_HANDSHAKES)
            conn.close()
        finally:
            self.node.handshake_ends(conn)  # (the link's own handshake goes on in _Receiver)

    def close(self):
        if self.retry is not None:
            self.retry.cancel()
            self.retry = None
        if self.sock.fileno() >= 0:
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()


class _Receiver(asyncio.Protocol):
    """One connection to the peer port: the handshake (by deadline, a
    loop.time()), then the leader's frames, each checked, and the acks."""

    def __init__(self, node: FollowerNode, deadline: float, peer: str | None = None):
        self.node, self.deadline, self.peer = node, deadline, peer
        self.handshake = F.Accepting(node.secret, node.name, os.urandom(F.NONCE_SIZE))
        self.timer = None
        self.session = None  # once the handshake is done
        self.reader = None  # (the frames, checked against the session)
        self.epoch = None  # the epoch the hello proved: the only one taken here
        self.unsynced = None  # (epoch, seq) applied, not yet acked

    def connection_made(self, transport):
        self.node.conns.add(self)
        self.transport = transport
        if self.peer is None:
            addr = transport.get_extra_info("peername")
            self.peer = "%s:%d" % addr[:2] if addr else "?"
        self.node.handshake_begins(self, transport.abort)
        self.timer = asyncio.get_running_loop().call_at(self.deadline, self._late)
        transport.write(self.handshake.greeting())

    def connection_lost(self, exc):
        self.node.conns.discard(self)
        self.node.handshake_ends(self)
        if self.timer is not None:
            self.timer.cancel()

    def _late(self):
        self.timer = None
        self.refuse(f"did not complete its handshake within {self.node.handshake_s:g} s")

    def refuse(self, why: str):
        self.node.refused(why, self.peer or "?")  # (None only before connection_made)
        self.transport.abort()

    def data_received(self, data):
        try:
            if self.session is None:
                proof = self.handshake.feed(data)
                if proof is None:
                    return
                if self.timer is not None:
                    self.timer.cancel()
                    self.timer = None
                epoch, newest = self.handshake.hello.epoch, self.node.state.epoch
                if epoch < newest:  # (no proof: it would ship a snapshot for nothing)
                    self.refuse(f"was refused: its hello is of epoch {epoch}, older than"
                                f" {newest}: its leader is deposed")
                    return
                self.session = self.handshake.session
                self.epoch = epoch
                self.node.handshake_ends(self)
                self.reader = F.Reader(self.session)
                self.transport.write(proof)
                self.node.last_refusal = None  # (a later failure is said again)
                return  # (nothing came after the hello: Accepting refuses it)
            frames = self.reader.feed(data)
        except F.FrameError as e:
            self.refuse(f"was refused: {e}" if self.session is None else f"was dropped: {e}")
            return
        for f in frames:
            if f.epoch != self.epoch:
                self.node.log(f"replication: a frame of epoch {f.epoch} on a link of {self.epoch}")
                self.transport.close()
                return
            if not self.node.take(f, self):
                self.transport.close()
                return
            if f.last:  # (a snapshot is acked once all of it is in)
                self.unsynced = (f.epoch, f.seq)
        if self.unsynced is None:
            return
        ack, self.unsynced = self.unsynced, None
        wal = self.node.wal
        wal.flush()
        if self.node.sync:
            # Inline: a follower serves no client, and a hand-off to a thread
            # and back costs more here than the fsync. Frames that arrive
            # meanwhile wait in the socket and share the next one.
            if wal.use:
                try:
                    sync_inline(wal)
                except OSError as e:
                    wal.fail(f"fsync: {e}")
            if not wal.use:  # nothing is on disk here: no ack, so the leader drops this node
                self.node.undurable()
                return
        else:
            self.node.kick()
        self.transport.write(self.session.seal(F.encode_ack(*ack)))


class Replicator:
    """The leader's side: gathers what its binlog writes during one pass of
    the loop into one batch, ships it to every connected follower (one
    write each, however many commands the pass ran), and tracks what each
    has acked."""

    def __init__(self, q, wal, epoch: int, secret: bytes, name: str, log=lambda m: None,
                 certs=None, handshake_s: float = HANDSHAKE_S, link_buffer: int = LINK_BUFFER,
                 on_ack: Callable[[], None] = lambda: None,
                 on_ship: Callable[[], None] | None = None, eager: bool = True):
        self.q, self.wal, self.epoch, self.log = q, wal, epoch, log
        self.secret = secret
        self.name = name  # this node's, in its hellos
        self.certs = certs  # TLS links: tls.Certs, or None
        self.handshake_s = handshake_s  # a follower not through the handshake by then is dropped
        self.link_buffer = link_buffer  # a link holding more unsent is closed
        self.seq = 0  # the last batch numbered
        self.lsn: dict[int, int] = {}  # seq -> the wal's written bytes after that batch
        self.sent_at: dict[int, int] = {}  # seq -> when it was shipped (monotonic ns)
        self.links: dict[str, _Shipper] = {}
        self.on_ack = on_ack  # called on each ack (the node: replies may go out)
        self.on_ship = on_ship  # called once a batch is written here and shipped
        self.pending: list[bytes] = []  # written, not yet shipped
        self.part_bytes = PART_BYTES
        self.link_errors: dict[str, str] = {}  # node -> why its last link failed
        self.scheduled = False
        self.shipping = False
        # True: ship once per pass of the loop (-f MS). False (-f0): the
        # Syncer ships as it starts each fsync, one batch per group commit.
        self.eager = eager
        wal.tap(self._written)

    def _written(self, data: bytes):
        self.pending.append(data)
        if self.eager and not self.shipping:
            self.kick()

    def kick(self):
        """Ship at the end of this pass of the loop (records are buffered
        meanwhile: one write to the binlog and one to each follower)."""
        if not self.scheduled:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self.ship)

    def ship(self):
        """Write what the binlog buffers, number it as one batch, send it."""
        self.scheduled = False
        self.shipping = True
        try:
            self.wal.flush()  # (its tap adds to pending)
        finally:
            self.shipping = False
        if not self.pending:
            return
        data = b"".join(self.pending)
        self.pending.clear()
        self.seq += 1
        lsn = self.lsn
        lsn[self.seq] = self.wal.written
        self.sent_at[self.seq] = monotonic_ns()
        if len(lsn) > 4096:  # keep what a follower may still ack
            low = min((link.acked for link in self.links.values()), default=self.seq)
            for k in [k for k in lsn if k < low]:
                del lsn[k]
                self.sent_at.pop(k, None)
        chunks = F.chunks(self.epoch, self.seq, data)
        for link in list(self.links.values()):
            link.ship(chunks)
        if self.on_ship is not None:
            self.on_ship()

    def in_flight(self, gate) -> bool:
        """Has a member of gate (with its snapshot out) not acked the last
        batch? With -f0 the next batch waits for it: larger batches, so
        fewer frames, fsyncs and wake-ups on every node per job."""
        links = self.links
        for m in gate:
            link = links.get(m)
            if link is not None and link.acked < self.seq and link.backlog is None:
                return True
        return False

    def acked_lsn(self, name: str) -> int:
        """Bytes of this epoch's records the follower has on disk."""
        link = self.links.get(name)
        if link is None or not link.snapshot_acked:
            return 0
        return self.lsn.get(link.acked, 0)

    def caught_up(self, name: str, committed: int) -> bool:
        """Has the follower acked all that may have been acknowledged to
        clients (committed: what the leader's replies have waited for)?"""
        link = self.links.get(name)
        return link is not None and link.snapshot_acked and self.acked_lsn(name) >= committed

    def oldest_unacked(self, link, now: int) -> int | None:
        """When the oldest batch (or the snapshot) the follower has not
        acked was sent; None if it has acked everything."""
        if not link.snapshot_acked:
            return link.since
        if link.acked >= self.seq:
            return None
        return self.sent_at.get(link.acked + 1, now)

    def lagging(self, link, now: int, lag_s: float) -> bool:
        """Has the follower left a batch (or its snapshot) unacked too long?"""
        since = self.oldest_unacked(link, now)
        return since is not None and now - since > lag_s * 1e9

    def failed(self, name: str, e: Exception):
        """A link could not be made or was lost: said once per cause (a
        follower down, or a TLS mismatch, fails every attempt)."""
        why = str(e) or repr(e)
        if self.link_errors.get(name) != why:
            self.link_errors[name] = why
            self.log(f"replication to {name}: {why}")

    async def connect(self, name: str, host: str, port: int):
        """Open the link to follower name (registered at host:port): the
        handshake, then a snapshot, then every batch. ConnectionError (an
        OSError) if the node there does not prove the secret, or is not
        name, or does not answer within handshake_s."""
        reader, writer, session = await self._handshake(name, host, port)
        self.ship()  # to the others: the snapshot holds all of it
        self.lsn.setdefault(self.seq, self.wal.written)
        link = self.links[name] = _Shipper(self, name, reader, writer, session)
        link.backlog = []
        # The jobs are listed now, as of this batch: a batch shipped before
        # the link's task first runs (-f0: the Syncer's, from any callback)
        # is not older than the listing its records follow.
        parts = snapshot_parts(self.q, self.wal.wall_offset, self.part_bytes)
        link.task = asyncio.get_running_loop().create_task(link.run(self.seq, parts))
        return link

    async def _handshake(self, name: str, host: str, port: int):
        kw = {} if self.certs is None else {"ssl": self.certs.peer(),
                                            "ssl_handshake_timeout": self.handshake_s}
        try:
            hs = F.Connecting(self.secret, self.epoch, self.name, name, os.urandom(F.NONCE_SIZE))
        except ValueError as e:  # (a name registered in etcd that no link can carry)
            raise ConnectionError(str(e)) from None
        writer = None
        try:
            async with asyncio.timeout(self.handshake_s):
                reader, writer = await asyncio.open_connection(host, port, **kw)
                writer.write(await _until(reader, hs.greeted, "its nonce" + (
                    " (does it trust this node's certificate? see its log)" if self.certs else "")))
                session = await _until(reader, hs.proved,
                                       "its proof (it refused this node's hello? see its log)")
        except TimeoutError:
            if writer is not None:
                writer.close()
            stage = ("connection" if writer is None else "nonce" if hs.greeting is None
                     else "proof")
            raise ConnectionError(f"no {stage} within {self.handshake_s:g} s") from None
        except F.FrameError as e:  # (from _until: the connection is open)
            if writer is not None:
                writer.close()
            raise ConnectionError(str(e)) from None
        except BaseException:
            if writer is not None:
                writer.close()
            raise
        return reader, writer, session

    async def _send_snapshot(self, link, seq: int, parts):
        """The snapshot as of batch seq (its parts: snapshot_parts, listed
        when seq was), other events served between them; the batches
        shipped meanwhile follow it."""
        for part in parts:
            link.send(F.chunks(self.epoch, seq, part, snapshot=True, last=False))
            await link.writer.drain()
            await asyncio.sleep(0)  # the leader goes on meanwhile
        # The end names the last batch written meanwhile (all of it shipped
        # into the backlog first): the parts are the leader's state only
        # with those applied too.
        self.ship()
        link.send(F.end_chunks(self.epoch, seq, self.seq))
        for chunks in link.backlog:
            link.send(chunks)
        link.backlog = None
        link.held = link.held_big = 0


async def _until(reader, step, what: str):
    """Feed step (a handshake's) what the follower sends until it returns
    something: a whole message is in."""
    while True:
        data = await reader.read(F.MAX_HELLO)
        if not data:
            raise ConnectionError(f"closed before {what}")
        got = step(data)
        if got is not None:
            return got


class _Shipper:
    def __init__(self, rep: Replicator, name: str, reader, writer, session: F.Session):
        self.rep, self.name, self.reader, self.writer = rep, name, reader, writer
        self.session = session  # the link's: every frame sent is signed under it
        self.acked = 0  # the last seq acked (0: not even the snapshot's yet)
        self.snapshot_acked = False
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.since = monotonic_ns()  # connected at
        self.backlog: list[list[bytes]] | None = None  # batches held while the snapshot goes out
        self.held = 0  # their bytes
        self.held_big = 0  # the bytes of the first of them of more than one chunk
        self.written = 0  # bytes written to the socket's transport
        # Where the frames of more than one chunk start and end in them, for
        # those not all sent yet.
        self.big: deque[tuple[int, int]] = deque()

    async def run(self, seq: int, parts):
        try:
            await self.rep._send_snapshot(self, seq, parts)
        except (OSError, ConnectionError) as e:
            if not self.writer.is_closing():  # (else it was closed here, and said why)
                self.rep.failed(self.name, e)
            self.close()
            return
        finally:
            parts.close()  # (the leader's deletes are not watched for it now)
        await self.read_acks()

    def close(self):
        self.writer.close()
        if self.rep.links.get(self.name) is self:
            del self.rep.links[self.name]
            self.rep.on_ack()  # (a group held for its ack need not wait now)
        self.changed.set()

    def ship(self, chunks: list[bytes]):
        """A batch's chunks: sent, or held while the snapshot goes out."""
        if self.backlog is None:
            self.send(chunks)
            return
        self.backlog.append(chunks)
        size = sum(len(c) for c in chunks) + len(chunks) * F.TAG
        self.held += size
        if len(chunks) > 1 and not self.held_big:
            self.held_big = size
        if self.held - self.held_big > self.rep.link_buffer:
            self.overflow()

    def send(self, chunks: list[bytes]):
        """Sign and send a frame's chunks (they must go out in the order
        signed)."""
        w = self.writer
        if w.is_closing():
            return
        start = self.written
        for chunk in chunks:
            tag = self.session.sign(chunk)
            if len(chunk) < 1 << 16:
                w.write(chunk + tag)
            else:  # (not a copy of a big chunk to join them)
                w.write(chunk)
                w.write(tag)
            self.written += len(chunk) + F.TAG
        if len(chunks) > 1:
            self.big.append((start, self.written))
        if self.unread() > self.rep.link_buffer:
            self.overflow()

    def unread(self) -> int:
        """Bytes written that the socket has not taken, but those of the
        first frame of more than one chunk among them (LINK_BUFFER)."""
        unsent = self.writer.transport.get_write_buffer_size()
        sent = self.written - unsent
        big = self.big
        while big and big[0][1] <= sent:
            big.popleft()
        if big:
            start, end = big[0]
            unsent -= end - max(start, sent)
        return unsent

    def overflow(self):
        self.rep.failed(self.name, ConnectionError(
            f"it left more than {self.rep.link_buffer:,} bytes unread: the link is closed, "
            "and the next starts from a snapshot"))
        self.close()

    async def read_acks(self):
        acks = F.AckReader(self.session)
        try:
            while data := await self.reader.read(65536):
                for epoch, seq in acks.feed(data):
                    if epoch == self.rep.epoch:
                        self.acked = seq
                        if not self.snapshot_acked:
                            self.snapshot_acked = True
                            self.rep.link_errors.pop(self.name, None)  # (it works now)
                        self.changed.set()
                        self.rep.on_ack()
        except (OSError, F.FrameError) as e:
            self.rep.failed(self.name, e)
        finally:
            self.close()

    async def until(self, seq: int, timeout: float = 10):
        """Wait until the follower has acked batch seq (for tests and joins)."""
        async def wait():
            while self.acked < seq or not self.snapshot_acked:
                if self.writer.is_closing():
                    raise ConnectionError(f"link to {self.name} closed")
                self.changed.clear()
                await self.changed.wait()
        await asyncio.wait_for(wait(), timeout)

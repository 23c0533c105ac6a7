"""The peer link (issue 13): a leader ships frames to each follower over
TCP; a follower applies them and writes them to its own binlog, then acks:
with -f0 once they are fsynced, otherwise at once (they are in its memory;
its own fsync policy covers them, as a single node's).

Every connection starts with the leader's proof of the cluster's secret
(frame.py), then a snapshot of its jobs in parts, then goes on with the
batches its binlog writes (Wal.tap): with -f0 one batch per group commit,
shipped as the leader's own fsync starts, the next one held until every
ISR member has acked it; with -f MS one per pass of the loop. A follower
that finds a gap,
or a frame of another epoch, closes the connection: the leader's next one
starts with a snapshot again. Frames that arrive while a follower fsyncs
share its next fsync, and it acks the last of them.
"""
from __future__ import annotations

import asyncio
import os
import socket
from time import monotonic_ns

from ..binlog.sync import sync_inline
from . import frame as F
from .apply import PART_BYTES, ApplyError, Restore, apply_records, snapshot_parts


HANDSHAKE_S = 5.0  # a TLS handshake on a link


class FollowerNode:
    """What a follower holds: its queue (with its own binlog as the store),
    the fencing state, and the link its leader writes to."""

    def __init__(self, q, wal, max_job_size: int, secret: bytes, log=lambda m: None,
                 sync: bool = True, kick=lambda: None):
        self.q, self.wal, self.max_job_size, self.log = q, wal, max_job_size, log
        self.secret = secret  # the cluster's, from etcd: a leader must prove it
        self.sync = sync  # -f0: ack only what is fsynced
        self.kick = kick  # otherwise: the server's fsync policy, told of new records
        self.state = F.Follower()
        self.conns: set = set()
        self.restore = None  # a snapshot coming in parts
        self.said_undurable = False
        self.last_refusal = None

    async def serve(self, host: str, port: int, certs=None):
        """Listen for the leader's link (TLS with certs: server.tls.Certs)."""
        loop = asyncio.get_running_loop()
        if certs is None:
            return await loop.create_server(lambda: _Receiver(self), host, port)
        return _TlsListener(self, host, port, certs)

    def refused(self, why: str, peer: str = "?"):
        """A link failed its TLS handshake: said once per cause."""
        if why != self.last_refusal:
            self.last_refusal = why
            self.log(f"replication: a link from {peer} failed its TLS handshake: {why}")

    def undurable(self):
        if not self.said_undurable:
            self.said_undurable = True
            self.log("replication: this node's binlog is disabled, so it acks nothing"
                     " with -f0 and leaves the ISR; it goes on applying in memory")

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
                return True
            if verdict == F.APPLY:
                apply_records(self.q, f.records, self.wal.wall_offset, now, self.max_job_size)
                self.state.applied(f)
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
        self.loop.add_reader(self.sock.fileno(), self._accept)

    def _accept(self):
        try:
            conn, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:  # (out of descriptors: the leader tries again)
            self.node.refused(f"accept: {e}")
            return
        self.loop.create_task(self._start(conn))

    async def _start(self, conn):
        try:
            peer = "%s:%d" % conn.getpeername()[:2]
        except OSError:
            peer = "?"
        try:
            await self.loop.connect_accepted_socket(
                lambda: _Receiver(self.node), conn, ssl=self.certs.server(),
                ssl_handshake_timeout=HANDSHAKE_S)
        except (OSError, asyncio.TimeoutError) as e:  # (ssl.SSLError is an OSError)
            from ..server.tls import failure_reason

            self.node.refused(failure_reason(e), peer)
            conn.close()
        else:
            self.node.last_refusal = None  # (a later failure is said again)

    def close(self):
        if self.sock.fileno() >= 0:
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()


class _Receiver(asyncio.Protocol):
    def __init__(self, node: FollowerNode):
        self.node = node
        self.reader = F.Reader()
        self.nonce = os.urandom(16)
        self.hello = b""  # until the leader's hello is in
        self.epoch = None  # the epoch it proved: the only one taken here
        self.unsynced = None  # (epoch, seq) applied, not yet acked

    def connection_made(self, transport):
        self.node.conns.add(self)
        self.transport = transport
        transport.write(F.encode_nonce(self.nonce))

    def connection_lost(self, exc):
        self.node.conns.discard(self)

    def data_received(self, data):
        try:
            if self.epoch is None:
                self.hello += data
                if len(self.hello) < F.HELLO.size:
                    return
                self.epoch = F.check_hello(self.node.secret, self.nonce, self.hello)
                data, self.hello = self.hello[F.HELLO.size:], b""
            frames = self.reader.feed(data)
        except F.FrameError as e:
            self.node.log(f"replication: {e}")
            self.transport.close()
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
        self.transport.write(F.encode_ack(*ack))


class Replicator:
    """The leader's side: gathers what its binlog writes during one pass of
    the loop into one batch, ships it to every connected follower (one
    write each, however many commands the pass ran), and tracks what each
    has acked."""

    def __init__(self, q, wal, epoch: int, secret: bytes, log=lambda m: None, certs=None):
        self.q, self.wal, self.epoch, self.log = q, wal, epoch, log
        self.secret = secret
        self.certs = certs  # TLS links: server.tls.Certs, or None
        self.seq = 0  # the last batch numbered
        self.lsn = {}  # seq -> the wal's written bytes after that batch
        self.sent_at = {}  # seq -> when it was shipped (monotonic ns)
        self.links: dict[str, _Shipper] = {}
        self.on_ack = lambda: None
        self.on_ship = None  # called once a batch is written here and shipped
        self.pending: list[bytes] = []  # written, not yet shipped
        self.part_bytes = PART_BYTES
        self.link_errors: dict[str, str] = {}  # node -> why its last link failed
        self.scheduled = False
        self.shipping = False
        # True: ship once per pass of the loop (-f MS). False (-f0): the
        # Syncer ships as it starts each fsync, one batch per group commit.
        self.eager = True
        wal.tap = self._written

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
        frame = F.encode(self.epoch, self.seq, data)
        for link in self.links.values():
            if link.backlog is None:
                link.send(frame)
            else:  # its snapshot is going out: after it
                link.backlog.append(frame)
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
        """Open the link to a follower: a snapshot, then every batch."""
        kw = {} if self.certs is None else {"ssl": self.certs.peer(),
                                            "ssl_handshake_timeout": HANDSHAKE_S}
        reader, writer = await asyncio.open_connection(host, port, **kw)
        self.ship()  # to the others: the snapshot holds all of it
        self.lsn.setdefault(self.seq, self.wal.written)
        link = self.links[name] = _Shipper(self, name, reader, writer)
        link.backlog = []
        link.task = asyncio.get_running_loop().create_task(link.run(self.seq))
        return link

    async def _send_snapshot(self, link, seq: int):
        """The proof of the secret; then the snapshot as of batch seq, in
        parts, other events served between them; the batches shipped
        meanwhile follow it."""
        try:
            nonce = F.read_nonce(await asyncio.wait_for(link.reader.readexactly(F.NONCE.size), 5))
        except asyncio.IncompleteReadError:
            raise ConnectionError("closed before its nonce" + (
                " (does it trust this node's certificate? see its log)" if self.certs else "")) from None
        except (asyncio.TimeoutError, F.FrameError) as e:
            raise ConnectionError(f"no nonce ({e!r})") from None
        link.send(F.encode_hello(self.secret, nonce, self.epoch))
        parts = snapshot_parts(self.q, self.wal.wall_offset, self.part_bytes)
        part = next(parts)
        for following in parts:
            link.send(F.encode(self.epoch, seq, part, snapshot=True, last=False))
            await link.writer.drain()
            await asyncio.sleep(0)  # the leader goes on meanwhile
            part = following
        link.send(F.encode(self.epoch, seq, part, snapshot=True))
        for frame in link.backlog:
            link.send(frame)
        link.backlog = None


class _Shipper:
    def __init__(self, rep: Replicator, name: str, reader, writer):
        self.rep, self.name, self.reader, self.writer = rep, name, reader, writer
        self.acked = 0  # the last seq acked (0: not even the snapshot's yet)
        self.snapshot_acked = False
        self.changed = asyncio.Event()
        self.task = None
        self.since = monotonic_ns()  # connected at
        self.backlog: list[bytes] | None = None  # batches held while the snapshot goes out

    async def run(self, seq: int):
        try:
            await self.rep._send_snapshot(self, seq)
        except (OSError, ConnectionError) as e:
            self.rep.failed(self.name, e)
            self.close()
            return
        await self.read_acks()

    def close(self):
        self.writer.close()
        if self.rep.links.get(self.name) is self:
            del self.rep.links[self.name]
            self.rep.on_ack()  # (a group held for its ack need not wait now)
        self.changed.set()

    def send(self, frame: bytes):
        if not self.writer.is_closing():
            self.writer.write(frame)

    async def read_acks(self):
        acks = F.AckReader()
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

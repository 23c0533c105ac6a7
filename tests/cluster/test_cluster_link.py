"""The peer link (cluster/link.py) on loopback: a follower gets a snapshot,
then every batch, has it on disk when it acks, refuses an old epoch, and
catches up after a break; each side of a link proves the secret (and the
follower its name) before anything else, and neither keeps a connection
that does not complete its handshake in time."""
import asyncio
import os
import socket

from test_replica import jobs, node
from pybeanstalkd.cluster import frame as F
from pybeanstalkd.cluster.link import FollowerNode, Replicator

SECRET = b"the cluster's secret"


def setup(tmp_path):
    lh, lwal = node(os.path.join(tmp_path, "leader"))
    fh, fwal = node(os.path.join(tmp_path, "follower"))
    fwal.wall_offset = lwal.wall_offset  # one host, one clock
    return lh, lwal, fh, fwal


async def linked(lh, lwal, fh, fwal, epoch=7, part_bytes=None, **follower):
    """The follower listening, and the leader's link to it (epoch 7)."""
    follower.setdefault("refusals_s", 0)  # (every refusal said: the tests read them)
    f = FollowerNode(fh.e.q, fwal, fh.e.max_job_size, SECRET, "f", **follower)
    srv = await f.serve("127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    rep = Replicator(lh.e.q, lwal, epoch, SECRET, "leader")
    if part_bytes is not None:
        rep.part_bytes = part_bytes
    return srv, port, rep, await rep.connect("f", "127.0.0.1", port)


def recovers_the_same(tmp_path, fh, lh):
    """The follower's binlog, read back, holds the leader's jobs."""
    h2, _ = node(os.path.join(str(tmp_path), "follower"), now=fh.now,
                 max_job_size=fh.e.max_job_size)
    assert set(jobs(h2.e.q)) == set(jobs(lh.e.q))


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_a_follower_gets_every_batch_and_has_it_on_disk(tmp_path):
    lh, lwal, fh, fwal = setup(str(tmp_path))
    c = lh.conn()
    for i in range(3):
        lh.send(c, b"put %d 0 60 3\r\npre\r\n" % i)  # before the link: in the snapshot

    async def main():
        srv, port, rep, link = await linked(lh, lwal, fh, fwal)
        await link.until(0)
        assert jobs(fh.e.q) == jobs(lh.e.q)
        # The snapshot covers all that was written: a new leader's replies
        # (a peek) need not wait for a first batch.
        assert rep.acked_lsn("f") == lwal.written > 0
        assert rep.caught_up("f", lwal.written) and not rep.caught_up("f", lwal.written + 1)
        assert not rep.caught_up("g", 0)  # no link
        for i in range(50):
            lh.send(c, b"put 0 %d 60 4\r\nj%03d\r\n" % (i % 2 * 30, i))
            if i % 5 == 0:
                lh.send(c, b"delete %d\r\n" % (i + 1))
            lwal.flush()  # as the transport does after each event
            await asyncio.sleep(0)  # a pass of the loop: the batch is shipped
        lh.send(c, b"reserve-with-timeout 0\r\n")
        lh.send(c, b"bury 2 9\r\n")
        lwal.flush()
        rep.ship()
        assert rep.seq > 50
        await link.until(rep.seq)
        assert jobs(fh.e.q) == jobs(lh.e.q)
        assert fwal.synced == fwal.written  # acked only once on disk
        assert rep.acked_lsn("f") == lwal.written
        srv.close()
        link.writer.close()
    run(main())
    recovers_the_same(tmp_path, fh, lh)


def test_with_f_ms_a_follower_acks_from_memory_and_leaves_the_fsync_to_its_policy(tmp_path):
    lh, lwal, fh, fwal = setup(str(tmp_path))
    c = lh.conn()
    kicks = []

    async def main():
        srv, port, rep, link = await linked(lh, lwal, fh, fwal, sync=False,
                                            kick=lambda: kicks.append(fwal.written))
        await link.until(0)
        for i in range(20):
            lh.send(c, b"put 0 0 60 4\r\nj%03d\r\n" % i)
            lwal.flush()
            rep.ship()
            await link.until(rep.seq)
            # Acked once written (a kill -9 of the follower keeps it), not fsynced.
            assert fwal.written > fwal.synced
            assert kicks[-1] == fwal.written
        assert jobs(fh.e.q) == jobs(lh.e.q)
        assert rep.acked_lsn("f") == lwal.written
        srv.close()
        link.writer.close()
    run(main())
    recovers_the_same(tmp_path, fh, lh)


def test_a_big_snapshot_goes_in_parts_while_the_leader_goes_on(tmp_path):
    lh, lwal, fh, fwal = setup(str(tmp_path))
    c = lh.conn()
    for i in range(300):
        lh.send(c, b"put %d 0 60 20\r\n%020d\r\n" % (i % 7, i))
    for i in range(20):
        lh.send(c, b"reserve-with-timeout 0\r\n")
        lh.send(c, b"bury %d 3\r\n" % (i + 1))
    lwal.flush()
    frames = []

    async def main():
        srv, port, rep, link = await linked(lh, lwal, fh, fwal, part_bytes=512)  # ~8 jobs a part
        send = link.send
        link.send = lambda chunks: (frames.append(chunks[-1][:4]), send(chunks))
        # The leader goes on while the parts go out: puts, deletes, kicks, buries.
        for i in range(60):
            lh.send(c, b"put 0 0 60 1\r\nn\r\n")
            lh.send(c, b"delete %d\r\n" % (300 - i))
            if i % 10 == 0:
                lh.send(c, b"kick 2\r\n")
                r = lh.send(c, b"reserve-with-timeout 0\r\n")
                lh.send(c, b"bury %d 1\r\n" % int(r.split()[1]))
            lwal.flush()
            await asyncio.sleep(0)
        rep.ship()
        await link.until(rep.seq)
        assert frames.count(F.PART) > 10 and frames.count(F.SNAPSHOT) == 1
        assert frames.index(F.SNAPSHOT) < frames.index(F.MAGIC)  # batches after the snapshot
        assert jobs(fh.e.q) == jobs(lh.e.q)
        for t in lh.e.q.tubes.named.values():
            assert list(fh.e.q.tubes.named[t.name].buried) == list(t.buried)
        srv.close()
        link.writer.close()
    run(main())


def test_a_snapshots_end_names_the_batches_after_which_the_follower_settles(tmp_path):
    """With --extensions. The follower has job 2, a member of group g, and
    job 3, held by g; then the link breaks, and the next one's snapshot goes
    out in parts. After job 1's part, the leader puts a new member of g
    and deletes job 2, whose part is not read then: the snapshot's end
    drops job 2 here, before the new member's put (which follows it) is
    in. The end names the batch of that put: job 3 stays held, as on the
    leader, and g completes here only once the leader's does."""
    from test_replica_tags import ext_node, held, state_of
    lh, lwal = ext_node(str(tmp_path / "leader"))
    fh, fwal = ext_node(str(tmp_path / "follower"))
    fwal.wall_offset = lwal.wall_offset
    c = lh.conn()
    for tags in (b"", b" grp:g", b" aft:g"):
        lh.send(c, b"put 0 0 60 1%s\r\nx\r\n" % tags)
    lwal.flush()
    ends = []

    async def main():
        srv, port, rep, link = await linked(lh, lwal, fh, fwal)
        await link.until(0)
        assert held(fh.e.q, 3) and 2 in fh.e.q.jobs
        link.writer.close()
        await asyncio.sleep(0.1)
        rep.part_bytes = 1  # a job a part
        link = await rep.connect("f", "127.0.0.1", port)
        send, first = link.send, rep.seq

        def sending(chunks):
            magic = chunks[-1][:4]
            if magic == F.PART and not ends and 4 not in lh.e.q.jobs:  # job 1's part
                assert lh.send(c, b"put 0 0 60 1 grp:g\r\ny\r\n") == b"INSERTED 4\r\n"
                assert lh.send(c, b"delete 2\r\n") == b"DELETED\r\n"
                lwal.flush()
            elif magic == F.SNAPSHOT:
                ends.append(F.THROUGH.unpack_from(chunks[-1], F.HEAD_SIZE)[0])
            send(chunks)
        link.send = sending
        await link.until(rep.seq)
        assert ends == [rep.seq] and rep.seq > first  # (the put's and the delete's batch)
        assert held(fh.e.q, 3) and held(lh.e.q, 3)
        assert state_of(fh.e.q) == state_of(lh.e.q) and fh.e.q.tags.holding.settling is None
        lh.send(c, b"delete 4\r\n")  # g completes on the leader: so it does here
        lwal.flush()
        rep.ship()
        await link.until(rep.seq)
        assert not held(fh.e.q, 3) and state_of(fh.e.q) == state_of(lh.e.q)
        srv.close()
        link.writer.close()
    run(main())


def test_an_old_epoch_is_refused_and_a_break_is_caught_up(tmp_path):
    lh, lwal, fh, fwal = setup(str(tmp_path))
    oh, owal, _, _ = setup(str(tmp_path / "old"))
    c = lh.conn()

    async def main():
        srv, port, rep, link = await linked(lh, lwal, fh, fwal)
        lh.send(c, b"put 0 0 60 1\r\na\r\n")
        lwal.flush()
        rep.ship()
        await link.until(rep.seq)
        # A deposed leader (epoch 6) tries: refused, nothing of it applied.
        oc = oh.conn()
        oh.send(oc, b"put 0 0 60 1\r\nx\r\n")
        oh.send(oc, b"put 0 0 60 5\r\nstale\r\n")  # an id the leader has not used
        try:  # (refused at its hello: test_cluster_fencing.py)
            old = await Replicator(oh.e.q, owal, 6, SECRET, "old").connect("f", "127.0.0.1", port)
            await old.until(0, timeout=5)
            raise AssertionError("the follower acked an old epoch")
        except ConnectionError:
            pass
        assert jobs(fh.e.q) == jobs(lh.e.q)
        lh.send(c, b"put 0 0 60 1\r\nc\r\n")  # the leader's link was not disturbed
        lwal.flush()
        rep.ship()
        await link.until(rep.seq)
        assert jobs(fh.e.q) == jobs(lh.e.q)
        # The link breaks; the leader goes on; a new link catches up.
        link.writer.close()
        await asyncio.sleep(0.1)
        for _i in range(5):
            lh.send(c, b"put 0 0 60 1\r\nb\r\n")
        lh.send(c, b"delete 1\r\n")
        lwal.flush()
        rep.ship()
        link = await rep.connect("f", "127.0.0.1", port)
        await link.until(rep.seq)
        assert jobs(fh.e.q) == jobs(lh.e.q) and 1 not in fh.e.q.jobs
        srv.close()
        link.writer.close()
    run(main())


async def refused(connecting) -> str:
    """Why the leader's link failed (it must)."""
    try:
        link = await connecting
    except ConnectionError as e:
        return str(e)
    link.writer.close()
    raise AssertionError("the link was made")


def test_a_link_that_cannot_prove_the_secret_is_refused(tmp_path):
    lh, lwal, fh, fwal = setup(str(tmp_path))
    c = lh.conn()
    lh.send(c, b"put 0 0 60 1\r\na\r\n")
    lwal.flush()
    said = []

    async def main():
        srv, port, rep, link = await linked(lh, lwal, fh, fwal, log=said.append)
        await link.until(0)
        # A leader with another secret (or none): the follower refuses its
        # hello, and sends no proof.
        oh, owal, _, _ = setup(str(tmp_path / "other"))  # (a Replicator taps its binlog)
        wrong = Replicator(oh.e.q, owal, 8, b"guess", "x")
        why = await refused(wrong.connect("f", "127.0.0.1", port))
        assert why == "closed before its proof (it refused this node's hello? see its log)"
        # Nor raw frames after a made-up hello.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        g, _ = F.parse_greeting(await reader.read(F.MAX_GREETING))
        assert g.name == "f"
        writer.write(F.encode_hello(b"guess", 9, "x", "f", g.nonce, os.urandom(32))
                     + F.encode(9, 0, b"", snapshot=True) + bytes(F.TAG))
        assert await reader.read() == b""  # closed, no proof
        assert jobs(fh.e.q) == jobs(lh.e.q) and len(jobs(fh.e.q)) == 1
        # A hello for another node (relayed from its address), with the secret: refused.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        g, _ = F.parse_greeting(await reader.read(F.MAX_GREETING))
        writer.write(F.encode_hello(SECRET, 9, "x", "g", g.nonce, os.urandom(32)))
        assert await reader.read() == b""
        # A proven link carries only the epoch it proved.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        hs = F.Connecting(SECRET, 9, "x", "f", os.urandom(32))
        writer.write(hs.greeted(await reader.read(F.MAX_GREETING)))
        session = hs.proved(await reader.readexactly(F.PROOF.size))
        writer.write(session.seal(F.end_chunks(10, 0, 0)[0]))
        assert await reader.read() == b""
        # Nor frames under a session the leader did not make.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        hs = F.Connecting(SECRET, 9, "x", "f", os.urandom(32))
        writer.write(hs.greeted(await reader.read(F.MAX_GREETING)))
        hs.proved(await reader.readexactly(F.PROOF.size))
        other = F.Session(os.urandom(32), leader=True)
        writer.write(other.seal(F.end_chunks(9, 0, 0)[0]))
        assert await reader.read() == b""
        assert jobs(fh.e.q) == jobs(lh.e.q) and len(jobs(fh.e.q)) == 1
        assert [m.split(" ", 6)[-1] for m in said if "a link from" in m] == [
            "refused: its hello does not prove the cluster's secret",
            "refused: its hello was made for node 'g', not for this one ('f'): relayed from"
            " that node's address?",
            "dropped: a frame failed its tag: forged, replayed, reordered or damaged"], said
        lh.send(c, b"put 0 0 60 1\r\nb\r\n")  # the real link goes on
        lwal.flush()
        rep.ship()
        assert rep.seq == 1
        await link.until(rep.seq)
        assert len(jobs(fh.e.q)) == 2
        srv.close()
        link.writer.close()
    run(main())


class Impostor:
    """Listens where a follower should be, and says what it is told to
    (a greeting as name, then proof: the bytes after the hello); keeps
    all it receives."""

    def __init__(self, name="f", proof=None, greet=True):
        self.name, self.proof, self.greet = name, proof, greet
        self.got = bytearray()
        self.closed = asyncio.Event()

    async def serve(self):
        self.srv = await asyncio.start_server(self.conn, "127.0.0.1", 0)
        return self.srv.sockets[0].getsockname()[1]

    async def conn(self, reader, writer):
        if self.greet:
            writer.write(F.encode_greeting(os.urandom(32), self.name))
        while data := await reader.read(65536):
            self.got += data
            if self.proof is not None and F.parse_hello(bytes(self.got)):
                writer.write(self.proof)
                self.proof = None
        self.closed.set()
        writer.close()


def test_the_leader_sends_nothing_before_the_follower_proves_the_secret_and_its_name(tmp_path):
    lh, lwal, _, _ = setup(str(tmp_path))
    c = lh.conn()
    lh.send(c, b"put 0 0 60 6\r\nsecret\r\n")
    lwal.flush()

    async def main():
        rep = Replicator(lh.e.q, lwal, 7, SECRET, "leader")
        # A process on the follower's address, without the secret: the
        # leader's hello, and nothing more.
        for impostor, why in [
                (Impostor(proof=F.PROOF.pack(F.PROOF_MAGIC, os.urandom(32))),
                 "its proof is wrong: it does not know the cluster's secret"),
                (Impostor(name="g"), "the node at its address says it is 'g'"),
                (Impostor(proof=b"pbf2" + bytes(32)), "proof of another version of this format"
                 " (b'pbf2', not b'pbf4'): all the nodes of a cluster must run the same version")]:
            port = await impostor.serve()
            assert (await refused(rep.connect("f", "127.0.0.1", port))).startswith(why)
            await asyncio.wait_for(impostor.closed.wait(), 5)
            hello = F.parse_hello(bytes(impostor.got))
            if impostor.name == "f":
                assert hello[1] == len(impostor.got)  # all it got
                assert (hello[0].leader, hello[0].target, hello[0].epoch) == ("leader", "f", 7)
            else:
                assert impostor.got == b""
            assert b"secret" not in impostor.got
            impostor.srv.close()
        assert rep.links == {}
    run(main())


def test_neither_side_keeps_a_connection_that_does_not_complete_the_handshake(tmp_path):
    lh, lwal, fh, fwal = setup(str(tmp_path))
    said = []

    async def main():
        f = FollowerNode(fh.e.q, fwal, fh.e.max_job_size, SECRET, "f", said.append,
                         handshake_s=0.3, refusals_s=0)
        srv = await f.serve("127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()

        async def closed_after(sent: bytes) -> float:
            # (timed from before the connect: the follower's limit runs from
            # its accept, which may come well before open_connection returns)
            t0 = loop.time()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            greeting = await reader.read(F.MAX_GREETING)
            assert F.parse_greeting(greeting)[0].name == "f"
            writer.write(sent)
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            return loop.time() - t0
        # Silent, or a hello that never ends: closed at the limit.
        assert 0.25 < await closed_after(b"") < 1.5
        unended = F.encode_hello(SECRET, 9, "x", "f", bytes(32), bytes(32))[:-1]
        assert 0.25 < await closed_after(unended) < 1.5
        # Bytes that are no hello: at once, without waiting for more.
        assert await closed_after(b"GET / HTTP/1.1\r\n") < 0.25
        assert [m.split(" ", 5)[-1] for m in said] == [
            "did not complete its handshake within 0.3 s",
            "was refused: bad hello magic b'GET '"], said
        assert f.conns == set()

        # The leader's side: a follower that does not answer, or does not prove.
        rep = Replicator(lh.e.q, lwal, 7, SECRET, "leader", handshake_s=0.3)
        for impostor, why in [(Impostor(greet=False), "no nonce within 0.3 s"),
                              (Impostor(), "no proof within 0.3 s")]:
            port = await impostor.serve()
            t0 = loop.time()
            assert await refused(rep.connect("f", "127.0.0.1", port)) == why
            assert loop.time() - t0 < 1.5
            await asyncio.wait_for(impostor.closed.wait(), 5)  # the leader closed it
            impostor.srv.close()
        srv.close()
    run(main())


def test_with_f0_one_batch_per_group_commit_and_one_group_in_flight(tmp_path):
    """-f0: the leader's Syncer ships each group as its fsync starts, and
    the next group waits for the follower's ack of the last (the follower
    fsyncs before it acks)."""
    from types import SimpleNamespace

    from pybeanstalkd.core.engine import HOLD_ALL
    from pybeanstalkd.server.gate import Replicated
    from pybeanstalkd.server.transport import Server

    lh, lwal, fh, fwal = setup(str(tmp_path))
    c = lh.conn()
    sent = []

    async def main():
        srv, port, rep, link = await linked(lh, lwal, fh, fwal)
        await link.until(0)
        lh.e.hold = HOLD_ALL  # as a leader's engine
        server = Server(asyncio.get_running_loop(), lh.e,
                        gate=lambda srv: Replicated(srv, lwal, True, 0, each_write=True))
        syncer = server.syncer
        rep.eager = False
        server.gate.lead(SimpleNamespace(  # (as a Node: its acks are not waited for here)
            committed=lambda: lwal.synced, ship=rep.ship, ship_soon=rep.kick,
            in_flight=lambda: rep.in_flight(["f", "gone"])))
        rep.on_ack = syncer.kick
        send = link.send
        link.send = lambda chunks: (sent.append((link.acked, fwal.synced)), send(chunks))
        for _i in range(10):
            lh.send(c, b"put 0 0 60 1\r\na\r\n")
        server.flush()  # the group's fsync starts, and it is shipped
        assert rep.seq == 1 and len(sent) == 1 and rep.in_flight(["f"])
        link.writer.transport.pause_reading()  # its ack is late
        while syncer.busy:  # the leader's own fsync is done
            await asyncio.sleep(0.001)
        for _i in range(10):
            lh.send(c, b"put 0 0 60 1\r\nb\r\n")
            server.flush()
        assert rep.seq == 1 and lwal.buf and not syncer.busy  # held: one group in flight
        link.writer.transport.resume_reading()
        await link.until(2)
        assert len(sent) == 2 and sent[1][0] == 1  # the second went out on the first's ack
        assert fwal.synced == fwal.written  # the follower acked what it had fsynced
        assert not rep.in_flight(["f", "gone"])  # (a member without a link holds nothing)
        link.backlog = []  # nor one whose snapshot is going out
        rep.seq += 1
        assert not rep.in_flight(["f"])
        link.backlog, rep.seq = None, rep.seq - 1
        while lwal.synced < lwal.written:
            await asyncio.sleep(0.01)
        assert jobs(fh.e.q) == jobs(lh.e.q) and len(jobs(lh.e.q)) == 20
        srv.close()
        link.writer.close()
    run(main())
    recovers_the_same(tmp_path, fh, lh)


def test_with_f0_a_follower_whose_fsync_fails_acks_nothing_and_says_why(tmp_path, monkeypatch):
    """An fsync error disables the follower's binlog: it must not ack what
    is not on its disk (the leader then drops it), and it says so once."""
    import errno

    lh, lwal, fh, fwal = setup(str(tmp_path))
    c = lh.conn()
    said, warned = [], []
    fwal.warn = warned.append

    async def main():
        srv, port, rep, link = await linked(lh, lwal, fh, fwal, log=said.append)
        await link.until(0)

        def eio(fd):
            raise OSError(errno.EIO, "Input/output error")
        monkeypatch.setattr(os, "fdatasync", eio)  # (the follower's fsync)
        monkeypatch.setattr(os, "fsync", eio)
        for _i in range(3):
            lh.send(c, b"put 0 0 60 1\r\na\r\n")
            lwal.flush()
            rep.ship()
            await asyncio.sleep(0.05)
        assert link.acked == 0 and not link.writer.is_closing()  # no ack; the link stays
        assert len(jobs(fh.e.q)) == 3  # applied in memory all the same
        assert not fwal.use and warned == ["binlog disabled: fsync: [Errno 5] Input/output error;"
                                          " jobs are kept in memory only"]
        assert [m for m in said if "acks nothing" in m] == [
            "replication: this node's binlog is disabled, so it acks nothing with -f0 and"
            " leaves the ISR; it goes on applying in memory"]
        srv.close()
        link.writer.close()
    run(main())


def test_silent_connections_cannot_hold_the_peer_port(tmp_path):
    # However many connect and say nothing, at most MAX_HANDSHAKES are held
    # (a new one closes the oldest), and the leader's link still forms.
    from pybeanstalkd.cluster.link import MAX_HANDSHAKES

    lh, lwal, fh, fwal = setup(str(tmp_path))
    said = []

    async def main():
        f = FollowerNode(fh.e.q, fwal, fh.e.max_job_size, SECRET, "f", said.append)
        srv = await f.serve("127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3 * MAX_HANDSHAKES)]
        await asyncio.sleep(0.2)
        assert len(f.handshaking) == MAX_HANDSHAKES
        closed = 0
        for reader, _ in silent:
            await reader.readexactly(F.MAX_GREETING - 255 + 1)  # its greeting ("f")
            try:
                closed += await asyncio.wait_for(reader.read(1), 0.05) == b""
            except TimeoutError:
                pass
        assert closed == 2 * MAX_HANDSHAKES
        rep = Replicator(lh.e.q, lwal, 7, SECRET, "leader")
        link = await rep.connect("f", "127.0.0.1", port)
        await link.until(0)
        assert not f.handshaking or len(f.handshaking) < MAX_HANDSHAKES
        # Said once (then at most once a second).
        assert sum("connections to the peer port were in their handshakes" in m
                   for m in said) == 1, said
        for _, w in silent:
            w.close()
        srv.close()
        link.writer.close()
    run(main())


def test_a_follower_that_stops_reading_is_not_buffered_for_without_end(tmp_path):
    lh, lwal, fh, fwal = setup(str(tmp_path))
    c = lh.conn()
    said = []

    async def main():
        f = FollowerNode(fh.e.q, fwal, fh.e.max_job_size, SECRET, "f", refusals_s=0)
        srv = await f.serve("127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        rep = Replicator(lh.e.q, lwal, 7, SECRET, "leader", said.append, link_buffer=1 << 20)
        link = await rep.connect("f", "127.0.0.1", port)
        await link.until(0)
        for conn in f.conns:
            conn.transport.pause_reading()  # as a stopped process
        body = b"x" * 60000
        for _i in range(200):  # 12 MB, past what the sockets take
            lh.send(c, b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
            lwal.flush()
            rep.ship()
            await asyncio.sleep(0)
            if "f" not in rep.links:
                break
        assert "f" not in rep.links and link.writer.is_closing()
        assert "unread: the link is closed" in rep.link_errors["f"], rep.link_errors
        srv.close()
    run(main())


def big_jobs(tmp_path, size=3 << 20):
    """A leader and a follower that take jobs of size bytes, and the
    leader's connection; the first job (in the snapshot) is already put."""
    lh, lwal, fh, fwal = setup(str(tmp_path))
    lh.e.max_job_size = fh.e.max_job_size = size
    c = lh.conn()
    body = os.urandom(size // 2).hex().encode()
    assert lh.send(c, b"put 0 0 60 %d\r\n%s\r\n" % (size, body)) == b"INSERTED 1\r\n"
    lwal.flush()
    return lh, lwal, fh, fwal, c, body


def test_a_batch_bigger_than_a_chunk_reaches_the_follower_which_holds_a_chunk_unverified(
        tmp_path, monkeypatch):
    # A snapshot's part and a batch of 3 MiB each: the follower checks them
    # 1 MiB at a time, and holds no more than that (and a read) unverified.
    lh, lwal, fh, fwal, c, body = big_jobs(tmp_path)
    held = []

    class Reader(F.Reader):  # the follower's, measured after each read
        def feed(self, data):
            held.append(len(self.buf) + len(data))
            try:
                return super().feed(data)
            finally:
                held.append(len(self.buf))
    monkeypatch.setattr(F, "Reader", Reader)

    async def main():
        srv, port, rep, link = await linked(lh, lwal, fh, fwal)
        await link.until(0)
        assert fh.e.q.jobs[1].body == body + b"\r\n"
        assert lh.send(c, b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body[::-1])) == b"INSERTED 2\r\n"
        lwal.flush()
        rep.ship()
        await link.until(rep.seq)
        assert jobs(fh.e.q) == jobs(lh.e.q) and len(jobs(fh.e.q)) == 2
        srv.close()
        link.writer.close()
    run(main())
    recovers_the_same(tmp_path, fh, lh)
    read = 256 << 10  # (asyncio's reads)
    assert max(held[1::2]) < (1 << 20) + F.HEAD_SIZE + F.TAG, max(held)
    assert max(held) < (1 << 20) + F.HEAD_SIZE + F.TAG + read, max(held)




def test_a_batch_bigger_than_the_link_buffer_reaches_a_follower_that_reads(tmp_path):
    # The buffer bounds what a follower leaves unread behind the frame that
    # is going out, not that frame: a job of 3 MiB (in the snapshot, then in
    # a batch, with small ones right behind it) goes through a 1 MiB buffer.
    lh, lwal, fh, fwal, c, body = big_jobs(tmp_path)
    said = []

    async def main():
        f = FollowerNode(fh.e.q, fwal, fh.e.max_job_size, SECRET, "f", refusals_s=0)
        srv = await f.serve("127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        rep = Replicator(lh.e.q, lwal, 7, SECRET, "leader", said.append, link_buffer=1 << 20)
        link = await rep.connect("f", "127.0.0.1", port)
        # Small socket buffers (the snapshot is not sent yet): what the
        # follower has not read stays in the leader's, not in the kernel's.
        for t in [link.writer.transport] + [conn.transport for conn in f.conns]:
            sock = t.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        await link.until(0)
        for size in [len(body)] + [60000] * 10:
            lh.send(c, b"put 0 0 60 %d\r\n%s\r\n" % (size, body[:size]))
            lwal.flush()
            rep.ship()
        await link.until(rep.seq)
        assert jobs(fh.e.q) == jobs(lh.e.q) and len(jobs(fh.e.q)) == 12
        assert said == [] and rep.links == {"f": link}
        # Behind a big frame, the bound still holds: a follower that stops
        # reading is dropped once 1 MiB waits behind it.
        for conn in f.conns:
            conn.transport.pause_reading()
        for size in [len(body)] + [60000] * 40:
            lh.send(c, b"put 0 0 60 %d\r\n%s\r\n" % (size, body[:size]))
            lwal.flush()
            rep.ship()
            await asyncio.sleep(0)
            if "f" not in rep.links:
                break
        assert "f" not in rep.links and size == 60000
        assert "unread: the link is closed" in rep.link_errors["f"], rep.link_errors
        srv.close()
    run(main())

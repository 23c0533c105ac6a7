"""The peer link (cluster/link.py) on loopback: a follower gets a snapshot,
then every batch, has it on disk when it acks, refuses an old epoch, and
catches up after a break."""
import asyncio
import os

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
    f = FollowerNode(fh.e.q, fwal, fh.e.max_job_size, SECRET, **follower)
    srv = await f.serve("127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    rep = Replicator(lh.e.q, lwal, epoch, SECRET)
    if part_bytes is not None:
        rep.part_bytes = part_bytes
    return srv, port, rep, await rep.connect("f", "127.0.0.1", port)


def recovers_the_same(tmp_path, fh, lh):
    """The follower's binlog, read back, holds the leader's jobs."""
    h2, _ = node(os.path.join(str(tmp_path), "follower"), now=fh.now)
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
        link.send = lambda frame: (frames.append(frame[:4]), send(frame))
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
        assert frames.count(b"pbp1") > 10 and frames.count(b"pbs1") == 1
        assert frames.index(b"pbs1") < frames.index(b"pbr1")  # batches after the snapshot
        assert jobs(fh.e.q) == jobs(lh.e.q)
        for t in lh.e.q.tubes.values():
            assert list(fh.e.q.tubes[t.name].buried) == list(t.buried)
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
        old = await Replicator(oh.e.q, owal, 6, SECRET).connect("f", "127.0.0.1", port)
        try:
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
        for i in range(5):
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


def test_a_link_that_cannot_prove_the_secret_is_refused(tmp_path):
    lh, lwal, fh, fwal = setup(str(tmp_path))
    c = lh.conn()
    lh.send(c, b"put 0 0 60 1\r\na\r\n")
    lwal.flush()

    async def main():
        srv, port, rep, link = await linked(lh, lwal, fh, fwal)
        await link.until(0)
        # A leader with another secret (or none): its snapshot is not taken.
        oh, owal, _, _ = setup(str(tmp_path / "other"))  # (a Replicator taps its binlog)
        wrong = await Replicator(oh.e.q, owal, 8, b"guess").connect("f2", "127.0.0.1", port)
        try:
            await wrong.until(0, timeout=5)
            raise AssertionError("the follower took a link without the secret")
        except ConnectionError:
            pass
        # Nor raw frames after a made-up hello.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        nonce = F.read_nonce(await reader.readexactly(F.NONCE.size))
        writer.write(F.encode_hello(b"guess", nonce, 9)
                     + F.encode(9, 0, b"", snapshot=True))
        assert await reader.read() == b""  # closed
        assert jobs(fh.e.q) == jobs(lh.e.q) and len(jobs(fh.e.q)) == 1
        # A proven link carries only the epoch it proved.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        nonce = F.read_nonce(await reader.readexactly(F.NONCE.size))
        writer.write(F.encode_hello(SECRET, nonce, 9) + F.encode(10, 0, b"", snapshot=True))
        assert await reader.read() == b""
        assert jobs(fh.e.q) == jobs(lh.e.q) and len(jobs(fh.e.q)) == 1
        lh.send(c, b"put 0 0 60 1\r\nb\r\n")  # the real link goes on
        lwal.flush()
        rep.ship()
        assert rep.seq == 1
        await link.until(rep.seq)
        assert len(jobs(fh.e.q)) == 2
        srv.close()
        link.writer.close()
    run(main())


def test_with_f0_one_batch_per_group_commit_and_one_group_in_flight(tmp_path):
    """-f0: the leader's Syncer ships each group as its fsync starts, and
    the next group waits for the follower's ack of the last (the follower
    fsyncs before it acks)."""
    from pybeanstalkd.binlog.sync import Syncer
    from pybeanstalkd.server.transport import Server

    lh, lwal, fh, fwal = setup(str(tmp_path))
    c = lh.conn()
    sent = []

    async def main():
        srv, port, rep, link = await linked(lh, lwal, fh, fwal)
        await link.until(0)
        server = Server(asyncio.get_running_loop(), lh.e)
        syncer = server.syncer = Syncer(asyncio.get_running_loop(), lwal, server, True, 0)
        rep.eager = False
        lh.e.hold_writes = lh.e.hold_all = True  # as a leader's engine
        syncer.starting, syncer.wait = rep.ship, lambda: rep.in_flight(["f", "gone"])
        rep.on_ack = syncer.kick
        send = link.send
        link.send = lambda frame: (sent.append((link.acked, fwal.synced)), send(frame))
        for i in range(10):
            lh.send(c, b"put 0 0 60 1\r\na\r\n")
        server.flush()  # the group's fsync starts, and it is shipped
        assert rep.seq == 1 and len(sent) == 1 and rep.in_flight(["f"])
        link.writer.transport.pause_reading()  # its ack is late
        while syncer.busy:  # the leader's own fsync is done
            await asyncio.sleep(0.001)
        for i in range(10):
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

    from pybeanstalkd.binlog import sync as S

    lh, lwal, fh, fwal = setup(str(tmp_path))
    c = lh.conn()
    said, warned = [], []
    fwal.warn = warned.append

    async def main():
        srv, port, rep, link = await linked(lh, lwal, fh, fwal, log=said.append)
        await link.until(0)

        def eio(fds, dirfd):
            raise OSError(errno.EIO, "Input/output error")
        monkeypatch.setattr(S, "fsync_all", eio)  # (the follower's fsync)
        for i in range(3):
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

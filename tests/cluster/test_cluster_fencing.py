"""A follower fences off a deposed leader by the epoch etcd names, not only
by the frames of a newer one: once it has read epoch E in etcd, it takes
no frame of an older epoch, closes the links that carry one, and refuses
an older leader's hello before its proof (frame.py: "It learns epochs two
ways")."""
from types import SimpleNamespace

from test_cluster_link import SECRET, run, setup
from test_replica import jobs
from pybeanstalkd.cluster.link import FollowerNode, Replicator
from pybeanstalkd.cluster.node import Node


def following(f: FollowerNode, said) -> Node:
    """A Node as its follower loop runs it: what it reads of the leader
    key goes to _saw_leader."""
    node = Node.__new__(Node)
    node.cluster = SimpleNamespace(name="c")
    node.name, node.log, node.follower = "f", said.append, f
    node.leader, node.leader_epoch = "", 0
    return node


def test_an_epoch_read_in_etcd_fences_off_an_older_leader(tmp_path):
    lh, lwal, fh, fwal = setup(str(tmp_path))
    nh, nwal, _, _ = setup(str(tmp_path / "new"))
    nwal.wall_offset = lwal.wall_offset
    c = lh.conn()
    said = []

    async def main():
        f = FollowerNode(fh.e.q, fwal, fh.e.max_job_size, SECRET, "f", said.append, refusals_s=0)
        srv = await f.serve("127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        node = following(f, said)
        node._saw_leader(("old", 7, {}))
        old = Replicator(lh.e.q, lwal, 7, SECRET, "old")
        link = await old.connect("f", "127.0.0.1", port)
        lh.send(c, b"put 0 0 60 1\r\na\r\n")
        lwal.flush()
        old.ship()
        await link.until(old.seq)
        assert len(jobs(fh.e.q)) == 1
        # etcd names a new leader (epoch 9) before any of its frames come:
        # the old one's next batch is not taken, and its link is closed.
        node._saw_leader(("new", 9, {}))
        lh.send(c, b"put 0 0 60 5\r\nstale\r\n")
        lwal.flush()
        old.ship()
        try:
            await link.until(old.seq, timeout=5)
            raise AssertionError("the follower acked a deposed leader's batch")
        except ConnectionError:
            pass
        assert len(jobs(fh.e.q)) == 1 and "f" not in old.links
        # Nor does a new link of the old epoch get a proof.
        try:
            await old.connect("f", "127.0.0.1", port)
            raise AssertionError("a link of a deposed leader was made")
        except ConnectionError as e:
            assert "closed before its proof" in str(e), e
        assert any("its hello is of epoch 7, older than 9" in m for m in said), said
        # The new leader links, and its snapshot replaces what the old one sent.
        new = Replicator(nh.e.q, nwal, 9, SECRET, "new")
        nh.e.q.ids.next = 100  # (ids never repeat across leaders: ids.py)
        nh.send(nh.conn(), b"put 0 0 60 3\r\nnew\r\n")
        nwal.flush()
        link = await new.connect("f", "127.0.0.1", port)
        await link.until(0)
        assert jobs(fh.e.q) == jobs(nh.e.q) and list(jobs(fh.e.q)) == [100]
        srv.close()
        link.writer.close()
    run(main())

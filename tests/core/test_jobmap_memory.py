"""A block of the id map left with a few jobs (THIN or fewer) behind the
block taking new ids is small (thinned), as jobmap.py promises ("so that a
few survivors do not keep 32 KiB each"), whichever way it came to hold so
few: deletes while it still took new ids (copied once a put passes it), a
jump of the next id, a restart with -b, a follower's snapshot."""
import sys

from fakeclock import Harness, with_binlog
from jobmaptools import check_map
from pybeanstalkd.core.jobmap import BITS, THIN

SIZE = 1 << BITS


def put_id(h, s, delay=0) -> int:
    out = h.send(s, b"put 0 %d 60 1\r\nx\r\n" % delay)
    assert out.startswith(b"INSERTED "), out
    return int(out.split()[1])


def fat_blocks(q):
    """Blocks behind next_id's with THIN jobs or fewer that are not small."""
    cur = q.ids.next >> BITS
    return {k: (b.live, sys.getsizeof(b.table)) for k, b in q.jobs.blocks.items()
            if k != cur and b.live <= THIN and b.few is None}


def steady(h, a, n, every):
    """A consumer keeping up with its producer: each job deleted at once,
    but one in `every`, delayed for an hour (or buried: the same)."""
    kept = []
    for i in range(1, n):
        if i % every == 0:
            kept.append(put_id(h, a, delay=3600))
        else:
            assert h.send(a, b"delete %d\r\n" % put_id(h, a)) == b"DELETED\r\n"
    return kept


def test_a_block_thinned_while_it_took_new_ids_is_copied_small_once_passed():
    h = Harness()
    a = h.conn()
    q = h.e.q
    kept = steady(h, a, 10 * SIZE, 1000)
    check_map(q)
    assert q.job_count() == len(kept)
    assert fat_blocks(q) == {}  # (not 32 KiB for about 4 jobs)


def test_a_block_left_with_few_jobs_by_a_jump_of_next_id_is_copied_small():
    """A cluster leader's next block of ids starts further on (ids.py own())."""
    h = Harness()
    a = h.conn()
    q = h.e.q
    for _ in range(5):
        put_id(h, a, delay=3600)
    q.ids.next = 10 * SIZE  # the leader's new range
    put_id(h, a)
    assert fat_blocks(q) == {}


def test_thinned_blocks_stay_small_after_a_restart(tmp_path):
    h, wal = with_binlog(tmp_path)
    a = h.conn()
    q = h.e.q
    ids = [put_id(h, a) for _ in range(8 * SIZE)]
    for i in ids:
        if i % SIZE != 7:  # one job left in each block
            assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    put_id(h, a)
    assert fat_blocks(q) == {}  # small before the restart
    wal.flush()
    h2, _ = with_binlog(tmp_path)
    check_map(h2.e.q)
    assert fat_blocks(h2.e.q) == {}  # (recovery loads them into full blocks first)


def test_thinned_blocks_stay_small_on_a_follower_after_a_snapshot(tmp_path):
    """A follower catching up from a snapshot (cluster/apply.py) puts each
    job through Queue.insert."""
    from pybeanstalkd.cluster.apply import Restore, snapshot_parts

    (tmp_path / "leader").mkdir()
    (tmp_path / "follower").mkdir()
    h, wal = with_binlog(tmp_path / "leader")
    a = h.conn()
    q = h.e.q
    for i in [put_id(h, a) for _ in range(8 * SIZE)]:
        if i % SIZE != 7:
            assert h.send(a, b"delete %d\r\n" % i) == b"DELETED\r\n"
    put_id(h, a)
    assert fat_blocks(q) == {}
    fh, fwal = with_binlog(tmp_path / "follower")
    fwal.wall_offset = wal.wall_offset
    r = Restore("k")
    for part in snapshot_parts(q, wal.wall_offset):
        r.part(fh.e.q, part, fwal.wall_offset, fh.now, fh.e.max_job_size)
    r.end(fh.e.q, fh.now)
    fq = fh.e.q
    check_map(fq)
    assert set(fq.jobs) == set(q.jobs)
    assert fat_blocks(fq) == {}

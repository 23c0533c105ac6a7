"""What the binlog's directory holds at every moment a server could die:
compaction moves a job's full record into the current file, and the
file it leaves may then go. It must not go before the new record is in
the kernel (kill -9) and, when the binlog is synced, on the disk (a
power cut): else the job is in neither file."""
from __future__ import annotations

import os
import random
import shutil

from fakeclock import OPEN_WALS, Harness, with_binlog
from pybeanstalkd.binlog.bodies import DiskBodies
from pybeanstalkd.binlog.files import Wal
from pybeanstalkd.binlog.recovery import recover
from pybeanstalkd.binlog.sync import sync_inline


def recovered(d, ram_min) -> dict[int, bytes]:
    """The jobs a server started on directory d would have, and their bytes."""
    wal = (Wal(str(d), 4096, warn=lambda m: None) if ram_min is None
           else Wal(str(d), 4096, warn=lambda m: None, bodies=DiskBodies(str(d), ram_min, lambda m: None)))
    OPEN_WALS.append(wal)
    h = Harness(filesize=4096, store=wal, bodies_on_disk=ram_min is not None)
    recover(wal, h.e.q, h.e.max_job_size, h.now, lambda m: None)
    out = {j.id: wal.body(j) for j in h.e.q.jobs.values()}
    wal.close()
    return out


def test_a_kill_at_any_moment_loses_no_job_compaction_moves(tmp_path):
    """After every command, before its records are handed to the kernel
    (where the server could be killed), the directory as it is holds
    every job whose put was written and whose delete was not."""
    for ram_min in (None, 0):
        d = tmp_path / str(ram_min)
        d.mkdir()
        h, wal = with_binlog(d, filesize=4096, ram_min=ram_min)
        c = h.conn()
        rnd = random.Random(1)
        acked: dict[int, bytes] = {}
        moved = 0
        for step in range(300):
            if rnd.random() < 0.55 or len(acked) < 8:
                body = rnd.randbytes(rnd.choice((50, 300, 700)))
                got = h.send(c, b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
                new = {int(got.split()[1]): body}
            else:
                gone = rnd.choice(sorted(acked))
                assert h.send(c, b"delete %d\r\n" % gone) == b"DELETED\r\n"
                del acked[gone]
                new = {}
            # killed here: what was written before this command is there
            snap = tmp_path / "snap"
            shutil.copytree(d, snap)
            have = recovered(snap, ram_min)
            shutil.rmtree(snap)
            for i, body in acked.items():
                assert have.get(i) == body + b"\r\n", (ram_min, step, i)
            moved = wal.nmig
            wal.flush()
            acked.update(new)
        assert moved > 10  # (compaction moved jobs all along)


def test_a_file_let_go_waits_for_the_fsync_of_what_replaced_it(tmp_path):
    """Synced (-f), a file compaction emptied is unlinked only after the
    fsync that covers the records that took its jobs' place: a power cut
    before it finds the job in the old file at least."""
    h, wal = with_binlog(tmp_path, filesize=4096)
    c = h.conn()
    assert h.send(c, b"put 0 0 60 300\r\n%s\r\n" % (b"k" * 300)) == b"INSERTED 1\r\n"
    wal.flush()
    sync_inline(wal)
    first = wal.path_of(1)
    while wal.head.seq == 1:
        got = h.send(c, b"put 9 0 60 600\r\n%s\r\n" % (b"f" * 600))
        h.send(c, b"delete %d\r\n" % int(got.split()[1]))
        wal.flush()
        assert wal.nfile < 50
    assert h.e.q.jobs[1].file.seq > 1  # (moved)
    assert os.path.exists(first)  # written, not yet synced: the old record stays
    sync_inline(wal)
    assert not os.path.exists(first)

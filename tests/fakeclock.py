"""Drive the pure Engine with a fake clock: no sockets, no sleeping."""
from __future__ import annotations

from pybeanstalkd.binlog.bodies import DiskBodies
from pybeanstalkd.binlog.codec import codec_for
from pybeanstalkd.binlog.files import Wal, _falloc
from pybeanstalkd.binlog.recovery import recover
from pybeanstalkd.binlog.sync import sync_inline
from pybeanstalkd.core.engine import Engine
from pybeanstalkd.core.protocol import NS
from pybeanstalkd.core.tags import ExtState


class Harness:
    """auto: after each event, run background work to the end, as an idle
    server would; tests of the slices turn it off and call step()."""

    def __init__(self, auto=True, **kw):
        self.now = 1_000_000 * NS  # arbitrary monotonic origin
        self.e = Engine(self.now, log=lambda m: None, **kw)
        self.auto = auto

    def step(self) -> bool:
        """One slice of background work; True while more remains."""
        return self.e.step(self.now)

    def idle(self):
        if self.auto:
            while self.e.step(self.now):
                pass

    def conn(self):
        return self.e.connect()

    def take(self, s) -> bytes:
        out = b"".join(s.out)
        s.out = []
        return out

    def send(self, s, data: bytes) -> bytes:
        self.e.data(s, data, self.now)
        self.idle()
        return self.take(s)

    def advance(self, seconds: float):
        """Move the clock forward, running each timer at the time it is due."""
        target = self.now + round(seconds * NS)
        while True:
            due = self.e.next_due()
            if due is None or due > target:
                break
            self.now = max(self.now, due)
            self.e.tick(self.now)
            self.idle()
        self.now = target

    def close(self, s):
        self.e.close(s, self.now)
        self.idle()



# Binlogs made by with_binlog, closed after each test (conftest.py): a test
# that makes many (restarts, small files) would otherwise leave thousands
# of fds open for the tests after it.
OPEN_WALS: list = []


def with_binlog(tmp_path, filesize=10485760, falloc=_falloc, zero_ahead=False, ram_min=None,
                warn=lambda m: None, wall=None, **kw):
    """A Harness whose queue writes a binlog in tmp_path (recovered first),
    wired as the server does: the binlog is the engine's store from the start.
    ram_min: --bodies-on-disk, bodies of ram_min bytes (CRLF included) or
    more left in the files. wall: a fake wall clock (its time_ns()) for
    recovery, so that the records' times are set ones."""
    if kw.get("extensions", False):
        kw.setdefault("tag_state", ExtState(kw.get("max_tries", 0)))
    codec = codec_for(kw.get("tag_state"))
    if ram_min is None:
        wal = Wal(str(tmp_path), filesize, warn=warn, falloc=falloc, zero_ahead=zero_ahead,
                  codec=codec)
    else:
        wal = Wal(str(tmp_path), filesize, warn=warn, falloc=falloc, zero_ahead=zero_ahead,
                  codec=codec, bodies=DiskBodies(str(tmp_path), ram_min, warn))
        kw["bodies_on_disk"] = True
    OPEN_WALS.append(wal)
    h = Harness(filesize=filesize, store=wal, **kw)
    recover(wal, h.e.q, h.e.max_job_size, h.now, lambda m: None,
            None if wall is None else wall.time_ns())
    return h, wal


def synced(wal):
    """What the server does at the end of a pass with -f0: the records are
    written and fsynced; the files let go meanwhile are unlinked then."""
    wal.flush()
    sync_inline(wal)

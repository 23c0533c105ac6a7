"""The job ids a cluster's leader may hand out: ranges it takes from etcd
(Coordinator.take_ids), so that no id is ever used twice, across
failovers too.

Small blocks keep ids dense, as a single beanstalkd's are (applications
keep them in 32-bit columns): at a failover the next leader starts past
only what the old one owned and had not used, under 1.5 blocks. While a
leader holds its epoch, only its own transactions move etcd's counter, so
its blocks follow one another: each one extends the range it owns, and
the ids go on without a gap.

The queue never hands out an id past the end of that range (q.ids.last:
core/jobids.py, which commands.admit and the HTTP moves check): if etcd is
slow or unreachable, puts are refused (INTERNAL_ERROR) until the next
block, rather than use an id another leader may be given. The next block
is taken while half a block is still left, so that a leader busy at 100k
puts/s does not run out while etcd answers. A follower owns no id (the
leader's records move its next_id on).

Pure (no etcd here): the node passes the coordinator's take_ids.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..core.engine import Engine

ID_BLOCK = 1 << 18  # job ids taken from etcd at a time
REFILL_S = 0.05  # how often a leader checks what it has left


class IdBlocks:
    """A leader's blocks of ids, taken from etcd and handed to the queue's
    id owner (core/jobids.py) as the range it may use."""

    def __init__(self, engine: Engine, take: Callable[[int, int], Awaitable[range | None]],
                 log: Callable[[str], None]):
        """take(n, at_least): n ids no other leader has or will have,
        starting at at_least or later; None once this node no longer
        leads."""
        self.engine, self.take, self.log = engine, take, log
        self.q = engine.q
        self.ids_from = 0  # where the range owned starts (0: none owned)
        self.q.ids.bound(0)  # none yet: used up until the first block

    def left(self) -> int:
        """Ids owned and not yet used."""
        return self.q.ids.left()

    def low(self) -> bool:
        return self.left() < ID_BLOCK // 2

    def own(self, block: range) -> None:
        """Add block to what the queue may hand out: the current range
        grows if block follows it; otherwise (the first block, or ids lost
        between two takes) the range starts anew at block, and what was
        left of the old one is abandoned."""
        ids = self.q.ids
        if not (self.ids_from and block.start == ids.last + 1):
            self.ids_from = block.start
            ids.skip_to(block.start)
        # (never past the ids' top, core/jobids.py, etcd's counter however high)
        ids.bound(block.stop - 1)
        e = self.engine
        if e.said_ids_used_up and not ids.used_up():
            # (commands._ids_used_up said when puts began to be refused)
            e.said_ids_used_up = False
            self.log("job ids: puts accepted again (the last is now %d)" % ids.last)

    async def refill(self) -> bool:
        """Take the next block from etcd (UNREACHABLE passes through);
        False if this node no longer leads. A block starts at or past the
        queue's next id (a binlog may hold ids etcd never gave)."""
        block = await self.take(ID_BLOCK, self.q.ids.next)
        if block is None:
            return False
        self.own(block)
        return True

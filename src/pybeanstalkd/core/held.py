"""A connection's reservations, in blocks, so that no table grows in one step.

One dict of a connection's reservations rebuilt its whole table as it grew:
while one connection reserved 6M jobs, single reads stalled for 73, 253,
679, 1,428 and 2,402 ms, one at each doubling (docs/PERFORMANCE.md). Now
`Conn.held` maps a block number to a Held, each holding at most SIZE of the
connection's reservations, {id: Job} in the order it made them; a reserved
job refers to its block (Job.holder), and so to its holder.

A connection's blocks follow reservation order, not ids, because that order
is visible: the reference returns a closing connection's jobs in the order
they were reserved, handing each to a waiting client at once. New
reservations go to the open block until it holds SIZE, so a worker that
reserves and deletes one job at a time keeps one small block forever.

Blocks that empty are dropped, and blocks that thin out are copied small (a
dict never shrinks its table), except the one that a worker's
reserve-delete cycle would otherwise make and drop every time: a
connection's open block.

Queue's hot paths index them inline; these helpers serve the rarer steps.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .job import Held
from .jobmap import THIN

if TYPE_CHECKING:
    from .job import Conn, Job

SIZE: Final = 4096  # reservations a block takes before the next one opens
# The jobs of a freed block: never written to.
FREED: Final[dict[int, Job]] = {}


def open_block(c: Conn) -> Held:
    """c's block for its next reservation: the first, or one after a full one."""
    h = c.open_held
    key = 0 if h is None else h.key + 1
    h = c.open_held = Held(c, key)
    c.held[key] = h
    return h


def thinned(h: Held) -> None:
    """A reservation left h, which now holds THIN or fewer and is not its
    connection's open block: drop h once empty, or copy it once at THIN."""
    c = h.conn
    if not h.jobs:
        del c.held[h.key]
    elif len(h.jobs) == THIN:
        h.jobs = h.jobs.copy()

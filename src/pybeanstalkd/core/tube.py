"""A tube and a connection as the queue sees them (queue.py moves jobs
between their lists and heaps)."""
from __future__ import annotations

from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Final

from .heaps import CONN_SLACK, TUBE_SLACK, StaleHeap

# How a reserve picks among its tubes (weighted.py)
FIFO: Final = 0
WEIGHTED: Final = 1
WEIGHTED_FAIR: Final = 2
DEFAULT_TUBE: Final = b"default"  # every connection's tube at first; never freed

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .held import Held
    from .job import Job
    from .outcome import Outcome
    from .weighted import Weighted


class Tube:
    __slots__ = ("name", "ready", "run", "run_pri", "run_draining", "matching", "delayed", "buried", "waiting",
                 "using", "watching",
                 "nready", "ndelayed", "nreserved", "urgent", "total_jobs",
                 "cmd_delete", "cmd_pause", "pause", "unpause_at", "alive", "ikey", "seq",
                 "wait_hist", "work_hist", "timeouts", "buries", "tries_used_up", "ewma",
                 "ewma_n")

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.ready = StaleHeap(TUBE_SLACK)  # pri << 64 | id
        self.run: deque[int] | None = None  # ids of fresh jobs of priority run_pri
        self.run_pri = 0
        self.run_draining = False  # its stale entries are being dropped in slices
        self.matching = False  # its waiters are being served in slices (Queue._match)
        self.delayed = StaleHeap(TUBE_SLACK)  # deadline << 64 | id
        self.buried: OrderedDict[int, Job] = OrderedDict()  # FIFO, O(1) removal by id
        self.waiting: OrderedDict[Conn, None] = OrderedDict()  # FIFO of reservers
        self.using = self.watching = 0
        self.nready = self.ndelayed = self.nreserved = self.urgent = 0
        self.total_jobs = self.cmd_delete = self.cmd_pause = 0
        self.pause = 0  # ns; 0 when not paused
        self.unpause_at = 0
        self.alive = True
        self.ikey: int | None = None  # key of this tube's entry in Queue.index, if it has one
        self.seq = 0
        # For the metrics (hist.py): ready -> reserved, and reserved -> delete,
        # release, bury (a tuple indexed by WORK_DELETE...), made at first use
        # (a server may hold many tubes that never serve a job); TTR expiries
        # and buries.
        self.wait_hist: list[int] | None = None
        self.work_hist: tuple[list[int], ...] | None = None
        self.timeouts = self.buries = 0
        self.tries_used_up = 0  # jobs buried by --max-tries (of buries)
        # Reserved to deleted, ns: a moving average (Queue.delete), -1 before
        # the first, and how many deletes it has seen.
        self.ewma = -1
        self.ewma_n = 0

    def njobs(self) -> int:
        return self.nready + self.ndelayed + self.nreserved + len(self.buried)


class SwapList:
    """An array whose removal moves the last item into the hole.

    The reference keeps tubes and watch lists this way, and list-tubes shows
    the resulting order, so we keep it too; membership is O(1) here."""

    __slots__ = ("items", "index")

    def __init__(self) -> None:
        self.items: list[Tube] = []
        self.index: dict[Tube, int] = {}

    def append(self, x: Tube) -> None:
        self.index[x] = len(self.items)
        self.items.append(x)

    def remove(self, x: Tube) -> None:
        i = self.index.pop(x)
        last = self.items.pop()
        if last is not x:
            self.items[i] = last
            self.index[last] = i

    def __contains__(self, x: object) -> bool:
        return x in self.index

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Tube]:
        return iter(self.items)


class Conn:
    """What the queue knows about a client connection. The queue tells it of
    a blocked reserve's end through reserved() and no_job(); what that means
    on the wire is the subclass's (session.py)."""

    __slots__ = ("use", "watch", "nreserved", "held", "open_held", "deadlines", "waiting",
                 "timeout", "wait_key", "producer", "worker", "gone", "weighted")

    def __init__(self) -> None:
        # A Tube from Queue.attach on, which the engine calls as it makes the
        # connection: None only before that, so it is typed as a Tube.
        self.use: Tube = None  # type: ignore[assignment]
        self.watch = SwapList()
        self.nreserved = 0
        self.held: dict[int, Held] = {}  # its reservations, in blocks (held.py)
        self.open_held: Held | None = None  # the block its next reservation goes to
        self.deadlines = StaleHeap(CONN_SLACK)  # deadline << 64 | id of reserved jobs
        self.waiting = False
        self.timeout: int | None = None  # ns, for reserve-with-timeout
        self.wait_key: tuple[int, int, Conn] | None = None  # its wait_heap entry
        self.producer = self.worker = False
        self.gone = False  # closed; its reservations are being returned in slices
        # --extensions: its reserve-mode and its tubes' weights, once it
        # gave either (None: reserves as the reference's)
        self.weighted: Weighted | None = None

    def reserved(self, job: Job) -> None:
        """A reserve of this connection's got `job` (at once, or after waiting)."""
        raise NotImplementedError

    def no_job(self, outcome: Outcome) -> None:
        """A reserve of this connection's ended without a job: TIMED_OUT or
        DEADLINE_SOON (at once, or after waiting)."""
        raise NotImplementedError

    def woken(self) -> None:
        """Called when a blocked reserve has been answered."""

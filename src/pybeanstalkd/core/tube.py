"""A tube and a connection as the queue sees them (queue.py moves jobs
between their lists and heaps)."""
from __future__ import annotations

from collections import OrderedDict, deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Self

    from .held import Held
    from .job import Job


class Tube:
    __slots__ = ("name", "ready", "run", "run_pri", "delayed", "buried", "waiting",
                 "using", "watching",
                 "nready", "ndelayed", "nreserved", "urgent", "total_jobs",
                 "cmd_delete", "cmd_pause", "pause", "unpause_at", "alive", "ikey", "seq",
                 "wait_hist", "work_hist", "timeouts", "buries")

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.ready: list[int] = []  # pri << 64 | id
        self.run: deque[int] | None = None  # ids of fresh jobs of priority run_pri
        self.run_pri = 0
        self.delayed: list[int] = []  # deadline << 64 | id
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
    """What the queue knows about a client connection."""

    __slots__ = ("use", "watch", "nreserved", "held", "open_held", "deadlines", "waiting",
                 "timeout", "wait_key", "producer", "worker", "out", "sink", "gone")

    def __init__(self, sink: list[Self]) -> None:
        # A Tube from Queue.attach on, which the engine calls as it makes the
        # connection: None only before that, so it is typed as a Tube.
        self.use: Tube = None  # type: ignore[assignment]
        self.watch = SwapList()
        self.nreserved = 0
        self.held: dict[int, Held] = {}  # its reservations, in blocks (held.py)
        self.open_held: Held | None = None  # the block its next reservation goes to
        self.deadlines: list[int] = []  # deadline << 64 | id of reserved jobs
        self.waiting = False
        self.timeout: int | None = None  # ns, for reserve-with-timeout
        self.wait_key: tuple[int, int, Conn] | None = None  # its wait_heap entry
        self.producer = self.worker = False
        self.out: list[bytes] = []
        self.sink = sink  # the engine's list of connections with output
        self.gone = False  # closed; its reservations are being returned in slices

    def send(self: Self, data: bytes) -> None:
        if not self.out:
            self.sink.append(self)
        self.out.append(data)

    def send_job(self: Self, word: bytes, job: Job) -> None:
        out = self.out
        if not out:
            self.sink.append(self)
        body = job.body
        out.append(b"%s %d %d\r\n" % (word, job.id, len(body) - 2))  # (job_header, inline)
        out.append(body)

    def woken(self) -> None:
        """Called when a blocked reserve has been answered."""

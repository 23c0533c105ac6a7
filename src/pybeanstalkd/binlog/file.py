"""One file of the binlog, as the Wal (files.py) keeps it: its sequence
number and path, its descriptor, the bytes it has free and reserved, the
references that hold it, and the ids of the full records written to it.

A job's full record, and a cooldown's (ext.py), keeps the File it is in;
the bodies' policy (bodies.py) reads a body back from it. So it is here,
below them all, and not with the Wal, which calls them.
"""
from __future__ import annotations

from array import array
from collections.abc import Callable


class File:
    __slots__ = ("seq", "path", "fd", "free", "resv", "refs", "ids", "add_id", "next",
                 "open", "unsynced", "zeroed")

    def __init__(self, seq: int, path: str) -> None:
        self.seq = seq
        self.path = path
        self.fd = -1
        self.free = self.resv = self.refs = 0
        self.zeroed = 0  # bytes from the start written as records or zeros (-f0)
        # The ids of the full records written here, stale ones included (a
        # job deleted or moved on is left in place): 8 bytes a record, where
        # a dict of the live ones cost about 48 a job. Compaction walks it
        # from the end (Wal._live_in).
        self.ids: array[int] = array("Q")
        # ids.append, bound once (ids is never replaced): compiled, a call
        # of the method by name looks it up on the array each time (about
        # 150 instructions), and a -f0 put adds its id before its fsync.
        self.add_id: Callable[[int], None] = self.ids.append
        self.next: File | None = None
        self.open = False
        self.unsynced = False

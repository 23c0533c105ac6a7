"""Where the queue's job records go: the binlog (binlog/files.py: Wal), or
nowhere (NullStore, the null store). The queue writes a record next to
each change that must outlive a restart (put, delete, release with a
delay, bury, kick...), and the server's reply gate (server/gate.py)
answers once it is safe."""
from __future__ import annotations

from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    from typing import TypeAlias

    from .job import Job
    from .tags import Clear, Cooldown

    # A record of the put tags' state that is not a job's (binlog/ext.py)
    Record: TypeAlias = "Cooldown | Clear"


# The binlog (a native class) and the stores the tests make (a binlog with
# no room, one that fails; interpreted classes) are its subclasses. The
# queue calls the one it has through this class's methods: compiled, a
# direct call where a protocol's was a generic method call (about 800
# instructions a record).
@mypyc_attr(allow_interpreted_subclasses=True)
class Store:
    """Where job records go; this one takes every reservation and writes
    nothing, as the null store (NullStore) does. The binlog is the other
    (binlog/files.py: Wal)."""

    lsn = 0  # bytes of records produced so far
    filesize = 10485760  # the -s value, for stats

    def __init__(self) -> None:
        # Does it keep records? Only the null store does not: a put's and
        # a delete's paths (commands.store_put, Queue.place_ready and
        # delete) ask this, not its methods, which would do nothing
        # (two calls a put, one a delete: 16 instructions a put compiled,
        # 697 pure, which would leave the pure put 43 under its budget; a
        # delete, 6 compiled, 316 pure). An instance's, not its class's:
        # interpreted, a class's attribute read through an instance is not
        # specialized, about 200 instructions a read.
        self.keeps = True

    # (read only: the binlog gives its bodies' policy's, binlog/bodies.py)
    @property
    def on_disk(self) -> int:
        """Bytes of the bodies left in the binlog (--bodies-on-disk)."""
        return 0

    @property
    def transient(self) -> bool:
        """body() gave None for want of descriptors or memory: try again later."""
        return False

    def stats(self) -> tuple[int, int, int, int, int]:
        """(oldest index, current index, migrations, records written, max size)"""
        return (0, 0, 0, 0, self.filesize)

    def reserve_put(self, j: Job) -> bool:
        return True

    def reserve_update(self, j: Job) -> bool:
        return True

    def write(self, j: Job, rec: bytes | None = None) -> bool:
        return True

    def note(self, rec: Record) -> bool:
        """Reserve room for a record of ours and write it (False: no room,
        or the binlog failed)."""
        return True

    def forget(self, rec: Record) -> None:
        """A record written by note() no longer matters (its file may go)."""

    def body(self, j: Job) -> bytes | None:
        """j's body, CRLF included (None: the binlog could not give it back,
        and said why)."""
        body = j.body
        return body if isinstance(body, bytes) else None  # (no OnDisk here: no binlog)


class NullStore(Store):
    """No binlog: the queue's store when it is given none. It keeps
    nothing (keeps is False), so a put and a delete do not call it."""

    def __init__(self) -> None:
        super().__init__()
        self.keeps = False

"""Values by job id, in blocks of 4,096 consecutive ids, for the jobs of a
kind (--extensions: the tagged jobs' tags, a group's members), as the job
map (jobmap.py) keeps every job.

A dict by id boxes each id it is given and, as it fills, copies its one
table into a bigger one: most of what a tagged put cost beyond a plain
one. Ids are handed out in sequence, so the values of a block come
together and mostly go together. A block keeps its values in a small dict
by slot (`id & LOW`) while it has DENSE or fewer (a few tagged jobs among
plain ones, a small group's members), and past that in a table indexed by
slot, None where no value is: 32 KiB, what the small dict takes for about
480 values (68 bytes each, its key boxed), in which a value is set with no
hash, no box and no growth. The block made after one holding more than
DENSE is a table from the start: values that came dense come on dense. A
table down to THIN values goes back to a small dict, so that a few
survivors do not keep 32 KiB each; an emptied block goes.

The block a value was last set in is kept at hand: a put's id is nearly
always in the block of the put before it, so its value is set (and a
recent job's read) without looking its block up.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Iterator

BITS: Final = 12  # ids per block: 1 << BITS, as the job map's
LOW: Final = (1 << BITS) - 1  # id & LOW: a value's slot in its block
DENSE: Final = 256  # a block with more values than this keeps them in a table
THIN: Final = 16  # ... until it is down to this many

V = TypeVar("V")


class IdBlock(Generic[V]):
    """The values of one block of ids, by slot; `live` counts them. In
    `few` while it has DENSE or fewer, else in `table` (`few` None)."""

    __slots__ = ("live", "table", "few")

    def __init__(self, dense: bool) -> None:
        self.live = 0
        self.table: list[V | None] = [None] * (LOW + 1) if dense else []
        self.few: dict[int, V] | None = None if dense else {}

    def get(self, i: int) -> V | None:
        few = self.few
        if few is None:
            return self.table[i]
        return few.get(i)

    def thicken(self, few: dict[int, V]) -> None:
        """Its values (few) moved to a table."""
        table: list[V | None] = [None] * (LOW + 1)
        for i, v in few.items():
            table[i] = v
        self.table = table
        self.few = None

    def thin(self) -> None:
        """Its values moved to a small dict, its table dropped."""
        few: dict[int, V] = {}
        for i, v in enumerate(self.table):
            if v is not None:
                few[i] = v
        self.few = few
        self.table = []

    def slots(self) -> list[int]:
        """Where its values are (ascending in a table)."""
        few = self.few
        if few is None:
            return [i for i, v in enumerate(self.table) if v is not None]
        return list(few)


# The block last set in of a map that has none: never matched (its number
# is -1), never written to.
_NO_BLOCK: Final[IdBlock[Any]] = IdBlock(False)


class IdMap(Generic[V]):
    """A value (never None) by job id; len() is O(1)."""

    __slots__ = ("blocks", "n", "k", "last")

    def __init__(self) -> None:
        self.blocks: dict[int, IdBlock[V]] = {}  # id >> BITS -> its block
        self.n = 0  # the values held
        # The block a value was last set in, and its number (-1: none)
        self.k = -1
        self.last: IdBlock[V] = _NO_BLOCK

    def _block(self, k: int) -> IdBlock[V] | None:
        return self.last if k == self.k else self.blocks.get(k)

    def get(self, id_: int) -> V | None:
        b = self._block(id_ >> BITS)
        return None if b is None else b.get(id_ & LOW)

    def __getitem__(self, id_: int) -> V:
        v = self.get(id_)
        if v is None:
            raise KeyError(id_)
        return v

    def __setitem__(self, id_: int, v: V) -> None:
        k = id_ >> BITS
        b = self.last if k == self.k else self._open(k)
        i = id_ & LOW
        few = b.few
        if few is None:
            table = b.table
            if table[i] is None:
                b.live += 1
                self.n += 1
            table[i] = v
        else:
            if i not in few:
                b.live += 1
                self.n += 1
            few[i] = v
            if b.live > DENSE:
                b.thicken(few)

    def _open(self, k: int) -> IdBlock[V]:
        """Block k, made if it has none, now the block last set in."""
        b = self.blocks.get(k)
        if b is None:
            b = self.blocks[k] = IdBlock(self.last.live > DENSE)
        self.k = k
        self.last = b
        return b

    def pop(self, id_: int) -> V | None:
        """id_'s value, taken out (None: it had none)."""
        k = id_ >> BITS
        b = self._block(k)
        if b is None:
            return None
        i = id_ & LOW
        few = b.few
        if few is None:
            v = b.table[i]
            if v is None:
                return None
            b.table[i] = None
        else:
            v = few.pop(i, None)
            if v is None:
                return None
        b.live -= 1
        self.n -= 1
        if not b.live:
            del self.blocks[k]
            if k == self.k:
                self.k = -1
                self.last = _NO_BLOCK
        elif few is None and b.live <= THIN:
            b.thin()
        return v

    def __delitem__(self, id_: int) -> None:
        if self.pop(id_) is None:
            raise KeyError(id_)

    def __contains__(self, id_: int) -> bool:
        return self.get(id_) is not None

    def __len__(self) -> int:
        return self.n

    def ids(self, k: int) -> list[int]:
        """The ids of block k (id >> BITS) that hold a value, a copy."""
        b = self.blocks.get(k)
        if b is None:
            return []
        base = k << BITS
        return [base + i for i in b.slots()]

    def __iter__(self) -> Iterator[int]:
        """Every id that holds a value, a block at a time."""
        for k in list(self.blocks):
            yield from self.ids(k)

    def items(self) -> list[tuple[int, V]]:
        """Every (id, value), in one go (recovery, tests)."""
        out: list[tuple[int, V]] = []
        for id_ in self:
            v = self.get(id_)
            assert v is not None
            out.append((id_, v))
        return out

    def clear(self) -> None:
        self.blocks.clear()
        self.n = 0
        self.k = -1
        self.last = _NO_BLOCK

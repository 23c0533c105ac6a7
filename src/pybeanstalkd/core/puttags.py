"""Put tags (--extensions): what a put may say about its job beyond the
reference's four numbers, parsed as tuber 0.6.4 parses them into a Tags,
which the job keeps (Job.tags). The server-wide state they make is
tags.py's; tagged.py applies them to the queue.

    idp:KEY[:TTL]   a unique job: while a job of this tube holds KEY, a put
                    with it answers that job (INSERTED <id> <STATE>[ <pri>],
                    the priority lowered to the new one if that is lower);
                    TTL seconds after its delete, INSERTED <id> DELETED
    con:KEY[:N]     at most N jobs with KEY (any tube) reserved at once; the
                    others are hidden from reserves until a slot frees
    grp:NAME        a member of group NAME until it is deleted
    aft:NAME        held (delayed, in no heap) until NAME has no member left
                    and none of them buried
    try:N           (ours) buried instead of coming back once its releases
                    and TTR expiries reach N (as --max-tries N, for one job)

A tag may come twice (the last wins) and in any order; any other word, an
empty or ill-formed key or name, a TTL that is not a u32, N = 0: BAD_FORMAT,
and the body that follows is read as a command line, as in tuber. Keys and
names are tube names (no ':').
"""
from __future__ import annotations

from typing import Final

from mypy_extensions import mypyc_attr

from .protocol import U32_MAX, Bad, name_ok


# Its fields are bytes, ints and None: a Tags is in no reference cycle, so
# the collector need not track it (compiled). Each put with an idp: key
# makes one, which the young collection traversed and which carried a GC
# header: a new-key put 15,882 -> 15,656 instructions.
@mypyc_attr(acyclic=True)
class Tags:
    """What a tagged job's put said (a job without tags has none); never
    changed once made, so that the jobs of a repeated tag line share one."""

    __slots__ = ("idp", "ttl", "con", "limit", "grp", "aft", "tries")

    def __init__(self, idp: bytes | None = None, ttl: int = 0, con: bytes | None = None,
                 limit: int = 1, grp: bytes | None = None, aft: bytes | None = None,
                 tries: int = 0) -> None:
        self.idp = idp
        self.ttl = ttl  # seconds a deleted job's key stays taken
        self.con = con
        self.limit = limit
        self.grp = grp
        self.aft = aft
        self.tries = tries  # 0: --max-tries decides

    def with_idp(self, idp: bytes, ttl: int) -> Tags:
        """These tags with idp: in place of theirs."""
        return Tags(idp, ttl, self.con, self.limit, self.grp, self.aft, self.tries)

    def fields(self) -> tuple[bytes | None, int, bytes | None, int, bytes | None,
                              bytes | None, int]:
        return (self.idp, self.ttl, self.con, self.limit, self.grp, self.aft, self.tries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tags) and self.fields() == other.fields()

    def __hash__(self) -> int:
        return hash(self.fields())

    def __repr__(self) -> str:
        return "Tags(idp=%r, ttl=%r, con=%r, limit=%r, grp=%r, aft=%r, tries=%r)" % self.fields()


NO_TAGS: Final = Tags()


def is_void(idp: bytes) -> bool:
    """Is idp: key idp one a flush-tube cleared (void_idp)?"""
    return idp[:1] == b":"


def void_idp(tags: Tags) -> Tags:
    """tags whose idp: key a flush-tube cleared: ':' in place of its first
    byte, a key no put can name. The binlog's record of the tags keeps its
    size (and so its accounting), and says the key is gone."""
    assert tags.idp is not None
    return tags.with_idp(b":" + tags.idp[1:], tags.ttl)


def rust_uint(word: bytes, limit: int = U32_MAX) -> int:
    """A number as Rust's str::parse::<uN> reads it (tuber's parser):
    digits, an optional leading '+', no more than `limit`; Bad otherwise."""
    digits = word[1:] if word[:1] == b"+" else word
    if not digits or not digits.isdigit():
        raise Bad
    value = int(digits)
    if value > limit:
        raise Bad
    return value


def _keyed(value: bytes) -> tuple[bytes, int | None]:
    """KEY or KEY:NUMBER, split at the last ':'."""
    i = value.rfind(b":")
    key, num = (value, None) if i < 0 else (value[:i], rust_uint(value[i + 1:]))
    if not name_ok(key):
        raise Bad
    return key, num


def with_idp(tags: Tags | None, word: bytes) -> Tags | None:
    """tags (None: none) with the idp:KEY[:TTL] word added, if the word is
    one, well formed and tags have no idp: yet; else None (parse_tags
    decides). A put's fast path: unique keys make every tail new."""
    if word[:4] != b"idp:" or (tags is not None and tags.idp is not None):
        return None
    i = word.rfind(b":")
    if i == 3:
        key = word[4:]
        ttl = 0
    else:
        key, num = word[4:i], word[i + 1:]
        if not num.isdigit() or len(num) > 9:
            return None
        ttl = int(num)
    if not name_ok(key):
        return None
    return Tags(key, ttl) if tags is None else tags.with_idp(key, ttl)


def parse_tags(words: list[bytes]) -> Tags:
    idp: bytes | None = None
    con = grp = aft = None
    ttl = tries = 0
    limit = 1
    for w in words:
        kind, value = w[:4], w[4:]
        if kind == b"idp:":
            idp, n = _keyed(value)
            ttl = n or 0
        elif kind == b"grp:" or kind == b"aft:":
            if not name_ok(value):
                raise Bad
            if kind == b"grp:":
                grp = value
            else:
                aft = value
        elif kind == b"con:":
            con, n = _keyed(value)
            if n == 0:
                raise Bad
            limit = 1 if n is None else n
        elif kind == b"try:":
            tries = rust_uint(value)
            if not tries:
                raise Bad
        else:
            raise Bad
    return Tags(idp, ttl, con, limit, grp, aft, tries)

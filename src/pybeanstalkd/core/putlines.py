"""Put lines as the engine's fast path has parsed them (Engine.command).

A producer sends the same few put lines, which differ only where the body
size does, so each is parsed once and looked up after that. The engine owns
one PutLines; its caches live and go with it.

Only lines the fast path took are ever added (plain digits that fit, single
spaces between them; a tagged line's tags as they came, once they parsed),
and each cache stops growing at ENTRIES entries. A client chooses the
lines, so their size is bounded too: a plain put line is at most 47 bytes,
and a tagged line or tail is kept only if its tags are at most
LINE_BUF_SIZE (224) bytes, the longest line the reference takes (a tagged
line may be 21 KB: 4,096 of those would be 86 MB). Together under 4 MiB
(tests/core/test_client_bounds.py measures it).

What each cache saves, compiled (callgrind instructions a command, 100-byte
bodies, cmd-cost.py; each measured by turning it off): whole plain put
lines 2,644 a put (16,309 -> 13,665; 2,581 pipelined), and 13,533 an idp:
put, whose line less its key is looked up; the u32 arguments 3,141 a put
whose line is not known (19,450 -> 16,309), and a release's two; whole
tagged lines 4,808 a con:c put (19,260 -> 14,452); the tags by their
tail 4,682 a tagged put whose line is not known (23,942 -> 19,260).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

from .protocol import LINE_BUF_SIZE, U32_MAX
from .tags import parse_tags, with_idp

if TYPE_CHECKING:
    from typing import TypeAlias

    from .tags import Tags

    # A cached put line's pri, delay, ttr and size. (One tuple type: read
    # through a union of two, each field was a generic lookup, compiled.)
    PutHead: TypeAlias = tuple[int, int, int, int]

ENTRIES: Final = 4096  # the most each cache keeps


@final
class PutLines:
    __slots__ = ("u32s", "heads", "tagged", "tails")

    def __init__(self) -> None:
        # The u32 arguments of put, release and reserve-with-timeout, by
        # their bytes: most clients send a few values (priority, delay,
        # ttr, body size, timeout).
        self.u32s: dict[bytes, int] = {}
        # Whole plain put lines, parsed (the engine looks them up).
        self.heads: dict[bytes, PutHead] = {}
        # Whole put lines with tags that repeat (no idp: key; --extensions).
        self.tagged: dict[bytes, tuple[PutHead, Tags]] = {}
        # Tags by the put line's words after the size, for tags without
        # idp: (most puts repeat a few con:/grp:/aft:/try: words). Shared
        # by the jobs put with them, so never changed.
        self.tails: dict[bytes, Tags] = {}

    def u32(self, arg: bytes) -> int:
        """A plain u32 argument's value, or -1: not plain, or too big."""
        value = self.u32s.get(arg, -1)
        if value >= 0:
            return value
        if arg.isdigit():
            value = int(arg)
            if value <= U32_MAX:
                if len(self.u32s) < ENTRIES:
                    self.u32s[arg] = value
                return value
        return -1

    def keep_head(self, line: bytes, head: PutHead) -> None:
        if len(self.heads) < ENTRIES:
            self.heads[line] = head

    def keep_tagged(self, args: list[bytes], head: PutHead, tags: Tags) -> None:
        """A tagged put line the fast path took (args: its words after
        "put", the tail last): kept whole, or without its idp: word (what
        keyed() and the engine look up: keys are unique)."""
        tail = args[4]
        if len(self.tagged) >= ENTRIES or len(tail) > LINE_BUF_SIZE:
            return
        if tags.idp is None:
            self.tagged[b"put %s %s %s %s %s" % tuple(args)] = (head, tags)
            return
        words = tail.split(b" ")
        others = [w for w in words if w[:4] != b"idp:"]
        if len(others) == len(words) - 1 and b"" not in others:
            line = b"put %s %s %s %s" % tuple(args[:4])
            if not others:
                self.keep_head(line, head)
            else:
                rest = b" ".join(others)
                self.tagged[line + b" " + rest] = (head, self.tail_tags(rest))

    def keyed(self, line: bytes, i: int) -> tuple[PutHead | None, Tags | None]:
        """A put line known but for its idp: word at line[i + 1:] (anywhere
        in its tags, a TTL allowed): its numbers and tags, or Nones."""
        j = line.find(b" ", i + 1)
        word, rest = (line[i + 1:], line[:i]) if j < 0 else (line[i + 1:j], line[:i] + line[j:])
        head = self.heads.get(rest)
        if head is not None:
            return head, with_idp(None, word)
        tagged = self.tagged.get(rest)
        if tagged is not None:
            return tagged[0], with_idp(tagged[1], word)
        return None, None

    def tail_tags(self, tail: bytes) -> Tags:
        """parse_tags of a put line's tail (the words after its size)."""
        tags = self.tails.get(tail)
        if tags is not None:
            return tags
        i = tail.find(b"idp:")
        if i == 0 or (i > 0 and tail[i - 1] == 32):
            # A key differs from put to put; the other tags repeat (kept).
            j = tail.find(b" ", i)
            word = tail[i:] if j < 0 else tail[i:j]
            rest = tail[:max(i - 1, 0)] if j < 0 else tail[:i] + tail[j + 1:]
            tags = with_idp(self.tail_tags(rest) if rest else None, word)
            if tags is not None:
                return tags
        tags = parse_tags(tail.split())
        if tags.idp is None and len(self.tails) < ENTRIES and len(tail) <= LINE_BUF_SIZE:
            self.tails[tail] = tags
        return tags

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
tail 4,682 a tagged put whose line is not known (23,942 -> 19,260). The
whole lines, plain and tagged, are one cache: a line with an idp: key,
never kept, misses once rather than twice.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

from .protocol import INT_MAX, LINE_BUF_SIZE, NS, U32_MAX
from .puttags import parse_tags, with_idp

if TYPE_CHECKING:
    from typing import TypeAlias

    from .puttags import Tags

    # A cached put line's pri, delay, ttr and size. (One tuple type: read
    # through a union of two, each field was a generic lookup, compiled.)
    PutHead: TypeAlias = tuple[int, int, int, int]
    # ... and its tags: None for a plain put's line
    PutLine: TypeAlias = tuple[int, int, int, int, Tags | None]

ENTRIES: Final = 4096  # the most each cache keeps


@final
class PutLines:
    __slots__ = ("u32s", "known", "tails", "timeouts", "keyed_front", "keyed_head")

    def __init__(self) -> None:
        # The u32 arguments of put, release and reserve-with-timeout, by
        # their bytes: most clients send a few values (priority, delay,
        # ttr, body size, timeout).
        self.u32s: dict[bytes, int] = {}
        # Whole put lines, parsed: plain, or (--extensions) with tags that
        # repeat (no idp: key), so that one lookup finds either, and misses
        # once for a line with a key.
        self.known: dict[bytes, PutLine] = {}
        # Tags by the put line's words after the size, for tags without
        # idp: (most puts repeat a few con:/grp:/aft:/try: words). Shared
        # by the jobs put with them, so never changed.
        self.tails: dict[bytes, Tags] = {}
        # Whole reserve-with-timeout lines, by their bytes: their timeouts
        # in ns. A worker sends one line again and again, which one lookup
        # finds, where a prefix test, the argument cut off and its value
        # looked up (u32) cost about 900 instructions a reserve
        # interpreted. A plain line only (timeout()), so at most 31 bytes.
        self.timeouts: dict[bytes, int] = {}
        # The last put line that was a known plain line and " idp:KEY" (the
        # commonest keyed put), up to its key, and its numbers: the next
        # line that starts so (a producer's keyed puts of one size do) is
        # known by a compare, where cutting its key off and looking the
        # rest up in `known` cost 1,200 instructions. (The engine keeps
        # it: put lines start with 'p', so that none starts as this.)
        self.keyed_front = b"-"
        self.keyed_head: PutHead = (0, 0, 0, 0)

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

    def timeout(self, line: bytes) -> int | None:
        """A reserve-with-timeout line's timeout in ns, if its argument is
        plain (u32) and at most INT_MAX (the line kept); else None."""
        value = self.u32(line[21:])
        if not 0 <= value <= INT_MAX:
            return None
        value *= NS
        # (31 bytes: the command and a space, 21, and a u32's 10 digits; a
        # line padded longer with zeros is read, not kept)
        if len(self.timeouts) < ENTRIES and len(line) <= 31:
            self.timeouts[line] = value
        return value

    def keep(self, line: bytes, head: PutHead, tags: Tags | None) -> None:
        if len(self.known) < ENTRIES:
            self.known[line] = (head[0], head[1], head[2], head[3], tags)

    def keep_tagged(self, args: list[bytes], head: PutHead, tags: Tags) -> None:
        """A tagged put line the fast path took (args: its words after
        "put", the tail last): kept whole, or without its idp: word (what
        keyed() and the engine look up: keys are unique)."""
        tail = args[4]
        if len(tail) > LINE_BUF_SIZE:
            return
        if tags.idp is None:
            self.keep(b"put %s %s %s %s %s" % tuple(args), head, tags)
            return
        words = tail.split(b" ")
        others = [w for w in words if w[:4] != b"idp:"]
        if len(others) == len(words) - 1 and b"" not in others:
            line = b"put %s %s %s %s" % tuple(args[:4])
            if not others:
                self.keep(line, head, None)
            else:
                rest = b" ".join(others)
                self.keep(line + b" " + rest, head, self.tail_tags(rest))

    def keyed(self, line: bytes, i: int) -> tuple[PutHead | None, Tags | None]:
        """A put line known but for its idp: word at line[i + 1:] (anywhere
        in its tags, a TTL allowed): its numbers and tags, or Nones."""
        j = line.find(b" ", i + 1)
        word, rest = (line[i + 1:], line[:i]) if j < 0 else (line[i + 1:j], line[:i] + line[j:])
        known = self.known.get(rest)
        if known is None:
            return None, None
        pri, delay, ttr, size, tags = known
        return (pri, delay, ttr, size), with_idp(tags, word)

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

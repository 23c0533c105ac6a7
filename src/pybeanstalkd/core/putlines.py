"""Put lines as the engine's fast path has parsed them (Engine.command).

A producer sends the same few put lines, which differ only where the body
size does, so each is parsed once and looked up after that. Only lines
the fast path took are ever added (plain digits that fit, single spaces
between them; a tagged line's tags as they came, once they parsed), and
each cache stops growing at 4,096 entries. A client chooses the lines, so
their size is bounded too: a plain put line is at most 47 bytes, and a
tagged line is cached only if its tags are at most LINE_BUF_SIZE (224)
bytes, the longest line the reference takes (a tagged line may be 21 KB:
4,096 of those would be 86 MB). Together with tags.py's cache of tag
words, under 4 MiB (tests/core/test_client_bounds.py measures it).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .protocol import U32_MAX
from .tags import with_idp

if TYPE_CHECKING:
    from typing import TypeAlias

    from .tags import Tags

    # A cached put line's pri, delay, ttr and size. (One tuple type: read
    # through a union of two, each field was a generic lookup, compiled.)
    PutHead: TypeAlias = tuple[int, int, int, int]

# The u32 arguments of put and release, by their bytes: most clients send a
# few values (priority, delay, ttr, body size), and a lookup costs half of
# isdigit and int. Only plain digits that fit are ever added.
U32S: Final[dict[bytes, int]] = {}


# Whole put lines, parsed: a producer sends the same few (they differ only
# where the body size does). Only lines the fast path took are added.
PUTS: Final[dict[bytes, PutHead]] = {}


# The same for put lines with tags that repeat (no idp: key; --extensions).
TAGGED_PUTS: Final[dict[bytes, tuple[PutHead, Tags]]] = {}


def keyed_put(line: bytes, i: int) -> tuple[PutHead | None, Tags | None]:
    """A put line known but for its idp: word at line[i + 1:] (anywhere in
    its tags, a TTL allowed): its numbers and tags, or Nones."""
    j = line.find(b" ", i + 1)
    word, rest = (line[i + 1:], line[:i]) if j < 0 else (line[i + 1:j], line[:i] + line[j:])
    hdr = PUTS.get(rest)
    if hdr is not None:
        return hdr, with_idp(None, word)
    tagged = TAGGED_PUTS.get(rest)
    if tagged is not None:
        return tagged[0], with_idp(tagged[1], word)
    return None, None


def u32(arg: bytes) -> int:
    """A plain u32 argument's value (cached), or -1: not plain, or too big."""
    if arg.isdigit():
        value = int(arg)
        if value <= U32_MAX:
            if len(U32S) < 4096:
                U32S[arg] = value
            return value
    return -1

"""Wire format: command-line framing, command parsing and reply bytes. No I/O.

The parsing rules are beanstalkd 1.13's (prot.c), quirks included, because
clients and their test suites depend on the exact replies.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any, TypeAlias

    # A parsed command: (op, *args). Its arguments' number and types depend
    # on op (see parse), which a static type cannot tie to the string, so
    # each handler reads the ones its own op has.
    Command: TypeAlias = tuple[Any, ...]

LINE_BUF_SIZE: Final = 224  # a command line, CRLF included, may be at most this long
MAX_TUBE_NAME_LEN: Final = 200
U32_MAX: Final = 0xFFFFFFFF
U64_MAX: Final = 0xFFFFFFFFFFFFFFFF
INT_MAX: Final = 0x7FFFFFFF
NS: Final = 1_000_000_000

NAME_CHARS: Final = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()"
# Each byte to itself if a name may hold it, else to another byte: a name
# is all name chars if translate(NAME_TABLE) leaves it as it is, in half
# the time translate(None, NAME_CHARS) takes (which builds its table per
# call). (Compiled, translate is a call to C, which returns the name
# itself when no byte changed; .isalpha() was a method looked up by name
# at each call: an idp: put's name_ok of its key 504 -> 296 instructions,
# and the compare with the name in place of a prefix test of a string of
# 'a's, a new-key put 12,008 -> 11,974.)
NAME_TABLE: Final = bytes(c if c in NAME_CHARS else c ^ 128 for c in range(256))

# Replies that carry no arguments.
OUT_OF_MEMORY: Final = b"OUT_OF_MEMORY\r\n"
INTERNAL_ERROR: Final = b"INTERNAL_ERROR\r\n"
DRAINING: Final = b"DRAINING\r\n"
BAD_FORMAT: Final = b"BAD_FORMAT\r\n"
UNKNOWN_COMMAND: Final = b"UNKNOWN_COMMAND\r\n"
EXPECTED_CRLF: Final = b"EXPECTED_CRLF\r\n"
JOB_TOO_BIG: Final = b"JOB_TOO_BIG\r\n"
NOT_FOUND: Final = b"NOT_FOUND\r\n"
DELETED: Final = b"DELETED\r\n"
RELEASED: Final = b"RELEASED\r\n"
BURIED: Final = b"BURIED\r\n"
TOUCHED: Final = b"TOUCHED\r\n"
KICKED: Final = b"KICKED\r\n"
PAUSED: Final = b"PAUSED\r\n"
NOT_IGNORED: Final = b"NOT_IGNORED\r\n"
TIMED_OUT: Final = b"TIMED_OUT\r\n"
DEADLINE_SOON: Final = b"DEADLINE_SOON\r\n"


class Bad(Exception):
    """The command line does not parse: the reply is BAD_FORMAT."""


def line_in(window: bytes) -> bytes | None:
    """The command line at the start of window, its CRLF left off; None
    if there is none yet.

    Like the reference, only the first CR counts, it must be followed by
    LF, and it is searched for in all but the last buffered byte. (The
    line is partition()'s: its one argument is passed as it is, where
    find() parses its arguments from a tuple, with the line then sliced
    again: 1,290 instructions a command compiled, about 1,000 now.) The
    caller slices the window, and an unpipelined command's read, which
    is the window, is not sliced: compiled, a slice is a copy even of
    all of it, about 200 instructions of a put's 1,370 here.
    """
    line, cr, rest = window.partition(b"\r")
    return line if rest and rest[0] == 10 else None


def line_at(buf: bytes, pos: int, end: int) -> bytes | None:
    """The command line at buf[pos:end] (line_in)."""
    return line_in(buf[pos:end])


def find_line_end(buf: bytes, pos: int, end: int) -> int:
    """Length of the command line (CRLF included) at buf[pos:end], or 0."""
    line = line_at(buf, pos, end)
    return 0 if line is None else len(line) + 2


def read_num(line: bytes, pos: int, limit: int) -> tuple[int, int]:
    """read_u64/read_u32: skip spaces, require a digit, parse base 10.

    Returns (value, position after the digits)."""
    n = len(line)
    while pos < n and line[pos] == 32:
        pos += 1
    start = pos
    while pos < n and 48 <= line[pos] <= 57:
        pos += 1
    if pos == start:
        raise Bad
    value = int(line[start:pos])
    if value > limit:
        raise Bad
    return value, pos


def plain_id(arg: bytes) -> int:
    """The value of arg if it is 1 to 19 ASCII digits (a job id as clients
    send it), else -1: what the engine's fast paths take; anything else goes
    through parse(). Compiled, this loop costs under half of isdigit() and
    int() (about 470 instructions a delete against 1,070); indexing the bytes
    in a range() costs 200 less compiled, and 1,770 more interpreted."""
    if not 0 < len(arg) < 20:
        return -1
    value = 0
    for c in arg:
        if not 48 <= c <= 57:
            return -1
        value = value * 10 + c - 48
    return value


def read_last(line: bytes, pos: int, limit: int) -> int:
    """A number that must end the line: no trailing space or garbage."""
    arg = line[pos:]
    if arg.isdigit():  # fast path: the common, well-formed case
        value = int(arg)
    else:
        value, pos = read_num(line, pos, limit)
        if pos != len(line):
            raise Bad
    if value > limit:
        raise Bad
    return value


_STRTOUL_SPACE = b" \t\n\v\f\r"


def read_strtoul(arg: bytes) -> int:
    """kick's bound: C strtoul semantics truncated to 32 bits.

    Leading whitespace and a sign are accepted, trailing garbage ignored;
    only "no digits" and 64-bit overflow are errors. "-1" wraps around."""
    pos, n = 0, len(arg)
    while pos < n and arg[pos] in _STRTOUL_SPACE:
        pos += 1
    neg = False
    if pos < n and arg[pos] in b"+-":
        neg = arg[pos] == 45
        pos += 1
    start = pos
    while pos < n and 48 <= arg[pos] <= 57:
        pos += 1
    if pos == start:
        raise Bad
    value = int(arg[start:pos])
    if value > U64_MAX:
        raise Bad
    if neg:
        value = (-value) & U64_MAX
    return value & U32_MAX


def name_ok(name: bytes) -> bool:
    return (
        0 < len(name) <= MAX_TUBE_NAME_LEN
        and name.translate(NAME_TABLE) == name
        and name[0] != 45  # '-'
    )


def read_tube_name(line: bytes, pos: int) -> tuple[bytes, int]:
    """pause-tube's name: skip spaces, then the longest run of name chars."""
    n = len(line)
    while pos < n and line[pos] == 32:
        pos += 1
    start = pos
    while pos < n and line[pos] in NAME_CHARS:
        pos += 1
    if pos == start:
        raise Bad
    return line[start:pos], pos


_SECONDS: dict[int, int] = {}


def seconds(n: int) -> int:
    """n seconds in ns, one shared int per value: every job keeps its ttr
    and delay, and most jobs use the same few values."""
    ns = _SECONDS.get(n)
    if ns is None:
        ns = n * NS
        if len(_SECONDS) < 4096:
            _SECONDS[n] = ns
    return ns


# The arguments of each command, parsed as the reference does: each parser
# takes the command's name, the line (CRLF stripped) and where its
# arguments start (after the prefix it matched: core/cmdtable.py), and
# returns (op, *args), or raises Bad for BAD_FORMAT. put and pause-tube
# have checks that come after the command is counted; they return their
# raw pieces so that the handler keeps the reference's order.


def no_args(op: str, line: bytes, at: int) -> Command:
    """A command of one word: nothing may follow it."""
    if len(line) != at:
        raise Bad
    return (op,)


def anything(op: str, line: bytes, at: int) -> Command:
    """quit: whatever follows the word is ignored."""
    return (op,)


def job_id(op: str, line: bytes, at: int) -> Command:
    return (op, read_last(line, at, U64_MAX))


def tube_name(op: str, line: bytes, at: int) -> Command:
    name = line[at:]
    if not name_ok(name):
        raise Bad
    return (op, name)


def put_args(op: str, line: bytes, at: int) -> Command:
    """(op, pri, delay, ttr, size, clean): clean is False if something
    follows the size (JOB_TOO_BIG still comes first: the handler's order)."""
    parts = line[at:].split(b" ")
    if len(parts) == 4 and all(map(bytes.isdigit, parts)):  # fast path
        pri, delay, ttr, size = map(int, parts)
        if pri <= U32_MAX and delay <= U32_MAX and ttr <= U32_MAX and size <= U32_MAX:
            return (op, pri, seconds(delay), seconds(ttr), size, True)
        raise Bad
    pri, pos = read_num(line, at, U32_MAX)
    delay, pos = read_num(line, pos, U32_MAX)
    ttr, pos = read_num(line, pos, U32_MAX)
    size, pos = read_num(line, pos, U32_MAX)
    return (op, pri, seconds(delay), seconds(ttr), size, pos == len(line))


def timeout_arg(op: str, line: bytes, at: int) -> Command:
    timeout, _ = read_num(line, at, U32_MAX)  # trailing garbage is ignored
    if timeout > INT_MAX:
        raise Bad
    return (op, timeout)


def release_args(op: str, line: bytes, at: int) -> Command:
    id_, pos = read_num(line, at, U64_MAX)
    pri, pos = read_num(line, pos, U32_MAX)
    return (op, id_, pri, read_last(line, pos, U32_MAX) * NS)


def bury_args(op: str, line: bytes, at: int) -> Command:
    id_, pos = read_num(line, at, U64_MAX)
    return (op, id_, read_last(line, pos, U32_MAX))


def kick_bound(op: str, line: bytes, at: int) -> Command:
    return (op, read_strtoul(line[at:]))


def pause_args(op: str, line: bytes, at: int) -> Command:
    """(op, name, delay): the handler counts the command, then checks the
    name with name_ok()."""
    name, pos = read_tube_name(line, at)
    return (op, name, read_last(line, pos, U32_MAX) * NS)


def yaml_reply(body: bytes) -> bytes:
    return b"OK %d\r\n%s\r\n" % (len(body), body)


def yaml_list(names: Iterable[bytes]) -> bytes:
    return yaml_reply(b"---\n" + b"".join(b"- %s\n" % n for n in names))

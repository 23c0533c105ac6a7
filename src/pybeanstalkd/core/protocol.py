"""Wire format: command-line framing, command parsing and reply bytes. No I/O.

The parsing rules are beanstalkd 1.13's (prot.c), quirks included, because
clients and their test suites depend on the exact replies.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any, TypeAlias

    # A parsed command: (op, *args). Its arguments' number and types depend
    # on op (see parse), which a static type cannot tie to the string, so
    # each handler reads the ones its own op has.
    Command: TypeAlias = tuple[Any, ...]

LINE_BUF_SIZE = 224  # a command line, CRLF included, may be at most this long
MAX_TUBE_NAME_LEN = 200
U32_MAX = 0xFFFFFFFF
U64_MAX = 0xFFFFFFFFFFFFFFFF
INT_MAX = 0x7FFFFFFF
NS = 1_000_000_000

NAME_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()"
# Each byte to 'a' if a name may hold it, else to '!': name.translate(NAME_TABLE)
# .isalpha() says a name is not empty and all name chars, in half the time
# that translate(None, NAME_CHARS) takes (which builds its table per call).
NAME_TABLE = bytes(97 if c in NAME_CHARS else 33 for c in range(256))

# Replies that carry no arguments.
OUT_OF_MEMORY = b"OUT_OF_MEMORY\r\n"
INTERNAL_ERROR = b"INTERNAL_ERROR\r\n"
DRAINING = b"DRAINING\r\n"
BAD_FORMAT = b"BAD_FORMAT\r\n"
UNKNOWN_COMMAND = b"UNKNOWN_COMMAND\r\n"
EXPECTED_CRLF = b"EXPECTED_CRLF\r\n"
JOB_TOO_BIG = b"JOB_TOO_BIG\r\n"
NOT_FOUND = b"NOT_FOUND\r\n"
DELETED = b"DELETED\r\n"
RELEASED = b"RELEASED\r\n"
BURIED = b"BURIED\r\n"
TOUCHED = b"TOUCHED\r\n"
KICKED = b"KICKED\r\n"
PAUSED = b"PAUSED\r\n"
NOT_IGNORED = b"NOT_IGNORED\r\n"
TIMED_OUT = b"TIMED_OUT\r\n"
DEADLINE_SOON = b"DEADLINE_SOON\r\n"


class Bad(Exception):
    """The command line does not parse: the reply is BAD_FORMAT."""


def find_line_end(buf: bytes, pos: int, end: int) -> int:
    """Length of the command line (CRLF included) at buf[pos:end], or 0.

    Like the reference, only the first CR counts, it must be followed by LF,
    and it is searched for in all but the last buffered byte.
    """
    i = buf.find(b"\r", pos, end - 1)
    if i < 0 or buf[i + 1] != 10:
        return 0
    return i - pos + 2


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
        len(name) <= MAX_TUBE_NAME_LEN
        and name.translate(NAME_TABLE).isalpha()  # (not empty, and only name chars)
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


# Dispatch is by prefix, in the reference's order; the first match wins.
# (prefix, op, length of a no-argument command or 0)
PREFIXES = (
    (b"put ", "put", 0),
    (b"peek ", "peek", 0),
    (b"peek-ready", "peek-ready", 10),
    (b"peek-delayed", "peek-delayed", 12),
    (b"peek-buried", "peek-buried", 11),
    (b"reserve-with-timeout ", "reserve-with-timeout", 0),
    (b"reserve-job ", "reserve-job", 0),
    (b"reserve", "reserve", 7),
    (b"delete ", "delete", 0),
    (b"release ", "release", 0),
    (b"bury ", "bury", 0),
    (b"kick ", "kick", 0),
    (b"kick-job ", "kick-job", 0),
    (b"touch ", "touch", 0),
    (b"stats-job ", "stats-job", 0),
    (b"stats-tube ", "stats-tube", 0),
    (b"stats", "stats", 5),
    (b"use ", "use", 0),
    (b"watch ", "watch", 0),
    (b"ignore ", "ignore", 0),
    (b"list-tubes-watched", "list-tubes-watched", 18),
    (b"list-tube-used", "list-tube-used", 14),
    (b"list-tubes", "list-tubes", 10),
    (b"quit", "quit", 0),
    (b"pause-tube", "pause-tube", 0),
)

# Words whose "<word> " prefix no earlier prefix shadows: a fast, exact lookup.
_ARG_WORDS = {p[:-1]: (op, len(p), p) for p, op, _ in PREFIXES if p.endswith(b" ")}
_NOARG_WORDS = {p: (op, n, p) for p, op, n in PREFIXES if n}


def match_prefix(line: bytes) -> tuple[str | None, int, bytes]:
    """(op, offset of the arguments, the matched prefix) in the reference's order."""
    sp = line.find(b" ")
    if sp > 0:
        hit = _ARG_WORDS.get(line[:sp])
        if hit is not None:
            return hit
    else:
        hit = _NOARG_WORDS.get(line)
        if hit is not None:
            return hit
    for prefix, op, _ in PREFIXES:
        if line.startswith(prefix):
            return op, len(prefix), prefix
    return None, 0, b""


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


def parse(line: bytes) -> Command:
    """Parse one command line (CRLF stripped) into a tuple (op, *args).

    Raises Bad for BAD_FORMAT. Returns ("unknown",) for UNKNOWN_COMMAND.
    put and pause-tube have checks that come after the command is counted;
    they return their raw pieces so the caller can keep the reference's order.
    """
    if b"\0" in line:
        raise Bad
    op, at, _ = match_prefix(line)
    if op is None:
        return ("unknown",)
    expect = _NOARG_LEN.get(op)
    if expect is not None:
        if len(line) != expect:
            raise Bad
        return (op,)
    if op == "put":
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
    if op in _ID_OPS:
        return (op, read_last(line, at, U64_MAX))
    if op in _NAME_OPS:
        name = line[at:]
        if not name_ok(name):
            raise Bad
        return (op, name)
    if op == "reserve-with-timeout":
        timeout, _ = read_num(line, at, U32_MAX)  # trailing garbage is ignored
        if timeout > INT_MAX:
            raise Bad
        return (op, timeout)
    if op == "release":
        id_, pos = read_num(line, at, U64_MAX)
        pri, pos = read_num(line, pos, U32_MAX)
        return (op, id_, pri, read_last(line, pos, U32_MAX) * NS)
    if op == "bury":
        id_, pos = read_num(line, at, U64_MAX)
        return (op, id_, read_last(line, pos, U32_MAX))
    if op == "kick":
        return (op, read_strtoul(line[at:]))
    if op == "quit":
        return (op,)
    # pause-tube: the caller counts it, then checks the name with name_ok().
    name, pos = read_tube_name(line, at)
    return (op, name, read_last(line, pos, U32_MAX) * NS)


_NOARG_LEN = {op: n for _, op, n in PREFIXES if n}
_ID_OPS = frozenset(("peek", "reserve-job", "delete", "kick-job", "touch", "stats-job"))
_NAME_OPS = frozenset(("use", "watch", "ignore", "stats-tube"))


def job_header(word: bytes, job_id: int, size: int) -> bytes:
    return b"%s %d %d\r\n" % (word, job_id, size)


def yaml_reply(body: bytes) -> bytes:
    return b"OK %d\r\n%s\r\n" % (len(body), body)


def yaml_list(names: Iterable[bytes]) -> bytes:
    return yaml_reply(b"---\n" + b"".join(b"- %s\n" % n for n in names))

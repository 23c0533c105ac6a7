"""Parsing rules of the pure protocol layer (section 1 of the reference doc)."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pybeanstalkd.core.cmdtable import COMMANDS, CommandTable
from pybeanstalkd.core.protocol import (
    NS, Bad, find_line_end, line_at, name_ok, plain_id, read_num, read_strtoul)

REFERENCE = CommandTable()

# The reference's prefixes in its own order (prot.c): the first match wins.
PROT_C_ORDER = (
    b"put ", b"peek ", b"peek-ready", b"peek-delayed", b"peek-buried", b"reserve-with-timeout ",
    b"reserve-job ", b"reserve", b"delete ", b"release ", b"bury ", b"kick ", b"kick-job ",
    b"touch ", b"stats-job ", b"stats-tube ", b"stats", b"use ", b"watch ", b"ignore ",
    b"list-tubes-watched", b"list-tube-used", b"list-tubes", b"quit", b"pause-tube",
)


def match_prefix(line):
    c, at = REFERENCE.match(line)
    assert at == (len(c.prefix) if c else 0)
    return (c.name if c else None), at


def parse(line):
    found = REFERENCE.lookup(line)
    return ("unknown",) if found is None else found[1]


@pytest.mark.parametrize("line,op", [
    (b"put 1 2 3 4", "put"), (b"peek 1", "peek"), (b"peek-ready", "peek-ready"),
    (b"peek-readyx", "peek-ready"), (b"reserve", "reserve"), (b"reservex", "reserve"),
    (b"reserve-with-timeout", "reserve"), (b"reserve-job", "reserve"),
    (b"reserve-job 1", "reserve-job"), (b"reserve-with-timeout 1", "reserve-with-timeout"),
    (b"stats-job", "stats"), (b"stats-foo", "stats"), (b"stats-job 1", "stats-job"),
    (b"quitxyz", "quit"), (b"quit now", "quit"), (b"pause-tubedefault 0", "pause-tube"),
    (b"list-tubes-watched", "list-tubes-watched"), (b"list-tube-used", "list-tube-used"),
    (b"list-tubesx", "list-tubes"), (b"kick-job 1", "kick-job"), (b"kick 1", "kick"),
    (b"put", None), (b"PUT 1 2 3 4", None), (b" put 1 2 3 4", None), (b"", None),
    (b"delete", None), (b"use", None), (b"kick", None),
])
def test_prefix_dispatch(line, op):
    assert match_prefix(line)[0] == op


def test_the_table_has_the_references_prefixes():
    assert sorted(c.prefix for c in COMMANDS) == sorted(PROT_C_ORDER)


@given(st.lists(st.sampled_from([b"put", b"peek", b"-ready", b"-delayed", b"reserve", b"-job",
                                 b"-with-timeout", b"stats", b"-tube", b"list-tube", b"s", b"-used",
                                 b"-watched", b"kick", b"quit", b"pause-tube", b" ", b"1", b"x"]),
                max_size=6))
def test_longest_prefix_is_the_references_first_match(pieces):
    line = b"".join(pieces)
    first = next((p for p in PROT_C_ORDER if line.startswith(p)), None)
    c, _ = REFERENCE.match(line)
    assert (c.prefix if c else None) == first


@pytest.mark.parametrize("line,expect", [
    (b"put 0 0 0 01", ("put", 0, 0, 0, 1, True)),
    (b"put  0   0  0  1", ("put", 0, 0, 0, 1, True)),
    (b"put 4294967295 0 0 1", ("put", 4294967295, 0, 0, 1, True)),
    (b"put 0 0 0 10b", ("put", 0, 0, 0, 10, False)),
    (b"put 0 0 0 99999 junk", ("put", 0, 0, 0, 99999, False)),
    (b"put 0 0 0 1 ", ("put", 0, 0, 0, 1, False)),
    (b"put 1 2 3 4", ("put", 1, 2 * NS, 3 * NS, 4, True)),
    (b"delete  1", ("delete", 1)),
    (b"peek 18446744073709551615", ("peek", 18446744073709551615)),
    (b"reserve-with-timeout 0abc", ("reserve-with-timeout", 0)),
    (b"reserve-with-timeout 2147483647", ("reserve-with-timeout", 2147483647)),
    (b"kick 3abc", ("kick", 3)), (b"kick -1", ("kick", 4294967295)),
    (b"kick 4294967296", ("kick", 0)), (b"kick \t+7", ("kick", 7)),
    (b"release 1 2 3", ("release", 1, 2, 3 * NS)), (b"bury 1 2", ("bury", 1, 2)),
    (b"use ()$;/+._-", ("use", b"()$;/+._-")),
    (b"watch " + b"a" * 200, ("watch", b"a" * 200)),
    (b"reserve", ("reserve",)), (b"nonsense", ("unknown",)), (b"quitxyz", ("quit",)),
])
def test_parse_ok(line, expect):
    assert parse(line) == expect


@pytest.mark.parametrize("line", [
    b"put ", b"put +1 0 0 1", b"put -1 0 0 1", b"put 4294967296 0 0 1", b"put 0 0 0 4294967296",
    b"put 0 0 0 --!@#$%^&&**()0b", b"put 512 -1 100 0", b"put 1\t0 0 1", b"delete 1 ",
    b"delete 18446744073709551616", b"delete foo111", b"delete 111foo", b"peek " + b"9" * 52,
    b"reserve ", b"reservex", b"stats ", b"stats-job", b"peek-readyx", b"list-tubesx",
    b"reserve-with-timeout 2147483648", b"reserve-with-timeout -1", b"reserve-with-timeout ",
    b"kick x", b"kick 18446744073709551616", b"kick ", b"kick -", b"use -foo", b"use a*b",
    b"use foo bar", b"use " + b"a" * 201, b"stats-tube  default", b"use default ",
    b"bury 111abc 2", b"bury 111", b"release 1 abc 0", b"touch !@#!@#", b"use a\0b",
    b"quit\0",
])
def test_parse_bad(line):
    with pytest.raises(Bad):
        parse(line)


@pytest.mark.parametrize("args,expect", [
    (b" default 0", (b"default", 0)), (b"default 4294967295", (b"default", 4294967295 * NS)),
    (b"  x   5", (b"x", 5 * NS)), (b" -x 5", (b"-x", 5 * NS)),  # the name is checked later
])
def test_pause_args(args, expect):
    assert parse(b"pause-tube" + args) == ("pause-tube",) + expect


@pytest.mark.parametrize("args", [b" x 4294967296", b" x", b" x*y 5", b" x 5 ", b""])
def test_pause_args_bad(args):
    with pytest.raises(Bad):
        parse(b"pause-tube" + args)


def test_line_end_rules():
    assert find_line_end(b"use a\r\n", 0, 7) == 7
    assert find_line_end(b"use a\r", 0, 6) == 0  # CR in the last byte is not looked at
    assert find_line_end(b"use a\rb\r\n", 0, 9) == 0  # only the first CR counts
    assert find_line_end(b"xxuse a\r\n", 2, 9) == 7
    # nothing at or past end - 1 counts, though the buffer goes on
    assert find_line_end(b"use a\r\nuse b\r\n", 0, 6) == 0
    assert find_line_end(b"use a\r\nuse b\r\n", 0, 7) == 7
    assert find_line_end(b"xxuse a\r\nuse b\r\n", 2, 8) == 0
    assert find_line_end(b"use a" * 100 + b"\r\n", 0, 224) == 0  # over-long: no line


def _scan_line(buf: bytes, pos: int, end: int) -> bytes | None:
    """The reference's scan (prot.c's scan_line_end), byte by byte: the
    first CR from pos before end - 1, which must be followed by LF."""
    for i in range(pos, end - 1):
        if buf[i] == 13:
            return buf[pos:i] if buf[i + 1] == 10 else None
    return None


@given(st.binary(max_size=40).map(lambda b: b.replace(b"x", b"\r").replace(b"y", b"\n")),
       st.integers(0, 40), st.integers(0, 40))
def test_line_at_is_the_references_scan(buf, pos, end):
    pos, end = min(pos, len(buf)), min(max(pos, end), len(buf))
    line = line_at(buf, pos, end)
    assert line == _scan_line(buf, pos, end)
    assert find_line_end(buf, pos, end) == (0 if line is None else len(line) + 2)


@pytest.mark.parametrize("arg, value", [
    (b"0", 0), (b"7", 7), (b"0042", 42), (b"1" * 19, int(b"1" * 19)), (b"9" * 19, 10**19 - 1),
    (b"", -1), (b"1" * 20, -1), (b"+1", -1), (b"-1", -1), (b" 1", -1), (b"1 ", -1),
    (b"1_0", -1), (b"1x", -1), (b"\xd9\xa3", -1), (b"/", -1), (b":", -1)])
def test_plain_id(arg, value):
    """What the engine's fast paths take as an id: 1 to 19 ASCII digits;
    anything else (-1) goes through parse() and its rules."""
    assert plain_id(arg) == value


def test_name_rules():
    assert name_ok(b"a" * 200) and not name_ok(b"a" * 201)
    assert not name_ok(b"") and not name_ok(b"-a") and name_ok(b"a-")


def _slow_u32s(args: bytes):
    """An independent model of read_u32 x4 for put: spaces, then digits."""
    out, pos = [], 0
    for _ in range(4):
        out_v, pos = read_num(args, pos, 0xFFFFFFFF)
        out.append(out_v)
    return out, pos == len(args)


@given(st.lists(st.sampled_from([b"0", b"7", b"42", b"4294967295", b"4294967296", b" ", b"  ",
                                 b"x", b"-", b"+", b"\t", b"00"]), max_size=10))
def test_put_fast_path_agrees_with_scanner(pieces):
    args = b"".join(pieces)
    try:
        nums, clean = _slow_u32s(args)
        expect = ("put", nums[0], nums[1] * NS, nums[2] * NS, nums[3], clean)
    except Bad:
        expect = Bad
    try:
        got = parse(b"put " + args)
    except Bad:
        got = Bad
    assert got == expect


@given(st.binary(max_size=30))
def test_strtoul_never_crashes_and_fits_u32(arg):
    try:
        v = read_strtoul(arg)
    except Bad:
        return
    assert 0 <= v <= 0xFFFFFFFF

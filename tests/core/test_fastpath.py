"""The engine's fast paths for the hot commands (Engine.command) against the
full parser: the same lines, fed to one engine with the fast paths and one
without, must get the same replies and leave the same counters.

The lines are made near each fast path's edges: leading zeros, signs, double
spaces, tabs, 10- and 20-digit numbers around the u32 and u64 limits,
trailing garbage, NULs. The differential suite (fastpath.txt) checks the
same edges against the reference.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakeclock import Harness

EDGES = [
    b"00", b"007", b"2147483647", b"2147483648", b"4294967295", b"4294967296",
    b"9999999999", b"18446744073709551615", b"18446744073709551616",
    b"99999999999999999999", b"0000000000000000000000001", b"+1", b"-1", b"1x", b"x",
    b"", b"1\0", b" 1", b"\t1",
]
# Each hot command in a plain form that the fast path takes (id 1 is reserved).
PLAIN = {b"put": [b"0", b"0", b"60", b"1"], b"reserve": [],
         b"reserve-with-timeout": [b"0"], b"release": [b"1", b"0", b"0"],
         b"touch": [b"1"], b"delete": [b"1"]}
OTHER_WORDS = [b"Reserve", b"reserve-job", b"delete-", b"put-", b"touchy"]


@st.composite
def lines(draw):
    """A plain hot command with up to three changes: an argument replaced by
    an edge value, a separator changed, an argument dropped or added,
    something appended; or another word that shares a prefix."""
    word = draw(st.sampled_from(sorted(PLAIN) + OTHER_WORDS))
    args = list(PLAIN.get(word, [b"1"]))
    seps = [b" "] * len(args)
    for _ in range(draw(st.integers(0, 3))):
        change = draw(st.integers(0, 4))
        if change == 0 and args:
            args[draw(st.integers(0, len(args) - 1))] = draw(st.sampled_from(EDGES))
        elif change == 1 and seps:
            seps[draw(st.integers(0, len(seps) - 1))] = draw(st.sampled_from([b"  ", b"\t", b""]))
        elif change == 2 and args:
            i = draw(st.integers(0, len(args) - 1))
            del args[i], seps[i]
        elif change == 3:
            args.append(draw(st.sampled_from([b"0", b"1"] + EDGES)))
            seps.append(b" ")
        else:
            args[-1:] = [a + draw(st.sampled_from([b" ", b"\0", b"x", b"\t"])) for a in args[-1:]]
    line = word + b"".join(sep + a for sep, a in zip(seps, args)) + b"\r\n"
    if word == b"put" and draw(st.booleans()):
        line += draw(st.sampled_from([b"x", b"", b"xy", b"x" * 300])) + b"\r\n"
    return line


SETUP = [b"put 0 0 60 1\r\na\r\n", b"put 0 0 60 1\r\nb\r\n", b"put 0 0 60 1\r\nc\r\n",
         b"reserve\r\n"]  # ids 1-3 name real jobs, 1 reserved


def run(lines_, fast: bool) -> tuple:
    h = Harness()
    h.e.fast = fast
    s = h.conn()
    replies = [h.send(s, line) for line in SETUP + lines_]
    # the counters, and where the framing stands (a put's body skipped...)
    return replies, h.e.counts.as_dict(), h.e.worker_ct, h.e.producer_ct, s.state, s.need


def single_changes() -> list[bytes]:
    """Every plain hot command with one change: each argument replaced by
    each edge value, each separator changed, each argument dropped, an
    argument added, something appended."""
    out = []
    for word, plain in PLAIN.items():
        variants = [list(plain)]
        for i in range(len(plain)):
            variants += [plain[:i] + [e] + plain[i + 1:] for e in EDGES]
            variants.append(plain[:i] + plain[i + 1:])
        variants += [plain + [e] for e in [b"0", b"1"] + EDGES]
        for args in variants:
            line = word + b"".join(b" " + a for a in args)
            out.append(line + b"\r\n")
            out += [line + tail + b"\r\n" for tail in (b" ", b"\0", b"x", b"\t")]
        for i in range(len(plain)):
            for sep in (b"  ", b"\t", b""):
                seps = [b" "] * len(plain)
                seps[i] = sep
                out.append(word + b"".join(p + a for p, a in zip(seps, plain)) + b"\r\n")
    out += [w + tail + b"\r\n" for w in OTHER_WORDS for tail in (b"", b" 1")]
    return out


def test_fast_paths_answer_as_the_full_parser():
    lines_ = single_changes()
    assert len(lines_) > 500
    for line in lines_:
        for body in ([b""] if not line.startswith(b"put ") else [b"", b"x\r\n"]):
            assert run([line + body], fast=True) == run([line + body], fast=False), line + body


@settings(max_examples=300, deadline=None)
@given(st.lists(lines(), min_size=2, max_size=25))
def test_fast_paths_answer_as_the_full_parser_in_sequence(seq):
    assert run(seq, fast=True) == run(seq, fast=False)


@pytest.mark.parametrize("line", [
    b"put 0 0 60 1\r\nx\r\n", b"reserve\r\n", b"reserve-with-timeout 0\r\n",
    b"release 1 0 0\r\n", b"touch 1\r\n", b"delete 1\r\n"])
def test_plain_hot_commands_skip_the_parser(line):
    h = Harness()
    s = h.conn()
    h.send(s, b"put 0 0 60 1\r\nx\r\n")
    h.send(s, b"put 0 0 60 1\r\ny\r\n")  # (so that a reserve does not block)
    h.send(s, b"reserve\r\n")
    parsed = h.e.commands.lookups
    h.send(s, line)
    assert h.e.commands.lookups == parsed
    h.send(s, b"stats\r\n")
    assert h.e.commands.lookups == parsed + 1


@pytest.mark.parametrize("line", [
    b"put 0 0 60 01x\r\n", b"reserve \r\n", b"reserve-with-timeout 2147483648\r\n",
    b"release 1 4294967296 0\r\n", b"touch 18446744073709551616\r\n", b"delete +1\r\n",
    b"delete 1\0\r\n"])
def test_unusual_hot_commands_take_the_parser(line):
    h = Harness()
    s = h.conn()
    parsed = h.e.commands.lookups
    assert h.send(s, line) == b"BAD_FORMAT\r\n"
    assert h.e.commands.lookups == parsed + 1

"""The put's fast path with tags (Engine.command, putlines.py) against the
general parser (Engine.fast = False, as with -V -V): the same reads of
tagged put lines, whole, split or pipelined, with the caches empty or
warm, near the memory cap and while draining, get the same replies, and
stats-job, stats-tube and the stats counters agree after each."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fakeclock import Harness
from pybeanstalkd.core.putlines import PutLines


# The fast engines' put lines when they are not to start empty: parsed
# before, by the earlier runs.
WARM = PutLines()


NAMECH = b"abzAZ09-+/;.$_()"
BADCH = b":\0\t *\x0b\x0c\x80\xe9\xff\n"
_ch = st.one_of(st.sampled_from(list(NAMECH)), st.sampled_from(list(BADCH)))


def _key_of_len(n):
    return st.tuples(st.lists(st.sampled_from(list(NAMECH)), min_size=n, max_size=n).map(bytes),
                     st.integers(0, max(n - 1, 0)), st.one_of(st.none(), st.sampled_from(list(BADCH + b"-")))
                     ).map(lambda t: t[0] if t[2] is None or not t[0] else
                           t[0][:t[1]] + bytes([t[2]]) + t[0][t[1] + 1:])


_key = st.one_of(
    st.sampled_from([b"k", b"k1", b"-k", b"k-", b"", b":", b"a:", b"a:0", b"a:+5", b"a:5",
                     b"a:4294967296", b"a:999999999", b"a:1000000000", b"a:b:5", b"a::5",
                     b"k\0", b"k\0\0", b"\0", b"\xe9", b"k idp:j", b"k idp:k", b"k con:c",
                     b"k grp:g", b"k\tcon:c", b"k\x0bcon:c", b"k ", b"k  ", b"a:05", b"a:-1"]),
    st.lists(_ch, max_size=12).map(bytes),
    st.integers(195, 205).flatmap(_key_of_len),
)
_other = st.sampled_from([b"con:c", b"con:c:2", b"grp:g", b"aft:h", b"try:2", b"try:0", b"junk",
                          b"idp:z", b"idp:z:3", b"con:c:0", b"aft:g"])
_head = st.sampled_from([b"put 0 0 60 1", b"put 5 0 60 1", b"put 0 0 0 1", b"put 0 1 60 1",
                         b"put 0 0 60 2", b"put 00 0 60 1", b"put +1 0 60 1",
                         b"put 4294967295 0 60 1", b"put 4294967296 0 60 1", b"put 0 0 60 1000000"])
_sep = st.sampled_from([b" ", b" ", b" ", b"  ", b"\t"])


@st.composite
def _put(draw):
    head = draw(_head)
    before = draw(st.lists(_other, max_size=2))
    after = draw(st.lists(_other, max_size=2))
    key = draw(_key)
    sep = draw(_sep)
    words = before + [b"idp:" + key] + after
    if draw(st.booleans()) and draw(st.booleans()):
        words.append(b"idp:" + draw(_key))
    line = head + b" " + sep.join(words)
    if draw(st.integers(0, 9)) == 0:
        line += draw(st.sampled_from([b" ", b"\0", b"\0\0", b"\t"]))
    size = int(head.split()[-1]) if len(head) < 30 else 1
    body = draw(st.sampled_from([b"x" * size, b"x" * (size + 1), b"", b"xy"[:max(size - 1, 0)]]))
    return line + b"\r\n" + body + b"\r\n"


_plain = st.sampled_from([b"put 0 0 60 1\r\nx\r\n", b"put 5 0 60 1\r\nx\r\n", b"put 0 0 60 2\r\nxy\r\n",
                          b"put 0 0 60 1 con:c\r\nx\r\n", b"put 0 0 60 1 grp:g\r\nx\r\n",
                          b"drain\r\n", b"undrain\r\n", b"use t2\r\n", b"use default\r\n",
                          b"reserve-with-timeout 0\r\n", b"delete 1\r\n", b"delete 2\r\n",
                          b"delete 3\r\n", b"stats-tube t2\r\n", b"peek-ready\r\n"])

@st.composite
def _fastish(draw):
    head = draw(st.sampled_from([b"put 0 0 60 1", b"put 5 0 60 1", b"put 0 0 60 2", b"put 0 1 60 1"]))
    key = draw(st.one_of(_key, st.integers(1, 205).flatmap(_key_of_len), st.integers(198, 202).flatmap(_key_of_len)))
    size = int(head.split()[-1])
    body = draw(st.sampled_from([b"x" * size] * 4 + [b"x" * (size + 1), b""]))
    return head + b" idp:" + key + b"\r\n" + body + b"\r\n"


_cmd = st.one_of(_put(), _fastish(), _fastish(), _fastish(), _plain, st.just("advance"))


def _feed(h, c, data, cuts):
    out = b""
    pos = 0
    for cut in sorted(set(x for x in cuts if 0 < x < len(data))):
        out += h.send(c, data[pos:cut])
        pos = cut
    return out + h.send(c, data[pos:])


def _counters(stats: bytes) -> bytes:
    return b"\n".join(ln for ln in stats.split(b"\n")
                      if b"cmd-" in ln or b"current-" in ln or b"total-" in ln)


def _run(cmds, clear, mem, cutmode):
    kw = dict(extensions=True)
    if mem:
        kw["max_memory"] = mem
    fast, slow = Harness(**kw), Harness(**kw)
    if not clear:
        fast.e.lines = WARM
    slow.e.fast = False
    assert fast.e.fast
    cf, cs = fast.conn(), slow.conn()
    pending = b""
    for i, (cmd, cuts) in enumerate(cmds):
        if cmd == "advance":
            fast.advance(1.5)
            slow.advance(1.5)
            continue
        if cutmode == "pipeline" and i % 3 != 2:
            pending += cmd
            continue
        data = pending + cmd
        pending = b""
        rf = _feed(fast, cf, data, cuts if cutmode == "cuts" else ())
        rs = _feed(slow, cs, data, cuts if cutmode == "cuts" else ())
        assert rf == rs, data
        for q in [b"stats-tube default\r\n", b"stats\r\n"] + [b"stats-job %d\r\n" % n for n in range(1, 6)]:
            a, b = fast.send(cf, q), slow.send(cs, q)
            if q == b"stats\r\n":
                # pid/rusage/id lines are process-wide; compare the counters
                a, b = _counters(a), _counters(b)
            assert a == b, (data, q)
    assert fast.e.q.job_count() == slow.e.q.job_count()


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(_cmd, st.lists(st.integers(1, 240), max_size=2)), min_size=1, max_size=10),
       st.booleans(), st.sampled_from([None, None, 3000, 600]),
       st.sampled_from(["whole", "whole", "cuts", "pipeline"]))
def test_fast_equals_slow(cmds, clear, mem, cutmode):
    _run(cmds, clear, mem, cutmode)


K200 = b"k" * 200
LINES = [
    b"put 0 0 60 1 idp:" + K200, b"put 0 0 60 1 idp:" + K200 + b"k",
    b"put 0 0 60 1 idp:" + b"k" * 199 + b"-", b"put 0 0 60 1 idp:-" + b"k" * 199,
    b"put 0 0 60 1 idp:" + b"k" * 199 + b"\x80", b"put 0 0 60 1 idp:" + b"k" * 199 + b"\0",
    b"put 0 0 60 1 idp:" + b"k" * 199 + b":", b"put 0 0 60 1 idp:" + K200 + b":5",
    b"put 0 0 60 1 idp:" + K200 + b"\0", b"put 0 0 60 1 idp:" + b"k" * 5000,
    b"put 4294967295 4294967295 4294967295 1 idp:" + K200,
    b"put 0 0 60 1 idp:k", b"put 0 0 60 1 idp:k\0", b"put 0 0 60 1 idp:k\0\0",
    b"put 0 0 60 1 idp:\0k", b"put 0 0 60 1 idp:k\t", b"put 0 0 60 1 idp:k\tgrp:g",
    b"put 0 0 60 1 idp:k\x0bgrp:g", b"put 0 0 60 1 idp:k\x0cgrp:g", b"put 0 0 60 1 idp:\xe9",
    b"put 0 0 60 1 idp:k\xff", b"put 0 0 60 1 idp:", b"put 0 0 60 1 idp::", b"put 0 0 60 1 idp:a:",
    b"put 0 0 60 1 idp:a:0", b"put 0 0 60 1 idp:a:+5", b"put 0 0 60 1 idp:a:05",
    b"put 0 0 60 1 idp:a:4294967295", b"put 0 0 60 1 idp:a:4294967296",
    b"put 0 0 60 1 idp:a:999999999", b"put 0 0 60 1 idp:a:1000000000", b"put 0 0 60 1 idp:a:b:5",
    b"put 0 0 60 1 idp:a idp:b", b"put 0 0 60 1 idp:a idp:a", b"put 0 0 60 1 idp:a:5 idp:b",
    b"put 0 0 60 1 con:c idp:a", b"put 0 0 60 1 idp:a con:c", b"put 0 0 60 1 grp:g idp:a aft:h",
    b"put 0 0 60 1 idp:a try:0", b"put 0 0 60 1 idp:a junk", b"put 0 0 60 1 idp:a ",
    b"put 0 0 60 1  idp:a", b"put 0 0 60 1\tidp:a", b"put 0 0 60  1 idp:a",
    b"put 0 0 60 01 idp:a", b"put 0 0 60 +1 idp:a", b"put 0 0 60 1 xidp:a",
    b"put 0 0 60 1 idp:a\rb", b"put 0 0 60 2 idp:a",
]
BODIES = [b"x\r\n", b"xy\r\n", b"\r\n", b"x\n"]


def _pair(**kw):
    fast, slow = Harness(extensions=True, **kw), Harness(extensions=True, **kw)
    slow.e.fast = False
    return fast, slow, fast.conn(), slow.conn()


def _same(fast, slow, cf, cs, data, cut=None):
    parts = [data] if cut is None else [data[:cut], data[cut:]]
    got = [b"".join(h.send(c, p) for p in parts) for h, c in ((fast, cf), (slow, cs))]
    assert got[0] == got[1], data
    for q in [b"stats-tube default\r\n"] + [b"stats-job %d\r\n" % n for n in range(1, 5)]:
        assert fast.send(cf, q) == slow.send(cs, q), (data, q)
    return got[0]


@pytest.mark.parametrize("line", LINES)
@pytest.mark.parametrize("known", [False, True])
@pytest.mark.parametrize("mode", ["whole", "split-line", "split-body", "drain", "cap"])
def test_alike(line, known, mode):
    fast, slow, cf, cs = _pair(**({"max_memory": 1500} if mode == "cap" else {}))
    if known:
        _same(fast, slow, cf, cs, b"put 0 0 60 1\r\nx\r\nput 0 0 60 2\r\nxy\r\n")
        _same(fast, slow, cf, cs, b"put 4294967295 4294967295 4294967295 1\r\nx\r\n")
    if mode == "drain":
        _same(fast, slow, cf, cs, b"drain\r\n")
    for body in BODIES:
        data = line + b"\r\n" + body
        cut = {"split-line": len(line) // 2, "split-body": len(line) + 2}.get(mode)
        _same(fast, slow, cf, cs, data, cut)
        _same(fast, slow, cf, cs, data, cut)  # (a duplicate, if the first was taken)


def test_expected_replies():
    """A few replies by tuber's rules (tags.py), with the head known."""
    h = Harness(extensions=True)
    c = h.conn()
    assert h.send(c, b"put 0 0 60 1\r\nx\r\n") == b"INSERTED 1\r\n"
    bad = b"BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n"  # (the body read as a line)
    for line, want in [
        (b"put 0 0 60 1 idp:" + K200, b"INSERTED 2\r\n"),
        (b"put 0 0 60 1 idp:" + K200, b"INSERTED 2 READY\r\n"),
        (b"put 0 0 60 1 idp:" + K200 + b"k", bad),
        (b"put 0 0 60 1 idp:-k", bad), (b"put 0 0 60 1 idp:k\x80", bad),
        (b"put 0 0 60 1 idp::", bad), (b"put 0 0 60 1 idp:a:", bad),
        (b"put 0 0 60 1 idp:a:+5", b"INSERTED 3\r\n"), (b"put 0 0 60 1 idp:a:0", b"INSERTED 3 READY\r\n"),
        (b"put 0 0 60 1 idp:b:4294967296", bad), (b"put 0 0 60 1 idp:b:4294967295", b"INSERTED 4\r\n"),
        (b"put 0 0 60 1 idp:k\0", b"INSERTED 5\r\n"),  # (tuber trims trailing NULs)
        (b"put 0 0 60 1 idp:k", b"INSERTED 5 READY\r\n"),
        (b"put 0 0 60 1 idp:x idp:y", b"INSERTED 6\r\n"), (b"put 0 0 60 1 idp:y", b"INSERTED 6 READY\r\n"),
    ]:
        assert h.send(c, line + b"\r\nx\r\n") == want, line


@pytest.mark.parametrize("tail", [b" ", b"  ", b" \t", b" \x0b", b"\t "])
def test_a_put_with_only_white_space_after_its_size_is_bad_format(tail):
    """No tag after the size, only white space: the reference's put, whose
    trailing garbage is BAD_FORMAT (the body then read as a command), by
    the fast path and the general one alike."""
    for fast in (True, False):
        h = Harness(extensions=True)
        h.e.fast = fast
        c = h.conn()
        assert h.send(c, b"put 0 0 60 1\r\nx\r\n") == b"INSERTED 1\r\n"
        assert h.send(c, b"put 0 0 60 1" + tail + b"\r\nx\r\n") == \
            b"BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n"


def test_a_key_with_a_space_after_it_leaves_no_blank_line_cached():
    """The line less its idp: word is cached for the next keys; with a space
    after the key that would be the put line and a blank tail, which must
    stay BAD_FORMAT."""
    h = Harness(extensions=True)
    c = h.conn()
    assert h.send(c, b"put 0 0 60 1 idp:a \r\nx\r\n") == b"INSERTED 1\r\n"
    assert h.send(c, b"put 0 0 60 1 \r\nx\r\n") == b"BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n"

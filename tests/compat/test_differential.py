"""Differential tests: the same bytes to the reference beanstalkd and to our server, replies compared
byte for byte (after the normalisation described in tests/compat/differential/README.md).

One test per transcript case in tests/compat/differential/*.txt.  Each case gets a fresh reference server
and a fresh server of ours (run side by side in two threads).

Environment:
  PYBEANSTALKD_DIFF_OURS=reference  play the reference against itself (checks the harness and the
                                    transcripts are stable)
  PYBEANSTALKD_DIFF_SERIAL=1        run the reference first, then ours, instead of side by side
"""
from __future__ import annotations

import pytest

from differential import harness
from support import require_reference

CASES = harness.load_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_differential(case: harness.Case):
    require_reference()  # fails hard in CI when the reference is missing, skips locally
    ref, ours = harness.run_case(case)
    problems = harness.compare(case, ref, ours)
    if problems:
        pytest.fail(harness.report(case, ref, ours, problems), pytrace=False)


def test_transcripts_cover_every_command():
    """Every command word of the protocol appears in some transcript (a cheap guard against a
    command silently losing its coverage when transcripts are edited)."""
    sent = b"".join(s.data for c in CASES for s in c.steps)
    for word in (
        b"put ", b"use ", b"reserve\r\n", b"reserve-with-timeout ", b"reserve-job ", b"delete ",
        b"release ", b"bury ", b"touch ", b"watch ", b"ignore ", b"peek ", b"peek-ready\r\n",
        b"peek-delayed\r\n", b"peek-buried\r\n", b"kick ", b"kick-job ", b"stats-job ",
        b"stats-tube ", b"stats\r\n", b"list-tubes\r\n", b"list-tube-used\r\n",
        b"list-tubes-watched\r\n", b"quit\r\n", b"pause-tube ",
    ):
        assert word in sent, word


def test_harness_escapes_and_expectations():
    assert harness.unescape(r"a\r\n\0\s\x41\\\{3*ab}") == b"a\r\n\0 A\\ababab"
    assert harness._expected_reply("USING a") == b"USING a\r\n"
    assert harness._expected_reply(r"OK *\r\n---\n- default\n\r\n") == b"OK 14\r\n---\n- default\n\r\n"
    assert harness._expected_reply(r"FOUND 3 *\r\nabc") == b"FOUND 3 3\r\nabc\r\n"


def test_harness_normalisation():
    def ok(yaml: bytes) -> bytes:
        return b"OK %d\r\n" % len(yaml) + yaml + b"\r\n"

    old = ok(b"---\nid: 1\ntube: default\nstate: ready\n")
    new = ok(b'---\nid: 1\ntube: "default"\nstate: ready\n')
    assert harness.normalise(old, legacy_112=True) == new
    assert harness.normalise(new, legacy_112=False) == new
    # stats: volatile values masked, quotes kept visible, count recomputed
    stats = b'---\ncurrent-jobs-urgent: 0\npid: 42\nversion: "1.13"\nid: abc\nhostname: "h"\n'
    masked = harness.normalise(ok(stats), legacy_112=False)
    assert masked.endswith(b'pid: *\nversion: "*"\nid: *\nhostname: "*"\n\r\n')
    unquoted = stats.replace(b'"1.13"', b"1.13")
    assert b"version: *\n" in harness.normalise(ok(unquoted), legacy_112=False)
    # a reply whose count is wrong is left alone, so that the comparison shows it
    assert harness.normalise(b"OK 3\r\n" + stats + b"\r\n", legacy_112=False) == b"OK 3\r\n" + stats + b"\r\n"
    # +-1 tolerance only for the listed keys
    a = ok(b"---\nage: 1\npri: 5\n")
    b = ok(b"---\nage: 2\npri: 5\n")
    assert harness.apply_tolerance(a, b, {"age"}) == a
    assert harness.apply_tolerance(a, b, set()) == b

"""pybeanstalkd-admin as a person at a terminal sees it: `put` with no
body on a terminal says how to give one (under a pty, pexpect); `groups`
cuts a long name as `tubes` does, at 80 columns (tmux) and whole in a
pipe; `top` suggests only what it takes."""
from __future__ import annotations

import os
import re
import signal
import sys

import pytest

from support import Server, ours_argv
from test_admin import ADMIN, LONG, Raw, Tmux, assert_fits_whole, big_tube, drawn, run

HINT = ("pybeanstalkd-admin: reading the body from the terminal: type it, then Ctrl-D on a line "
        "of its own (or give BODY as an argument, or pipe it in)")


@pytest.fixture
def ours():
    s = Server(ours_argv())
    yield s
    s.stop()


def spawn_put(srv, *args):
    import pexpect

    env = dict(os.environ, COLUMNS="200")
    # (Ctrl-C reaches it even when the tests run with SIGINT ignored, as
    # under nohup: a Python started so would ignore it too)
    return pexpect.spawn(sys.executable, ["-m", "pybeanstalkd.ops.admin", "-p", str(srv.port), "put",
                                          *args], env=env, timeout=60, encoding="utf-8",
                         dimensions=(24, 200),
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.mark.parametrize("dash", [[], ["-"]])
def test_put_on_a_terminal_says_how_to_give_the_body(ours, dash):
    import pexpect

    child = spawn_put(ours, "typed", *dash)
    child.expect_exact(HINT)
    child.sendline("hello from a terminal")
    child.sendeof()
    child.expect(r"(\d+)\r\n")
    job = int(child.match.group(1))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    raw = Raw(ours)
    try:
        assert raw.cmd(f"peek {job}") == b"FOUND %d 22\r\nhello from a terminal\n\r\n" % job
    finally:
        raw.close()


def test_put_on_a_terminal_can_be_left_with_ctrl_c(ours):
    import pexpect

    child = spawn_put(ours, "left")
    child.expect_exact(HINT)
    child.send("half a body")
    child.sendintr()
    child.expect_exact("pybeanstalkd-admin: interrupted")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    raw = Raw(ours)
    try:
        assert raw.cmd("stats-tube left") == b"NOT_FOUND\r\n"  # nothing was put
    finally:
        raw.close()


def test_put_from_a_pipe_or_an_argument_says_nothing(ours):
    assert run(["put", "piped"], ours, input=b"body")[2] == ""
    assert run(["put", "piped", "body"], ours)[2] == ""


# -- groups cut long names, as tubes does

GROUP = "nightly-report-regeneration-for-every-customer-account." + "y" * 60


@pytest.fixture
def groups_srv():
    srv = Server(ours_argv(), ["--extensions"])
    raw = Raw(srv)
    raw.cmd("use grouped")
    for tags in (f"grp:{GROUP}", f"grp:{GROUP}", "grp:short", f"aft:{GROUP}"):
        assert raw.cmd(f"put 0 0 60 1 {tags}", b"x").startswith(b"INSERTED")
    yield srv
    raw.close()
    srv.stop()


def test_groups_at_80_columns_cut_a_long_name_on_one_line(groups_srv):
    term = Tmux(width=80)
    try:
        term.type(f"clear; {' '.join(ADMIN)} -p {groups_srv.port} groups {GROUP} short; echo groups-exit-$((1+1))")
        pane = term.wait_for(lambda p: "groups-exit-2" in p, "groups")
    finally:
        term.close()
    assert_fits_whole(pane, 80, [])
    rows = [line.split() for line in pane.splitlines() if line.strip().startswith(("nightly", "short"))]
    # One line a group: the long name cut with an ellipsis, every number whole.
    assert [r[1:] for r in rows] == [["2", "0", "0", "0", "1"], ["1", "0", "0", "0", "0"]], pane
    assert rows[0][0].endswith("…") and GROUP.startswith(rows[0][0][:-1]) and len(rows[0][0]) >= 20
    assert GROUP not in pane


def test_groups_in_a_pipe_keep_a_long_name_whole(groups_srv):
    rc, out, err = run(["groups", GROUP, "short"], groups_srv, env={"COLUMNS": "80"})
    assert (rc, err) == (0, "")
    assert out.splitlines()[1:] == [f"{GROUP}\t2\t0\t0\t0\t1", "short\t1\t0\t0\t0\t0"]
    term = Tmux(width=80)
    try:  # `| cat` at a terminal: a pipe, whatever the terminal's width
        term.type(f"clear; {' '.join(ADMIN)} -p {groups_srv.port} groups {GROUP} | cat; echo cat-exit-$((1+1))")
        pane = term.wait_for(lambda p: "cat-exit-2" in p, "groups | cat")
    finally:
        term.close()
    assert "\t" not in pane  # (tmux shows tabs as spaces)
    assert re.search(rf"^{re.escape(GROUP[:80])}$", pane, re.M)  # whole: it wraps at 80, uncut
    assert "…" not in pane


# -- top's footer


@pytest.mark.parametrize("width", [80, 120])
def test_tops_footer_suggests_only_what_top_takes(width):
    from pybeanstalkd.ops import admin_views as v

    tubes = [big_tube("default", 1), big_tube(LONG, 2)]
    rates = {t["name"]: (1.5, 2.5) for t in tubes}
    server = {"version": "1.13", "uptime": 5}
    out = drawn(lambda c: c.print(v.top_frame(server, tubes, None, rates, "127.0.0.1:11300", 1,
                                              "name", c.width)), width)
    words = " ".join(out.split())  # (the caption may wrap)
    assert "--json" not in out and "not shown: " in words
    assert "(widen the terminal, or pipe it for every column)" in words
    out = drawn(lambda c: v.show_tubes(c, tubes, "127.0.0.1:11300"), width)
    assert "(widen the terminal, or pipe it or --json for every column)" in " ".join(out.split())

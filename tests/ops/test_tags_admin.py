"""pybeanstalkd-admin and the put tags (--extensions): `groups NAME...`
(stats-group of each, tab-separated in a pipe, drawn on a terminal, JSON),
its errors (no such group, a server without stats-group, a bad name), and
`peek`'s stats-job with tuber's tag fields. As test_admin.py: the CLI as a
process against a live server, set up by an independent raw client."""
from __future__ import annotations

import json

import pytest

from support import Server, ours_argv, require_reference
from test_admin import Raw, assert_fits_whole, drawn, run


@pytest.fixture(scope="module")
def ext():
    """Ours with --extensions: group g with a ready, a reserved and a
    buried job, and two aft:g jobs held; group "123" with one delayed job."""
    srv = Server(ours_argv(), ["--extensions"])
    r, worker = Raw(srv), Raw(srv)
    try:
        def put(tags: str, body: bytes = b"x", delay: int = 0) -> int:
            got = r.cmd(f"put 0 {delay} 60 {len(body)} {tags}", body)
            assert got.startswith(b"INSERTED "), got
            return int(got.split()[1])

        r.cmd("use gt")
        put("grp:g idp:123:30 con:c:2")
        held = put("grp:g")
        buried = put("grp:g")
        put("aft:g")
        put("aft:g")
        put("grp:123", delay=600)
        assert worker.cmd(f"reserve-job {buried}").startswith(b"RESERVED")
        assert worker.cmd(f"bury {buried} 0") == b"BURIED\r\n"
        assert worker.cmd(f"reserve-job {held}").startswith(b"RESERVED")
        yield srv
    finally:
        r.close()
        worker.close()
        srv.stop()


def test_groups_in_a_pipe_are_tab_separated(ext):
    rc, out, err = run(["groups", "g", "123"], ext)
    assert (rc, err) == (0, "")
    assert out.splitlines() == [
        "group\tready\treserved\tdelayed\tburied\twaiting",
        "g\t1\t1\t0\t1\t2",
        "123\t0\t0\t1\t0\t0",
    ]


def test_groups_json(ext):
    rc, out, _ = run(["groups", "123", "g", "--json"], ext)
    assert rc == 0
    assert json.loads(out) == [
        {"name": "123", "ready": 0, "reserved": 0, "delayed": 1, "buried": 0, "waiting-jobs": 0},
        {"name": "g", "ready": 1, "reserved": 1, "delayed": 0, "buried": 1, "waiting-jobs": 2},
    ]


def test_a_group_not_found_is_said_and_the_others_shown(ext):
    rc, out, err = run(["groups", "nope", "g"], ext)
    assert rc == 1
    assert out.splitlines()[1:] == ["g\t1\t1\t0\t1\t2"]
    assert "group 'nope': NOT_FOUND: no such group" in err
    rc, out, err = run(["groups", "nope", "--json"], ext)
    assert (rc, json.loads(out)) == (1, [])


def test_a_bad_group_name_is_usage(ext):
    rc, out, err = run(["groups", "g", "-x"], ext)  # (argparse: an option)
    assert rc == 2
    rc, out, err = run(["groups", "a b"], ext)
    assert rc == 2 and "invalid group name 'a b'" in err and out == ""


@pytest.mark.parametrize("kind", ["ours", "reference"])
def test_a_server_without_stats_group(kind):
    srv = Server(ours_argv() if kind == "ours" else [require_reference()])
    try:
        rc, out, err = run(["groups", "g"], srv)
        assert rc == 1 and out == ""
        assert "does not know stats-group" in err and "--extensions" in err
    finally:
        srv.stop()


@pytest.mark.parametrize("width", [60, 80, 120])
def test_groups_drawn(width):
    from pybeanstalkd.ops import admin_views as v

    groups = [{"name": "emails", "ready": 1234567, "reserved": 2, "delayed": 0, "buried": 5,
               "waiting-jobs": 89012},
              {"name": "123", "ready": 0, "reserved": 0, "delayed": 1, "buried": 0, "waiting-jobs": 0}]
    text = drawn(lambda c: v.show_groups(c, groups, "127.0.0.1:11300"), width)
    assert "groups on 127.0.0.1:11300" in text and "waiting" in text
    # numbers whole; on a narrow terminal a long name is folded, never cut
    assert_fits_whole(text, width, ["1,234,567", "89,012", "123"])
    if width >= 80:
        assert "emails" in text


def test_peek_shows_the_tag_fields(ext):
    rc, out, _ = run(["peek", "gt", "--json"], ext)
    assert rc == 0
    st = json.loads(out)["stats"]
    assert st["idempotency-key"] == "123"  # (text, though it looks like a number)
    assert (st["idempotency-ttl"], st["group"], st["after-group"]) == (30, "g", "")
    assert (st["concurrency-key"], st["concurrency-limit"]) == ("c", 2)
    rc, out, _ = run(["peek", "gt", "delayed", "--json"], ext)
    assert json.loads(out)["stats"]["group"] == "123"


def test_groups_on_a_terminal_draws_the_table(ext, monkeypatch, capsys):
    from pybeanstalkd.ops import admin

    monkeypatch.setattr(admin, "on_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "100")
    assert admin.main(["-p", str(ext.port), "groups", "g", "gone"]) == 1
    out, err = capsys.readouterr()
    assert f"groups on 127.0.0.1:{ext.port}" in out and "group 'gone': NOT_FOUND" in err
    [row] = [line.split() for line in out.splitlines() if line.strip().startswith("g ")]
    assert row == ["g", "1", "1", "0", "1", "2"]

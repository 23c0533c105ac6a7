"""pybeanstalkd-admin and the put tags (--extensions): `groups NAME...`
(stats-group of each, tab-separated in a pipe, drawn on a terminal, JSON),
its errors (no such group, a server without stats-group, a bad name),
`peek`'s stats-job with tuber's tag fields, and `keys TUBE --http` (a
tube's idp: keys and cooldowns, from the HTTP side: tab-separated, drawn,
JSON, and its errors). As test_admin.py: the CLI as a
process against a live server, set up by an independent raw client."""
from __future__ import annotations

import json
import re

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
    from pybeanstalkd.ops import admin, admin_groups

    monkeypatch.setattr(admin_groups, "on_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "100")
    assert admin.main(["-p", str(ext.port), "groups", "g", "gone"]) == 1
    out, err = capsys.readouterr()
    assert f"groups on 127.0.0.1:{ext.port}" in out and "group 'gone': NOT_FOUND" in err
    [row] = [line.split() for line in out.splitlines() if line.strip().startswith("g ")]
    assert row == ["g", "1", "1", "0", "1", "2"]


# -- keys TUBE --http: the tube's idp: keys and cooldowns (GET /api/v1/keys) ----


@pytest.fixture(scope="module")
def keyed():
    """Ours with --extensions and --http: in tube mail, keys b-2 and a-1
    held, key c-3 in a 300 s cooldown; key z in tube other."""
    from dashtools import HttpServer

    srv = HttpServer("--extensions")
    r = Raw(srv.srv)
    try:
        def put(tube: str, tags: str) -> int:
            r.cmd(f"use {tube}")
            got = r.cmd(f"put 0 0 60 1 {tags}", b"x")
            assert got.startswith(b"INSERTED "), got
            return int(got.split()[1])

        srv.ids = {"b-2": put("mail", "idp:b-2"), "a-1": put("mail", "idp:a-1"),
                   "c-3": put("mail", "idp:c-3:300"), "z": put("other", "idp:z")}
        assert r.cmd(f"delete {srv.ids['c-3']}") == b"DELETED\r\n"
        srv.where = f"127.0.0.1:{srv.http_port}"
        yield srv
    finally:
        r.close()
        srv.stop()


def test_keys_in_a_pipe_are_tab_separated(keyed):
    rc, out, err = run(["keys", "mail", "--http", keyed.where])
    assert (rc, err) == (0, "")
    header, *rows = out.splitlines()
    assert header == "kind\tkey\tjob\tends-in-s"
    ids = keyed.ids
    assert rows[:2] == [f"key\ta-1\t{ids['a-1']}\t-", f"key\tb-2\t{ids['b-2']}\t-"]
    kind, key, job, ends = rows[2].split("\t")
    assert (kind, key, job) == ("cooldown", "c-3", str(ids["c-3"])) and 290 <= int(ends) <= 300
    assert len(rows) == 3
    rc, out, err = run(["keys", "nowhere", "--http", keyed.where])  # (no such tube: none)
    assert (rc, out, err) == (0, "kind\tkey\tjob\tends-in-s\n", "")


def test_keys_json_is_the_apis_answer(keyed):
    rc, out, _ = run(["keys", "other", "--json", "--http", keyed.where])
    assert rc == 0
    assert json.loads(out) == {"tube": "other", "keys": [{"key": "z", "job": keyed.ids["z"]}],
                               "cooldowns": [], "truncated": False}


def test_keys_on_a_terminal_draws_both_tables(keyed, monkeypatch, capsys):
    from pybeanstalkd.ops import admin, admin_keys

    monkeypatch.setattr(admin_keys, "on_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "100")
    assert admin.main(["keys", "mail", "--http", keyed.where]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert f"idp: keys of mail on {keyed.where}" in out and "cooldowns" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()
            if line.strip() and line.split()[0] in ("a-1", "b-2", "c-3")}
    assert rows["a-1"] == [str(keyed.ids["a-1"])] and rows["b-2"] == [str(keyed.ids["b-2"])]
    assert rows["c-3"][0] == str(keyed.ids["c-3"]) and re.fullmatch(r"[45]m \d\ds", " ".join(rows["c-3"][1:]))


def test_keys_errors(keyed, tmp_path):
    rc, out, err = run(["keys", "a b", "--http", keyed.where])
    assert rc == 2 and "invalid tube name 'a b'" in err and out == ""
    rc, _, err = run(["keys", "mail"])
    assert rc == 2 and "--http" in err
    from support import free_port

    rc, _, err = run(["keys", "mail", "--http", f"127.0.0.1:{free_port()}", "--timeout", "2"])
    assert rc == 3 and "cannot reach the HTTP side" in err
    from dashtools import HttpServer

    plain = HttpServer(auth="ops:s3cret")  # no --extensions, and basic auth
    try:
        at = f"127.0.0.1:{plain.http_port}"
        rc, _, err = run(["keys", "mail", "--http", at])
        assert rc == 1 and "authorization required" in err
        rc, _, err = run(["keys", "mail", "--http", at, "--http-auth", "ops:s3cret"])
        assert rc == 1 and "HTTP 404" in err and "--extensions" in err
        rc, _, err = run(["keys", "mail", "--http", at], env={"PYBEANSTALKD_HTTP_AUTH": "ops:s3cret"})
        assert rc == 1 and "--extensions" in err
    finally:
        plain.stop()


def test_keys_says_when_the_list_is_cut(monkeypatch, capsys):
    from pybeanstalkd.ops import admin, admin_keys

    answer = {"tube": "t", "keys": [{"key": "k%d" % i, "job": i + 1} for i in range(3)],
              "cooldowns": [{"key": "c", "job": 9, "ends_in_s": 5}], "truncated": True}
    monkeypatch.setattr(admin_keys, "fetch_keys", lambda *a: answer)
    monkeypatch.setattr(admin_keys, "on_terminal", lambda: False)
    assert admin.main(["keys", "t", "--http", "127.0.0.1:1"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[1:] == ["key\tk0\t1\t-", "key\tk1\t2\t-", "key\tk2\t3\t-", "cooldown\tc\t9\t5"]
    assert "the first 3 keys and 1 cooldowns by key: the tube has more" in err
    monkeypatch.setattr(admin_keys, "on_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "80")
    assert admin.main(["keys", "t", "--http", "127.0.0.1:1"]) == 0
    assert "the tube has more" in capsys.readouterr().out


@pytest.mark.parametrize("width", [40, 60, 100])
def test_keys_drawn(width):
    from pybeanstalkd.ops import admin_views as v

    d = {"tube": "mail", "truncated": False,
         "keys": [{"key": "order-" + "x" * 70, "job": 123456789}, {"key": "a", "job": 7}],
         "cooldowns": [{"key": "invoice-9", "job": 98765432, "ends_in_s": 7199}]}
    text = drawn(lambda c: v.show_keys(c, d, "127.0.0.1:8080"), width)
    assert "cooldowns" in text and "1h 59m 59s" in text
    # numbers whole (ids without separators, as the protocol writes them); a long key folded
    assert_fits_whole(text, width, ["123456789", "7", "98765432"])
    empty = drawn(lambda c: v.show_keys(c, {"tube": "t", "keys": [], "cooldowns": []}, "h:1"), width)
    assert empty.count("(none)") == 2

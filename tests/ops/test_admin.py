"""pybeanstalkd-admin against live servers, ours and the reference beanstalkd:
each command's output, and its effect seen over the protocol by an
independent raw client. Run as a process its stdout is a pipe, so tables come
as tab-separated values; the drawn tables are checked at 80 and 200 columns,
in-process and in a real terminal (tmux), where `top` also runs: its tubes and
rates, and the terminal restored after q and Ctrl-C."""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from support import Client, Server, free_port, ours_argv, require_reference, sock_path

ADMIN = [sys.executable, "-m", "pybeanstalkd.ops.admin"]
WAIT = 60.0  # how long a terminal may take to show something; never asserted on


@pytest.fixture(params=["ours", "reference"])
def srv(request):
    s = Server(ours_argv() if request.param == "ours" else [require_reference()])
    yield s
    s.stop()


def run(args, srv=None, input=None, env=None):
    """The admin CLI as a process: (returncode, stdout, stderr); never a traceback."""
    where = ["-p", str(srv.port)] if srv is not None else []
    full_env = dict(os.environ, COLUMNS="200")
    full_env.pop("BEANSTALKD_HOST", None)
    full_env.pop("BEANSTALKD_PORT", None)
    full_env.update(env or {})
    p = subprocess.run(ADMIN + where + list(args), input=input, capture_output=True, env=full_env,
                       timeout=120)
    out, err = p.stdout.decode(), p.stderr.decode()
    assert "Traceback" not in err, err
    return p.returncode, out, err


# -- an independent raw client to set up and check


def yaml_dict(body: bytes) -> dict:
    out = {}
    for line in body.decode().splitlines()[1:]:
        k, _, v = line.partition(": ")
        out[k] = v.strip('"')
    return out


class Raw:
    def __init__(self, srv):
        self.c = Client(srv.connect())

    def cmd(self, line: str, body: bytes | None = None) -> bytes:
        data = line.encode() + b"\r\n"
        if body is not None:
            data += body + b"\r\n"
        return self.c.cmd(data)

    def put(self, tube: str, body: bytes = b"x", pri=100, delay=0, ttr=60) -> int:
        self.cmd(f"use {tube}")
        r = self.cmd(f"put {pri} {delay} {ttr} {len(body)}", body)
        assert r.startswith(b"INSERTED "), r
        return int(r.split()[1])

    def bury(self, tube: str, n: int, body: bytes = b"b") -> list[int]:
        """n buried jobs in tube (put, reserved by id order, buried)."""
        ids = [self.put(tube, body, pri=0) for _ in range(n)]
        self.cmd(f"watch {tube}")
        for _i in ids:
            r = self.cmd("reserve-with-timeout 0")
            assert r.startswith(b"RESERVED "), r
            assert self.cmd(f"bury {int(r.split()[1])} 10") == b"BURIED\r\n"
        self.cmd(f"ignore {tube}")
        return ids

    def stats_tube(self, tube: str) -> dict:
        r = self.cmd(f"stats-tube {tube}")
        assert r.startswith(b"OK "), r
        return yaml_dict(r.split(b"\r\n", 1)[1])

    def stats_job(self, job_id: int) -> dict | None:
        r = self.cmd(f"stats-job {job_id}")
        return yaml_dict(r.split(b"\r\n", 1)[1]) if r.startswith(b"OK ") else None

    def counts(self, tube: str) -> tuple[int, ...]:
        st = self.stats_tube(tube)
        return tuple(int(st[f"current-jobs-{s}"]) for s in ("ready", "reserved", "delayed", "buried"))

    def close(self):
        self.c.close()


@pytest.fixture
def raw(srv):
    r = Raw(srv)
    yield r
    r.close()


def wait_until(check, what: str):
    end = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > end:
            pytest.fail(f"never: {what}")
        time.sleep(0.01)


def reserve_elsewhere(srv, tube: str) -> tuple[Raw, int]:
    """Another connection holding a job of tube reserved."""
    other = Raw(srv)
    other.cmd(f"watch {tube}")
    other.cmd("ignore default")
    r = other.cmd("reserve-with-timeout 0")
    assert r.startswith(b"RESERVED "), r
    return other, int(r.split()[1])


# -- stats and tubes


def test_stats_grouped_and_json(srv, raw):
    for _ in range(3):
        raw.put("st", b"abc")
    rc, out, _ = run(["stats"], srv)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == "key\tvalue" and all(line.count("\t") == 1 for line in lines)
    values = dict(line.split("\t") for line in lines[1:])
    assert values["current-jobs-ready"] == "3" and values["cmd-put"] == "3"
    assert values["max-job-size"] == "65535" and values["draining"] == "false"

    rc, out, _ = run(["stats", "--json"], srv)
    data = json.loads(out)
    assert data["current-jobs-ready"] == 3 and data["cmd-put"] == 3
    assert data["draining"] is False
    assert isinstance(data["version"], str) and isinstance(data["id"], str)
    assert isinstance(data["rusage-utime"], float)

    rc, out, _ = run(["stats", "current-jobs-ready", "draining"], srv)
    assert (rc, out) == (0, "3\nfalse\n")
    rc, out, err = run(["stats", "no-such-key"], srv)
    assert rc == 2 and out == "" and "no such stats key on " in err and err.rstrip().endswith(": no-such-key")


TSV_HEADER = ["tube", "ready", "reserved", "delayed", "buried", "urgent", "waiting", "watching",
              "using", "pause", "pause-left", "total"]


def tubes_rows(out: str) -> dict[str, list[str]]:
    """The piped tubes table (TSV) by tube name, after checking its header."""
    lines = out.splitlines()
    assert lines[0].split("\t") == TSV_HEADER
    rows = {}
    for line in lines[1:]:
        cells = line.split("\t")
        assert len(cells) == len(TSV_HEADER), line
        rows[cells[0]] = cells
    return rows


def test_tubes_table_and_json(srv, raw):
    for i in range(3):
        raw.put("t1", pri=5 if i == 0 else 2000)
    raw.put("t2", delay=100)
    raw.bury("t2", 2)
    raw.put("t2")
    holder, _ = reserve_elsewhere(srv, "t2")
    raw.put("t3")
    assert raw.cmd("pause-tube t3 500") == b"PAUSED\r\n"

    rc, out, _ = run(["tubes"], srv)
    assert rc == 0
    rows = tubes_rows(out)
    assert set(rows) >= {"default", "t1", "t2", "t3"}
    #                     ready reserved delayed buried urgent waiting watching using pause left total
    assert rows["t1"][1:] == ["3", "0", "0", "0", "1", "0", "0", "0", "0", "0", "3"]
    assert rows["t2"][1:] == ["0", "1", "1", "2", "0", "0", "1", "0", "0", "0", "4"]
    assert rows["t3"][8] == "1"  # raw uses t3 now
    assert rows["t3"][9] == "500" and 0 < int(rows["t3"][10]) <= 500

    rc, out, _ = run(["tubes", "--json"], srv)
    by_name = {t["name"]: t for t in json.loads(out)}
    t2 = by_name["t2"]
    assert (t2["current-jobs-ready"], t2["current-jobs-reserved"], t2["current-jobs-delayed"],
            t2["current-jobs-buried"], t2["total-jobs"]) == (0, 1, 1, 2, 4)
    assert by_name["t3"]["pause"] == 500
    assert by_name["t1"]["current-jobs-urgent"] == 1
    holder.close()


# -- connection and errors


def test_connection_flags_and_environment(srv):
    port = str(srv.port)
    rc, out, _ = run(["stats", "pid"], env={"BEANSTALKD_PORT": port})
    assert rc == 0 and out.strip() == str(srv.proc.pid)
    rc, out, _ = run(["-p", port, "stats", "pid"], env={"BEANSTALKD_PORT": "1"})
    assert rc == 0 and out.strip() == str(srv.proc.pid)  # the flag wins over the environment
    rc, out, _ = run(["stats", "pid", "-p", port])  # flags after the command work too
    assert rc == 0 and out.strip() == str(srv.proc.pid)

    rc, out, err = run(["-p", str(free_port()), "tubes"], env={"BEANSTALKD_PORT": port})
    assert rc == 3 and out == ""  # nobody listens there
    assert err.count("\n") == 1 and "connection refused" in err

    rc, _, err = run(["put", "bad*name", "x"], srv)
    assert rc == 2 and err.count("\n") == 1 and "invalid tube name 'bad*name'" in err


def test_unix_socket(tmp_path):
    for name, argv in (("ours", ours_argv()), ("reference", [require_reference()])):
        (tmp_path / name).mkdir()
        path = sock_path(tmp_path / name)
        s = Server(argv, unix_path=path)
        try:
            rc, out, _ = run(["-H", "unix:" + path, "put", "u", "over-unix"])
            assert rc == 0 and out.strip().isdigit()
            rc, out, _ = run(["tubes", "--json"], env={"BEANSTALKD_HOST": "unix:" + path})
            assert {t["name"]: t["current-jobs-ready"] for t in json.loads(out)}["u"] == 1
        finally:
            s.stop()


NO_RICH = ("import sys; sys.modules['rich'] = None\n"
           "from pybeanstalkd.ops.admin import main\n"
           "sys.exit(main(sys.argv[1:]))")


def test_without_rich_plain_and_json_still_work(srv):
    base = [sys.executable, "-c", NO_RICH, "-p", str(srv.port)]
    assert Raw(srv).put("nr", b"x") > 0
    p = subprocess.run(base + ["peek", "nr"], capture_output=True, timeout=60)
    assert p.returncode == 0 and plain_job(p.stdout)[1] == b"x"
    p = subprocess.run(base + ["tubes", "--json"], capture_output=True, timeout=60)
    assert p.returncode == 0 and json.loads(p.stdout)[0]["name"] == "default"
    p = subprocess.run(base + ["tubes"], capture_output=True, timeout=60)  # a pipe: TSV, no rich
    assert p.returncode == 0 and tubes_rows(p.stdout.decode())["nr"][1] == "1"
    assert p.stderr == b""  # in a pipe, TSV is what was asked for: nothing to explain


def test_without_rich_a_terminal_gets_plain_output_and_says_how_to_draw(srv):
    import pexpect

    assert Raw(srv).put("nr", b"x") > 0
    child = pexpect.spawn(sys.executable, ["-c", NO_RICH, "-p", str(srv.port), "tubes"],
                          dimensions=(24, 80), timeout=60, encoding="utf-8")
    out = child.read()
    child.close()
    assert child.exitstatus == 0, out
    assert "plain output: rich is not installed (pip install 'pybeanstalkd[admin]'" in out
    assert "make install-service EXTRAS=http,admin" in out
    assert tubes_rows(out.replace("\r\n", "\n").split("\n", 1)[1])["nr"][1] == "1"


def test_help_does_not_load_rich():
    code = ("import sys\nfrom pybeanstalkd.ops.admin import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('rich loaded' if 'rich' in sys.modules else 'rich not loaded')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert p.stdout.decode().splitlines()[-1] == "rich not loaded"
    assert b"flush" in p.stdout and b"top" in p.stdout


# -- peek, kick, kick-job, delete


def plain_job(out: bytes) -> tuple[dict[str, str], bytes]:
    """peek in a pipe: `key value` rows, an empty line, then the body's bytes."""
    head, _, body = out.partition(b"\n\n")
    lines = head.decode().splitlines()
    assert lines[0] == "key\tvalue", out
    return dict(line.split("\t", 1) for line in lines[1:]), body


def run_bytes(args, srv) -> subprocess.CompletedProcess:
    p = subprocess.run(ADMIN + ["-p", str(srv.port)] + list(args), capture_output=True, timeout=120)
    assert b"Traceback" not in p.stderr, p.stderr
    return p


def test_peek_each_state(srv, raw):
    ready = raw.put("pk", b"hello\nworld", pri=7, ttr=9)
    delayed = raw.put("pk", b"later", delay=300)
    binary = bytes(range(0, 40)) + b"\xff"
    [buried] = raw.bury("pk", 1, body=binary)

    p = run_bytes(["peek", "pk"], srv)
    assert p.returncode == 0
    rows, body = plain_job(p.stdout)
    assert rows["id"] == str(ready) and rows["tube"] == "pk" and rows["state"] == "ready"
    assert rows["pri"] == "7" and rows["ttr"] == "9" and rows["body-bytes"] == "11"
    assert body == b"hello\nworld"

    rows, body = plain_job(run_bytes(["peek", "pk", "delayed"], srv).stdout)
    assert rows["id"] == str(delayed) and rows["state"] == "delayed" and body == b"later"

    rows, body = plain_job(run_bytes(["peek", "pk", "buried"], srv).stdout)
    assert rows["id"] == str(buried) and rows["state"] == "buried" and body == binary
    p = run_bytes(["peek", "pk", "buried", "--limit", "16"], srv)
    assert plain_job(p.stdout)[1] == binary[:16] and b"body cut to 16 of 41 bytes" in p.stderr

    rc, out, _ = run(["peek", "pk", "buried", "--json"], srv)
    data = json.loads(out)
    assert data["id"] == buried and data["stats"]["state"] == "buried" and data["body"] is None
    assert base64.b64decode(data["body_base64"]) == binary

    assert raw.counts("pk") == (1, 0, 1, 1)  # peeking changed nothing
    raw.cmd(f"delete {buried}")
    rc, out, err = run(["peek", "pk", "buried"], srv)
    assert rc == 1 and out == "" and "no buried job in tube 'pk'" in err
    rc, out, err = run(["peek", "nosuchtube"], srv)
    assert rc == 1 and "tube 'nosuchtube' not found" in err


def test_peek_drawn_on_a_terminal():
    from pybeanstalkd.ops.admin_views import show_job

    stats = {"id": 5, "tube": "pk", "state": "ready", "pri": 7, "ttr": 9}
    out = drawn(lambda c: show_job(c, 5, stats, b"hello\nworld", 65536), 80)
    assert "job 5 in tube 'pk'" in out
    assert re.search(r"state\s+ready\b", out) and re.search(r"pri\s+7\b", out)
    assert "body: 11 bytes (text)" in out and "hello\nworld" in out
    out = drawn(lambda c: show_job(c, 6, stats, bytes(range(0, 40)) + b"\xff", 65536), 80)
    assert "41 bytes (binary, hex dump)" in out
    assert "00000000  00 01 02 03 04 05 06 07  08 09 0a 0b 0c 0d 0e 0f  |................|" in out
    assert "00000020  20 21 22 23 24 25 26 27  ff" in out and '| !"#$%&\'.|' in out
    out = drawn(lambda c: show_job(c, 7, None, b"x" * 100, 10), 80)
    assert "the job was deleted before its stats could be read" in out
    assert "... 90 more bytes (--limit 0 shows all)" in out


def test_kick_buried_then_delayed(srv, raw):
    raw.bury("kk", 5)
    raw.put("kk", delay=300)
    rc, out, _ = run(["kick", "kk", "3"], srv)
    assert (rc, out) == (0, "kicked 3 buried jobs in tube 'kk'\n")
    assert raw.counts("kk") == (3, 0, 1, 2)
    rc, out, _ = run(["kick", "kk", "10"], srv)
    assert (rc, out) == (0, "kicked 2 buried jobs in tube 'kk'\n")
    rc, out, _ = run(["kick", "kk", "10"], srv)
    assert (rc, out) == (0, "kicked 1 delayed job in tube 'kk'\n")
    assert raw.counts("kk") == (6, 0, 0, 0)
    rc, out, _ = run(["kick", "kk", "1"], srv)
    assert (rc, out) == (0, "kicked 0 jobs: tube 'kk' has no buried or delayed jobs\n")
    raw.put("kk", delay=300)
    rc, out, _ = run(["kick", "kk", "0"], srv)  # as the protocol's kick 0: KICKED 0
    assert (rc, out) == (0, "kicked 0 jobs in tube 'kk': a bound of 0 kicks nothing\n")
    assert raw.counts("kk") == (6, 0, 1, 0)
    rc, _, err = run(["kick", "nosuchtube", "1"], srv)
    assert rc == 1 and "tube 'nosuchtube' not found" in err


def test_kick_job(srv, raw):
    [buried] = raw.bury("kj", 1)
    ready = raw.put("kj")
    rc, out, _ = run(["kick-job", str(buried)], srv)
    assert (rc, out) == (0, f"kicked job {buried}\n")
    assert raw.stats_job(buried)["state"] == "ready"
    rc, out, err = run(["kick-job", str(ready)], srv)
    assert rc == 1 and out == ""
    assert err == (f"pybeanstalkd-admin: job {ready}: NOT_FOUND: it is ready; "
                   "only buried or delayed jobs can be kicked\n")
    rc, _, err = run(["kick-job", "987654"], srv)
    assert rc == 1 and "job 987654: NOT_FOUND: no such job" in err


def test_delete_reports_each_id(srv, raw):
    a, b = raw.put("dl"), raw.put("dl", delay=100)
    [c] = raw.bury("dl", 1)
    held = raw.put("dl2")
    holder, got = reserve_elsewhere(srv, "dl2")
    assert got == held
    rc, out, err = run(["delete", str(a), str(held), str(b), "987654", str(c)], srv)
    assert rc == 1
    assert out == f"job {a}: deleted\njob {b}: deleted\njob {c}: deleted\n"
    assert f"job {held}: NOT_FOUND: reserved by another connection" in err
    assert "job 987654: NOT_FOUND: no such job" in err
    assert [raw.stats_job(i) for i in (a, b, c)] == [None] * 3
    assert raw.stats_job(held)["state"] == "reserved"  # still there, still held
    holder.close()  # released back to ready: now it can be deleted
    wait_until(lambda: raw.stats_job(held)["state"] == "ready", "the job released")
    rc, out, _ = run(["delete", str(held)], srv)
    assert (rc, out) == (0, f"job {held}: deleted\n")
    assert raw.stats_job(held) is None


# -- put, pause, flush


def test_put_from_argument_and_stdin(srv, raw):
    rc, out, _ = run(["put", "pt", "hello", "--pri", "5", "--ttr", "7"], srv)
    assert rc == 0 and re.fullmatch(r"\d+\n", out)
    job = int(out)
    st = raw.stats_job(job)
    assert (st["tube"], st["pri"], st["ttr"], st["state"]) == ("pt", "5", "7", "ready")
    assert raw.cmd(f"peek {job}") == f"FOUND {job} 5\r\nhello\r\n".encode()

    body = b"line one\r\nline two\x00\xff" * 100
    for args in (["put", "pt", "-"], ["put", "pt", "--delay", "100"]):
        rc, out, _ = run(args, srv, input=body)
        assert rc == 0
        job = int(out)
        assert raw.cmd(f"peek {job}") == b"FOUND %d %d\r\n%s\r\n" % (job, len(body), body)
    assert raw.stats_job(job)["state"] == "delayed"
    assert raw.counts("pt") == (2, 0, 1, 0)


def test_put_too_big_says_the_limit(tmp_path):
    for argv in (ours_argv(), [require_reference()]):
        s = Server(argv, extra=["-z", "10"])
        try:
            rc, out, err = run(["put", "big", "x" * 11], s)
            assert rc == 1 and out == ""
            assert "JOB_TOO_BIG: the body is 11 bytes, the server's max-job-size is 10" in err
            assert run(["put", "big", "x" * 10], s)[0] == 0
        finally:
            s.stop()


def test_pause(srv, raw):
    raw.put("pz")
    rc, out, _ = run(["pause", "pz", "100"], srv)
    assert (rc, out) == (0, "paused tube 'pz' for 100s\n")
    assert raw.stats_tube("pz")["pause"] == "100"
    rc, out, _ = run(["pause", "pz", "0"], srv)
    assert (rc, out) == (0, "unpaused tube 'pz'\n")
    assert raw.stats_tube("pz")["pause"] == "0"
    rc, _, err = run(["pause", "nosuchtube", "5"], srv)
    assert rc == 1 and "tube 'nosuchtube' not found" in err


def test_flush_each_state_leaves_other_tubes_and_reserved_jobs(srv, raw):
    # Interleaved with another tube's jobs, with varied priorities: ids in the
    # flushed tube are not consecutive and ready order is not id order.
    for i in range(300):
        raw.put("fl", pri=1 + (i * 7919) % 5000)
        if i % 3 == 0:
            raw.put("other")
    for _ in range(50):
        raw.put("fl", delay=500)
    raw.bury("fl", 40)
    raw.put("fl", pri=0)
    holder, _ = reserve_elsewhere(srv, "fl")
    assert raw.counts("fl") == (300, 1, 50, 40)

    rc, out, _ = run(["flush", "fl", "--state", "buried"], srv)
    assert (rc, out) == (0, "deleted 40 jobs from tube 'fl' (buried 40)\n")
    assert raw.counts("fl") == (300, 1, 50, 0)
    rc, out, _ = run(["flush", "fl", "--state", "delayed"], srv)
    assert (rc, out) == (0, "deleted 50 jobs from tube 'fl' (delayed 50)\n")
    assert raw.counts("fl") == (300, 1, 0, 0)
    raw.bury("fl", 2)
    raw.put("fl", delay=500)
    rc, out, err = run(["flush", "fl"], srv)
    assert rc == 0
    assert out == "deleted 303 jobs from tube 'fl' (ready 300, delayed 1, buried 2)\n"
    assert "1 reserved job left: only the connection holding it can delete it" in err
    assert raw.counts("fl") == (0, 1, 0, 0)
    assert raw.counts("other") == (100, 0, 0, 0)
    rc, out, _ = run(["flush", "fl"], srv)
    assert (rc, out) == (0, "deleted 0 jobs from tube 'fl' (ready 0, delayed 0, buried 0)\n")
    holder.close()


def test_flush_is_idempotent(srv, raw):
    raw.put("once")
    raw.cmd("use default")  # nobody uses "once" now: emptied, the server frees it
    rc, out, _ = run(["flush", "once"], srv)
    assert (rc, out) == (0, "deleted 1 job from tube 'once' (ready 1, delayed 0, buried 0)\n")
    rc, out, _ = run(["tubes", "--json"], srv)
    assert "once" not in {t["name"] for t in json.loads(out)}
    rc, out, err = run(["flush", "once"], srv)
    assert (rc, out) == (0, "deleted 0 jobs from tube 'once' (ready 0, delayed 0, buried 0)\n")
    assert "tube 'once' does not exist" in err
    rc, out, _ = run(["flush", "once", "--state", "buried"], srv)
    assert (rc, out) == (0, "deleted 0 jobs from tube 'once' (buried 0)\n")


def test_flush_a_big_tube(srv, raw):
    batch = b"".join(b"put 0 0 60 1\r\nx\r\n" for _ in range(5000))
    raw.cmd("use big")
    raw.c.send(batch)
    for _ in range(5000):
        assert raw.c.reply().startswith(b"INSERTED")
    rc, out, _ = run(["flush", "big", "--state", "ready"], srv)
    assert (rc, out) == (0, "deleted 5000 jobs from tube 'big' (ready 5000)\n")
    assert raw.counts("big") == (0, 0, 0, 0)


# -- bury, move, tail


def test_bury_by_id(srv, raw):
    ready = raw.put("by", pri=7)
    delayed = raw.put("by", delay=300, pri=9)
    rc, out, _ = run(["bury", str(ready), str(delayed), "--pri", "3"], srv)
    assert (rc, out) == (0, f"job {ready}: buried (was ready)\njob {delayed}: buried (was delayed)\n")
    for i in (ready, delayed):
        st = raw.stats_job(i)
        assert (st["state"], st["pri"], st["tube"]) == ("buried", "3", "by")
    assert raw.counts("by") == (0, 0, 0, 2)
    kept = raw.put("by", pri=11)
    rc, out, _ = run(["bury", str(kept)], srv)  # without --pri: the priority it has
    assert rc == 0 and raw.stats_job(kept)["pri"] == "11"
    rc, out, _ = run(["bury", str(ready)], srv)
    assert (rc, out) == (0, f"job {ready}: already buried\n")

    raw.put("by2")
    holder, held = reserve_elsewhere(srv, "by2")
    rc, out, err = run(["bury", str(held), "987654"], srv)
    assert rc == 1 and out == ""
    assert f"job {held}: NOT_FOUND: reserved by another connection" in err
    assert "job 987654: NOT_FOUND: no such job" in err
    assert raw.stats_job(held)["state"] == "reserved"
    holder.close()


def test_move_between_tubes(srv, raw):
    ids = [raw.put("mv", b"body-%d" % i, pri=50 - i, ttr=30 + i) for i in range(5)]
    delayed = raw.put("mv", b"later", delay=300, pri=4)
    raw.bury("mv", 2, body=b"dead")
    raw.put("mvx", b"held")  # a job held by a worker stays where it is
    raw.cmd("use default")

    rc, out, _ = run(["move", "mv", "dst", "--count", "2"], srv)
    assert (rc, out) == (0, "moved 2 ready jobs from tube 'mv' to 'dst'\n")
    assert raw.counts("mv") == (3, 0, 1, 2) and raw.counts("dst") == (2, 0, 0, 0)
    assert [raw.stats_job(i) for i in ids[-2:]] == [None, None]  # the best priorities went first
    moved, held = [], []
    raw.cmd("watch dst")
    for _ in range(2):
        r = raw.cmd("reserve-with-timeout 0")
        job = int(r.split()[1])
        st = raw.stats_job(job)
        moved.append((r.split(b"\r\n")[1], st["pri"], st["ttr"], st["tube"]))
        held.append((job, st["pri"]))
    for job, pri in held:
        raw.cmd(f"release {job} {pri} 0")
    raw.cmd("ignore dst")
    assert sorted(moved) == [(b"body-3", "47", "33", "dst"), (b"body-4", "46", "34", "dst")]

    rc, out, _ = run(["move", "mv", "dst", "--state", "delayed"], srv)
    assert (rc, out) == (0, "moved 1 delayed job from tube 'mv' to 'dst'\n")
    assert raw.stats_job(delayed) is None
    assert raw.counts("dst") == (2, 0, 1, 0)
    raw.cmd("use dst")
    r = raw.cmd("peek-delayed")  # the moved job has a new id
    st = raw.stats_job(int(r.split()[1]))
    assert (st["pri"], st["state"]) == ("4", "delayed") and 250 < int(st["time-left"]) <= 300

    rc, out, _ = run(["move", "mv", "dst", "--state", "buried"], srv)
    assert (rc, out) == (0, "moved 2 buried jobs from tube 'mv' to 'dst'\n")
    assert raw.counts("dst") == (4, 0, 1, 0)  # buried jobs arrive ready
    rc, out, _ = run(["move", "mv", "dst"], srv)
    assert (rc, out) == (0, "moved 3 ready jobs from tube 'mv' to 'dst'\n")
    assert raw.counts("dst") == (7, 0, 1, 0)

    holder, _ = reserve_elsewhere(srv, "mvx")
    rc, out, _ = run(["move", "mvx", "dst"], srv)
    assert (rc, out) == (0, "moved 0 ready jobs from tube 'mvx' to 'dst'\n")
    assert raw.counts("mvx") == (0, 1, 0, 0)
    holder.close()

    rc, out, err = run(["move", "nosuchtube", "dst"], srv)
    assert (rc, out) == (0, "moved 0 jobs from tube 'nosuchtube' to 'dst'\n")
    assert "does not exist" in err
    rc, _, err = run(["move", "dst", "dst"], srv)
    assert rc == 2 and "two different tubes" in err


def test_tail_follows_a_tube(srv, raw):
    # (Ctrl-C reaches it even when the tests run with SIGINT ignored, as
    # under nohup: a Python started so would ignore it too)
    p = subprocess.Popen(ADMIN + ["-p", str(srv.port), "tail", "tl", "-i", "0.05"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen: list[str] = []

    def expect(pattern: str) -> str:
        end = time.monotonic() + WAIT
        while time.monotonic() < end:
            line = p.stdout.readline()
            assert line, f"tail ended; it printed {seen}"
            seen.append(line)
            assert re.match(r"\d\d:\d\d:\d\d tl ", line), line
            if re.search(pattern, line):
                return line
        pytest.fail(f"tail never printed {pattern!r}; it printed {seen}")

    try:
        expect("no such tube yet")
        raw.cmd("use tl")
        raw.c.send(b"put 0 0 60 1\r\nx\r\n" * 3)
        for _ in range(3):
            assert raw.c.reply().startswith(b"INSERTED")
        expect(r"created: ready [0-3] ")
        expect(r"put \d+ \(total 3\)")
        raw.bury("tl", 1)
        expect(r"buried 0 -> 1$")
        assert raw.cmd("pause-tube tl 30") == b"PAUSED\r\n"
        expect(r"paused for 30s$")
        r = raw.cmd("peek-ready")
        raw.cmd(f"delete {int(r.split()[1])}")
        expect(r"deleted 1$")
    finally:
        p.send_signal(2)  # Ctrl-C is how tail is left
        try:
            # (reading what is left: a tail blocked on a full pipe never ends)
            _, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            pytest.fail(f"tail did not end on Ctrl-C; it printed {seen}; stderr {err!r}")
        rc = p.returncode
    assert rc == 0 and "Traceback" not in err


# -- top


def test_rates_from_counter_deltas():
    from pybeanstalkd.ops.admin_views import Rates

    r = Rates()
    server = {"pid": 1, "uptime": 5, "cmd-put": 10, "cmd-reserve": 1, "cmd-reserve-with-timeout": 1,
              "cmd-delete": 0, "job-timeouts": 0}
    assert r.update(0.0, server, [{"name": "a", "total-jobs": 10, "cmd-delete": 0}]) == (None, {"a": None})
    server2 = dict(server, uptime=7, **{"cmd-put": 30, "cmd-reserve-with-timeout": 5, "cmd-delete": 4})
    tubes = [{"name": "a", "total-jobs": 20, "cmd-delete": 4}, {"name": "new", "total-jobs": 10}]
    srv_rates, tube_rates = r.update(2.0, server2, tubes)
    assert srv_rates == {"put": 10.0, "reserve": 2.0, "delete": 2.0, "timeouts": 0.0}
    assert tube_rates == {"a": (5.0, 2.0), "new": (5.0, 0.0)}
    # "a" freed and made again: its counters start over from 0
    srv_rates, tube_rates = r.update(3.0, dict(server2, uptime=8), [{"name": "a", "total-jobs": 3}])
    assert tube_rates == {"a": (3.0, 0.0)}
    # another server process behind the same address: no server rates this time
    assert r.update(4.0, dict(server2, pid=2, uptime=1), [])[0] is None


def test_top_without_a_terminal_prints_rows_per_refresh(srv, raw):
    raw.put("alpha")
    rc, out, _ = run(["top", "--iterations", "2", "--interval", "0.1"], srv)
    assert rc == 0
    lines = [line.split("\t") for line in out.splitlines()]
    assert lines[0] == ["time", *TSV_HEADER, "puts/s", "deletes/s"]
    alpha = [row for row in lines[1:] if row[1] == "alpha"]
    assert len(alpha) == 2 and all(len(row) == len(lines[0]) for row in lines[1:])
    assert alpha[0][2] == "1" and alpha[0][-2:] == ["-", "-"]  # no rates on the first refresh
    assert alpha[1][-2:] == ["0.0", "0.0"] and float(alpha[1][0]) >= float(alpha[0][0])


class Tmux:
    """A private tmux server running a shell in a pane of a known size."""

    def __init__(self, width=160, height=45):
        if not shutil.which("tmux"):
            pytest.fail("tmux is not installed (apt-get install tmux; .ci/run does)")
        self.dir = tempfile.mkdtemp(prefix="pbtmux")
        self.sock = os.path.join(self.dir, "s")
        env = dict(os.environ, TERM="xterm-256color", PS1="$ ", HOME=self.dir)
        env.pop("TMUX", None)
        env.pop("COLUMNS", None)
        env.pop("LINES", None)
        self.tmux("new-session", "-d", "-x", str(width), "-y", str(height), "-c", self.dir,
                  "bash --norc --noprofile", env=env)

    def tmux(self, *args, env=None):
        return subprocess.run(["tmux", "-S", self.sock, "-f", "/dev/null", *args], check=True,
                              capture_output=True, env=env, timeout=30).stdout.decode()

    def type(self, line: str):
        self.tmux("send-keys", "-t", "0", "-l", line)
        self.tmux("send-keys", "-t", "0", "Enter")

    def key(self, key: str):
        self.tmux("send-keys", "-t", "0", key)

    def capture(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "0")

    def wait_for(self, check, what: str) -> str:
        end = time.monotonic() + WAIT
        while True:
            pane = self.capture()
            if check(pane):
                return pane
            if time.monotonic() > end:
                pytest.fail(f"the terminal never showed {what}; it shows:\n{pane}")
            time.sleep(0.05)

    def close(self):
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True, timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def term():
    t = Tmux()
    yield t
    t.close()


def cell(pane: str, tube: str, column: str) -> str | None:
    """A cell of top's table: columns are right-aligned under their header."""
    lines = pane.splitlines()
    header = next((line for line in lines if " puts/s " in line and "tube" in line), None)
    if header is None:
        return None
    end = header.index(column) + len(column)
    for line in lines:
        if line.split()[:1] == [tube]:
            for m in re.finditer(r"\S+", line):
                if m.end() == end:
                    return m.group()
    return None


def rate(value: str | None) -> float | None:
    if value is None or value == "…":
        return None
    return float(value.replace(",", ""))


def server_rate(pane: str, label: str) -> float | None:
    m = re.search(rf"\b{label}/s (\S+)", pane)
    return rate(m.group(1)) if m else None


class Producer(threading.Thread):
    """Puts (or reserves and deletes) jobs at a steady pace until stopped."""

    def __init__(self, srv, tube, delete=False):
        super().__init__(daemon=True)
        self.raw, self.tube, self.delete = Raw(srv), tube, delete
        self.stop = threading.Event()

    def run(self):
        if self.delete:
            self.raw.cmd(f"watch {self.tube}")
        while not self.stop.wait(0.01):
            if self.delete:
                r = self.raw.cmd("reserve-with-timeout 0")
                if r.startswith(b"RESERVED"):
                    self.raw.cmd(f"delete {int(r.split()[1])}")
            else:
                self.raw.put(self.tube)

    def finish(self):
        self.stop.set()
        self.join(30)
        self.raw.close()


@pytest.mark.parametrize("quit_key", ["q", "C-c"])
def test_top_in_a_terminal(srv, raw, term, quit_key):
    for _ in range(5):
        raw.put("alpha")
    raw.bury("beta", 2)
    raw.cmd("use alpha")  # alpha lives on when the deleter empties it
    # Each echo computes its marker, so that the typed line never matches it.
    term.type("stty -g > before; clear; echo shell-before-$((1+1))")
    term.wait_for(lambda p: "shell-before-2" in p, "the shell")
    term.type(f"{' '.join(ADMIN)} -p {srv.port} top --interval 0.3; echo top-exit-$?; stty -g > after")

    # The first frame has no rates yet; the next ones do, all 0 while nothing happens.
    pane = term.wait_for(lambda p: rate(cell(p, "alpha", "puts/s")) == 0 and server_rate(p, "put") == 0,
                         "alpha with a puts/s of 0")
    assert cell(pane, "alpha", "ready") == "5" and cell(pane, "beta", "buried") == "2"
    assert "q or Ctrl-C quits" in pane and "shell-before-2" not in pane  # the alternate screen

    producer = Producer(srv, "alpha")
    producer.start()
    try:
        term.wait_for(lambda p: (rate(cell(p, "alpha", "puts/s")) or 0) > 0
                      and (server_rate(p, "put") or 0) > 0, "alpha's puts/s above 0")
    finally:
        producer.finish()
    # Enough jobs for the deleter to go on for many frames, however slow this machine.
    raw.c.send(b"put 100 0 60 1\r\nx\r\n" * 2000)
    for _ in range(2000):
        assert raw.c.reply().startswith(b"INSERTED")
    deleter = Producer(srv, "alpha", delete=True)
    deleter.start()
    try:
        term.wait_for(lambda p: (rate(cell(p, "alpha", "deletes/s")) or 0) > 0
                      and (server_rate(p, "delete") or 0) > 0 and (server_rate(p, "reserve") or 0) > 0,
                      "alpha's deletes/s above 0")
    finally:
        deleter.finish()
    pane = term.wait_for(lambda p: rate(cell(p, "alpha", "puts/s")) == 0
                         and rate(cell(p, "alpha", "deletes/s")) == 0, "the rates back to 0")
    assert cell(pane, "alpha", "ready") == f"{raw.counts('alpha')[0]:,}"
    assert cell(pane, "beta", "puts/s") == "0"

    term.key(quit_key)
    pane = term.wait_for(lambda p: re.search(r"top-exit-\d", p), "top exiting")
    assert "top-exit-0" in pane
    assert "shell-before-2" in pane and "q or Ctrl-C quits" not in pane  # the screen restored
    term.type("cmp before after && echo modes-same-$((6*7))")
    term.wait_for(lambda p: "modes-same-42" in p, "the terminal modes as they were before top")


# -- output at real widths, and in pipes

LONG = "thumbnails-regenerate-after-upload." + "x" * 40  # longer than any terminal column


def big_tube(name: str, i: int) -> dict:
    return {"name": name, "current-jobs-ready": 1234567 * i, "current-jobs-reserved": 12345 * i,
            "current-jobs-delayed": 987654 * i, "current-jobs-buried": 55555 * i,
            "current-jobs-urgent": 4444444 * i, "current-waiting": 12 * i, "current-watching": 130 * i,
            "current-using": 45 * i, "pause": 3600 if i == 2 else 0, "pause-time-left": 3599,
            "total-jobs": 987654321 * i, "cmd-delete": 5}


def drawn(show, width: int) -> str:
    import io

    from rich.console import Console

    out = io.StringIO()
    show(Console(file=out, width=width, color_system=None, legacy_windows=False))
    return out.getvalue()


def assert_fits_whole(text: str, width: int, numbers):
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width, text
    assert not re.search(r"[\d,.]…|…[\d,.]", text), text  # no number cut
    for n in numbers:
        assert re.search(rf"(?<![\d,]){re.escape(n)}(?![\d,])", text), (n, text)


@pytest.mark.parametrize("width", [80, 120, 200])
def test_drawn_tables_fit_the_width_and_never_cut_numbers(width):
    from pybeanstalkd.ops import admin_views as v

    tubes = [big_tube("default", 1), big_tube(LONG, 2), big_tube("emails", 3)]
    ready = [f"{t['current-jobs-ready']:,}" for t in tubes]
    buried = [f"{t['current-jobs-buried']:,}" for t in tubes if t["current-jobs-buried"]]

    out = drawn(lambda c: v.show_tubes(c, tubes, "127.0.0.1:11300"), width)
    assert_fits_whole(out, width, ready + buried + ["7,407,402"])  # the ready total too
    header = next(line for line in out.splitlines() if line.split()[:2] == ["tube", "ready"])
    assert "thumbnails-regen" in out and LONG not in out  # the long name is cut, never a number
    if width >= 200:  # every column, with the full headers
        assert header.split() == ["tube", "ready", "reserved", "delayed", "buried", "urgent", "waiting",
                                  "watching", "using", "pause", "total"]
        assert "3,600s (3,599s left)" in out and "not shown" not in out
        assert_fits_whole(out, width, ["5,925,925,926", "26,666,664"])
    else:  # fewer columns, and said so
        assert "not shown: " in out

    rates = {t["name"]: (12345.6, 9876.5) for t in tubes}
    server = {"version": "1.13", "uptime": 12345, **{k: 98765432 for k in (
        "current-connections", "current-jobs-ready", "current-jobs-urgent", "current-jobs-buried")}}
    out = drawn(lambda c: c.print(v.top_frame(server, tubes, {"put": 12345.6, "reserve": 1.5, "delete": 0,
                                                              "timeouts": 0}, rates, "127.0.0.1:11300",
                                              1, "name", c.width)), width)
    assert_fits_whole(out, width, ready + buried + ["12,346", "9,876", "98,765,432"])
    header = next(line for line in out.splitlines() if line.split()[:2] == ["tube", "ready"])
    for column in ("ready", "put", "del"):  # top's headers whole, whatever the width
        assert re.search(rf"\b{column}", header), header

    stats = {"current-jobs-urgent": 4444444, "current-jobs-ready": 123456789, "max-job-size": 65535,
             "pid": 123456, "version": "1.13", "rusage-utime": 1234.5, "uptime": 99999999,
             "binlog-max-size": 10485760, "draining": False, "id": "fb4636de4ad47be5",
             **{f"cmd-{c}": 9876543210 for c in ("put", "peek", "reserve", "delete", "release", "bury",
                                                 "kick", "stats", "stats-tube", "list-tubes-watched")}}
    out = drawn(lambda c: v.show_stats(c, stats, "127.0.0.1:11300"), width)
    assert_fits_whole(out, width, ["123,456,789", "9,876,543,210", "4,444,444", "65,535", "123456"])

    st = {"cluster": "prod", "node": "node-a", "role": "leader", "leader": "node-a", "epoch": 12,
          "isr": ["node-a", "node-b"], "seq": 123456789,
          "nodes": [{"name": "node-a", "acked_seq": 123456789, "lag_batches": 0, "lag_bytes": 0,
                     "lag_seconds": 0.0, "peer": "10.0.0.11:11400", "http": "10.0.0.11:8080"},
                    {"name": "node-b", "connected": True, "acked_seq": 123456700, "lag_batches": 98765,
                     "lag_bytes": 1234567, "lag_seconds": 0.25, "peer": "10.0.0.12:11400",
                     "http": "10.0.0.12:8080"},
                    {"name": "node-c-with-a-long-name", "connected": False, "peer": "10.0.0.13:11400",
                     "http": "node-c.internal.example.com:8080"}]}
    out = drawn(lambda c: v.show_cluster(c, st, "10.0.0.11:8080", None), width)
    assert_fits_whole(out, width, ["123,456,789", "123,456,700", "98,765"])
    if width >= 200:
        assert "1.2 MiB" in out and "node-c.internal.example.com:8080" in out


def test_piped_tables_have_whole_values(srv, raw):
    raw.cmd(f"use {LONG}")
    raw.c.send(b"put 0 0 60 1\r\nx\r\n" * 12345)
    for _ in range(12345):
        assert raw.c.reply().startswith(b"INSERTED")
    raw.bury(LONG, 3)
    rc, out, _ = run(["tubes"], srv, env={"COLUMNS": "80"})
    assert rc == 0 and "…" not in out and "," not in out
    row = next(line for line in out.splitlines() if line.startswith(LONG + "\t"))
    assert row.split("\t")[1:5] == ["12345", "0", "0", "3"] and row.endswith("\t12348")
    rc, out, _ = run(["top", "-n", "1"], srv, env={"COLUMNS": "80"})
    assert rc == 0 and "…" not in out
    assert any(line.split("\t")[1:3] == [LONG, "12345"] for line in out.splitlines())
    rc, out, _ = run(["stats"], srv, env={"COLUMNS": "80"})
    assert "current-jobs-ready\t12345\n" in out and "cmd-put\t12348\n" in out


@pytest.mark.parametrize("width", [80, 200])
def test_tubes_and_top_in_a_terminal_at_its_width(srv, raw, width):
    raw.cmd(f"use {LONG}")
    raw.c.send(b"put 0 0 60 1\r\nx\r\n" * 23456)
    for _ in range(23456):
        assert raw.c.reply().startswith(b"INSERTED")
    raw.bury(LONG, 3)
    raw.cmd("use default")
    term = Tmux(width=width)
    try:
        term.type(f"clear; {' '.join(ADMIN)} -p {srv.port} tubes; echo tubes-exit-$((1+1))")
        pane = term.wait_for(lambda p: "tubes-exit-2" in p, "tubes")
        assert_fits_whole(pane, width, ["23,456", "23,459"])
        assert ("not shown: " in pane) == (width < 120)
        assert (LONG in pane) == (width >= 200)
        term.type(f"clear; {' '.join(ADMIN)} -p {srv.port} top -i 0.2")
        pane = term.wait_for(lambda p: "q or Ctrl-C quits" in p and "23,456" in p, "top")
        assert_fits_whole(pane, width, ["23,456"])
        term.key("q")
    finally:
        term.close()


def test_piped_cluster_report_is_whole(tmp_path):
    import http.server

    report = {"cluster": "prod", "node": "node-a", "role": "leader", "leader": "node-a", "epoch": 3,
              "isr": ["node-a"], "seq": 123456789,
              "nodes": [{"name": "node-a", "acked_seq": 123456789, "lag_batches": 0, "lag_bytes": 0,
                         "lag_seconds": 0.0, "peer": "10.0.0.11:11400", "http": "10.0.0.11:8080"},
                        {"name": "node-c-with-a-rather-long-name", "connected": False,
                         "link_error": "[Errno 111] Connection refused", "peer": "10.0.0.13:11400",
                         "http": "node-c.internal.example.com:8080"}]}

    class Node(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps(report).encode()
            self.send_response(200 if self.path == "/api/v1/cluster" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    node = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Node)
    threading.Thread(target=node.serve_forever, daemon=True).start()
    where = "127.0.0.1:%d" % node.server_port
    try:
        rc, out, _ = run(["cluster", "--http", where], env={"COLUMNS": "60"})
        no_rich = subprocess.run([sys.executable, "-c", NO_RICH, "cluster", "--http", where],
                                 capture_output=True, timeout=60)
    finally:
        node.shutdown()
        node.server_close()
    # Without rich there is nothing to draw with: the report as JSON, and why.
    assert no_rich.returncode == 0 and json.loads(no_rich.stdout) == report
    assert b"the cluster report as JSON: rich is not installed" in no_rich.stderr
    assert rc == 0 and "…" not in out
    assert re.search(r"^node-c-with-a-rather-long-name\s+follower\s+✗\s+down\s+-\s+-\s+-\s+-\s+"
                     r"10\.0\.0\.13:11400\s+node-c\.internal\.example\.com:8080$", out, re.M), out
    assert re.search(r"^node-a\s+leader\s+✓\s+self\s+123,456,789\s+0\s+0 B\s+0\.00 s\s", out, re.M), out
    assert "node-c-with-a-rather-long-name: no link: [Errno 111] Connection refused" in out


def test_a_move_never_leaves_a_job_in_both_tubes_nor_holds_a_buried_one():
    """If the original is gone when the move deletes it (a delayed job came
    due and a worker took it), the copy is deleted again; a buried or
    delayed job is never reserved by the move (a lost connection would make
    a held job ready at once)."""
    from pybeanstalkd.ops import admin as cli

    class Reply:
        status = "INSERTED"

        def int(self, i):
            return 99

    class Fake:
        def __init__(self, state, delete_ok):
            self.state, self.delete_ok, self.calls = state, delete_ok, []

        def use(self, tube):
            self.calls.append(("use", tube))

        def peek_state(self, state):
            return (7, b"body")

        def stats_job(self, job_id):
            return {"state": self.state, "tube": "a", "pri": 5, "ttr": 60, "time-left": 30}

        def reserve_job(self, job_id):
            self.calls.append(("reserve-job", job_id))
            return b"body"

        def put(self, body, pri, delay, ttr):
            self.calls.append(("put", body, pri, delay, ttr))
            return Reply()

        def delete(self, job_id):
            self.calls.append(("delete", job_id))
            return self.delete_ok if job_id == 7 else True

    c = Fake("delayed", delete_ok=False)
    assert cli._move_one(c, "a", "b", "delayed") == "skipped"
    assert ("delete", 99) in c.calls and not any(x[0] == "reserve-job" for x in c.calls)
    assert ("put", b"body", 5, 30, 60) in c.calls
    c = Fake("buried", delete_ok=True)
    assert cli._move_one(c, "a", "b", "buried") == "moved"
    assert not any(x[0] == "reserve-job" for x in c.calls)
    c = Fake("ready", delete_ok=True)
    assert cli._move_one(c, "a", "b", "ready") == "moved"
    assert ("reserve-job", 7) in c.calls


def test_flush_with_flush_tube():
    """--flush-tube: one command, every state, reserved jobs included, on a
    server with --extensions; the reference (and ours without the flag)
    does not know it, and the CLI says so."""
    ext = Server(ours_argv(), ["--extensions"])
    try:
        r = Raw(ext)
        for _ in range(3):
            r.put("ft")
        r.cmd("watch ft")
        r.cmd("reserve-with-timeout 0")
        rc, out, _ = run(["flush", "ft", "--flush-tube"], ext)
        assert (rc, out) == (0, "deleted 3 jobs from tube 'ft' (flush-tube: every state)\n")
        assert r.counts("ft") == (0, 0, 0, 0)
        rc, out, err = run(["flush", "nope", "--flush-tube"], ext)
        assert (rc, out) == (0, "deleted 0 jobs from tube 'nope' (flush-tube: every state)\n")
        assert "does not exist" in err
        rc, _, err = run(["flush", "ft", "--flush-tube", "--state", "ready"], ext)
        assert rc == 2 and "leave --state out" in err
        r.close()
    finally:
        ext.stop()
    for argv in (ours_argv(), [require_reference()]):
        plain = Server(argv)
        try:
            rc, _, err = run(["flush", "ft", "--flush-tube"], plain)
            assert rc == 1 and "does not know it" in err
        finally:
            plain.stop()

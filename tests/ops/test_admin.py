"""pybeanstalkd-admin against live servers, ours and the reference beanstalkd:
each command's output, and its effect seen over the protocol by an
independent raw client. `top` runs in a real terminal (tmux): its tubes and
rates, and the terminal restored after q and Ctrl-C."""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
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
    for group in ("Jobs", "Connections", "Server", "Binlog", "Commands"):
        assert group in out
    assert re.search(r"current-jobs-ready\s+3\b", out)
    assert re.search(r"cmd-put\s+3\b", out)
    assert re.search(r"max-job-size\s+65,535", out)

    rc, out, _ = run(["stats", "--json"], srv)
    data = json.loads(out)
    assert data["current-jobs-ready"] == 3 and data["cmd-put"] == 3
    assert data["draining"] is False
    assert isinstance(data["version"], str) and isinstance(data["id"], str)
    assert isinstance(data["rusage-utime"], float)

    rc, out, _ = run(["stats", "current-jobs-ready", "draining"], srv)
    assert (rc, out) == (0, "3\nfalse\n")
    rc, out, err = run(["stats", "no-such-key"], srv)
    assert rc == 1 and out == "" and "no such stats key: no-such-key" in err


def tubes_rows(out: str) -> dict[str, list[str]]:
    """Rows of the tubes table by name: the cells split on spaces (pause merged)."""
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if len(cells) >= 11 and re.fullmatch(r"[\d,]+", cells[1]):
            rows[cells[0]] = cells[:9] + [" ".join(cells[9:-1]), cells[-1]]
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
    header = next(line for line in out.splitlines() if "tube" in line and "ready" in line)
    assert header.split() == ["tube", "ready", "reserved", "delayed", "buried", "urgent",
                              "waiting", "watching", "using", "pause", "total"]
    rows = tubes_rows(out)
    assert set(rows) >= {"default", "t1", "t2", "t3"}
    #                     ready reserved delayed buried urgent waiting watching using pause total
    assert rows["t1"][1:] == ["3", "0", "0", "0", "1", "0", "0", "0", "-", "3"]
    assert rows["t2"][1:] == ["0", "1", "1", "2", "0", "0", "1", "0", "-", "4"]
    assert rows["t3"][8] == "1"  # raw uses t3 now
    assert rows["t3"][9].startswith("500s (") and rows["t3"][9].endswith("s left)")

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


def test_without_rich_tables_say_how_to_install_and_json_still_works(srv):
    code = ("import sys; sys.modules['rich'] = None\n"
            "from pybeanstalkd.ops.admin import main\n"
            "sys.exit(main(sys.argv[1:]))")
    base = [sys.executable, "-c", code, "-p", str(srv.port)]
    p = subprocess.run(base + ["tubes"], capture_output=True, timeout=60)
    assert p.returncode == 1 and p.stdout == b""
    assert b"pip install 'pybeanstalkd[admin]'" in p.stderr and b"Traceback" not in p.stderr
    p = subprocess.run(base + ["tubes", "--json"], capture_output=True, timeout=60)
    assert p.returncode == 0 and json.loads(p.stdout)[0]["name"] == "default"


def test_help_does_not_load_rich():
    code = ("import sys\nfrom pybeanstalkd.ops.admin import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('rich loaded' if 'rich' in sys.modules else 'rich not loaded')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert p.stdout.decode().splitlines()[-1] == "rich not loaded"
    assert b"flush" in p.stdout and b"top" in p.stdout


# -- peek, kick, kick-job, delete


def test_peek_each_state(srv, raw):
    ready = raw.put("pk", b"hello\nworld", pri=7, ttr=9)
    delayed = raw.put("pk", b"later", delay=300)
    [buried] = raw.bury("pk", 1, body=bytes(range(0, 40)) + b"\xff")

    rc, out, _ = run(["peek", "pk"], srv)
    assert rc == 0
    assert f"job {ready} in tube 'pk'" in out
    assert re.search(r"state\s+ready\b", out) and re.search(r"pri\s+7\b", out)
    assert re.search(r"ttr\s+9\b", out)
    assert "body: 11 bytes (text)" in out and "hello\nworld" in out

    rc, out, _ = run(["peek", "pk", "delayed"], srv)
    assert rc == 0 and f"job {delayed} in tube 'pk'" in out and "later" in out
    assert re.search(r"state\s+delayed\b", out)

    rc, out, _ = run(["peek", "pk", "buried"], srv)
    assert rc == 0 and f"job {buried} in tube 'pk'" in out
    assert "41 bytes (binary, hex dump)" in out
    assert "00000000  00 01 02 03 04 05 06 07  08 09 0a 0b 0c 0d 0e 0f  |................|" in out
    assert "00000020  20 21 22 23 24 25 26 27  ff" in out and '| !"#$%&\'.|' in out

    rc, out, _ = run(["peek", "pk", "buried", "--json"], srv)
    data = json.loads(out)
    assert data["id"] == buried and data["stats"]["state"] == "buried" and data["body"] is None
    assert base64.b64decode(data["body_base64"]) == bytes(range(0, 40)) + b"\xff"

    assert raw.counts("pk") == (1, 0, 1, 1)  # peeking changed nothing
    raw.cmd(f"delete {buried}")
    rc, out, err = run(["peek", "pk", "buried"], srv)
    assert rc == 1 and out == "" and "no buried job in tube 'pk'" in err
    rc, out, err = run(["peek", "nosuchtube"], srv)
    assert rc == 1 and "tube 'nosuchtube' not found" in err


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
    assert "1 reserved job left: only the connections holding them can delete them" in err
    assert raw.counts("fl") == (0, 1, 0, 0)
    assert raw.counts("other") == (100, 0, 0, 0)
    rc, out, _ = run(["flush", "fl"], srv)
    assert (rc, out) == (0, "deleted 0 jobs from tube 'fl' (ready 0, delayed 0, buried 0)\n")
    holder.close()


def test_flush_a_big_tube(srv, raw):
    batch = b"".join(b"put 0 0 60 1\r\nx\r\n" for _ in range(5000))
    raw.cmd("use big")
    raw.c.send(batch)
    for _ in range(5000):
        assert raw.c.reply().startswith(b"INSERTED")
    rc, out, _ = run(["flush", "big", "--state", "ready"], srv)
    assert (rc, out) == (0, "deleted 5,000 jobs from tube 'big' (ready 5,000)\n")
    assert raw.counts("big") == (0, 0, 0, 0)


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


def test_top_without_a_terminal_prints_its_last_frame(srv, raw):
    raw.put("alpha")
    rc, out, _ = run(["top", "--iterations", "2", "--interval", "0.1"], srv)
    assert rc == 0
    assert "puts/s" in out and "deletes/s" in out and "alpha" in out
    assert re.search(r"server\s+put/s \S+\s+reserve/s \S+\s+delete/s", out)


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

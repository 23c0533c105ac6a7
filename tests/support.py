"""Spawning servers (ours and the reference) and talking raw bytes to them."""
from __future__ import annotations

import fcntl
import os
import random
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager

REFERENCE = shutil.which("beanstalkd")
ETCD = shutil.which("etcd")


def require_reference() -> str:
    """Path of the reference server; a hard failure in CI when it is missing."""
    import pytest

    if REFERENCE:
        return REFERENCE
    if os.environ.get("PYBEANSTALKD_REQUIRE_REFERENCE") or os.environ.get("CI"):
        pytest.fail("reference beanstalkd is not installed (apt-get install beanstalkd)")
    pytest.skip("reference beanstalkd is not installed")


def require_etcd() -> str:
    """Path of etcd (Debian's etcd-server); a hard failure in CI when missing."""
    import pytest

    if ETCD:
        return ETCD
    if os.environ.get("CI"):
        pytest.fail("etcd is not installed (apt-get install etcd-server)")
    pytest.skip("etcd is not installed")


# The processes a cluster test started (its nodes, its etcd members), each
# as (name, process, log file): a wait of theirs that times out shows what
# each said last, and which ones exited (tests/cluster/conftest.py empties
# it before each test).
WATCHED: list[tuple[str, subprocess.Popen, str]] = []


def watch(name: str, proc: subprocess.Popen, log: str) -> None:
    WATCHED.append((name, proc, str(log)))


def tail(path: str, lines: int = 30) -> str:
    """The last lines of a log file."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return f"(no log: {e})"


def watched_tails(lines: int = 30) -> str:
    """Each watched process's state (running, or its exit status) and the
    last lines of its log (one log may hold several processes': a node
    started again)."""
    out = []
    for log in dict.fromkeys(path for _, _, path in WATCHED):
        procs = ", ".join(f"{name} (pid {proc.pid}): "
                          + ("running" if proc.poll() is None else f"exited {proc.returncode}")
                          for name, proc, path in WATCHED if path == log)
        out.append(f"--- {procs}; the end of {log}:\n" + tail(log, lines))
    return "\n".join(out)


@contextmanager
def etcd_server(data_dir: str):
    """A one-member etcd on free loopback ports (no fsync: tests only);
    yields (host, client port), once it answers /health. Its log is kept
    beside data_dir (data_dir.log)."""
    import urllib.request

    client, peer = free_port(), free_port()
    c_url, p_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    log = data_dir + ".log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [require_etcd(), "--name", "n1", "--data-dir", data_dir, "--unsafe-no-fsync",
             "--listen-client-urls", c_url, "--advertise-client-urls", c_url,
             "--listen-peer-urls", p_url, "--initial-advertise-peer-urls", p_url,
             "--initial-cluster", f"n1={p_url}"],
            stdout=out, stderr=out)
    watch("etcd", proc, log)
    try:
        end = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(c_url + "/health", timeout=1) as r:
                    if b'"true"' in r.read():
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"etcd did not start; the end of its log:\n{tail(log)}")
            time.sleep(0.05)
        yield "127.0.0.1", client
    finally:
        proc.kill()
        proc.wait()


class EtcdCluster:
    """Three etcd members on loopback (no fsync: tests only); members can be
    killed and started again."""

    def __init__(self, data_dir: str, n: int = 3):
        self.dir = data_dir
        self.client = [free_port() for _ in range(n)]
        self.peer = [free_port() for _ in range(n)]
        self.procs = [None] * n
        self.initial = ",".join(f"e{i}=http://127.0.0.1:{p}" for i, p in enumerate(self.peer))
        for i in range(n):
            self.start(i)
        for i in range(n):
            self.wait_healthy(i)

    @property
    def endpoints(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", p) for p in self.client]

    def start(self, i: int):
        c, p = f"http://127.0.0.1:{self.client[i]}", f"http://127.0.0.1:{self.peer[i]}"
        os.makedirs(self.dir, exist_ok=True)
        log = os.path.join(self.dir, f"e{i}.log")  # (kept: a failed wait shows its end)
        with open(log, "ab") as out:
            self.procs[i] = subprocess.Popen(
                [require_etcd(), "--name", f"e{i}", "--data-dir", os.path.join(self.dir, f"e{i}"),
                 "--unsafe-no-fsync", "--listen-client-urls", c, "--advertise-client-urls", c,
                 "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
                 "--initial-cluster", self.initial, "--initial-cluster-state", "new"],
                stdout=out, stderr=out)
        watch(f"etcd e{i}", self.procs[i], log)

    def wait_healthy(self, i: int, timeout: float = 30):
        import urllib.request

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.client[i]}/health",
                                            timeout=1) as r:
                    if b'"true"' in r.read():
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"etcd member {i} is not healthy; the end of its log:\n"
                           + tail(os.path.join(self.dir, f"e{i}.log")))

    def kill(self, i: int):
        self.procs[i].kill()
        self.procs[i].wait()

    def stop(self):
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def ours_argv() -> list[str]:
    return [sys.executable, "-m", "pybeanstalkd"]


TARGET = os.environ.get("PYBEANSTALKD_TEST_TARGET", "ours")


def target_argv() -> list[str]:
    """The server the client/e2e tests drive: ours, or the reference to check
    the tests themselves (PYBEANSTALKD_TEST_TARGET=reference)."""
    if TARGET == "reference":
        return [require_reference()]
    if TARGET == "ours":
        return ours_argv()
    raise RuntimeError(f"PYBEANSTALKD_TEST_TARGET must be 'ours' or 'reference', not {TARGET!r}")


def drain_pipes(proc):
    """Keep the server's stdout/stderr pipes empty so logging can never block it."""
    import threading

    def pump(f):
        try:
            while f.read(65536):
                pass
        except (OSError, ValueError):
            pass

    for f in (proc.stdout, proc.stderr):
        if f is not None:
            threading.Thread(target=pump, args=(f,), daemon=True).start()


def sock_path(tmp_path) -> str:
    """A unix socket path short enough for sun_path (108 bytes)."""
    p = str(tmp_path / "s")
    if len(p) < 100:
        return p
    return os.path.join(tempfile.mkdtemp(prefix="pbs"), "s")


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # (Linux's default)


# The ports servers under test listen on: below the kernel's ephemeral
# range, from which every client socket's own port is drawn. A port that
# bind(0) found free in that range may be taken by another test's client
# socket before the server binds it: a node then exited on "Address
# already in use" (its test went on to time out, on a loaded machine
# running tests side by side).
_LISTEN_PORTS = range(max(1024, min(20000, _ephemeral_low() - 4096)), _ephemeral_low())
# (its own draws: hypothesis seeds the random module's, the same in every
# worker of a parallel run)
_DRAWS = random.SystemRandom()

# A port free_port() hands out stays free until its server binds it: a
# node binds its peer port only after its start and its first etcd calls,
# seconds later on a loaded machine. Meanwhile another process (the other
# worker of a parallel run, another job's tests) could draw the same port
# and bind it first: the node then exits on "address already in use" and
# its test times out waiting for it to lead. So each port handed out is
# held for HOLD_S, for every process that draws through free_port() on
# this machine, in a file they all lock while they draw.
HOLD_S = 60.0
_HELD = os.path.join(tempfile.gettempdir(), "pybeanstalkd-test-ports")


def _hold(port: int, hold_s: float = HOLD_S) -> bool:
    """Hold port for hold_s, unless a process holds it already. (Without
    the file, say another user's, only the bind checks a port.)"""
    try:
        f = open(_HELD, "a+")
    except OSError:
        return True
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)  # (released as f closes)
        f.seek(0)
        now = time.time()
        held = {}
        for line in f:
            try:
                p, until = line.split()
                if float(until) > now:
                    held[int(p)] = float(until)
            except ValueError:
                continue
        if port in held:
            return False
        held[port] = now + hold_s
        f.seek(0)
        f.truncate()
        f.write("".join(f"{p} {until:.3f}\n" for p, until in held.items()))
        return True


def free_port(ports: range | None = None) -> int:
    """A port no socket uses on 127.0.0.1 now, outside the ephemeral range
    (or from ports), and that no test process has been handed in the last
    HOLD_S."""
    ports = ports or _LISTEN_PORTS
    for _ in range(1000):
        port = _DRAWS.choice(ports)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if _hold(port):
            return port
    raise RuntimeError(f"no free port in {ports}")


class Server:
    """A running server process listening on 127.0.0.1:port (or a unix path).

    http: with --http too, on 127.0.0.1:http_port. nofile: its limit of
    open descriptors. keep_output: its stdout and stderr are read from the
    start into out and err (bytearrays), so that a server that logs a lot
    never blocks on a pipe, and a test can read what it said; all of it is
    there once stop() returns (output())."""

    def __init__(self, argv, extra=(), unix_path=None, env=None, *, http=False, nofile=None,
                 keep_output=False):
        self.unix_path = unix_path
        if unix_path:
            self.port = None
            listen = ["-l", "unix:" + unix_path]
        else:
            self.port = free_port()
            listen = ["-l", "127.0.0.1", "-p", str(self.port)]
        self.http_port = free_port() if http else None
        if self.http_port is not None:
            listen += ["--http", f"127.0.0.1:{self.http_port}"]
        self.argv = list(argv) + listen + list(extra)

        def limit_nofile():
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                     preexec_fn=limit_nofile if nofile else None)
        self.out, self.err = bytearray(), bytearray()
        self._keepers = [threading.Thread(target=_keep, args=(f, buf), daemon=True)
                         for f, buf in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))
                         ] if keep_output else []
        for t in self._keepers:
            t.start()
        self._wait_listening()

    @property
    def address(self):
        return self.unix_path if self.unix_path else ("127.0.0.1", self.port)

    def _wait_listening(self, timeout=10.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                if self._keepers:
                    self._join_keepers()
                    err = bytes(self.err)
                else:
                    _, err = self.proc.communicate()
                raise RuntimeError(f"server exited {self.proc.returncode}: {err.decode()!r}")
            try:
                self.connect().close()
                return
            except OSError:
                time.sleep(0.01)
        raise RuntimeError("server did not start listening")

    def connect(self, timeout=5.0) -> socket.socket:
        if self.unix_path:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        else:
            s = socket.socket()
        s.settimeout(timeout)
        s.connect(self.address)
        return s

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._join_keepers()
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()

    def _join_keepers(self):
        """Wait for keep_output's threads to read the pipes to their end (the
        process has exited)."""
        for t in self._keepers:
            t.join(10)

    def output(self) -> tuple[str, str]:
        """What it printed (stdout, stderr), with keep_output."""
        return self.out.decode(errors="replace"), self.err.decode(errors="replace")


def _keep(f, buf: bytearray):
    """Read f (a server's stdout or stderr) into buf until its end."""
    try:
        while data := f.read1(65536):
            buf += data
    except (OSError, ValueError):  # (closed under it: the server was stopped)
        pass


@contextmanager
def running(argv, extra=(), unix_path=None):
    srv = Server(argv, extra, unix_path)
    try:
        yield srv
    finally:
        srv.stop()


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


class Client:
    """Minimal raw client: send bytes, read one reply (line plus any body)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""

    def send(self, data: bytes):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("connection closed")
        self.buf += chunk

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line + b"\r\n"

    def reply(self) -> bytes:
        """One full reply: the line and, for FOUND/RESERVED/OK, the body with its CRLF."""
        line = self.line()
        parts = line.split()
        n = None
        if parts and parts[0] in (b"FOUND", b"RESERVED") and len(parts) == 3:
            n = int(parts[2])
        elif parts and parts[0] == b"OK" and len(parts) == 2:
            n = int(parts[1])
        if n is None:
            return line
        while len(self.buf) < n + 2:
            self._fill()
        body, self.buf = self.buf[: n + 2], self.buf[n + 2 :]
        return line + body

    def cmd(self, data: bytes) -> bytes:
        self.send(data)
        return self.reply()

    def close(self):
        self.sock.close()


# Serves as the real server does, and writes what it has loaded to $MODS_OUT
# (a module a line) and its collector's state to $MODS_OUT.gc once
# $MODS_OUT.go exists.
DUMP_MODULES = r"""
import gc, os, sys, threading, time
out = os.environ["MODS_OUT"]
def dump():
    while not os.path.exists(out + ".go"):
        time.sleep(0.01)
    with open(out + ".gc", "w") as f:
        f.write(f"{gc.isenabled()} {gc.get_freeze_count()}")
    with open(out + ".tmp", "w") as f:
        f.write("\n".join(sorted(sys.modules)))
    os.rename(out + ".tmp", out)
threading.Thread(target=dump, daemon=True).start()
from pybeanstalkd.cli import main
sys.exit(main())
"""


def modules_of_a_serving_server(tmp_path, *extra) -> set[str]:
    """The modules a server started with the flags `extra` has loaded once
    it has served a put, a reserve, a delete and a stats."""
    return serving_server_state(tmp_path, *extra)[0]


def serving_server_state(tmp_path, *extra) -> tuple[set[str], bool, int]:
    """What modules_of_a_serving_server gives, whether the collector is on
    then, and how many objects it has frozen."""
    out = str(tmp_path / "mods")
    port = free_port()
    argv = [sys.executable, "-c", DUMP_MODULES, "-l", "127.0.0.1", "-p", str(port), *extra]
    proc = subprocess.Popen(argv, env=dict(os.environ, MODS_OUT=out),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 15
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < end
                time.sleep(0.01)
        sock.sendall(b"put 0 0 1 1\r\nx\r\nreserve\r\ndelete 1\r\nstats\r\n")
        got = b""
        while b"platform" not in got:
            got += sock.recv(65536)
        open(out + ".go", "w").close()
        while not os.path.exists(out):
            assert proc.poll() is None and time.monotonic() < end
            time.sleep(0.01)
        sock.close()
        with open(out) as f:
            modules = set(f.read().split())
        with open(out + ".gc") as f:
            enabled, frozen = f.read().split()
        return modules, enabled == "True", int(frozen)
    finally:
        proc.terminate()
        proc.wait(10)

"""Servers started by pybeanstalkd-bench: the reference beanstalkd and ours,
each on a free port of 127.0.0.1, each with its own fresh temporary directory
(substituted for "{tmpdir}" in the extra flags, e.g. "-b {tmpdir}").
Also: a process's resident memory and CPU time, and small command helpers.
"""
from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from .drivers import BenchError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int) -> int:
    """VmRSS of a process, from /proc/PID/status."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise BenchError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def exchange(sock, data: bytes, lines: int) -> bytes:
    """Send data, read until `lines` CRLFs have arrived (bodies count too)."""
    sock.sendall(data)
    buf = b""
    while buf.count(b"\r\n") < lines:
        chunk = sock.recv(65536)
        if not chunk:
            raise BenchError("connection closed")
        buf += chunk
    return buf


def stats(addr) -> dict:
    """The server's `stats`, as a dict of strings."""
    with socket.create_connection(addr, timeout=30) as sock:
        head, _, body = exchange(sock, b"stats\r\n", 1).partition(b"\r\n")
        if not head.startswith(b"OK "):
            raise BenchError(f"stats: {head!r}")
        while len(body) < int(head[3:]) + 2:
            chunk = sock.recv(65536)
            if not chunk:
                raise BenchError("connection closed")
            body += chunk
    return dict(line.split(": ", 1) for line in body.decode().splitlines() if ": " in line)


def default_ours() -> list[str]:
    return [sys.executable, "-m", "pybeanstalkd"]


def describe(name: str, argv: list[str]) -> str:
    """What runs as `name`: its command, with the reference's version (its
    -v) or the Python that runs ours (version and path)."""
    import os
    import subprocess

    cmd = " ".join(argv)
    try:
        if name == "reference":
            out = subprocess.run([argv[0], "-v"], capture_output=True, text=True, timeout=5)
            return f"{name}: {cmd} ({(out.stdout or out.stderr).strip() or 'version unknown'})"
        exe = argv[0]
        if os.path.basename(exe).startswith("python"):
            out = subprocess.run([exe, "-c", "import sys, platform; print("
                                  "platform.python_implementation(), sys.version.split()[0])"],
                                 capture_output=True, text=True, timeout=10)
            return f"{name}: {cmd} ({out.stdout.strip()})"
    except (OSError, subprocess.SubprocessError) as e:
        return f"{name}: {cmd} ({e})"
    return f"{name}: {cmd}"


def default_reference() -> list[str]:
    path = shutil.which("beanstalkd")
    if not path:
        raise BenchError("no beanstalkd in PATH; give --reference PATH")
    return [path]


class Spawned:
    """A server process on 127.0.0.1:<free port>; use as a context manager."""

    def __init__(self, name: str, argv: list[str], extra: str = ""):
        self.name, self.argv, self.extra = name, list(argv), extra
        self.tmpdir: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None  # once entered

    def __enter__(self):
        if "{tmpdir}" in self.extra:
            self.tmpdir = tempfile.mkdtemp(prefix=f"bench-{self.name}-")
        extra = shlex.split(self.extra.replace("{tmpdir}", self.tmpdir or ""))
        self.port = free_port()
        argv = self.argv + ["-l", "127.0.0.1", "-p", str(self.port)] + extra
        self.errf = tempfile.TemporaryFile()  # a pipe nobody reads could block it
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.errf)
        end = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                self.errf.seek(0)
                err = self.errf.read().decode(errors="replace").strip()
                raise BenchError(f"{self.name} exited {self.proc.returncode}: {err}")
            try:
                # A connect succeeds once the socket listens, which may be well
                # before the server reads commands: wait for a reply, or the
                # first measurement would count the rest of its start-up.
                with socket.create_connection(self.addr, timeout=5) as sock:
                    exchange(sock, b"list-tube-used\r\n", 1)
                return self
            except OSError as e:
                if time.monotonic() > end:
                    raise BenchError(f"{self.name} did not start listening") from e
                time.sleep(0.02)

    @property
    def addr(self):
        return ("127.0.0.1", self.port)

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not entered"
        return self.proc.pid

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def dir_bytes(self) -> int | None:
        """Bytes in the temp dir (e.g. the binlog), None without one."""
        if not self.tmpdir:
            return None
        return sum(os.path.getsize(os.path.join(d, f))
                   for d, _, files in os.walk(self.tmpdir) for f in files)

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.errf.close()
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)

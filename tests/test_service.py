"""Running the server as a new user or an operator would: `make run`, the
socket-activated service of examples/, `make install-service` into a
directory another user runs it from, and a wheel built from the checkout
installed into a fresh virtualenv."""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from support import free_port

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
EXAMPLES = os.path.join(ROOT, "examples")
SERVER = os.path.join(os.path.dirname(sys.executable), "pybeanstalkd")


def exchange(addr, data: bytes, timeout: float = 10) -> bytes:
    with socket.create_connection(addr, timeout=timeout) as s:
        s.sendall(data)
        got = b""
        while not got.endswith(b"\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def answers(addr, timeout: float = 20) -> bytes:
    """The reply to a put once the server at addr answers (connections
    refused until then)."""
    end = time.monotonic() + timeout
    while True:
        try:
            return exchange(addr, b"put 0 0 60 5\r\nhello\r\n")
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


def test_make_run_says_listening_once_it_listens():
    port = free_port()
    proc = subprocess.Popen(["make", "-s", "run", f"PORT={port}"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()  # (only once the server holds its port)
        assert re.fullmatch(r"beanstalkd 1\.13 \(pybeanstalkd \S+, (compiled with mypyc|pure Python)\): "
                            r"listening on 127\.0\.0\.1:%d "
                            r"\(Ctrl-C stops it\)\n" % port, line), line
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:  # at once
            s.sendall(b"stats\r\n")
            stats = s.recv(4096)
        assert b"\ntotal-connections: 1\n" in stats  # (make's check made none)
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        proc.communicate(timeout=20)
    with socket.socket() as held:  # a server already there: who, and the way out
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        res = subprocess.run(["make", "-s", "run", f"PORT={taken}"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
        assert res.returncode != 0 and "listening" not in res.stdout
        assert re.search(rf"^make: port {taken} is taken \(\S+, pid {os.getpid()}\): "
                         "make run PORT=NNNN serves on another$", res.stderr, re.M), res.stderr
        # the same port at another address does not stand in the way
        proc = subprocess.Popen(["make", "-s", "run", f"PORT={taken}", "ADDR=127.0.0.2"], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            assert proc.stdout.readline().endswith(f"listening on 127.0.0.2:{taken} (Ctrl-C stops it)\n")
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            proc.communicate(timeout=20)


def _unit(name: str) -> str:
    return open(os.path.join(EXAMPLES, name)).read()


def test_the_socket_unit_activates_the_service_as_systemd_would():
    """systemd-socket-activate binds the socket unit's address and starts
    the service's command line with it (LISTEN_FDS): the server serves
    there, with its binlog."""
    tool = shutil.which("systemd-socket-activate")
    if tool is None:
        pytest.fail("systemd-socket-activate is not installed (apt-get install systemd)")
    listen = re.search(r"^ListenStream=(\S+)$", _unit("pybeanstalkd.socket"), re.M).group(1)
    host, port = listen.rsplit(":", 1)
    assert (host, port) == ("127.0.0.1", "11300")
    try:  # the unit's own address, unless something else holds it here
        with socket.socket() as probe:
            probe.bind((host, int(port)))
    except OSError:
        port = str(free_port())
    exec_start = re.search(r"^ExecStart=(.*)$", _unit("pybeanstalkd.service"), re.M).group(1).split()
    assert exec_start[0] == "/opt/pybeanstalkd/bin/pybeanstalkd"
    assert exec_start[1:] == ["-b", "/var/lib/pybeanstalkd", "$PYBEANSTALKD_OPTS"]
    with tempfile.TemporaryDirectory() as wal:
        argv = [tool, "-l", f"{host}:{port}", SERVER, "-b", wal]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            assert answers((host, int(port))).startswith(b"INSERTED 1")
            assert os.listdir(wal) and any(n.startswith("binlog.") for n in os.listdir(wal))
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            out, err = proc.communicate(timeout=20)
        assert b"Traceback" not in err, err


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel of the package, built from the checkout."""
    out = tmp_path_factory.mktemp("wheel")
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), ROOT],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    (path,) = out.glob("pybeanstalkd-*.whl")
    return path


def _serves(server: list[str], user: str | None = None):
    port = free_port()
    argv = [*server, "-l", "127.0.0.1", "-p", str(port)]
    as_user = {}
    if user is not None:
        import pwd

        as_user = {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": [], "cwd": "/"}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **as_user)
    try:
        assert answers(("127.0.0.1", port)).startswith(b"INSERTED 1"), proc
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0 and b"Traceback" not in err, err


def test_a_wheel_of_the_checkout_installs_into_a_fresh_venv_and_serves(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    res = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    _serves([str(venv / "bin" / "pybeanstalkd")])


def test_install_service_makes_a_server_another_user_can_run():
    """`make install-service` with the system's Python: the service's user
    (here `nobody`) runs the server from PREFIX, with its modules
    byte-compiled there (it cannot write them); the units point at PREFIX."""
    if os.geteuid() != 0:
        pytest.fail("install-service runs as root (CI runs as root)")
    python = "/usr/bin/python3"
    if not os.access(python, os.X_OK):
        pytest.fail("/usr/bin/python3 is missing")
    base = tempfile.mkdtemp(dir="/var/tmp")  # (under /tmp, pytest's directories are root's alone)
    try:
        os.chmod(base, 0o755)
        prefix, units = os.path.join(base, "opt"), os.path.join(base, "units")
        res = subprocess.run(["make", "-s", "install-service", f"PREFIX={prefix}", f"UNIT_DIR={units}",
                              f"SERVICE_PYTHON={python}", "SERVICE_USER=nobody"], cwd=ROOT,
                             capture_output=True, text=True, timeout=900)
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"in {prefix}; units in {units}" in res.stdout
        assert os.path.realpath(os.path.join(prefix, "bin", "python")).startswith("/usr/")
        service = open(os.path.join(units, "pybeanstalkd.service")).read()
        assert f"ExecStart={prefix}/bin/pybeanstalkd -b /var/lib/pybeanstalkd" in service
        assert "\nUser=nobody\n" in service
        assert os.path.exists(os.path.join(units, "pybeanstalkd.socket"))
        site = subprocess.run([os.path.join(prefix, "bin", "python"), "-c",
                               "import os, pybeanstalkd; print(os.path.dirname(pybeanstalkd.__file__))"],
                              capture_output=True, text=True, check=True).stdout.strip()
        assert site.startswith(prefix) and os.listdir(os.path.join(site, "core", "__pycache__"))
        _serves([os.path.join(prefix, "bin", "pybeanstalkd")], user="nobody")
        # (and nobody could not have run a virtualenv made from root's pyenv Python)
    finally:
        shutil.rmtree(base)

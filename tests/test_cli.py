"""Command line (cli.py) and listening socket (server/listen.py).

Flag parsing mirrors beanstalkd's testutil.c; messages and exit codes are
compared with the reference binary where it can be run; listen.py is checked for
socket options, UNIX socket handling and systemd socket activation.

None of these tests needs the real server: where main() gets as far as
serving, a stub ``pybeanstalkd.server.loop`` module stands in for it.
"""
from __future__ import annotations

import errno
import gc
import os
import re
import socket
import struct
import subprocess
import sys
import time
import types

import pytest

from pybeanstalkd import BEANSTALKD_VERSION, __version__, build, cli, diag
from pybeanstalkd.server import listen as net
from pybeanstalkd.cli import parse_args
from pybeanstalkd.settings import Settings
from support import REFERENCE, free_port, require_reference

PROG = "PROG"
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LISTEN_")}
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


@pytest.fixture(autouse=True)
def _no_socket_activation(monkeypatch):
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        monkeypatch.delenv(name, raising=False)


def parse(argv, capsys=None):
    """parse_args with prog PROG; returns (options or None, exit code or None, out, err)."""
    try:
        opts, code = parse_args(list(argv), prog=PROG), None
    except SystemExit as e:
        opts, code = None, e.code
    out, err = capsys.readouterr() if capsys else ("", "")
    return opts, code, out, err


# A stand-in for pybeanstalkd.server.loop, for runs of main() in a child process.
STUB_MAIN = r"""
import os, sys, types
mod = types.ModuleType("pybeanstalkd.server.loop")
def serve(sock, opts, rt):
    print("SERVE", sock.fileno(), repr(sock.getsockname()), sock.getblocking(), os.getuid(),
          os.environ.get("LISTEN_PID"), os.environ.get("LISTEN_FDS"),
          os.environ.get("LISTEN_FDNAMES"), flush=True)
    return 7
mod.serve = serve
sys.modules["pybeanstalkd.server.loop"] = mod
from pybeanstalkd.cli import main
sys.exit(main(sys.argv[1:]))
"""


def ours_stub(*args):
    """argv that runs our main() (program name "pybeanstalkd") with the stub server."""
    return [sys.executable, "-c", STUB_MAIN, *args]


def run(argv, timeout=10, **kw):
    kw.setdefault("env", clean_env())
    return subprocess.run(argv, capture_output=True, timeout=timeout, **kw)


def run_reference(args, timeout=10, **kw):
    """Run the reference with argv[0] = PROG, so its messages say PROG too."""
    ref = require_reference()
    kw.setdefault("env", clean_env())
    return subprocess.run([PROG, *args], executable=ref, capture_output=True, timeout=timeout, **kw)


def norm(data: bytes, prog: str) -> bytes:
    data = data.replace(prog.encode() + b":", b"PROG:").replace(b"Use: " + prog.encode(), b"Use: PROG")
    return re.sub(rb"pid \d+", b"pid N", data)


# ---------------------------------------------------------------------------
# parse_args: the testutil.c cases


def test_opt_none_defaults():
    opts = parse_args([])
    assert opts == Settings()
    assert opts.port == "11300"
    assert opts.addr is None
    assert opts.max_job_size == 65535
    assert opts.wal_dir is None
    assert opts.filesize == 10485760
    assert opts.wantsync is True
    assert opts.syncrate_ms == 50
    assert opts.user is None
    assert opts.verbose == 0


def test_optminus_exits(capsys):
    _, code, out, err = parse(["-"], capsys)
    assert code == 5
    assert err.startswith("PROG: unknown argument: -\nUse: PROG [OPTIONS]\n")
    assert out == ""


def test_optp():
    assert parse_args(["-p1234"]).port == "1234"


def test_optl():
    assert parse_args(["-llocalhost"]).addr == "localhost"


def test_optlseparate():
    assert parse_args(["-l", "localhost"]).addr == "localhost"


def test_optz():
    assert parse_args(["-z1234"]).max_job_size == 1234


def test_optz_more_than_max(capsys):
    opts, code, out, err = parse(["-z1073741825"], capsys)
    assert code is None
    assert opts.max_job_size == 1073741824
    assert err == "PROG: maximum job size was set to 1073741824\n"


def test_optz_max_is_allowed(capsys):
    opts, _, _, err = parse(["-z", "1073741824"], capsys)
    assert opts.max_job_size == 1073741824
    assert err == ""


def test_opts():
    assert parse_args(["-s1234"]).filesize == 1234


def test_optf():
    opts = parse_args(["-f1234"])
    assert opts.syncrate_ms == 1234
    assert opts.wantsync is True


def test_optF():
    opts = parse_args(["-f1234", "-F"])
    assert opts.syncrate_ms == 1234
    assert opts.wantsync is False


def test_opt_f_after_F_wins():
    opts = parse_args(["-F", "-f0"])
    assert opts.wantsync is True
    assert opts.syncrate_ms == 0


def test_settings_are_frozen_and_derive_fsync_each_write_once():
    """A value is set once, by __init__; -f0 (wantsync, 0 ms) is
    fsync_each_write, which as_dict() leaves out: it is not a field given."""
    opts = parse_args(["-f0"])
    assert opts.fsync_each_write is True and parse_args([]).fsync_each_write is False
    assert Settings(**opts.as_dict()) == opts and "fsync_each_write" not in opts.as_dict()
    for name in ("port", "fsync_each_write"):
        with pytest.raises(AttributeError):
            setattr(opts, name, "1")
        with pytest.raises(AttributeError):
            delattr(opts, name)
    assert opts.port == "11300"


def test_optu():
    assert parse_args(["-ukr"]).user == "kr"


def test_optb():
    assert parse_args(["-bfoo"]).wal_dir == "foo"


def test_optV():
    assert parse_args(["-V"]).verbose == 1


def test_optV_V():
    assert parse_args(["-V", "-V"]).verbose == 2


def test_optVVV():
    assert parse_args(["-VVV"]).verbose == 3


def test_optVFVu():
    opts = parse_args(["-VFVukr"])
    assert opts.verbose == 2
    assert opts.wantsync is False
    assert opts.user == "kr"


# ---------------------------------------------------------------------------
# parse_args: the finer points


def test_argument_taken_from_next_word_even_if_it_looks_like_a_flag():
    opts = parse_args(["-p", "-V"])
    assert opts.port == "-V"
    assert opts.verbose == 0


def test_attached_argument_ends_the_group():
    opts = parse_args(["-uVV"])
    assert opts.user == "VV"
    assert opts.verbose == 0


def test_empty_attached_argument_uses_next_word():
    assert parse_args(["-b", ""]).wal_dir == ""


@pytest.mark.parametrize(
    "text, value",
    [
        ("0", 0),
        ("010", 10),  # decimal, not octal
        (" 5", 5),
        ("\t5", 5),
        ("+5", 5),
        ("-0", 0),
        ("-1", 2**64 - 1),  # sscanf %zu wraps negative numbers
        ("99999999999999999999999", 2**64 - 1),  # and saturates on overflow
    ],
)
def test_size_parsing_follows_sscanf(text, value):
    opts = parse_args(["-s", text, "-F"])  # -s is stored as a C int
    expect = value & 0xFFFFFFFF
    expect = expect - 2**32 if expect >= 2**31 else expect
    assert opts.filesize == expect


def test_filesize_is_a_c_int():
    # The reference stores -s in an int: 4294967297 becomes 1 (checked: it then
    # preallocates a 4096-byte binlog file).
    assert parse_args(["-s", "4294967297"]).filesize == 1
    assert parse_args(["-s", "-1"]).filesize == -1


def test_syncrate_is_an_int64():
    assert parse_args(["-f", "-1"]).syncrate_ms == -1


def test_negative_z_is_capped(capsys):
    opts, _, _, err = parse(["-z", "-1"], capsys)
    assert opts.max_job_size == 1073741824
    assert err == "PROG: maximum job size was set to 1073741824\n"


@pytest.mark.parametrize(
    "text", ["abc", "12x", "5 ", "5\n", "0x10", "", "+", "-", "- 5", "1_0", "\u0663", "1.5", "١"]
)
@pytest.mark.parametrize("flag", ["-z", "-s", "-f"])
def test_invalid_size(capsys, flag, text):
    _, code, out, err = parse([flag, text], capsys)
    assert code == 5
    assert err.startswith(f"PROG: invalid size: {text}\nUse: PROG [OPTIONS]\n")
    assert out == ""


@pytest.mark.parametrize("flag", list("plzsfub"))
def test_missing_argument(capsys, flag):
    _, code, _, err = parse([f"-{flag}"], capsys)
    assert code == 5
    assert err.startswith(f"PROG: flag requires an argument: -{flag}\nUse: PROG [OPTIONS]\n")


def test_unknown_flag_shows_the_rest_of_the_word(capsys):
    assert parse(["-x"], capsys)[3].startswith("PROG: unknown flag: -x\n")
    assert parse(["-Vx"], capsys)[3].startswith("PROG: unknown flag: Vx\n")
    assert parse(["-VVxyz"], capsys)[3].startswith("PROG: unknown flag: Vxyz\n")
    assert parse(["--"], capsys)[3].startswith("PROG: unknown flag: --\n")


def test_parsing_stops_at_first_non_flag(capsys):
    _, code, _, err = parse(["-s", "12", "13", "-x"], capsys)
    assert code == 5
    assert err.startswith("PROG: unknown argument: 13\n")
    _, code, _, err = parse([""], capsys)
    assert code == 5
    assert err.startswith("PROG: unknown argument: \n")


def test_removed_flags_warn_and_continue(capsys):
    opts, code, _, err = parse(["-cn", "-V"], capsys)
    assert code is None
    assert opts.verbose == 1
    assert err == (
        "PROG: -c flag was removed. binlog is always compacted.\n"
        "PROG: -n flag was removed. binlog is always compacted.\n"
    )


def test_help(capsys):
    _, code, out, err = parse(["-h", "-x"], capsys)
    assert code == 0
    assert out == ""
    assert err == cli.usage_text(PROG) + "\n"
    assert err.startswith("Use: PROG [OPTIONS]\n\nOptions:\n -b DIR   write-ahead log directory\n")
    assert err.endswith(" -h       show this help\n")


def test_version(capsys):
    _, code, out, err = parse(["-vx"], capsys)
    assert code == 0
    # (after the reference's two words: ours, and which build runs)
    assert out == f"beanstalkd {BEANSTALKD_VERSION} (pybeanstalkd {__version__}, {build()})\n"
    assert out.startswith("beanstalkd 1.13 ")
    assert build() in ("compiled with mypyc", "pure Python")
    assert err == ""


def test_flags_act_in_order(capsys):
    _, code, _, err = parse(["-x", "-h"], capsys)
    assert code == 5
    _, code, out, _ = parse(["-V", "-v", "-x"], capsys)
    assert code == 0 and out.startswith("beanstalkd ")
    _, code, _, err = parse(["-z", "1073741825", "-h"], capsys)
    assert code == 0
    assert err.startswith("PROG: maximum job size was set to 1073741824\nUse: PROG")


# ---------------------------------------------------------------------------
# Same bytes and exit codes as the reference


REFERENCE_CASES = [
    ["-h"], ["-h", "foo"], ["-hx"], ["-x"], ["-Vx"], ["-Vxyz"], ["-xh"], ["-V", "-x"], ["-Fx"],
    ["--"], ["--", "-h"], ["-p1", "--", "x"], ["foo"], ["-"], [""], ["-s", "12", "13"],
    ["-p"], ["-l"], ["-z"], ["-s"], ["-f"], ["-u"], ["-b"], ["-Vp"],
    ["-zabc"], ["-z5x"], ["-z", "12x"], ["-z", "0x10"], ["-z", ""], ["-z", "5 "], ["-z", "5\n"],
    ["-z", "- 5"], ["-z", "+"], ["-z", "-"], ["-z", "-h"], ["-z", "1_0"], ["-z", "\u0663"],
    ["-f", "1x"], ["-s", "junk"], ["-f1", "-s", "1.5"],
    ["-z", " 5", "-h"], ["-z", "+5", "-h"], ["-z", "010", "-h"], ["-z", "-0", "-h"],
    ["-z", "1073741824", "-h"], ["-z", "1073741825", "-h"], ["-z", "-1", "-h"],
    ["-z", "18446744073709551616", "-h"], ["-z", "-99999999999999999999999", "-h"],
    ["-z", "1073741824", "-z", "1073741825", "-z", "1073741826", "-h"],
    ["-c", "-h"], ["-n", "-h"], ["-cn", "-h"], ["-ukr", "-h"], ["-VFVukr", "-h"],
    ["-f", "18446744073709551615", "-h"], ["-s", "-1", "-h"], ["-p", "-V", "-x"],
]


@pytest.mark.parametrize("args", REFERENCE_CASES, ids=repr)
def test_messages_match_reference(capsys, args):
    ref = run_reference(args)
    _, code, out, err = parse(args, capsys)
    assert (code if code is not None else "continues") == ref.returncode
    assert err.encode() == ref.stderr
    assert out.encode() == ref.stdout


def test_version_format_matches_reference():
    ref = run_reference(["-v"])
    assert ref.returncode == 0
    assert re.fullmatch(rb"beanstalkd \S+\n", ref.stdout)
    ours = run(ours_stub("-v"))
    assert ours.returncode == 0
    # (the server the tests start runs the same build as they do)
    assert ours.stdout == f"beanstalkd 1.13 (pybeanstalkd {__version__}, {build()})\n".encode()
    assert ours.stderr == b""


def test_undecodable_argument_is_echoed_byte_for_byte():
    arg = b"-z\xff1"
    ref = run_reference([arg])
    ours = run(ours_stub(arg))
    assert ours.returncode == ref.returncode == 5
    assert norm(ours.stderr, "pybeanstalkd") == ref.stderr
    assert b"invalid size: \xff1\n" in ours.stderr


def test_program_name_is_argv0_basename(tmp_path):
    ours = run([sys.executable, "-c", "import sys; from pybeanstalkd.cli import main;"
                " sys.argv[0] = '/some/where/mybeans'; sys.exit(main(['-x']))"])
    assert ours.returncode == 5
    assert ours.stderr.startswith(b"mybeans: unknown flag: -x\nUse: mybeans [OPTIONS]\n")
    ours = run([sys.executable, "-m", "pybeanstalkd", "-q"])
    assert ours.returncode == 5
    assert ours.stderr.startswith(b"pybeanstalkd: unknown flag: -q\nUse: pybeanstalkd [OPTIONS]\n")


# ---------------------------------------------------------------------------
# main(): in process, with a stub server


@pytest.fixture
def stub_server(monkeypatch):
    calls = []

    def serve(sock, opts, rt):
        calls.append((sock, opts))
        return 42

    mod = types.ModuleType("pybeanstalkd.server.loop")
    mod.serve = serve
    monkeypatch.setitem(sys.modules, "pybeanstalkd.server.loop", mod)
    monkeypatch.setattr(diag, "program_name", lambda: PROG)
    monkeypatch.setattr(cli, "program_name", lambda: PROG)
    yield calls
    for sock, _ in calls:
        sock.close()


def test_main_hands_listening_socket_to_serve(stub_server, capfd):
    assert cli.main(["-l", "127.0.0.1", "-p", "0", "-z", "100"]) == 42
    (sock, opts), = stub_server
    assert opts.max_job_size == 100
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
    assert sock.getblocking() is False
    with socket.create_connection(sock.getsockname(), timeout=5):
        pass
    out, err = capfd.readouterr()
    assert out == err == ""


def test_main_verbose_prints_pid_then_bind(stub_server, capfd):
    assert cli.main(["-V", "-l", "127.0.0.1", "-p", "0"]) == 42
    (sock, _), = stub_server
    out, err = capfd.readouterr()
    port = sock.getsockname()[1]
    assert out == f"pid {os.getpid()}\nbind {sock.fileno()} 127.0.0.1:{port}\n"
    assert err == ""


def test_main_exit_codes_before_serving(stub_server, capfd):
    assert cli.main(["-h"]) == 0
    assert cli.main(["-x"]) == 5
    assert cli.main(["-v"]) == 0
    assert stub_server == []


def test_main_leaves_the_collector_as_it_found_it(stub_server, capfd):
    # (off for start-up: serve() turns it on again)
    assert gc.isenabled()
    assert cli.main(["-l", "127.0.0.1", "-p", "0"]) == 42
    assert cli.main(["-x"]) == 5
    assert gc.isenabled()
    gc.disable()
    try:
        assert cli.main(["-x"]) == 5
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_main_bind_failure_exits_111(stub_server, capfd):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli.main(["-V", "-l", "127.0.0.1", "-p", str(port)]) == 111
    out, err = capfd.readouterr()
    assert out == f"pid {os.getpid()}\n"
    assert err == (
        "PROG: net.c:104 in make_inet_socket: bind(): Address already in use\n"
        "PROG: main.c:99 in main: make_server_socket()\n"
    )
    assert stub_server == []


def test_main_getaddrinfo_failure(stub_server, capfd):
    assert cli.main(["-l", "127.0.0.1", "-p", "nosuchservice-xyz"]) == 111
    _, err = capfd.readouterr()
    assert err == (
        "PROG: net.c:49 in make_inet_socket: getaddrinfo(): Servname not supported for ai_socktype\n"
        "PROG: main.c:99 in main: make_server_socket()\n"
    )


def test_main_unknown_user_exits_33(stub_server, capfd):
    assert cli.main(["-l", "127.0.0.1", "-p", "0", "-u", "no-such-user-pybeanstalkd"]) == 33
    _, err = capfd.readouterr()
    assert err == 'PROG: main.c:22 in su: getpwnam("no-such-user-pybeanstalkd"): no such user\n'
    assert stub_server == []


def test_main_setgid_failure_exits_34(stub_server, capfd, monkeypatch):
    import pwd

    monkeypatch.setattr(pwd, "getpwnam", lambda name: types.SimpleNamespace(pw_uid=0, pw_gid=0))

    def refuse(_):
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "setgid", refuse)
    monkeypatch.setattr(os, "setuid", lambda _: pytest.fail("setuid after failed setgid"))
    assert cli.main(["-l", "127.0.0.1", "-p", "0", "-u", "root"]) == 34
    _, err = capfd.readouterr()
    assert err == 'PROG: main.c:28 in su: setgid(0 "root"): Operation not permitted\n'


def test_main_setuid_failure_exits_34(stub_server, capfd, monkeypatch):
    import pwd

    order = []
    monkeypatch.setattr(pwd, "getpwnam", lambda name: types.SimpleNamespace(pw_uid=5, pw_gid=6))
    monkeypatch.setattr(os, "setgid", lambda gid: order.append(("setgid", gid)))

    def refuse(uid):
        order.append(("setuid", uid))
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "setuid", refuse)
    assert cli.main(["-l", "127.0.0.1", "-p", "0", "-u", "someone"]) == 34
    assert order == [("setgid", 6), ("setuid", 5)]
    _, err = capfd.readouterr()
    assert err == 'PROG: main.c:34 in su: setuid(5 "someone"): Operation not permitted\n'


@pytest.mark.skipif(not IS_ROOT, reason="needs root to drop privileges")
def test_setgid_failure_message_matches_reference(tmp_path):
    require_reference()
    drop = ("import os, sys; os.setgroups([]); os.setgid(65534); os.setuid(65534);"
            " os.execv(sys.argv[1], sys.argv[1:])")
    ref = run([sys.executable, "-c", drop, REFERENCE, "-l", "127.0.0.1", "-p", "0", "-u", "root"],
              cwd=str(tmp_path))
    if ref.returncode != 34:
        pytest.skip(f"could not run the reference as nobody: {ref.stderr!r}")
    assert norm(ref.stderr, REFERENCE) == b'PROG: main.c:28 in su: setgid(0 "root"): Operation not permitted\n'


@pytest.mark.skipif(not IS_ROOT, reason="needs root to switch user")
def test_user_switch_in_child():
    ours = run(ours_stub("-l", "127.0.0.1", "-p", "0", "-u", "nobody"))
    assert ours.returncode == 7, ours.stderr
    import pwd

    assert ours.stdout.split()[-4] == str(pwd.getpwnam("nobody").pw_uid).encode()


def test_unknown_user_matches_reference():
    args = ["-V", "-l", "127.0.0.1", "-p", "0", "-u", "no-such-user-pybeanstalkd"]
    ref = run_reference(args)
    ours = run(ours_stub(*args))
    assert ref.returncode == ours.returncode == 33
    assert norm(ours.stderr, "pybeanstalkd") == ref.stderr
    pattern = rb"pid \d+\nbind \d+ 127\.0\.0\.1:\d+\n"
    assert re.fullmatch(pattern, ref.stdout) and re.fullmatch(pattern, ours.stdout)


@pytest.mark.parametrize(
    "args",
    [
        ["-l", "nosuchhost.invalid", "-p", "0"],
        ["-l", "", "-p", "0"],
        ["-l", "127.0.0.1", "-p", "-1"],
        ["-l", "[::1]", "-p", "0"],
        ["-l", "unix:/nonexistent-dir-pybeanstalkd/sock"],
        ["-l", "unix:/" + "x" * 120],
    ],
    ids=repr,
)
def test_listen_errors_match_reference(args):
    ref = run_reference(["-V", *args])
    ours = run(ours_stub("-V", *args))
    assert ref.returncode == ours.returncode == 111
    assert norm(ours.stdout, "pybeanstalkd") == norm(ref.stdout, PROG)
    assert norm(ours.stderr, "pybeanstalkd") == ref.stderr


def test_bind_in_use_matches_reference():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        args = ["-V", "-l", "127.0.0.1", "-p", str(busy.getsockname()[1])]
        ref = run_reference(args)
        ours = run(ours_stub(*args))
    assert ref.returncode == ours.returncode == 111
    assert norm(ours.stdout, "pybeanstalkd") == norm(ref.stdout, PROG) == b"pid N\n"
    assert norm(ours.stderr, "pybeanstalkd") == ref.stderr


def test_not_a_socket_matches_reference(tmp_path):
    path = tmp_path / "plain"
    path.write_text("keep me")
    ref = run_reference(["-l", f"unix:{path}"])
    ours = run(ours_stub("-l", f"unix:{path}"))
    assert ref.returncode == ours.returncode == 111
    assert norm(ours.stderr, "pybeanstalkd") == ref.stderr == (
        b"PROG: net.c:177 in make_unix_socket: another file already exists in the given path\n"
        b"PROG: main.c:99 in main: make_server_socket()\n"
    )
    assert path.read_text() == "keep me"


def test_cli_import_is_light():
    code = ("import sys, pybeanstalkd.cli;"
            " bad = [m for m in ('asyncio', 'uvloop', 'pybeanstalkd.server.loop',"
            " 'pybeanstalkd.server.transport', 'pybeanstalkd.core.engine') if m in sys.modules];"
            " print(bad)")
    res = run([sys.executable, "-c", code])
    assert res.returncode == 0, res.stderr
    assert res.stdout == b"[]\n"


def test_listening_soon_after_exec():
    port = free_port()
    # The stub server keeps the process alive until we have connected.
    hold = STUB_MAIN.replace("    return 7", "    import time; time.sleep(30)\n    return 7")
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", hold, "-l", "127.0.0.1", "-p", str(port)],
                            env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None
                assert time.monotonic() - start < 5
                time.sleep(0.002)
        elapsed = time.monotonic() - start
    finally:
        proc.kill()
        proc.wait()
    # The budget is 100 ms; leave room for a loaded machine.
    assert elapsed < 0.5, elapsed


# ---------------------------------------------------------------------------
# net.py


def opts_for(**kw):
    return Settings(**kw)


class Collect:
    def __init__(self):
        self.lines = []

    def __call__(self, msg):
        self.lines.append(msg)


def test_tcp_socket_options():
    warn = Collect()
    with net.make_listener(opts_for(addr="127.0.0.1", port="0"), warn=warn) as sock:
        assert warn.lines == []
        assert sock.family == socket.AF_INET
        assert sock.type == socket.SOCK_STREAM
        assert sock.getblocking() is False
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        onoff, _linger = struct.unpack("ii", sock.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8))
        assert onoff == 0
        assert sock.getsockname()[0] == "127.0.0.1"
        assert sock.getsockname()[1] != 0


def test_verbose_bind_line():
    log = Collect()
    with net.make_listener(opts_for(addr="127.0.0.1", port="0", verbose=1), log=log) as sock:
        assert log.lines == [f"bind {sock.fileno()} 127.0.0.1:{sock.getsockname()[1]}"]
    log = Collect()
    with net.make_listener(opts_for(addr="127.0.0.1", port="0"), log=log):
        assert log.lines == []


def test_verbose_bind_line_ipv6():
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    log = Collect()
    try:
        sock = net.make_listener(opts_for(addr="::1", port="0", verbose=2), log=log, warn=Collect())
    except net.ListenError:
        pytest.skip("cannot bind ::1")
    with sock:
        assert sock.family == socket.AF_INET6
        assert log.lines == [f"bind {sock.fileno()} [::1]:{sock.getsockname()[1]}"]
        # -l given: IPV6_V6ONLY is left as the system default.


def test_wildcard_without_l():
    with net.make_listener(opts_for(port="0"), warn=Collect()) as sock:
        assert sock.getsockname()[0] in ("0.0.0.0", "::")
        if sock.family == socket.AF_INET6:
            assert sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0


def test_wildcard_ipv6_is_dual_stack(monkeypatch):
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    real = socket.getaddrinfo

    def only_v6(host, port, family=0, type=0, proto=0, flags=0):
        return [ai for ai in real(host, port, family, type, proto, flags) if ai[0] == socket.AF_INET6]

    monkeypatch.setattr(socket, "getaddrinfo", only_v6)
    try:
        sock = net.make_listener(opts_for(port="0"), warn=Collect())
    except net.ListenError:
        pytest.skip("cannot bind the IPv6 wildcard")
    with sock:
        assert sock.family == socket.AF_INET6
        assert sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
        # An IPv4 client reaches it.
        with socket.socket() as c:
            c.settimeout(5)
            c.connect(("127.0.0.1", sock.getsockname()[1]))


def test_first_address_that_binds_is_used(monkeypatch):
    real = socket.getaddrinfo
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        busy_port = busy.getsockname()[1]

        def two(host, port, *a):
            bad = real(b"127.0.0.1", str(busy_port).encode(), *a)
            good = real(b"127.0.0.1", b"0", *a)
            return bad + good

        monkeypatch.setattr(socket, "getaddrinfo", two)
        warn = Collect()
        with net.make_listener(opts_for(addr="127.0.0.1", port="x"), warn=warn) as sock:
            assert sock.getsockname()[1] not in (0, busy_port)
        assert warn.lines == ["net.c:104 in make_inet_socket: bind(): Address already in use"]


def test_unix_socket(tmp_path):
    path = tmp_path / "sock"
    log, warn = Collect(), Collect()
    with net.make_listener(opts_for(addr=f"unix:{path}", port="1", verbose=1), log=log, warn=warn) as sock:
        assert sock.family == socket.AF_UNIX
        assert sock.getblocking() is False
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
        assert log.lines == [f"bind {sock.fileno()} {path}"]
        assert warn.lines == []
        with socket.socket(socket.AF_UNIX) as c:
            c.connect(str(path))


def test_unix_stale_socket_is_removed(tmp_path):
    path = tmp_path / "sock"
    old = socket.socket(socket.AF_UNIX)
    old.bind(str(path))
    old.close()  # the file stays behind, as after a crash
    assert path.is_socket()
    warn = Collect()
    with net.make_listener(opts_for(addr=f"unix:{path}"), warn=warn) as sock:
        assert warn.lines == ["removing existing local socket to replace it"]
        with socket.socket(socket.AF_UNIX) as c:
            c.connect(str(path))
        assert sock.accept()


def test_unix_non_socket_file_is_refused(tmp_path):
    path = tmp_path / "file"
    path.write_bytes(b"data")
    warn = Collect()
    with pytest.raises(net.ListenError):
        net.make_listener(opts_for(addr=f"unix:{path}"), warn=warn)
    assert warn.lines == ["net.c:177 in make_unix_socket: another file already exists in the given path"]
    assert path.read_bytes() == b"data"


def test_unix_path_too_long(tmp_path):
    path = "/tmp/" + "y" * 103  # 108 characters, one too many
    warn = Collect()
    with pytest.raises(net.ListenError):
        net.make_listener(opts_for(addr=f"unix:{path}"), warn=warn)
    assert warn.lines == [f"socket path {path} is too long (108 characters), where maximum allowed is 107"]


def test_unix_stale_removal_matches_reference(tmp_path):
    ref_bin = require_reference()
    path = tmp_path / "s"

    def leave_stale_socket():
        if path.exists():
            path.unlink()
        old = socket.socket(socket.AF_UNIX)
        old.bind(str(path))
        old.close()

    leave_stale_socket()
    proc = subprocess.Popen([PROG, "-V", "-l", f"unix:{path}"], executable=ref_bin, env=clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        ref_out = proc.stdout.readline() + proc.stdout.readline()  # pid, bind
    finally:
        proc.kill()
        _, ref_err = proc.communicate()

    leave_stale_socket()
    ours = run(ours_stub("-V", "-l", f"unix:{path}"))
    assert ours.returncode == 7, ours.stderr
    ours_out = ours.stdout.split(b"SERVE")[0]

    assert norm(ours.stderr, "pybeanstalkd") == ref_err == b"PROG: removing existing local socket to replace it\n"
    pattern = rb"pid \d+\nbind \d+ " + re.escape(str(path).encode()) + rb"\n"
    assert re.fullmatch(pattern, ref_out), ref_out
    assert re.fullmatch(pattern, ours_out), ours_out


# ---------------------------------------------------------------------------
# systemd socket activation

# Moves the socket it was given to fd 3 (plus copies on 4.. when asked), sets
# LISTEN_PID to its own pid (exec keeps it) and LISTEN_FDS, then execs.
LAUNCHER = r"""
import os, sys
fd, copies, pid_mode, nfds = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
if fd != 3:
    os.dup2(fd, 3)
    os.close(fd)
os.set_inheritable(3, True)
for i in range(1, copies):
    os.dup2(3, 3 + i)
os.environ["LISTEN_PID"] = str(os.getpid()) if pid_mode == "self" else pid_mode
if nfds != "-":
    os.environ["LISTEN_FDS"] = nfds
os.environ["LISTEN_FDNAMES"] = "beanstalkd"
os.execv(sys.argv[5], sys.argv[5:])
"""


def make_inherited(kind, tmp_path):
    if kind == "tcp":
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        return s, s.getsockname()
    if kind == "unix":
        s = socket.socket(socket.AF_UNIX)
        path = str(tmp_path / "activated.sock")
        s.bind(path)
        s.listen()
        return s, path
    if kind == "udp":
        s = socket.socket(type=socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        return s, None
    if kind == "nolisten":
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        return s, None
    if kind == "file":
        f = open(tmp_path / "file", "w")
        return f, None
    raise AssertionError(kind)


def launch(target_argv, kind, tmp_path, copies=1, pid_mode="self", nfds="1", hold=False):
    """Start target_argv with an inherited socket. Returns (proc, address, inherited object)."""
    obj, address = make_inherited(kind, tmp_path)
    fd = obj.fileno()
    argv = [sys.executable, "-c", LAUNCHER, str(fd), str(copies), pid_mode, nfds, *target_argv]
    proc = subprocess.Popen(argv, env=clean_env(), pass_fds=[fd],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return proc, address, obj


def finish(proc, address, serving_reference):
    """Collect a run's output. A reference that is serving is asked a question
    (so that its startup output is complete) and then stopped."""
    if serving_reference:
        fam = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
        with socket.socket(fam) as c:
            c.settimeout(5)
            c.connect(address)
            c.sendall(b"list-tube-used\r\n")
            assert c.recv(100) == b"USING default\r\n"
        proc.terminate()
    try:
        out, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return proc.returncode, out, err


ACTIVATION_CASES = [
    # kind, copies, pid_mode, LISTEN_FDS, extra args, inherited socket is used
    ("tcp", 1, "self", "1", [], True),
    ("tcp", 2, "self", "2", [], True),
    ("tcp", 1, "self", "1", ["-p", "1234", "-l", "127.0.0.1", "-p1"], True),
    ("unix", 1, "self", "1", ["-l", "unix:/nonexistent/x"], True),
    ("tcp", 1, "self", " +1", [], True),
    ("tcp", 1, "self", "0x1", [], True),
    ("udp", 1, "self", "1", [], False),
    ("nolisten", 1, "self", "1", ["-p", "9"], False),
    ("file", 1, "self", "1", [], False),
    ("tcp", 1, "self", "0", [], False),
    ("tcp", 1, "self", "1 ", ["-p", "9"], False),
    ("tcp", 1, "self", "abc", [], False),
    ("tcp", 1, "self", "2", ["-p", "9"], False),  # fd 4 missing: EBADF
    ("tcp", 1, "abc", "1", [], False),
    ("tcp", 1, "0", "1", [], False),
]


@pytest.mark.parametrize("kind, copies, pid_mode, nfds, extra, used", ACTIVATION_CASES, ids=repr)
def test_socket_activation_matches_reference(tmp_path, kind, copies, pid_mode, nfds, extra, used):
    ref_bin = require_reference()
    args = ["-V", *extra]
    proc, address, obj = launch([ref_bin, *args], kind, tmp_path, copies, pid_mode, nfds)
    ref = finish(proc, address, serving_reference=used)
    ours_dir = tmp_path / "ours"
    ours_dir.mkdir()
    ours_proc, address2, obj2 = launch(ours_stub(*args), kind, ours_dir, copies, pid_mode, nfds)
    obj.close()
    code, out, err = finish(ours_proc, address2, serving_reference=False)
    obj2.close()

    assert norm(err, "pybeanstalkd") == norm(ref[2], ref_bin)
    # Drop the reference's "accept FD"/"close FD" lines caused by our probe.
    ref_out = b"".join(ln for ln in norm(ref[1], ref_bin).splitlines(True)
                       if not ln.startswith((b"accept ", b"close ", b"<", b">")))
    ours_out = norm(out, "pybeanstalkd")
    if used:
        assert ref_out == b"pid N\n"
        assert code == 7
        head, serve_line = ours_out.split(b"SERVE")
        assert head == b"pid N\n"
        fields = serve_line.split()
        assert fields[0] == b"3"  # the inherited fd itself
        expect = repr(address2 if kind == "unix" else tuple(address2)).encode()
        assert serve_line.split(b" ", 2)[2].startswith(expect)
        assert fields[-5:] == [b"False", str(os.getuid()).encode(), b"None", b"None", b"None"]
    else:
        assert ref[0] == code == 111
        assert ours_out == ref_out == b"pid N\n"


def test_socket_activation_for_another_process_is_ignored(tmp_path):
    # LISTEN_PID names someone else: bind normally, but still clear the variables.
    port = free_port()
    proc, _, obj = launch(ours_stub("-V", "-l", "127.0.0.1", "-p", str(port)), "tcp", tmp_path,
                          pid_mode="1")
    code, out, err = finish(proc, None, serving_reference=False)
    obj.close()
    assert code == 7, err
    assert err == b""
    lines = out.splitlines()
    assert re.fullmatch(rb"bind (\d+) 127\.0\.0\.1:%d" % port, lines[1])
    assert lines[2].split()[-3:] == [b"None", b"None", b"None"]


def test_sd_listen_fds_parsing(monkeypatch):
    pid = str(os.getpid())
    cases = [
        ({}, (0, 0)),
        ({"LISTEN_PID": pid}, (0, 0)),
        ({"LISTEN_PID": "1", "LISTEN_FDS": "1"}, (0, 0)),
        ({"LISTEN_PID": "abc", "LISTEN_FDS": "1"}, (-1, 0)),
        ({"LISTEN_PID": "0", "LISTEN_FDS": "1"}, (-1, 0)),
        ({"LISTEN_PID": "-" + pid, "LISTEN_FDS": "1"}, (-1, 0)),
        ({"LISTEN_PID": pid, "LISTEN_FDS": "0"}, (-1, 0)),
        ({"LISTEN_PID": pid, "LISTEN_FDS": "-1"}, (-1, 0)),
        ({"LISTEN_PID": pid, "LISTEN_FDS": "08"}, (-1, 0)),
        ({"LISTEN_PID": pid, "LISTEN_FDS": "0x"}, (-1, 0)),
        ({"LISTEN_PID": pid, "LISTEN_FDS": ""}, (-1, 0)),
        ({"LISTEN_PID": pid, "LISTEN_FDS": "99999999999"}, (-1, 0)),
    ]
    for env, expect in cases:
        for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            monkeypatch.delenv(name, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("LISTEN_FDNAMES", "x")
        assert net.sd_listen_fds(False) == expect, env
        assert os.environ.get("LISTEN_FDNAMES") == "x"
        net.sd_listen_fds(True)
        assert not any(k in os.environ for k in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"))


def test_sd_listen_fds_hex_and_octal(monkeypatch):
    try:
        os.fstat(3)
    except OSError:
        pytest.skip("fd 3 is not open")
    monkeypatch.setenv("LISTEN_PID", f"  {os.getpid():#x}")
    monkeypatch.setenv("LISTEN_FDS", "+01")
    inheritable = os.get_inheritable(3)
    os.set_inheritable(3, True)
    try:
        assert net.sd_listen_fds(False) == (1, 0)
        assert os.get_inheritable(3) is False  # made close-on-exec, like sd_listen_fds
    finally:
        os.set_inheritable(3, inheritable)


# Long options (ours only)

def test_long_options_parse(capsys):
    opts = parse(["--max-memory", "64M", "--max-connections=100", "-p", "1",
                  "--tls-cert", "c.pem", "--tls-key=k.pem", "--tls-client-ca", "ca.pem"], capsys)[0]
    assert opts.max_memory == 64 << 20
    assert opts.max_connections == 100
    assert (opts.tls_cert, opts.tls_key, opts.tls_client_ca) == ("c.pem", "k.pem", "ca.pem")
    assert opts.port == "1"
    assert parse(["--max-memory=1g"], capsys)[0].max_memory == 1 << 30
    assert parse(["--max-memory=4096"], capsys)[0].max_memory == 4096
    assert parse([], capsys)[0].max_memory is None


LONG_OPTION_ERRORS = [
    (["--max-memory", "lots"], "PROG: invalid value for --max-memory: 'lots'"),
    (["--max-memory=-5"], "PROG: invalid value for --max-memory: '-5'"),
    (["--max-connections", "0"], "PROG: invalid value for --max-connections: '0'"),
    (["--max-connections"], "PROG: flag requires an argument: --max-connections"),
    (["--tls-cert", "c.pem"], "PROG: --tls-cert and --tls-key go together"),
    (["--tls-client-ca", "ca.pem"], "PROG: --tls-client-ca needs --tls-cert and --tls-key"),
    (["--no-such"], "PROG: unknown flag: --no-such"),
]


def test_long_help_lists_long_options(capsys):
    _, code, _, err = parse(["--help"], capsys)
    assert code == 0
    assert "--max-memory BYTES" in err and err.startswith("Use: PROG [OPTIONS]")


def test_http_options_parse(capsys):
    opts = parse(["--http", "0.0.0.0:8080", "--http-auth=ops:pa:ss"], capsys)[0]
    assert opts.http == ("0.0.0.0", 8080)
    assert opts.http_auth == ("ops", "pa:ss")  # the password may hold a colon
    assert parse(["--http=:9000"], capsys)[0].http == ("127.0.0.1", 9000)
    assert parse(["--http", "[::1]:9000"], capsys)[0].http == ("::1", 9000)
    assert parse(["--http", "localhost:0"], capsys)[0].http == ("localhost", 0)
    opts = parse([], capsys)[0]
    assert (opts.http, opts.http_auth) == (None, None)


HTTP_OPTION_ERRORS = [
    (["--http", "8080"], "PROG: invalid value for --http: '8080'"),
    (["--http", "host:"], "PROG: invalid value for --http: 'host:'"),
    (["--http", ":65536"], "PROG: invalid value for --http: ':65536'"),
    (["--http", ":http"], "PROG: invalid value for --http: ':http'"),
    (["--http"], "PROG: flag requires an argument: --http"),
    (["--http", ":1", "--http-auth", "nopassword"], "PROG: invalid value for --http-auth: 'nopassword'"),
    (["--http", ":1", "--http-auth", ":pw"], "PROG: invalid value for --http-auth: ':pw'"),
    (["--http-auth", "a:b"], "PROG: --http-auth needs --http"),
    (["--http", ":1", "--http-max-connections", "0"],
     "PROG: invalid value for --http-max-connections: '0'"),
    (["--http", ":1", "--http-max-connections", "many"],
     "PROG: invalid value for --http-max-connections: 'many'"),
    (["--http", ":1", "--http-max-connections"],
     "PROG: flag requires an argument: --http-max-connections"),
    (["--http-max-connections", "8"], "PROG: --http-max-connections needs --http"),
    (["--http", ":1", "--http-allowed-hosts", "q.example:80"],
     "PROG: invalid value for --http-allowed-hosts: 'q.example:80'"),
    (["--http", ":1", "--http-allowed-hosts=a,,b"],
     "PROG: invalid value for --http-allowed-hosts: 'a,,b'"),
    (["--http", ":1", "--http-allowed-hosts", "-bad.example"],
     "PROG: invalid value for --http-allowed-hosts: '-bad.example'"),
    (["--http", ":1", "--http-allowed-hosts", "b\u00e9.example"],
     "PROG: invalid value for --http-allowed-hosts: 'b\u00e9.example'"),
    (["--http", ":1", "--http-allowed-hosts", "[::1]"],
     "PROG: invalid value for --http-allowed-hosts: '[::1]'"),
    (["--http", ":1", "--http-allowed-hosts", ""],
     "PROG: invalid value for --http-allowed-hosts: ''"),
    (["--http-allowed-hosts", "q.example"], "PROG: --http-allowed-hosts needs --http"),
]


def test_http_guard_options_parse(capsys):
    opts = parse(["--http", ":1", "--http-max-connections", "8",
                  "--http-allowed-hosts", "Queue.Internal., .corp.example,*,10.0.0.1"], capsys)[0]
    assert opts.http_max_connections == 8
    assert opts.http_allowed_hosts == ("queue.internal", ".corp.example", "*", "10.0.0.1")
    assert parse(["--http", ":1", "--http-allowed-hosts=q_1.example"], capsys)[0] \
        .http_allowed_hosts == ("q_1.example",)
    opts = parse(["--http", ":1"], capsys)[0]
    assert (opts.http_max_connections, opts.http_allowed_hosts) == (64, ())
    from pybeanstalkd.ops import httpguard
    assert cli.HTTP_MAX_CONNECTIONS_DEFAULT == httpguard.MAX_CONNECTIONS


def test_long_help_lists_http_options(capsys):
    err = parse(["--help"], capsys)[3]
    assert "--http ADDR" in err and "--http-auth USER:PASS" in err
    assert "--http-max-connections N" in err and "(default 64)" in err
    assert "--http-allowed-hosts NAME,..." in err


def test_cli_import_does_not_load_the_http_side():
    code = ("import sys, pybeanstalkd.cli;"
            " print([m for m in sys.modules if m.split('.')[0] in ('aiohttp', 'prometheus_client')"
            " or m.startswith('pybeanstalkd.ops')])")
    res = run([sys.executable, "-c", code])
    assert res.returncode == 0, res.stderr
    assert res.stdout == b"[]\n"


def test_cluster_options_parse(capsys):
    opts = parse(["-b", "/tmp", "--cluster", "c", "--etcd", "127.0.0.1:2379,h2:2379",
                  "--node", "n1", "--peer-listen", ":7001", "--peer-advertise=10.0.0.1:7001"],
                 capsys)[0]
    assert (opts.cluster, opts.etcd, opts.node) == ("c", "127.0.0.1:2379,h2:2379", "n1")
    assert (opts.peer_listen, opts.peer_advertise) == (":7001", "10.0.0.1:7001")
    assert parse([], capsys)[0].cluster is None


def test_bodies_on_disk_options_parse(capsys):
    opts = parse(["-b", "/tmp", "--bodies-on-disk"], capsys)[0]
    assert (opts.bodies_on_disk, opts.body_ram_min) == (True, 1024)
    opts = parse(["-b", "/tmp", "--bodies-on-disk", "--body-ram-min=4K"], capsys)[0]
    assert opts.body_ram_min == 4096
    assert parse(["-b", "/tmp", "--bodies-on-disk", "--body-ram-min", "0"], capsys)[0] \
        .body_ram_min == 0
    assert parse([], capsys)[0].bodies_on_disk is False


BODIES_OPTION_ERRORS = [
    (["--bodies-on-disk"], "PROG: --bodies-on-disk needs -b"),
    (["-b", "/tmp", "--body-ram-min", "100"], "PROG: --body-ram-min needs --bodies-on-disk"),
    (["-b", "/tmp", "--bodies-on-disk", "--body-ram-min", "x"],
     "PROG: invalid value for --body-ram-min: 'x' (expected a byte count (K, M, G suffixes))"),
    (["-b", "/tmp", "--bodies-on-disk=1"], "PROG: --bodies-on-disk takes no value"),
]


CLUSTER_OPTION_ERRORS = [
    (["--cluster", "c", "--etcd", "h:1", "--node", "n", "--peer-listen", ":1"],
     "PROG: --cluster needs -b, --etcd, --node and --peer-listen"),
    (["-b", "/tmp", "--cluster", "c", "--etcd", "h:1", "--node", "n"],
     "PROG: --cluster needs -b, --etcd, --node and --peer-listen"),
    (["--etcd", "h:1"], "PROG: --etcd, --node, --peer-listen and --peer-advertise need --cluster"),
    (["-b", "/tmp", "--cluster", "c", "--etcd", "h", "--node", "n", "--peer-listen", ":1"],
     "PROG: invalid value for --etcd: 'h'"),
    (["--peer-listen", "x"], "PROG: invalid value for --peer-listen: 'x'"),
]


@pytest.mark.parametrize("argv, msg", LONG_OPTION_ERRORS + HTTP_OPTION_ERRORS
                         + CLUSTER_OPTION_ERRORS + BODIES_OPTION_ERRORS)
def test_long_option_errors(argv, msg, capsys):
    _, code, _, err = parse(argv, capsys)
    assert code == 5
    assert err.split("\n")[0].startswith(msg)


def test_cli_import_does_not_load_the_cluster_side():
    code = ("import sys, pybeanstalkd.cli;"
            " print([m for m in sys.modules if m.split('.')[0] in ('aetcd', 'grpc')"
            " or m.startswith('pybeanstalkd.cluster')])")
    res = run([sys.executable, "-c", code])
    assert res.returncode == 0, res.stderr
    assert res.stdout == b"[]\n"


def test_help_and_docs_name_the_paths_http_auth_leaves_open():
    from pybeanstalkd.ops.http import OPEN

    def paths(text: str, marker: str) -> set[str]:
        line = next(line for line in text.splitlines() if marker in line)
        return set(re.findall(r"/[a-z]+", line.split(marker, 1)[1]))
    root = os.path.join(os.path.dirname(__file__), "..")
    readme = open(os.path.join(root, "README.md")).read()
    assert paths(cli.usage_text("PROG") + cli.LONG_USAGE, "--http-auth USER:PASS ") == set(OPEN)
    assert paths(readme, "| `--http-auth USER:PASSWORD` |") == set(OPEN)

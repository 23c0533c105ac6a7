"""Command line: beanstalkd's flags, parsed the way beanstalkd parses them
into the server's Settings (settings.py), once.

Startup order (as in the reference's main.c): parse flags, print ``pid N`` when
verbose, make the listening socket (exit 111 on failure), load the server and
the files the flags name (server/runtime.py's Runtime), switch user (exit
32/33/34), serve.

Imports here are kept to the minimum: clients connect 0.1 s after spawning us,
so the socket must be listening well before that. The server module (and with it
asyncio) is imported only once the socket is bound.
"""
from __future__ import annotations

import gc
import os
import signal
import sys

from pybeanstalkd import BEANSTALKD_VERSION, __version__, build
from pybeanstalkd.diag import program_name, write_line
from pybeanstalkd.server.listen import ListenError, inherited_listen_fds, make_listener
from pybeanstalkd.settings import (  # noqa: F401 (the defaults: cli's names for them too)
    BODY_RAM_MIN_DEFAULT, DEFAULT_FILESIZE, DEFAULT_FSYNC_MS, DEFAULT_PORT,
    HTTP_MAX_CONNECTIONS_DEFAULT, JOB_DATA_SIZE_LIMIT_DEFAULT, JOB_DATA_SIZE_LIMIT_MAX, Settings)

# (typing is not imported before the port is bound: settings.py says why)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn

    from pybeanstalkd.server.runtime import Runtime

EXIT_USAGE = 5
EXIT_LISTEN = 111
EXIT_GETPWNAM = 32
EXIT_NO_USER = 33
EXIT_SETID = 34
EXIT_CONFIG = 1  # a TLS or token file that cannot be used

_SIZE_MAX = 2**64 - 1
_C_SPACE = " \t\n\v\f\r"

USAGE = (
    "Use: {prog} [OPTIONS]\n"
    "\n"
    "Options:\n"
    " -b DIR   write-ahead log directory\n"
    " -f MS    fsync at most once every MS milliseconds (default is {fsync}ms);\n"
    '          use -f0 for "always fsync"\n'
    " -F       never fsync\n"
    " -l ADDR  listen on address (default is 0.0.0.0)\n"
    " -p PORT  listen on port (default is {port})\n"
    " -u USER  become user and group\n"
    " -z BYTES set the maximum job size in bytes (default is {zdef});\n"
    "          max allowed is {zmax} bytes\n"
    " -s BYTES set the size of each write-ahead log file (default is {sdef});\n"
    "          will be rounded up to a multiple of 4096 bytes\n"
    " -v       show version information\n"
    " -V       increase verbosity\n"
    " -h       show this help"
)


def usage_text(prog: str) -> str:
    return USAGE.format(
        prog=prog,
        fsync=DEFAULT_FSYNC_MS,
        port=DEFAULT_PORT,
        zdef=JOB_DATA_SIZE_LIMIT_DEFAULT,
        zmax=JOB_DATA_SIZE_LIMIT_MAX,
        sdef=DEFAULT_FILESIZE,
    )


LONG_USAGE = (
    "\n"
    "Long options (pybeanstalkd only):\n"
    " --max-memory BYTES      refuse puts with OUT_OF_MEMORY once jobs use BYTES\n"
    "                         (suffixes K, M, G; default: no cap)\n"
    " --max-connections N     stop accepting while N clients are connected\n"
    " --tls-cert FILE         serve TLS with this certificate chain (PEM)\n"
    "                         (with --cluster, on the replication links too)\n"
    " --tls-key FILE          ... and this private key (PEM)\n"
    " --tls-client-ca FILE    require client certificates signed by this CA\n"
    "                         (with --cluster, of the other nodes too)\n"
    " --auth-tokens FILE      clients must send `auth TOKEN` first (one token a line)\n"
    " --http ADDR             serve metrics, health, a JSON API and a dashboard over\n"
    "                         HTTP on host:port (:port means 127.0.0.1)\n"
    " --http-auth USER:PASS   HTTP basic auth on all of it but /healthz and /leader\n"
    " --http-max-connections N\n"
    "                         at most N HTTP connections open (default "
    f"{HTTP_MAX_CONNECTIONS_DEFAULT});\n"
    "                         one more replaces the one idle longest,\n"
    "                         or is answered 503 if all are busy\n"
    " --http-allowed-hosts NAME,...\n"
    "                         Host names the HTTP side answers to, besides IP\n"
    "                         addresses, localhost and this machine's names\n"
    "                         (.example.com: the domain and its subdomains; *: any)\n"
    " --cluster NAME          replicate to the other nodes of cluster NAME (needs -b,\n"
    "                         --etcd, --node, --peer-listen); etcd picks the leader\n"
    " --etcd HOST:PORT,...    the etcd members that decide (tried in turn)\n"
    " --node NODE             this node's name in the cluster\n"
    " --peer-listen ADDR      host:port where the leader ships to this node\n"
    " --peer-advertise ADDR   host:port the others reach it at (default --peer-listen)\n"
    " --max-tries N           a job released or timed out for the Nth time is\n"
    "                         buried instead (stats-job: tries, max-tries)\n"
    " --extensions            tuber's protocol extensions: flush-tube, reserve-batch,\n"
    "                         delete-batch, drain/undrain, watch TUBE WEIGHT,\n"
    "                         reserve-mode (COMPATIBILITY.md)\n"
    " --bodies-on-disk        keep job bodies in the binlog files, not in RAM, and\n"
    "                         read them back for reserve and peek (needs -b)\n"
    " --body-ram-min BYTES    with --bodies-on-disk, smaller bodies stay in RAM\n"
    f"                         (default {BODY_RAM_MIN_DEFAULT})\n"
    " --help                  this text"
)

# name -> Settings field: long options that take no value
LONG_SWITCHES = {"extensions": "extensions", "bodies-on-disk": "bodies_on_disk"}


def _parse_bytes(text: str) -> int | None:
    """A byte count with an optional K, M or G suffix (powers of 1024)."""
    t = text.strip()
    mult = 1
    if t[-1:].upper() in ("K", "M", "G"):
        mult = 1024 ** ("KMG".index(t[-1].upper()) + 1)
        t = t[:-1]
    if not t.isdigit() or not t.isascii():
        return None
    return int(t) * mult


def _parse_count(text: str) -> int | None:
    t = text.strip()
    return int(t) if t.isdigit() and t.isascii() and int(t) > 0 else None


def _parse_http_addr(text: str) -> tuple[str, int] | None:
    """host:port, [v6]:port, or :port (127.0.0.1)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or int(port) > 65535:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return (host or "127.0.0.1", int(port))


_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


def _parse_host_names(text: str) -> tuple[str, ...] | None:
    """NAME[,NAME...]: host names (no port), lowercased, without a trailing
    dot; .NAME is the domain and its subdomains, * any name."""
    names = []
    for name in text.split(","):
        name = name.strip().lower()
        if name != "*":
            if name.endswith("."):
                name = name[:-1]
            labels = name[1:].split(".") if name.startswith(".") else name.split(".")
            if not all(label and set(label) <= _LABEL_CHARS
                       and not label.startswith("-") and not label.endswith("-")
                       for label in labels):
                return None
        names.append(name)
    return tuple(names)


def _parse_user_password(text: str) -> tuple[str, str] | None:
    user, sep, password = text.partition(":")
    return (user, password) if sep and user else None


def _checked_addr(text: str) -> str | None:
    """host:port, kept as text: the cluster side parses it, and advertises
    it as given."""
    return text if _parse_http_addr(text) else None


def _checked_addrs(text: str) -> str | None:
    """A comma list of host:port, kept as text."""
    return text if all(_parse_http_addr(a) for a in text.split(",")) else None


# name -> (Settings field, parser returning None on a bad value, what it takes)
LONG_OPTIONS: dict[str, tuple[str, Callable[[str], object], str]] = {
    "max-memory": ("max_memory", _parse_bytes, "a byte count (K, M, G suffixes)"),
    "max-connections": ("max_connections", _parse_count, "a positive count"),
    "tls-cert": ("tls_cert", str, "a file"),
    "tls-key": ("tls_key", str, "a file"),
    "tls-client-ca": ("tls_client_ca", str, "a file"),
    "auth-tokens": ("auth_tokens_file", str, "a file"),
    "http": ("http", _parse_http_addr, "host:port or :port"),
    "http-auth": ("http_auth", _parse_user_password, "USER:PASSWORD"),
    "http-max-connections": ("http_max_connections", _parse_count, "a positive count"),
    "http-allowed-hosts": ("http_allowed_hosts", _parse_host_names, "NAME[,NAME...]"),
    "cluster": ("cluster", str, "a name"),
    "etcd": ("etcd", _checked_addrs, "host:port[,host:port...]"),
    "node": ("node", str, "a name"),
    "peer-listen": ("peer_listen", _checked_addr, "host:port"),
    "peer-advertise": ("peer_advertise", _checked_addr, "host:port"),
    "max-tries": ("max_tries", _parse_count, "a positive count"),
    "body-ram-min": ("body_ram_min", _parse_bytes, "a byte count (K, M, G suffixes)"),
}


def version_line() -> str:
    return f"beanstalkd {BEANSTALKD_VERSION} (pybeanstalkd {__version__}, {build()})"


class _Diag:
    """Where messages go: ``prog: text`` lines on stderr."""

    def __init__(self, prog: str):
        self.prog = prog

    def warn(self, msg: str) -> None:
        write_line(sys.stderr, f"{self.prog}: {msg}")

    def usage(self, code: int) -> NoReturn:
        write_line(sys.stderr, usage_text(self.prog))
        raise SystemExit(code)


def _parse_size(text: str, diag: _Diag) -> int:
    """sscanf(text, "%zu%c") must convert exactly one item: optional leading
    white space, an optional sign, decimal digits, and nothing after. A minus
    sign wraps modulo 2**64 and overflow saturates, as glibc's strtoul does."""
    s = text.lstrip(_C_SPACE)
    neg = False
    if s[:1] in ("+", "-"):
        neg = s[0] == "-"
        s = s[1:]
    if not s or any(c not in "0123456789" for c in s):
        diag.warn(f"invalid size: {text}")
        diag.usage(EXIT_USAGE)
    value = int(s)
    if value > _SIZE_MAX:
        return _SIZE_MAX
    return (-value) % 2**64 if neg else value


def _c_int(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


def _c_int64(value: int) -> int:
    value &= _SIZE_MAX
    return value - 2**64 if value >= 2**63 else value


def parse_args(argv: list[str], prog: str | None = None) -> Settings:
    """Parse flags (argv without the program name) like beanstalkd's optparse.

    Diagnostics go to stderr as ``prog: message``; errors, -h and -v raise
    SystemExit with the reference's exit code after printing.
    """
    diag = _Diag(prog if prog is not None else program_name())
    o: dict[str, Any] = Settings().as_dict()  # the fields, as parsed so far
    args = list(argv)
    i = 0
    given_long: set[str] = set()  # the Settings fields long options set

    word = ""  # the word being parsed
    pos = 0  # the next character of it

    def warn_inherited(flag: str, value: str) -> None:
        if inherited_listen_fds():
            diag.warn(f"inherited listen fd; ignoring option: {flag} {value}")

    def value(flag: str) -> str:
        """A flag's value: the rest of the word, else the next word."""
        nonlocal pos, i
        if pos < len(word):
            v = word[pos:]
            pos = len(word)
            return v
        if i < len(args):
            v = args[i]
            i += 1
            return v
        diag.warn(f"flag requires an argument: {flag}")
        diag.usage(EXIT_USAGE)

    while i < len(args):
        word = args[i]
        i += 1
        if word.startswith("--") and word != "--":
            i = _long_option(word, args, i, o, diag, given_long)
            continue
        if not word.startswith("-") or word == "-":
            diag.warn(f"unknown argument: {word}")
            diag.usage(EXIT_USAGE)
        pos = 1
        while pos < len(word):
            c = word[pos]
            pos += 1
            if c == "p":
                o["port"] = value("-p")
                warn_inherited("-p", o["port"])
            elif c == "l":
                o["addr"] = value("-l")
                warn_inherited("-l", o["addr"])
            elif c == "z":
                size = _parse_size(value("-z"), diag)
                if size > JOB_DATA_SIZE_LIMIT_MAX:
                    diag.warn(f"maximum job size was set to {JOB_DATA_SIZE_LIMIT_MAX}")
                    size = JOB_DATA_SIZE_LIMIT_MAX
                o["max_job_size"] = size
            elif c == "s":
                o["filesize"] = _c_int(_parse_size(value("-s"), diag))
            elif c in ("c", "n"):
                diag.warn(f"-{c} flag was removed. binlog is always compacted.")
            elif c == "f":
                o["syncrate_ms"] = _c_int64(_parse_size(value("-f"), diag))
                o["wantsync"] = True
            elif c == "F":
                o["wantsync"] = False
            elif c == "u":
                o["user"] = value("-u")
            elif c == "b":
                o["wal_dir"] = value("-b")
            elif c == "h":
                diag.usage(0)
            elif c == "v":
                write_line(sys.stdout, version_line())
                raise SystemExit(0)
            elif c == "V":
                o["verbose"] += 1
            else:
                # The reference prints from the character before the bad one:
                # "-x" for "-x", but "Vx" for "-Vx".
                diag.warn(f"unknown flag: {word[pos - 2:]}")
                diag.usage(EXIT_USAGE)
    if (o["tls_cert"] is None) != (o["tls_key"] is None):
        diag.warn("--tls-cert and --tls-key go together")
        diag.usage(EXIT_USAGE)
    if o["tls_client_ca"] is not None and o["tls_cert"] is None:
        diag.warn("--tls-client-ca needs --tls-cert and --tls-key")
        diag.usage(EXIT_USAGE)
    for name, given in (("--http-auth", o["http_auth"] is not None),
                        ("--http-max-connections", "http_max_connections" in given_long),
                        ("--http-allowed-hosts", "http_allowed_hosts" in given_long)):
        if given and o["http"] is None:
            diag.warn(f"{name} needs --http")
            diag.usage(EXIT_USAGE)
    parts = (o["etcd"], o["node"], o["peer_listen"], o["peer_advertise"])
    if o["cluster"] is None and any(p is not None for p in parts):
        diag.warn("--etcd, --node, --peer-listen and --peer-advertise need --cluster")
        diag.usage(EXIT_USAGE)
    if o["cluster"] is not None and (o["wal_dir"] is None or None in parts[:3]):
        diag.warn("--cluster needs -b, --etcd, --node and --peer-listen")
        diag.usage(EXIT_USAGE)
    if o["bodies_on_disk"] and o["wal_dir"] is None:
        diag.warn("--bodies-on-disk needs -b")
        diag.usage(EXIT_USAGE)
    if "body_ram_min" in given_long and not o["bodies_on_disk"]:
        diag.warn("--body-ram-min needs --bodies-on-disk")
        diag.usage(EXIT_USAGE)
    return Settings(**o)


def _long_option(word: str, args: list[str], i: int, o: dict[str, Any], diag: _Diag,
                 given: set[str]) -> int:
    """--name VALUE or --name=VALUE; returns the index of the next word. An
    unknown name gets the reference's message for an unknown flag."""
    name, eq, val = word[2:].partition("=")
    if name == "help" and not eq:
        write_line(sys.stderr, usage_text(diag.prog) + LONG_USAGE)
        raise SystemExit(0)
    if name in LONG_SWITCHES:
        if eq:
            diag.warn(f"--{name} takes no value")
            diag.usage(EXIT_USAGE)
        o[LONG_SWITCHES[name]] = True
        given.add(LONG_SWITCHES[name])
        return i
    if name not in LONG_OPTIONS:
        diag.warn(f"unknown flag: {word}")
        diag.usage(EXIT_USAGE)
    field, parse, what = LONG_OPTIONS[name]
    if not eq:
        if i >= len(args):
            diag.warn(f"flag requires an argument: --{name}")
            diag.usage(EXIT_USAGE)
        val, i = args[i], i + 1
    parsed = parse(val) if val else None
    if parsed is None:
        diag.warn(f"invalid value for --{name}: {val!r} (expected {what})")
        diag.usage(EXIT_USAGE)
    o[field] = parsed
    given.add(field)
    return i


def _switch_user(user: str, diag: _Diag) -> None:
    """setgid then setuid to USER's primary gid and uid, like the reference's
    su() (which leaves supplementary groups alone)."""
    import pwd

    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        diag.warn(f'main.c:22 in su: getpwnam("{user}"): no such user')
        raise SystemExit(EXIT_NO_USER) from None
    except (OSError, ValueError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        diag.warn(f'main.c:18 in su: getpwnam("{user}"): {reason}')
        raise SystemExit(EXIT_GETPWNAM) from None
    try:
        os.setgid(pw.pw_gid)
    except OSError as e:
        diag.warn(f'main.c:28 in su: setgid({pw.pw_gid} "{user}"): {e.strerror}')
        raise SystemExit(EXIT_SETID) from None
    try:
        os.setuid(pw.pw_uid)
    except OSError as e:
        diag.warn(f'main.c:34 in su: setuid({pw.pw_uid} "{user}"): {e.strerror}')
        raise SystemExit(EXIT_SETID) from None


def _vlog(settings: Settings, prefix: str) -> Callable[[str], None] | None:
    """With -V, a way to say what happens later (a reload) on stdout."""
    if settings.verbose:
        return lambda msg: write_line(sys.stdout, prefix + msg)
    return None


def _load(settings: Settings, diag: _Diag) -> Runtime | None:
    """The files the settings name, loaded: the TLS contexts and the tokens
    (ssl is imported only for them); None (after a message) when one is
    unusable."""
    from pybeanstalkd.server.runtime import Runtime

    rt = Runtime()
    if settings.tls_cert is not None:
        from pybeanstalkd.tls import Certs, TlsError

        assert settings.tls_key is not None  # parse_args: --tls-cert and --tls-key go together
        try:
            # (with --cluster the replication links are TLS too)
            rt.certs = Certs(settings.tls_cert, settings.tls_key, settings.tls_client_ca,
                             settings.cluster is not None, diag.warn, _vlog(settings, "tls: "))
        except TlsError as e:
            diag.warn(str(e))
            return None
    if settings.auth_tokens_file is not None:
        from pybeanstalkd.server.auth import TokenError, TokenFile

        try:
            rt.tokens = TokenFile(settings.auth_tokens_file, diag.warn, _vlog(settings, "auth: "))
        except TokenError as e:
            diag.warn(str(e))
            return None
        if settings.tls_cert is None and not (settings.addr or "").startswith("unix:"):
            diag.warn("--auth-tokens without --tls-cert: tokens travel in clear text")
    return rt


def _listen_http(settings: Settings, rt: Runtime, diag: _Diag) -> int:
    """With --http: import the HTTP side (aiohttp is imported only now) and
    bind its socket. 0, or the exit status after a message."""
    if settings.http is None:
        return 0
    try:
        from pybeanstalkd.ops.http import listen
    except ImportError as e:
        diag.warn(f"--http needs the http extra ({e.name or e}): pip install 'pybeanstalkd[http]'")
        return EXIT_CONFIG
    host, port = settings.http
    try:
        rt.http_sock = listen(host, port)
    except OSError as e:
        diag.warn(f"--http {host}:{port}: {e.strerror or e}")
        return EXIT_LISTEN
    if settings.verbose:
        addr = rt.http_sock.getsockname()
        write_line(sys.stdout, f"http {addr[0]} {addr[1]}")
    return 0


def _exit_code(e: SystemExit) -> int:
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    write_line(sys.stderr, str(code))
    return 1


def main(argv: list[str] | None = None) -> int:
    """Run the server; return the process exit status.

    ``argv`` excludes the program name (default: sys.argv[1:])."""
    if argv is None:
        argv = sys.argv[1:]
    # Until the loop's handler takes over, Ctrl-C stops the server as
    # SIGTERM does: at once, by the kernel's default action (nothing is
    # acknowledged yet; the binlog is safe against a kill at any point).
    # Python's KeyboardInterrupt could land anywhere in start-up, even in a
    # gc callback, which swallows it: the server then served on.
    previous = signal.signal(signal.SIGINT, signal.SIG_DFL)
    # Start-up makes tens of thousands of objects (modules, classes,
    # functions) that live as long as the process, and no garbage worth a
    # collection; with the collector on, they are walked again and again
    # as they load (6% of the instructions from exec to the first reply).
    # It stays off until serve() freezes them and turns it back on.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGINT, previous)
        if collecting:
            gc.enable()


def _main(argv: list[str]) -> int:
    prog = program_name()
    diag = _Diag(prog)
    out = sys.stdout
    if out is not None and hasattr(out, "reconfigure"):
        try:
            out.reconfigure(line_buffering=True)  # setlinebuf(stdout)
        except (ValueError, OSError):
            pass

    try:
        settings = parse_args(argv, prog)
        if settings.verbose:
            write_line(sys.stdout, f"pid {os.getpid()}")
        try:
            sock = make_listener(settings, log=lambda m: write_line(sys.stdout, m), warn=diag.warn)
        except ListenError:
            diag.warn("main.c:99 in main: make_server_socket()")
            return EXIT_LISTEN
    except SystemExit as e:
        return _exit_code(e)
    try:
        # Bound first, as the reference: a client that connects while the
        # rest starts (asyncio and uvloop alone take 60-90 ms here) waits in
        # the kernel's backlog and is answered once it is ready, where a
        # port bound later refuses it (a test harness that sleeps 100 ms
        # and connects once then fails). Then the imports, before the user
        # switch (the reference also initialises its state before su()):
        # the new user may not be able to read the interpreter's files.
        from pybeanstalkd.server.loop import serve

        rt = _load(settings, diag)
        if rt is None:
            sock.close()
            return EXIT_CONFIG
        code = _listen_http(settings, rt, diag)  # (aiohttp is imported here, with --http only)
        if code:
            sock.close()
            return code
        if settings.user is not None:
            _switch_user(settings.user, diag)
    except SystemExit as e:
        sock.close()
        return _exit_code(e)
    except BaseException:
        sock.close()
        raise
    return serve(sock, settings, rt)

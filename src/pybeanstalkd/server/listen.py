"""The listening socket: systemd socket activation, UNIX sockets, TCP.

Behaviour (option handling, socket options, messages and their order) follows
beanstalkd's net.c. Diagnostics that beanstalkd prints with its source location
("net.c:104 in make_inet_socket: bind(): ...") are printed with the very same
location text, so that log scrapers written for the reference keep working.

Keep the imports of this module cheap: the server has to be listening within
~100 ms of exec.
"""
from __future__ import annotations

import os
import socket
import stat
import sys

from ..diag import default_warn

# (typing is not imported before the port is bound: settings.py says why)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

    from ..settings import Settings

# Diagnostic locations exactly as the reference prints them.
_AT_SD_LISTEN_FDS = "net.c:225 in make_server_socket"
_AT_SD_MANY = "net.c:230 in make_server_socket"
_AT_SD_IS_INET = "net.c:236 in make_server_socket"
_AT_SD_NOT_LISTEN = "net.c:248 in make_server_socket"
_AT_GETADDRINFO = "net.c:49 in make_inet_socket"
_AT_INET_SOCKET = "net.c:56 in make_inet_socket"
_AT_REUSEADDR = "net.c:69 in make_inet_socket"
_AT_KEEPALIVE = "net.c:75 in make_inet_socket"
_AT_LINGER = "net.c:81 in make_inet_socket"
_AT_NODELAY = "net.c:87 in make_inet_socket"
_AT_V6ONLY = "net.c:96 in make_inet_socket"
_AT_INET_BIND = "net.c:104 in make_inet_socket"
_AT_INET_LISTEN = "net.c:134 in make_inet_socket"
_AT_UNLINK = "net.c:173 in make_unix_socket"
_AT_NOT_SOCKET = "net.c:177 in make_unix_socket"
_AT_UNIX_SOCKET = "net.c:184 in make_unix_socket"
_AT_UNIX_BIND = "net.c:196 in make_unix_socket"
_AT_UNIX_LISTEN = "net.c:206 in make_unix_socket"
_AT_NONBLOCK = "net.c:30 in set_nonblocking"

SD_LISTEN_FDS_START = 3
BACKLOG = 1024
# sizeof(sockaddr_un.sun_path) - 1: the reference keeps room for the NUL.
UNIX_PATH_MAX = 107

_INT_MAX = 2**31 - 1
_C_SPACE = " \t\n\v\f\r"


class ListenError(Exception):
    """No listening socket could be made. The diagnostics were already printed
    through ``warn``; the message is the last one of them."""


# --- systemd socket activation (sd_listen_fds semantics) ---------------------

def _c_strtol0(text: str, unsigned: bool) -> int | None:
    """C strtol/strtoul with base 0, requiring the whole string to be used,
    as systemd's safe_atoi / safe_atolu do. None on any failure."""
    s = text.lstrip(_C_SPACE)
    neg = False
    if s[:1] in ("+", "-"):
        neg = s[0] == "-"
        s = s[1:]
    if s[:2] in ("0x", "0X") and len(s) > 2 and s[2] in "0123456789abcdefABCDEF":
        base, digits = 16, s[2:]
        allowed = "0123456789abcdefABCDEF"
    elif s[:1] == "0":
        base, digits, allowed = 8, s, "01234567"
    else:
        base, digits, allowed = 10, s, "0123456789"
    if not digits or any(c not in allowed for c in digits):
        return None
    value = int(digits, base)
    if unsigned:
        if neg and value != 0:
            return None  # safe_atolu refuses negative numbers
        return value if value <= 2**64 - 1 else None
    value = -value if neg else value
    return value if -_INT_MAX - 1 <= value <= _INT_MAX else None


def sd_listen_fds(unset_environment: bool) -> tuple[int, int]:
    """Return (n, errno). n > 0: fds 3..3+n-1 were passed to us (and are now
    close-on-exec); n == 0: no socket activation; n < 0: error, and errno is
    what the reference's strerror() would show (0, "Success", when the
    variables don't parse: the reference reads errno that nothing set)."""
    env = os.environ
    try:
        pid_text = env.get("LISTEN_PID")
        if pid_text is None:
            return 0, 0
        pid = _c_strtol0(pid_text, unsigned=True)
        if pid is None or pid <= 0 or pid > _INT_MAX:
            return -1, 0
        if pid != os.getpid():
            return 0, 0
        fds_text = env.get("LISTEN_FDS")
        if fds_text is None:
            return 0, 0
        n = _c_strtol0(fds_text, unsigned=False)
        if n is None or n <= 0 or n > _INT_MAX - SD_LISTEN_FDS_START:
            return -1, 0
        for fd in range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + n):
            try:
                os.set_inheritable(fd, False)
            except OSError as e:
                return -1, e.errno or 0
        return n, 0
    finally:
        if unset_environment:
            for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
                env.pop(name, None)


def inherited_listen_fds() -> bool:
    """True when a listen fd was handed to us (without consuming it)."""
    return sd_listen_fds(False)[0] > 0


def _fail(warn, msg: str) -> NoReturn:
    warn(msg)
    raise ListenError(msg)


def _inherited_socket(n: int, warn) -> socket.socket:
    if n > 1:
        warn(f"{_AT_SD_MANY}: inherited more than one listen socket; ignoring all but the first")
    fd = SD_LISTEN_FDS_START
    try:
        st = os.fstat(fd)
    except OSError as e:
        _fail(warn, f"{_AT_SD_IS_INET}: sd_is_socket_inet: {os.strerror(e.errno or 0)}")
    ok = False
    sock = None
    if stat.S_ISSOCK(st.st_mode):
        try:
            sock = socket.socket(fileno=fd)
            ok = (
                sock.family in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX)
                and sock.type == socket.SOCK_STREAM
                and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) != 0
            )
        except OSError:
            ok = False
    if sock is None or not ok:
        if sock is not None:
            sock.detach()
        _fail(warn, f"{_AT_SD_NOT_LISTEN}: inherited fd is not a TCP or UNIX listening socket")
    sock.setblocking(False)
    return sock


# --- UNIX stream socket ------------------------------------------------------

def _unix_socket(path: str, log, warn) -> socket.socket:
    raw = path.encode(sys.getfilesystemencoding(), "surrogateescape")
    if len(raw) > UNIX_PATH_MAX:
        _fail(warn, f"socket path {path} is too long ({len(raw)} characters), "
                    f"where maximum allowed is {UNIX_PATH_MAX}")
    try:
        st = os.stat(raw) if raw else None
    except (OSError, ValueError):
        st = None
    if st is not None:
        if stat.S_ISSOCK(st.st_mode):
            warn("removing existing local socket to replace it")
            try:
                os.unlink(raw)
            except OSError as e:
                _fail(warn, f"{_AT_UNLINK}: unlink: {e.strerror}")
        else:
            _fail(warn, f"{_AT_NOT_SOCKET}: another file already exists in the given path")
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as e:
        _fail(warn, f"{_AT_UNIX_SOCKET}: socket(): {e.strerror}")
    try:
        try:
            sock.setblocking(False)
        except OSError as e:
            _fail(warn, f"{_AT_NONBLOCK}: setting O_NONBLOCK: {e.strerror}")
        try:
            # The reference binds the whole zero-filled sockaddr_un, so an empty
            # path names an abstract socket of 108 NULs rather than autobinding.
            sock.bind(raw if raw else b"\0" * (UNIX_PATH_MAX + 1))
        except OSError as e:
            _fail(warn, f"{_AT_UNIX_BIND}: bind(): {e.strerror}")
        if log:
            log(f"bind {sock.fileno()} {path}")
        try:
            sock.listen(BACKLOG)
        except OSError as e:
            _fail(warn, f"{_AT_UNIX_LISTEN}: listen(): {e.strerror}")
    except BaseException:
        sock.close()
        raise
    return sock


# --- TCP ---------------------------------------------------------------------

_LINGER_OFF = b"\0" * 8  # struct linger {l_onoff = 0, l_linger = 0}


def _inet_socket(host: str | None, port: str, log, warn) -> socket.socket:
    enc = sys.getfilesystemencoding()
    # Pass bytes: no IDNA conversion of the host, exactly what the C library sees.
    h = None if host is None else host.encode(enc, "surrogateescape")
    p = port.encode(enc, "surrogateescape")
    try:
        infos = socket.getaddrinfo(h, p, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except socket.gaierror as e:
        _fail(warn, f"{_AT_GETADDRINFO}: getaddrinfo(): {e.strerror}")
    except (OSError, UnicodeError, ValueError):
        _fail(warn, f"{_AT_GETADDRINFO}: getaddrinfo(): System error")

    last = "no usable address"
    for family, socktype, proto, _canon, sockaddr in infos:
        try:
            sock = socket.socket(family, socktype, proto)
        except OSError as e:
            last = f"{_AT_INET_SOCKET}: socket(): {e.strerror}"
            warn(last)
            continue
        fd = sock.fileno()
        # (where, what, call, its arguments), in the reference's order
        steps: list[tuple[str, str, Callable[..., object], tuple[object, ...]]] = [
            (_AT_NONBLOCK, "setting O_NONBLOCK", sock.setblocking, (False,)),
            (_AT_REUSEADDR, f"setting SO_REUSEADDR on fd {fd}",
             sock.setsockopt, (socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)),
            (_AT_KEEPALIVE, f"setting SO_KEEPALIVE on fd {fd}",
             sock.setsockopt, (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)),
            (_AT_LINGER, f"setting SO_LINGER on fd {fd}",
             sock.setsockopt, (socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_OFF)),
            (_AT_NODELAY, f"setting TCP_NODELAY on fd {fd}",
             sock.setsockopt, (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)),
        ]
        if host is None and family == socket.AF_INET6:
            # Dual stack, but only when no -l was given.
            steps.append((_AT_V6ONLY, f"setting IPV6_V6ONLY on fd {fd}",
                          sock.setsockopt, (socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)))
        steps.append((_AT_INET_BIND, "bind()", sock.bind, (sockaddr,)))
        failed = False
        for at, what, step, step_args in steps:
            try:
                step(*step_args)
            except OSError as e:
                last = f"{at}: {what}: {e.strerror}"
                warn(last)
                failed = True
                break
        if failed:
            sock.close()
            continue
        if log:
            try:
                bound = sock.getsockname()
                shown_host, shown_port = bound[0], str(bound[1])
            except OSError:
                shown_host, shown_port = host or "(null)", port
            if family == socket.AF_INET6:
                log(f"bind {fd} [{shown_host}]:{shown_port}")
            else:
                log(f"bind {fd} {shown_host}:{shown_port}")
        try:
            sock.listen(BACKLOG)
        except OSError as e:
            last = f"{_AT_INET_LISTEN}: listen(): {e.strerror}"
            warn(last)
            sock.close()
            continue
        return sock
    raise ListenError(last)


def make_listener(settings: Settings, log=print, warn=None) -> socket.socket:
    """Return a bound, listening, non-blocking stream socket for ``settings``.

    ``log`` receives the verbose lines (``bind FD host:port``) and is only used
    when ``settings.verbose`` >= 1; ``warn`` receives diagnostics (without the
    program-name prefix). Raises ListenError when no socket could be made; the
    caller should then exit 111 as the reference does.
    """
    if warn is None:
        warn = default_warn
    if not settings.verbose:
        log = None

    n, err = sd_listen_fds(True)
    if n < 0:
        _fail(warn, f"{_AT_SD_LISTEN_FDS}: sd_listen_fds: {os.strerror(err)}")
    if n > 0:
        return _inherited_socket(n, warn)

    addr = settings.addr
    if addr is not None and addr.startswith("unix:"):
        return _unix_socket(addr[5:], log, warn)
    return _inet_socket(addr, settings.port, log, warn)

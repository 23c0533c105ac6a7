"""pybeanstalkd-admin's connection options, given before or after the
command: the server (-H, -p, or BEANSTALKD_HOST/BEANSTALKD_PORT), the
reply timeout, and for the commands that speak the protocol, TLS and a
token (admin_tls.py). Also the argument types the commands share."""
from __future__ import annotations

import argparse
import os

from .admin_client import Conn, parse_address
from .admin_errors import UsageError
from .admin_tls import add_flags, from_args, given

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 11300


def ranged(name: str, low: int, high: int):
    def parse(s: str) -> int:
        try:
            v = int(s, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number, not {s!r}") from None
        if not low <= v <= high:
            raise argparse.ArgumentTypeError(f"{name} must be between {low} and {high}, not {v}")
        return v
    parse.__name__ = name
    return parse


def positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {s!r}") from None
    if not 0 < v < 1e6:
        raise argparse.ArgumentTypeError(f"must be above 0, not {s}")
    return v


def _env_port() -> int:
    raw = os.environ.get("BEANSTALKD_PORT")
    if not raw:
        return DEFAULT_PORT
    try:
        return ranged("BEANSTALKD_PORT", 1, 65535)(raw)
    except argparse.ArgumentTypeError as e:
        raise UsageError(str(e)) from None


def connection_flags(parser, default, protocol: bool = True):
    """The connection options on parser: default None on the main parser,
    SUPPRESS on a command's (unset there, the main parser's stand). Without
    protocol (a command that talks to the HTTP side), no TLS or token."""
    g = parser.add_argument_group("connection")
    g.add_argument("-H", "--host", default=default, help="server host, or unix:/path for a UNIX "
                   f"socket (env BEANSTALKD_HOST; default {DEFAULT_HOST})")
    g.add_argument("-p", "--port", type=ranged("port", 1, 65535), default=default,
                   help=f"server port (env BEANSTALKD_PORT; default {DEFAULT_PORT})")
    g.add_argument("--timeout", type=positive_float, default=default,
                   help="seconds to wait for a reply (default 10)")
    if protocol:
        add_flags(g, default)


def resolve(args, protocol: bool = True):
    """Fill in what was not given: the environment's, else the defaults.
    TLS or token options for a command that does not speak the protocol
    are refused rather than ignored."""
    if args.host is None:
        args.host = os.environ.get("BEANSTALKD_HOST") or DEFAULT_HOST
    if args.port is None:
        args.port = _env_port()
    if args.timeout is None:
        args.timeout = 10.0
    if not protocol and (flags := given(args)):
        raise UsageError(f"{', '.join(flags)}: for the protocol port; {args.command} talks to "
                         "the HTTP side (--http)")


def connect(args) -> Conn:
    address = parse_address(args.host, args.port)
    return Conn(address, timeout=args.timeout, secure=from_args(args, address))

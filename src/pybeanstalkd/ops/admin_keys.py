"""pybeanstalkd-admin keys TUBE --http HOST:PORT: a tube's idp: keys (put
tags, on a server with --extensions) with the job holding each, and the
keys in their cooldown (a deleted job's, for its TTL) with the deleted
job's id and the seconds left. From GET /api/v1/keys of the server's HTTP
side (--http): the protocol has no command that lists them.

A table on a terminal, tab-separated values in a pipe (admin_plain.py:
`kind key job ends-in-s`, one line a key, `-` where a key has no end),
--json for scripts (the API's answer as it is). The API lists at most
1,000 of each by key; more is said on stderr (or in the table's caption)."""
from __future__ import annotations

import os

from .admin_client import check_tube, http_get_json
from .admin_out import console, emit_json, on_terminal, say, views


def fetch_keys(addr: str, tube: str, auth: str | None, timeout: float) -> dict:
    """GET /api/v1/keys?tube=TUBE of the HTTP side at addr."""
    from urllib.parse import quote

    return http_get_json(addr, "/api/v1/keys?tube=" + quote(tube, safe=""), auth, timeout)


def cmd_keys(args) -> int:

    check_tube(args.tube)
    auth = args.http_auth or os.environ.get("PYBEANSTALKD_HTTP_AUTH") or None
    d = fetch_keys(args.http, args.tube, auth, args.timeout)
    if args.json:
        emit_json(d)
        return 0
    if on_terminal():
        views().show_keys(console(), d, args.http)
        return 0
    from .admin_plain import keys as plain_keys

    plain_keys(d)
    if d.get("truncated"):
        say(f"keys of {args.tube!r}: the first {len(d.get('keys', ()))} keys and "
            f"{len(d.get('cooldowns', ()))} cooldowns by key: the tube has more", err=True)
    return 0


def register(add):
    """The `keys` verb, on build_parser's `add`."""
    sp = add("keys", cmd_keys, "a tube's idp: keys with the job holding each, and the keys in "
             "their cooldown with the seconds left, from the HTTP side (--http) of a server "
             "with --extensions (tab-separated when stdout is not a terminal)", protocol=False)
    sp.add_argument("tube", metavar="TUBE")
    sp.add_argument("--http", required=True, metavar="HOST:PORT",
                    help="the server's HTTP side (--http)")
    sp.add_argument("--http-auth", metavar="USER:PASSWORD",
                    help="for a server started with --http-auth (env PYBEANSTALKD_HTTP_AUTH)")
    sp.add_argument("--json", action="store_true", default=False, help="JSON for scripts")

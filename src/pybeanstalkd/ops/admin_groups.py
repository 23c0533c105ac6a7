"""pybeanstalkd-admin groups NAME...: tuber's `stats-group` of each group
(put tags' grp:/aft:, on a server with --extensions, or tuber): its jobs by
state and the aft: jobs it holds. A table on a terminal, tab-separated
values in a pipe (admin_plain.py), --json for scripts.

A group is known from the first put that names it until its last job is
deleted: a completed group answers NOT_FOUND, as one never named."""
from __future__ import annotations

from .admin_client import TUBE_NAME
from .admin_errors import UsageError
from .admin_options import connect
from .admin_out import console, emit_json, on_terminal, say, views


def check_group(name: str) -> str:
    """Group names are tube names (the server answers BAD_FORMAT to others)."""
    if not TUBE_NAME.match(name) or name.startswith("-"):
        raise UsageError(f"invalid group name {name!r}: 1 to 200 characters from "
                         "A-Z a-z 0-9 - + / ; . $ _ ( ), not starting with '-'")
    return name


def cmd_groups(args) -> int:

    for name in args.names:
        check_group(name)
    with connect(args) as c:
        found = c.stats_groups(args.names)
    groups = [g for g in found if g is not None]
    if args.json:
        emit_json(groups)
    elif not on_terminal():
        from .admin_plain import groups as plain_groups

        plain_groups(groups)
    elif groups:
        views().show_groups(console(), groups, c.where)
    missing = [n for n, g in zip(args.names, found) if g is None]
    for name in missing:
        say(f"group {name!r}: NOT_FOUND: no such group on {c.where} "
            "(a group goes once its last job is deleted)", err=True)
    return 1 if missing else 0


def register(add):
    """The `groups` verb, on build_parser's `add`."""
    sp = add("groups", cmd_groups, "each group's jobs by state and the aft: jobs it holds "
             "(stats-group: a server with --extensions, or tuber; tab-separated when stdout is "
             "not a terminal)")
    sp.add_argument("names", nargs="+", metavar="NAME", help="group names (grp:NAME, aft:NAME)")
    sp.add_argument("--json", action="store_true", default=False, help="JSON for scripts")

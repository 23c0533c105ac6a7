"""What pybeanstalkd-admin prints and how: drawn with rich on a terminal
(admin_views.py, loaded only then), tab-separated values in a pipe or
without rich (admin_plain.py, and a line on stderr saying why), JSON for
scripts; messages on stdout or stderr."""
from __future__ import annotations

import json
import sys

from .admin_errors import AdminError

PROG = "pybeanstalkd-admin"
NO_RICH = ("rich is not installed (pip install 'pybeanstalkd[admin]', or from a checkout"
           " make install-service EXTRAS=http,admin)")


def views():
    """admin_views, which needs rich; a clear message when rich is missing."""
    try:
        import pybeanstalkd.ops.admin_views as v
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] == "rich":
            raise AdminError(f"this command draws with rich, but {NO_RICH}") from None
        raise
    return v


def has_rich() -> bool:
    import importlib.util

    return importlib.util.find_spec("rich") is not None


def console():
    return views().Console()


_told_plain = False


def on_terminal() -> bool:
    """Whether to draw: stdout is a terminal and rich is there to draw with.
    Otherwise plain TSV, and on a terminal a line on stderr saying why."""
    global _told_plain
    if not sys.stdout.isatty():
        return False
    if has_rich():
        return True
    if not _told_plain:
        _told_plain = True
        say(f"{PROG}: plain output: {NO_RICH}", err=True)
    return False


def jobs(n: int, what: str = "job") -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def say(*parts, err=False):
    print(*parts, file=sys.stderr if err else sys.stdout, flush=True)


def emit_json(data):
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")

"""Diagnostics as beanstalkd prints them: its program-name prefix, one flushed line
to stderr or stdout. Shared by the command line, the server and the binlog."""
from __future__ import annotations

import os
import sys


def program_name() -> str:
    """Basename of argv[0], as the prefix for diagnostics."""
    arg0 = sys.argv[0] if sys.argv else ""
    name = os.path.basename(arg0)
    if not name or name in ("__main__.py", "-c", "-m") or name.endswith(".py"):
        return "pybeanstalkd"
    return name


def write_line(stream, text: str) -> None:
    """Write one line to ``stream`` and flush it. Arguments that came from argv
    may hold undecodable bytes (as surrogate escapes); they go out unchanged."""
    if stream is None:
        return
    data = (text + "\n").encode(sys.getfilesystemencoding(), "surrogateescape")
    buf = getattr(stream, "buffer", None)
    try:
        if buf is not None:
            stream.flush()
            buf.write(data)
            buf.flush()
        else:
            stream.write(data.decode("utf-8", "replace"))
            stream.flush()
    except (OSError, ValueError):
        pass


def default_warn(msg: str) -> None:
    write_line(sys.stderr, f"{program_name()}: {msg}")


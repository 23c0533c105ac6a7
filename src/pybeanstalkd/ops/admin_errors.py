"""pybeanstalkd-admin's failures: each an expected one, printed as one line,
with the exit status it gives (admin.py's main)."""
from __future__ import annotations


class AdminError(Exception):
    """An expected failure, printed as one line; exit_code is the status."""

    exit_code = 1


class UsageError(AdminError):
    """A bad argument: a tube name, an option file, a stats key the server does not have."""

    exit_code = 2


class ConnectError(AdminError):
    """The server cannot be reached, or the connection broke."""

    exit_code = 3


class UnexpectedReply(AdminError):
    """The server answered something the command never answers."""

    exit_code = 3

    def __init__(self, command: bytes, reply: bytes):
        cmd = command.split(b"\r\n", 1)[0].decode("ascii", "replace")
        super().__init__(f"unexpected reply to {cmd!r}: {reply.decode('ascii', 'replace')}")
        self.reply = reply

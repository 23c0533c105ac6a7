"""The command table: one entry per command, as Redis's. An entry gives the
prefix a line is matched by, the parser of its arguments, its handler, and
whether `stats` shows its counter (cmd-NAME). Adding a command adds its
entry here, its parser and handler, and its test.

The reference's commands are listed in the order of their counters in
`stats`. beanstalkd matches a line against its prefixes in a fixed order,
the first match winning; wherever one prefix begins another (`reserve` and
`reserve-job `, `stats` and `stats-job `, `list-tubes` and
`list-tubes-watched`) its order puts the longer first, so matching the
longest prefix that fits gives the same command for every line.

With --extensions, tuber's commands come first, matched as tuber matches
them: a line is its word and a space, then the arguments, or exactly the
word of a command without arguments. A word alone that takes arguments is
UNKNOWN_COMMAND. A line none of them takes (a put with four numbers) is
matched as the reference matches it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import protocol as P
from . import commands as C, extensions as X
from .extensions import batch_size, job_ids, put_tagged_args, reserve_mode, weighted_tube
from .protocol import Bad

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeAlias

    from .session import EngineState
    from .protocol import Command
    from .session import Session
    from .tagged import Tagged

    # (op, line, where the arguments start) -> (op, *args); None: the line
    # is not this command's after all (a tagged put's parser, given the
    # reference's put); raises Bad for BAD_FORMAT.
    Parser: TypeAlias = Callable[[str, bytes, int], "Command | None"]
    Handler: TypeAlias = Callable[[EngineState, Session, Command, int], None]


class Spec:
    """One command's entry."""

    __slots__ = ("prefix", "name", "parse", "run", "shown")

    def __init__(self, prefix: bytes, name: str, parse: Parser, run: Handler,
                 shown: bool = True) -> None:
        self.prefix = prefix  # what a line starts with ("word " when arguments follow)
        self.name = name  # the op: its counter's name, and what -V -V logs
        self.parse = parse
        self.run = run
        self.shown = shown  # `stats` shows cmd-NAME

    def __repr__(self) -> str:
        return f"Spec({self.prefix!r}, {self.name!r})"


COMMANDS = (
    Spec(b"put ", "put", P.put_args, C.c_put),
    Spec(b"peek ", "peek", P.job_id, C.c_peek),
    Spec(b"peek-ready", "peek-ready", P.no_args, C.c_peek_ready),
    Spec(b"peek-delayed", "peek-delayed", P.no_args, C.c_peek_delayed),
    Spec(b"peek-buried", "peek-buried", P.no_args, C.c_peek_buried),
    Spec(b"reserve", "reserve", P.no_args, C.c_reserve),
    Spec(b"reserve-with-timeout ", "reserve-with-timeout", P.timeout_arg, C.c_reserve_timeout),
    Spec(b"delete ", "delete", P.job_id, C.c_delete),
    Spec(b"release ", "release", P.release_args, C.c_release),
    Spec(b"use ", "use", P.tube_name, C.c_use),
    Spec(b"watch ", "watch", P.tube_name, C.c_watch),
    Spec(b"ignore ", "ignore", P.tube_name, C.c_ignore),
    Spec(b"bury ", "bury", P.bury_args, C.c_bury),
    Spec(b"kick ", "kick", P.kick_bound, C.c_kick),
    Spec(b"touch ", "touch", P.job_id, C.c_touch),
    Spec(b"stats", "stats", P.no_args, C.c_stats),
    Spec(b"stats-job ", "stats-job", P.job_id, C.c_stats_job),
    Spec(b"stats-tube ", "stats-tube", P.tube_name, C.c_stats_tube),
    Spec(b"list-tubes", "list-tubes", P.no_args, C.c_list_tubes),
    Spec(b"list-tube-used", "list-tube-used", P.no_args, C.c_list_tube_used),
    Spec(b"list-tubes-watched", "list-tubes-watched", P.no_args, C.c_list_tubes_watched),
    Spec(b"pause-tube", "pause-tube", P.pause_args, C.c_pause_tube),
    # counted, never shown (as the reference's)
    Spec(b"reserve-job ", "reserve-job", P.job_id, C.c_reserve_job, False),
    Spec(b"kick-job ", "kick-job", P.job_id, C.c_kick_job, False),
    Spec(b"quit", "quit", P.anything, C.c_quit, False),
)

def extension_commands(tags: Tagged) -> tuple[Spec, ...]:
    """tuber's (extensions.py), those that ask the tags' policy bound to
    the engine's: counted, never shown, as tuber shows none of them."""
    x = X.TagCommands(tags)
    return (
        Spec(b"put ", "put-tagged", put_tagged_args, X.c_put_tagged, False),
        Spec(b"reserve-batch ", "reserve-batch", batch_size, X.c_reserve_batch, False),
        Spec(b"delete-batch ", "delete-batch", job_ids, X.c_delete_batch, False),
        Spec(b"flush-tube ", "flush-tube", P.tube_name, X.c_flush_tube, False),
        Spec(b"drain", "drain", P.no_args, X.c_drain, False),
        Spec(b"undrain", "undrain", P.no_args, X.c_undrain, False),
        Spec(b"watch ", "watch-weight", weighted_tube, x.c_watch_weight, False),
        Spec(b"reserve-mode ", "reserve-mode", reserve_mode, x.c_reserve_mode, False),
        Spec(b"stats-group ", "stats-group", P.tube_name, x.c_stats_group, False),
        Spec(b"peek-reserved", "peek-reserved", P.no_args, x.c_peek_reserved, False),
    )

# The cmd-* keys of `stats`, in order.
CMD_KEYS = tuple(c.name for c in COMMANDS if c.shown)


class CommandTable:
    """The commands one server answers: the reference's, and with
    --extensions (tags: its tags' policy) tuber's ahead of them."""

    def __init__(self, tags: Tagged | None = None) -> None:
        ext = () if tags is None else extension_commands(tags)
        self.specs = COMMANDS + ext
        self.shown = CMD_KEYS
        # The reference's matching: a "word " prefix or a whole line first
        # (a dict lookup), then every prefix, the longest first.
        self.words = {c.prefix[:-1]: c for c in COMMANDS if c.prefix[-1:] == b" "}
        self.lines = {c.prefix: c for c in COMMANDS if c.prefix[-1:] != b" "}
        self.longest_first = sorted(COMMANDS, key=lambda c: -len(c.prefix))
        # tuber's matching, ahead of it
        self.ext_words = {c.prefix[:-1]: c for c in ext if c.prefix[-1:] == b" "}
        self.ext_lines = {c.prefix: c for c in ext if c.prefix[-1:] != b" "}
        # Lines looked up here: those Engine.command's fast paths left to
        # the general parser (the tests check which those are).
        self.lookups = 0

    def match(self, line: bytes) -> tuple[Spec | None, int]:
        """The reference's command for the line, and where its arguments
        start; (None, 0) for UNKNOWN_COMMAND."""
        sp = line.find(b" ")
        hit = self.words.get(line[:sp]) if sp > 0 else self.lines.get(line)
        if hit is not None:
            return hit, len(hit.prefix)
        for c in self.longest_first:
            if line.startswith(c.prefix):
                return c, len(c.prefix)
        return None, 0

    def lookup(self, line: bytes) -> tuple[Spec, Command] | None:
        """The command and its parsed arguments; None for UNKNOWN_COMMAND.
        Raises Bad for BAD_FORMAT."""
        self.lookups += 1
        if self.ext_words or self.ext_lines:
            sp = line.find(b" ")
            c = self.ext_words.get(line[:sp]) if sp > 0 else self.ext_lines.get(line)
            if c is not None:
                cmd = c.parse(c.name, line, len(c.prefix))
                if cmd is not None:
                    return c, cmd
            elif sp < 0 and line in self.ext_words:
                return None  # (tuber matches "word " only)
        if 0 in line:  # (a NUL; as an int, memchr finds it: b"\0" would first fail as an int)
            raise Bad
        c, at = self.match(line)
        if c is None:
            return None
        cmd = c.parse(c.name, line, at)
        assert cmd is not None  # (the reference's parsers always answer)
        return c, cmd

"""The protocol's answer to each outcome (outcome.py), per command: the one
place where a queue operation's result becomes reply bytes. The HTTP side
has its own table (ops/http.py).

Where the reference answers one failure differently per command, so does
this table: no room in the binlog is OUT_OF_MEMORY for put and release
(the reference's allocation failure) and INTERNAL_ERROR for bury; kick-job
answers NOT_FOUND for every failure, as the reference's does.
"""
from __future__ import annotations

from typing import Final

from . import protocol as P
from .outcome import (
    DEADLINE_SOON, DONE, DRAINING, IDS_USED_UP, MALFORMED, NO_ROOM, NOT_FOUND, NOT_LOGGED,
    OVER_CAP, TIMED_OUT, TOO_BIG, TRIES_USED_UP, WRONG_STATE, Outcome)

REPLIES: dict[str, dict[Outcome, bytes]] = {
    "delete": {DONE: P.DELETED, NOT_FOUND: P.NOT_FOUND, NOT_LOGGED: P.INTERNAL_ERROR},
    # (BURIED: a reply the reference's release has too, when it cannot put
    # the job back; here, with --max-tries, when the job's tries are used up)
    "release": {DONE: P.RELEASED, NOT_FOUND: P.NOT_FOUND, NO_ROOM: P.OUT_OF_MEMORY,
                TRIES_USED_UP: P.BURIED},
    "bury": {DONE: P.BURIED, NOT_FOUND: P.NOT_FOUND, NO_ROOM: P.INTERNAL_ERROR},
    "touch": {DONE: P.TOUCHED, NOT_FOUND: P.NOT_FOUND},
    "kick-job": {DONE: P.KICKED, NOT_FOUND: P.NOT_FOUND, WRONG_STATE: P.NOT_FOUND,
                 NO_ROOM: P.NOT_FOUND},
    "reserve-job": {NOT_FOUND: P.NOT_FOUND},  # (DONE: the job itself, RESERVED)
    "reserve": {TIMED_OUT: P.TIMED_OUT, DEADLINE_SOON: P.DEADLINE_SOON},
    # A put refused; DONE is INSERTED with the new id. The body of a put
    # refused at its command line is read and dropped first (BITBUCKET),
    # but for MALFORMED, whose body is read as commands, as the reference's.
    "put": {MALFORMED: P.BAD_FORMAT, TOO_BIG: P.JOB_TOO_BIG, IDS_USED_UP: P.INTERNAL_ERROR, OVER_CAP: P.OUT_OF_MEMORY,
            DRAINING: P.DRAINING, NO_ROOM: P.OUT_OF_MEMORY},
}

# Each command's row, loaded as a global by the hot paths.
DELETE: Final = REPLIES["delete"]
RELEASE: Final = REPLIES["release"]
BURY: Final = REPLIES["bury"]
TOUCH: Final = REPLIES["touch"]
KICK_JOB: Final = REPLIES["kick-job"]
RESERVE_JOB: Final = REPLIES["reserve-job"]
RESERVE: Final = REPLIES["reserve"]
PUT: Final = REPLIES["put"]

"""What an operation on the queue came to.

The queue and the put admission return these small values, never wire bytes.
Two tables turn them into answers: REPLIES (core/replies.py) into the
protocol's reply bytes, and ops/http.py's into HTTP statuses. One outcome
may answer differently per command, as the reference's do: a release that
finds no room in the binlog answers OUT_OF_MEMORY, a bury INTERNAL_ERROR.
"""
from __future__ import annotations

from typing import Final

from enum import IntEnum


class Outcome(IntEnum):
    DONE = 0
    NOT_FOUND = 1  # no such job, or not the caller's to change
    WRONG_STATE = 2  # the job is not in a state the operation takes (kick-job)
    NO_ROOM = 3  # the binlog could not reserve room for the change: nothing changed
    NOT_LOGGED = 4  # changed in memory, but its binlog record could not be written
    # A reserve that found no job.
    TIMED_OUT = 5
    DEADLINE_SOON = 6  # a reservation of the caller's is about to expire
    # Why a put is not admitted.
    MALFORMED = 11  # its command line has junk after the size
    TOO_BIG = 7  # the body is over max-job-size
    IDS_USED_UP = 8  # every job id a binlog can hold has been used
    OVER_CAP = 9  # --max-memory would be passed
    DRAINING = 10  # the server takes no new jobs (SIGUSR1)
    # A release that used up the job's tries (--max-tries): buried instead.
    TRIES_USED_UP = 12
    # A body left in the binlog (--bodies-on-disk) could not be read back.
    UNREADABLE = 13


# The names the hot paths load as globals (an enum's attribute is a lookup more).
DONE: Final = Outcome.DONE
NOT_FOUND: Final = Outcome.NOT_FOUND
WRONG_STATE: Final = Outcome.WRONG_STATE
NO_ROOM: Final = Outcome.NO_ROOM
NOT_LOGGED: Final = Outcome.NOT_LOGGED
TIMED_OUT: Final = Outcome.TIMED_OUT
DEADLINE_SOON: Final = Outcome.DEADLINE_SOON
MALFORMED: Final = Outcome.MALFORMED
TOO_BIG: Final = Outcome.TOO_BIG
IDS_USED_UP: Final = Outcome.IDS_USED_UP
OVER_CAP: Final = Outcome.OVER_CAP
DRAINING: Final = Outcome.DRAINING
TRIES_USED_UP: Final = Outcome.TRIES_USED_UP
UNREADABLE: Final = Outcome.UNREADABLE

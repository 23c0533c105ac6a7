"""Files read at start and again when they change (the TLS certificates,
the auth tokens), so that they rotate without a restart."""
from __future__ import annotations

import os
from time import monotonic

CHECK_S = 1.0  # the files are looked at no more often than this


class Reloading:
    """What build() makes of some files, made again when one of them
    changes. The files are looked at when current() is asked for (on a
    handshake, an `auth`), at most once each CHECK_S: nothing runs while
    no one connects. A change that does not build (a key written before
    its certificate) keeps what is in use and is said once, through warn;
    what did build is said through log. Connections keep what they began
    with."""

    def __init__(self, files, build, errors, warn, log=None, clock=monotonic):
        self.files = [f for f in files if f is not None]
        self.build, self.errors, self.warn, self.log = build, errors, warn, log
        self.clock = clock
        self.stamp = self._stamp()  # (before build: a change meanwhile is seen next time)
        self.value = build()  # (its error at start is the caller's to say)
        self.bad = None  # the stamp of files that did not build
        self.next = clock() + CHECK_S

    def _stamp(self) -> tuple:
        out: list[tuple[int, int, int] | None] = []
        for f in self.files:
            try:
                st = os.stat(f)
            except OSError:
                out.append(None)  # (renamed away mid-rotation: seen when it is back)
            else:
                out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(out)

    def current(self):
        now = self.clock()
        if now >= self.next:
            self.next = now + CHECK_S
            stamp = self._stamp()
            if stamp != self.stamp and stamp != self.bad:
                self._rebuild(stamp)
        return self.value

    def _rebuild(self, stamp: tuple):
        try:
            value = self.build()
        except self.errors as e:
            self.bad = stamp
            self.warn(f"{e}; what was loaded before stays in use")
            return
        self.value, self.stamp, self.bad = value, stamp, None
        if self.log is not None:
            self.log("reloaded " + ", ".join(self.files))

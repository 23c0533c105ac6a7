"""Drive the pure Engine with a fake clock: no sockets, no sleeping."""
from __future__ import annotations

from pybeanstalkd.core.engine import Engine
from pybeanstalkd.core.protocol import NS


class Harness:
    def __init__(self, **kw):
        self.now = 1_000_000 * NS  # arbitrary monotonic origin
        self.e = Engine(self.now, log=lambda m: None, **kw)

    def conn(self):
        return self.e.connect()

    def take(self, s) -> bytes:
        out = b"".join(s.out)
        s.out = []
        return out

    def send(self, s, data: bytes) -> bytes:
        self.e.data(s, data, self.now)
        return self.take(s)

    def advance(self, seconds: float):
        """Move the clock forward, running each timer at the time it is due."""
        target = self.now + round(seconds * NS)
        while True:
            due = self.e.next_due()
            if due is None or due > target:
                break
            self.now = max(self.now, due)
            self.e.tick(self.now)
        self.now = target

    def close(self, s):
        self.e.close(s, self.now)

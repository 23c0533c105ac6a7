"""The first reply of a server just started: connect until it listens,
then send `list-tube-used` until an answer comes back. Shared by
startup-ab.py, startup-callgrind.py and cmd-cost.py (run from
docs/performance/ or with it on sys.path)."""
from __future__ import annotations

import socket
import time


def first_reply(port: int, pause: float = 0.0005, give_up: float = 120.0) -> socket.socket:
    """The connection that got the server's first reply, left open; retried
    every `pause` seconds while the port refuses or the server closes
    before it answers. TimeoutError after `give_up` seconds."""
    end = time.monotonic() + give_up
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=give_up)
        except OSError:
            if time.monotonic() > end:
                raise TimeoutError(f"nothing listens on port {port}") from None
            time.sleep(pause)
            continue
        s.sendall(b"list-tube-used\r\n")
        try:
            if s.recv(100):
                return s
        except OSError:
            pass
        s.close()
        if time.monotonic() > end:
            raise TimeoutError(f"no reply on port {port}")

"""Our own accept loop on the listening socket.

asyncio's and uvloop's servers accept whatever is pending and offer no way
to stop at a connection count. Out of descriptors, asyncio retries after a
second and logs each time, and libuv accepts-and-closes the waiting clients.
Here the listening socket is watched with add_reader, and watching stops
(the kernel backlog holds new clients) while --max-connections clients are
open or while accept() fails for want of descriptors; it resumes when a
connection closes (SOON_S after, when descriptors ran out, so a burst of closes
frees several first), or after RETRY_S.
"""
from __future__ import annotations

import errno
import socket
import time

# Out of descriptors or kernel memory: stop accepting for a while.
_NO_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
RETRY_S = 0.5  # without a close to wake us, retry this often when out of fds
SOON_S = 0.05  # after a close: soon, so that closes in a burst free their fds first
# Accepts per loop pass. One while the server is idle: a client is set up
# (and an early EOF seen) before the next one is accepted, as epoll order
# makes it in the reference. More once the loop's thread has spent
# BUSY_CPU_S of CPU since the last pass here (its own CPU: the fsync
# thread's does not count): its passes are long then (clients pipelining
# commands), and at one a pass a burst of new clients would wait for as
# many passes (200 clients pipelining without reading, 100 new ones: their
# first replies at 1.6 s, worst 3.3 s, against 21 and 49 ms).
BATCH = 1
BUSY_BATCH = 64
BUSY_CPU_S = 0.002


class Acceptor:
    def __init__(self, loop, sock: socket.socket, start_conn, max_conns=None, log=None,
                 free_fds=None):
        self.loop = loop
        # () -> how many descriptors the server gave back from what it keeps
        # only to go faster (--bodies-on-disk's read fds, up to 64): out of
        # descriptors, a client comes first
        self.free_fds = free_fds
        self.sock = sock
        self.fd = sock.fileno()
        self.start_conn = start_conn  # (accepted socket) -> None
        self.max_conns = max_conns
        self.log = log  # None unless -V
        self.open = 0  # accepted and not yet closed (handshakes included)
        self.reading = False
        self.starved = False  # accept() failed for want of descriptors
        self.short = False  # ... and has not succeeded since (one log line each way)
        self.retry = None
        self.soon = False  # the retry is the short one
        self.closed_ = False
        self.cpu_at = time.thread_time()  # the loop thread's CPU time at the last pass here

    def start(self):
        self._resume()

    def close(self):
        self.closed_ = True
        self._pause()
        if self.retry is not None:
            self.retry.cancel()
            self.retry = None

    def _pause(self):
        if self.reading:
            self.loop.remove_reader(self.fd)
            self.reading = False

    def _resume(self):
        if not self.reading and not self.closed_:
            self.loop.add_reader(self.fd, self._on_readable)
            self.reading = True

    def released(self):
        """A connection closed (or its handshake failed)."""
        self.open -= 1
        if self.reading or self.closed_:
            return
        if self.starved:
            if not self.soon:
                if self.retry is not None:
                    self.retry.cancel()
                self.soon = True
                self.retry = self.loop.call_later(SOON_S, self._retry)
        elif self.max_conns is None or self.open < self.max_conns:
            if self.log:
                self.log("accept resumed: %d connections" % self.open)
            self._resume()

    def _retry(self):
        if self.retry is not None:
            self.retry.cancel()
            self.retry = None
        self.soon = False
        self.starved = False
        if self.max_conns is None or self.open < self.max_conns:
            self._resume()

    def _on_readable(self):
        sock = self.sock
        cpu = time.thread_time()
        batch = BUSY_BATCH if cpu - self.cpu_at > BUSY_CPU_S else BATCH
        self.cpu_at = cpu
        for _ in range(batch):
            if self.max_conns is not None and self.open >= self.max_conns:
                self._pause()
                if self.log:
                    self.log("accept paused: %d connections (--max-connections)" % self.open)
                return
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in _NO_RESOURCES:
                    if self.free_fds is not None and self.free_fds():
                        return  # (some given back: the next pass accepts)
                    # Level-triggered: left armed, this would spin.
                    self._pause()
                    self.starved = True
                    if self.log and not self.short:
                        self.log("accept paused: %s with %d connections open"
                                 % (e.strerror, self.open))
                    self.short = True
                    if self.retry is None:
                        self.retry = self.loop.call_later(RETRY_S, self._retry)
                    return
                continue  # ECONNABORTED and the like: that client is gone
            conn.setblocking(False)
            self.open += 1
            if self.short:
                self.short = False
                if self.log:
                    self.log("accept resumed: descriptors free again, %d connections" % self.open)
            try:
                self.start_conn(conn)
            except Exception:
                conn.close()
                self.released()

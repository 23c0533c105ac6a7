"""Concurrent load for the kill -9 tests: producers and deleters on their
own connections, the server killed at a chosen time, and what each client
was told (a put counts once its INSERTED is read; a delete's job counts as
gone once the delete is sent)."""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field

from binlogtools import BinlogServer, Conn, ProtocolError
from support import Server


@dataclass
class LoadLog:
    """What clients were told. Sets are filled by several threads (GIL-atomic adds)."""

    put_acked: dict = field(default_factory=dict)  # id -> body
    delete_sent: set = field(default_factory=set)
    delete_acked: set = field(default_factory=set)
    errors: list = field(default_factory=list)  # unexpected replies (not connection loss)
    # run_load's jobs: (least, most): deleters wait while no more than least
    # jobs are left that no delete was sent for, producers while most are not
    # deleted yet; both on `changed`
    jobs: tuple[int, int] | None = None
    changed: threading.Condition = field(default_factory=threading.Condition)

    def wait_for_room(self, stop: threading.Event):
        if self.jobs is not None:
            self._wait(lambda: len(self.put_acked) - len(self.delete_acked) < self.jobs[1], stop)

    def wait_for_jobs(self, stop: threading.Event):
        if self.jobs is not None:
            self._wait(lambda: len(self.put_acked) - len(self.delete_sent) > self.jobs[0], stop)

    def _wait(self, ready, stop: threading.Event):
        with self.changed:
            while not ready() and not stop.is_set():
                self.changed.wait(0.1)  # (the timeout: to see stop once the server is killed)

    def put(self, jid: int, body: bytes):
        self.put_acked[jid] = body
        self._changed()

    def deleted(self, jid: int):
        self.delete_acked.add(jid)
        self._changed()

    def _changed(self):
        if self.jobs is not None:
            with self.changed:
                self.changed.notify_all()


def _producer(srv: Server, log: LoadLog, stop: threading.Event, tag: int, tubes: list[str]):
    import random

    rnd = random.Random(tag)
    try:
        c = Conn(srv.connect())
    except OSError:
        return
    try:
        n = 0
        tube = None
        while not stop.is_set():
            log.wait_for_room(stop)
            t = tubes[n % len(tubes)]
            if t != tube:
                c.use(t)
                tube = t
            body = b"p%d-%d-" % (tag, n) + rnd.randbytes(rnd.randrange(0, 300))
            got = c.cmd(b"put %d 0 120 %d\r\n%s\r\n" % (rnd.randrange(0, 2000), len(body), body))
            m = re.fullmatch(rb"INSERTED (\d+)\r\n", got)
            if not m:
                log.errors.append(("put", got))
                return
            log.put(int(m.group(1)), body)
            n += 1
    except (OSError, EOFError):
        return  # the server died under us
    except ProtocolError as e:
        log.errors.append(("use", str(e)))
    finally:
        c.close()


def _deleter(srv: Server, log: LoadLog, stop: threading.Event, tubes: list[str]):
    try:
        c = Conn(srv.connect())
    except OSError:
        return
    try:
        for t in tubes:
            c.watch(t)
        while not stop.is_set():
            log.wait_for_jobs(stop)
            got = c.cmd(b"reserve-with-timeout 1\r\n")
            if got == b"TIMED_OUT\r\n":
                continue
            m = re.match(rb"RESERVED (\d+) ", got)
            if not m:
                log.errors.append(("reserve", got))
                return
            jid = int(m.group(1))
            log.delete_sent.add(jid)
            got = c.cmd(b"delete %d\r\n" % jid)
            if got != b"DELETED\r\n":
                log.errors.append(("delete", jid, got))
                return
            log.deleted(jid)
    except (OSError, EOFError):
        return
    finally:
        c.close()


UNTIL_LIMIT = 120  # s: run_load's until not met by then is a failure, not a slow machine


def run_load(srv: BinlogServer, kill_after: float, producers=3, deleters=2, tubes=("default", "load-b"),
             until=None, jobs=None) -> LoadLog:
    """Run producers and deleters, SIGKILL the server after kill_after seconds, and
    return what the clients were acknowledged.

    until: a test of what the load must have done first: the kill waits for
    it (a busy machine runs the load slower), and fails the test if it is
    not met within UNTIL_LIMIT.

    jobs: (least, most): deleters wait while no more than least jobs are
    left that no delete was sent for (else, whenever they run faster, a
    waiting reserve takes each job as it is put, and the kill may find
    none that must come back), and producers while most jobs are not
    deleted. Without most, producers outrun the deleters (a delete takes
    two commands) and the jobs pile up; a binlog compacts only while its
    live jobs take under a third of its files, so once they pile up the
    oldest file stays until the deleters reach its last job, which the
    newer urgent jobs keep them from: if compaction had not freed it by
    then (a busy machine), no wait will see it freed."""
    log = LoadLog(jobs=jobs)
    stop = threading.Event()
    threads = [threading.Thread(target=_producer, args=(srv, log, stop, i, list(tubes))) for i in range(producers)]
    threads += [threading.Thread(target=_deleter, args=(srv, log, stop, list(tubes))) for _ in range(deleters)]
    for t in threads:
        t.start()
    time.sleep(kill_after)  # (the kill's random time: what the test is about, not a wait)
    give_up = time.monotonic() + UNTIL_LIMIT
    met = until is None or until()
    while not met and time.monotonic() < give_up and any(t.is_alive() for t in threads):
        time.sleep(0.05)
        met = until()
    srv.kill9()
    stop.set()
    for t in threads:
        t.join(10)
        assert not t.is_alive(), "a load thread hung after the server was killed"
    assert met, (f"the load had not done what the test needs within {UNTIL_LIMIT} s"
                 f" (puts {len(log.put_acked)}, deletes {len(log.delete_acked)}, errors {log.errors[:3]})")
    return log

"""--stalls: how long other clients wait while the server does big work.

A probe process sends one cheap command (`list-tube-used`) every
millisecond on its own connection and times each reply, while the bench
makes the server do one of these (N jobs of --size bytes each):

  fill   a pipelined fill to N jobs (the id map and heaps grow)
  kick   `kick N` on N delayed jobs
  due    N delayed jobs all coming due at once
  close  a connection holding N reservations closes
  flush  `flush-tube` of a tube of N jobs (a server started with
         --extensions; one that does not know it, as the reference, is
         skipped: its row says so)
  release  N `aft:` jobs held by a group, released by the delete of
         its one member (--extensions too)
  group  `stats-group` of a group of N jobs (--extensions)
  groupdel  the N jobs of a group deleted by pipelined `delete-batch`es
         of 1,000 (--extensions)

"due": the jobs are put with a delay longer than the fill takes, then the
server is stopped (SIGSTOP) before the first one is due and continued
(SIGCONT) once the last one is, so that all N are due in the same instant
on either server. The probe starts at the SIGCONT.

The probe's worst wait, p99.9, p99 and p50 are reported per case and
server, with how long the big work itself took, and with the machine's own
worst hiccup over the same time: a third process that only sleeps 1 ms at
a time reports how late it woke (a stall there is the kernel's or the
hypervisor's, not the server's).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from array import array

from .client import connect
from .drivers import BenchError
from .modes import alternate
from .spawn import exchange, stats
from .workloads import Options, fill, percentile

CASES = ["fill", "kick", "due", "close"]
OPTIONAL = ["flush", "release", "group", "groupdel"]  # only when asked for: --cases flush,...
PROBE = b"list-tube-used\r\n"
PROBE_REPLY = b"USING default\r\n"
INTERVAL_NS = 1_000_000
# The fill's load processes run at this nice value. On a machine with few
# cores they otherwise take the CPU from the server and the probe for
# 8-30 ms at a time (seen as involuntary context switches of a server that
# had work to do), which measures the scheduler, not the server. Same for both.
LOAD_NICE = 10
WORK_TIMEOUT = 900.0  # s: big work on millions of jobs, on a loaded machine


def _probe(addr, go, stop, out):
    """Until stop: one PROBE per INTERVAL_NS, or at once after a slow reply."""
    rtt = array("q")
    try:
        sock = connect(addr)
        sock.settimeout(None)
        out.send(("ready", None))
        while not go.value:
            time.sleep(0.0001)
        nxt = time.monotonic_ns()
        while not stop.value:
            now = time.monotonic_ns()
            if now < nxt:
                time.sleep((nxt - now) / 1e9)
            t0 = time.monotonic_ns()
            sock.sendall(PROBE)
            got = b""
            while len(got) < len(PROBE_REPLY):
                chunk = sock.recv(64)
                if not chunk:
                    raise BenchError("the server closed the probe's connection")
                got += chunk
            t1 = time.monotonic_ns()
            if got != PROBE_REPLY:
                raise BenchError(f"probe got {got!r}")
            rtt.append(t1 - t0)
            nxt = t0 + INTERVAL_NS
        sock.close()
        out.send(("done", rtt.tobytes()))
    except BaseException as e:  # reported to the parent
        out.send(("error", f"{type(e).__name__}: {e}"))


def _sleeper(go, stop, out):
    """Until stop: sleep 1 ms at a time; report the worst lateness (ns)."""
    worst = 0
    try:
        out.send(("ready", None))
        while not go.value:
            time.sleep(0.0001)
        while not stop.value:
            t0 = time.monotonic_ns()
            time.sleep(INTERVAL_NS / 1e9)
            late = time.monotonic_ns() - t0 - INTERVAL_NS
            if late > worst:
                worst = late
        out.send(("done", worst))
    except BaseException as e:  # reported to the parent
        out.send(("error", f"{type(e).__name__}: {e}"))


class Probe:
    """The probe process (and the sleeper beside it): connected at creation,
    sending from go() until stop()."""

    def __init__(self, addr):
        ctx = mp.get_context("fork")
        self.go_flag = ctx.RawValue("b", 0)
        self.stop_flag = ctx.RawValue("b", 0)
        self.rx, tx = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_probe, daemon=True,
                                args=(addr, self.go_flag, self.stop_flag, tx))
        self.proc.start()
        self.srx, tx = ctx.Pipe(duplex=False)
        self.sleeper = ctx.Process(target=_sleeper, daemon=True,
                                   args=(self.go_flag, self.stop_flag, tx))
        self.sleeper.start()
        self.machine_ns = None  # the sleeper's worst lateness, after stop()
        self._expect("ready", 30)
        self._expect("ready", 30, self.srx)

    def _expect(self, what, timeout, rx=None):
        rx = rx or self.rx
        if not rx.poll(timeout):
            raise BenchError(f"the probe did not report {what!r} within {timeout} s")
        kind, val = rx.recv()
        if kind == "error":
            raise BenchError(val)
        return val

    def go(self):
        self.go_flag.value = 1

    def stop(self) -> list[int]:
        self.stop_flag.value = 1
        rtt = array("q")
        rtt.frombytes(self._expect("done", 120))
        self.machine_ns = self._expect("done", 120, self.srx)
        self.proc.join(5)
        self.sleeper.join(5)
        return sorted(rtt)

    def kill(self):
        for p in (self.proc, self.sleeper):
            if p.is_alive():
                p.kill()
                p.join()


def cpu_ticks() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs, from /proc/stat ((0, 0) elsewhere).
    Steal is time the hypervisor gave our vCPUs to someone else: on a shared
    VM it shows up as stalls that no server causes."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def _summary(rtt: list[int]) -> dict:
    if not rtt:
        return {"samples": 0, "p50_ms": None, "p99_ms": None, "p999_ms": None, "max_ms": None}
    return {"samples": len(rtt), "p50_ms": percentile(rtt, 0.5) / 1e3,
            "p99_ms": percentile(rtt, 0.99) / 1e3, "p999_ms": percentile(rtt, 0.999) / 1e3,
            "max_ms": percentile(rtt, 1.0) / 1e3}  # (the same arithmetic: p999 <= max exactly)


def _stopped(probe: Probe, took: float, extra: dict):
    rtt = probe.stop()
    return rtt, took, extra | {"machine_max_ms": probe.machine_ns / 1e6}


def _wait_stats(addr, key, want, timeout=WORK_TIMEOUT):
    end = time.monotonic() + timeout
    while int(stats(addr)[key]) != want:
        if time.monotonic() > end:
            raise BenchError(f"{key} did not reach {want} within {timeout:.0f} s")
        time.sleep(0.01)


def _fill(s, o, n, progress, label, delay=0, ttr=60, tags=b""):
    t0 = time.monotonic()
    fill(s.addr, o, n, progress=progress and progress.labelled(label), delay=delay, ttr=ttr,
         nice=LOAD_NICE, tags=tags)
    if progress:
        progress.clear()
    return time.monotonic() - t0


def case_fill(s, o, n, progress, fill_s):
    probe = Probe(s.addr)
    try:
        probe.go()
        took = _fill(s, o, n, progress, "fill")
        return _stopped(probe, took, {"fill_rate": n / took})
    finally:
        probe.kill()


def _timed(s, o, probe, command: bytes, ok, what: str, replies: int = 1) -> float:
    """Send commands that do big work (from `o.tube`), with the probe
    running, and time their `replies` replies: the work's seconds. ok(got)
    says whether the replies are the expected ones."""
    with connect(s.addr) as c:
        c.settimeout(WORK_TIMEOUT)  # the reply comes after the last slice
        exchange(c, b"use %s\r\n" % o.tube.encode(), 1)
        probe.go()
        time.sleep(0.05)
        t0 = time.monotonic()
        got = exchange(c, command, replies)
        took = time.monotonic() - t0
        if not ok(got):
            raise BenchError(f"{what}: {got[:120]!r}")
    time.sleep(0.05)
    return took


def case_kick(s, o, n, progress, fill_s):
    _fill(s, o, n, progress, "delayed fill", delay=100_000)
    probe = Probe(s.addr)
    try:
        took = _timed(s, o, probe, b"kick %d\r\n" % n, (b"KICKED %d\r\n" % n).__eq__, "kick")
        return _stopped(probe, took, {})
    finally:
        probe.kill()


def case_due(s, o, n, progress, fill_s):
    # The delay must outlast the fill: this server's own fill time (from the
    # fill case) with room to spare.
    delay = int(2 + 1.5 * (fill_s or n / 20_000)) + 1
    t0 = time.monotonic()
    took = _fill(s, o, n, progress, f"fill delayed {delay} s", delay=delay)
    first_due = t0 + delay
    if time.monotonic() > first_due - 0.5:
        raise BenchError(f"the fill took {took:.1f} s, too close to the {delay} s delay")
    os.kill(s.pid, signal.SIGSTOP)
    try:
        probe = Probe(s.addr)  # connects; its first command waits in the socket
    except BaseException:
        os.kill(s.pid, signal.SIGCONT)
        raise
    try:
        if progress:
            progress.line(f"{s.name} stopped until all {n:,} jobs are due")
        time.sleep(max(0.0, t0 + took + delay + 0.2 - time.monotonic()))
        os.kill(s.pid, signal.SIGCONT)
        probe.go()
        t1 = time.monotonic()
        _wait_stats(s.addr, "current-jobs-delayed", 0)
        took = time.monotonic() - t1
        time.sleep(0.05)
        return _stopped(probe, took, {"delay_s": delay})
    finally:
        os.kill(s.pid, signal.SIGCONT)
        probe.kill()


def case_close(s, o, n, progress, fill_s):
    # A TTR that outlasts reserving them all: none may time out before the close.
    _fill(s, o, n, progress, "fill", ttr=86_400)
    # Forked before the reserving connection opens, so that it holds no copy
    # of that socket: the close below must reach the server.
    probe = Probe(s.addr)
    c = connect(s.addr)
    try:
        exchange(c, b"watch %s\r\nignore default\r\n" % o.tube.encode(), 2)
        batch, got, sent = 5000, 0, 0
        buf = b""
        while got < n:
            k = min(batch, n - sent)
            if k and sent - got < 4 * batch:
                c.sendall(b"reserve-with-timeout 0\r\n" * k)
                sent += k
            chunk = c.recv(1 << 20)
            if not chunk:
                raise BenchError("closed while reserving")
            buf += chunk
            end = buf.rfind(b"\r\n") + 2  # count whole lines only
            got += buf.count(b"RESERVED ", 0, end)
            if b"TIMED_OUT" in buf[:end]:
                raise BenchError("ran out of jobs while reserving")
            buf = buf[end:]
            if progress and got % 50_000 < 1000:
                progress.line(f"{s.name} reserving: {got:,}")
        if progress:
            progress.clear()
        _wait_stats(s.addr, "current-jobs-reserved", n)
    except BaseException:
        c.close()
        probe.kill()
        raise
    try:
        probe.go()
        time.sleep(0.05)
        t0 = time.monotonic()
        c.close()
        _wait_stats(s.addr, "current-jobs-reserved", 0)
        took = time.monotonic() - t0
        time.sleep(0.05)
        return _stopped(probe, took, {})
    finally:
        probe.kill()


def case_flush(s, o, n, progress, fill_s):
    with connect(s.addr) as c:
        exchange(c, b"use %s\r\n" % o.tube.encode(), 1)
        if exchange(c, b"flush-tube %s\r\n" % o.tube.encode(), 1) == b"UNKNOWN_COMMAND\r\n":
            return [], 0.0, {"skipped": "no flush-tube"}
    _fill(s, o, n, progress, "fill")
    probe = Probe(s.addr)
    try:
        took = _timed(s, o, probe, b"flush-tube %s\r\n" % o.tube.encode(),
                      (b"FLUSHED %d\r\n" % n).__eq__, "flush-tube")
        return _stopped(probe, took, {})
    finally:
        probe.kill()


def case_release(s, o, n, progress, fill_s):
    group = b"stalls-%d" % os.getpid()
    with connect(s.addr) as c:
        exchange(c, b"use %s\r\n" % o.tube.encode(), 1)
        got = exchange(c, b"put 0 0 60 1 grp:%s\r\nm\r\n" % group, 1)
        if not got.startswith(b"INSERTED "):
            return [], 0.0, {"skipped": "no put tags"}
        member = int(got.split()[1])
    _fill(s, o, n, progress, "fill held", tags=b" aft:" + group)
    probe = Probe(s.addr)
    try:
        with connect(s.addr) as c:
            probe.go()
            time.sleep(0.05)
            t0 = time.monotonic()
            got = exchange(c, b"delete %d\r\n" % member, 1)
            if got != b"DELETED\r\n":
                raise BenchError(f"delete: {got[:80]!r}")
        _wait_stats(s.addr, "current-jobs-ready", n)
        took = time.monotonic() - t0
        time.sleep(0.05)
        return _stopped(probe, took, {})
    finally:
        probe.kill()


def _group_fill(s, o, n, progress) -> bytes | None:
    """N jobs in one group (grp:), or None where put tags are unknown."""
    group = b"stalls-%d" % os.getpid()
    with connect(s.addr) as c:
        exchange(c, b"use %s\r\n" % o.tube.encode(), 1)
        got = exchange(c, b"stats-group %s\r\n" % group, 1)
        if got != b"NOT_FOUND\r\n":  # (the reference: BAD_FORMAT, its "stats" prefix)
            return None
    _fill(s, o, n, progress, "fill a group", tags=b" grp:" + group)
    return group


def case_group(s, o, n, progress, fill_s):
    group = _group_fill(s, o, n, progress)
    if group is None:
        return [], 0.0, {"skipped": "no stats-group"}
    probe = Probe(s.addr)
    try:
        took = _timed(s, o, probe, b"stats-group %s\r\n" % group,
                      lambda got: b"\nready: %d\n" % n in got, "stats-group", replies=2)
        return _stopped(probe, took, {})
    finally:
        probe.kill()


def case_groupdel(s, o, n, progress, fill_s):
    """The group's N members deleted by pipelined delete-batches of 1,000
    (ids 1..N: the fill's, on a fresh server)."""
    if _group_fill(s, o, n, progress) is None:
        return [], 0.0, {"skipped": "no delete-batch"}
    lines = [b"delete-batch " + b" ".join(b"%d" % i for i in range(k, min(k + 1000, n + 1)))
             + b"\r\n" for k in range(1, n + 1, 1000)]
    probe = Probe(s.addr)
    try:
        took = _timed(s, o, probe, b"".join(lines),
                      lambda got: got.count(b"DELETED_BATCH") == len(lines), "delete-batch",
                      replies=len(lines))
        return _stopped(probe, took, {})
    finally:
        probe.kill()


RUN = {"fill": case_fill, "kick": case_kick, "due": case_due, "close": case_close,
       "flush": case_flush, "release": case_release, "group": case_group,
       "groupdel": case_groupdel}


def stalls(servers, sizes: list[int], cases: list[str], o: Options, progress=None,
           on_row=None) -> list[dict]:
    """A row per (jobs, case, server): the probe's waits and the work's time.
    Every case starts on a fresh server; the order of servers alternates.
    on_row(row) is called as each row is measured (a long run keeps what it
    measured if a later case fails)."""
    rows = []
    for n in sizes:
        fill_s: dict = {}
        for k, case in enumerate(cases):
            for mk in alternate(servers, k):
                with mk() as s:
                    if progress:
                        progress.prefix = f"{s.name} {case} {n:,} "
                    steal0, total0 = cpu_ticks()
                    rtt, took, extra = RUN[case](s, o, n, progress, fill_s.get(s.name))
                    steal1, total1 = cpu_ticks()
                    extra["steal_pct"] = (100 * (steal1 - steal0) / (total1 - total0)
                                          if total1 > total0 else None)
                    if case == "fill":
                        fill_s[s.name] = took
                    rows.append({"server": s.name, "case": case, "jobs": n, "work_s": took}
                                | _summary(rtt) | extra)
                    if on_row:
                        on_row(rows[-1])
                if progress:
                    progress.clear()
    return rows

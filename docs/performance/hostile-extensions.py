#!/usr/bin/env python3
"""Re-measure the hostile pass's figures on two source trees, side by side.

A hostile pass over the extensions and --bodies-on-disk found structures a
client could make the server hold without bound, and a peek-reserved that
walked every reservation; commit 5d401f1 fixed them, and 8b5061f added a
CRC-32 check of every body read back from disk. This script runs the same
workloads, with the same sizes as the pass's report, against a server run
from each of two trees (BEFORE and AFTER), in one run, and prints one table.

    python3 hostile-extensions.py BEFORE_TREE AFTER_TREE [--python PY]
        [--only 1,2,3,4,5,6,6a,6p,6bc] [--reps 3] [--aa] [--tmpdir /var/tmp]
        [--json FILE]

A tree is a checkout of pybeanstalkd; its server is started as
`PYTHONPATH=TREE/src PY -m pybeanstalkd -l 127.0.0.1 -p PORT FLAGS`, a fresh
server (and a fresh binlog directory under --tmpdir) for every measurement.
Only the standard library is used; Linux only (/proc).

What is measured (the server's, from /proc/PID):
  RSS   VmRSS of /proc/PID/status; "settled" means no change of more than
        256 KiB over 2 s (polled every 0.25 s, 60 s at most).
  CPU   utime+stime of /proc/PID/stat (clock ticks, 10 ms here), and beside
        it the run time of /proc/PID/task/*/schedstat (ns), for figures
        smaller than a tick. CPU figures run --reps times (fresh servers,
        the trees' order alternating) and are given as min-max.

Figures (numbers as in the report):
  1  reserve-batch past the cap: -b DIR --bodies-on-disk --extensions
     -z 262144 --max-memory 64M; 1,600 jobs of 262,144 bytes; then 4
     clients each send `reserve-batch 400` and read nothing: RSS growth
     once settled, stats body-bytes-in-ram, jobs reserved. The same with 4
     clients pipelining 400 `reserve` each.
  2  con: keys and aft: names outliving their jobs: --extensions; 200,000
     put+delete cycles, each put `put 0 0 60 1 con:KEY` (aft:KEY) with a
     unique 150-byte KEY; sent 500 puts in one write, their replies read,
     then their 500 deletes in one write. RSS growth, bytes a cycle (over
     all 200,000, and over the second 100,000: the slope, less the
     put-line caches' fixed fill). Then under --max-memory 16M: puts
     answered INSERTED, and the highest RSS.
  3  put-line caches: --extensions; 8,192 distinct put lines of 21,013
     bytes (+ CRLF: the longest line the server takes with --extensions),
     each `put 0 0 60 1` and 108 grp: words with distinct names (107 of
     190 bytes), each put then deleted (8 puts a write, then their
     deletes). RSS growth. (grp: only: a con: word would add figure 2's
     leak to BEFORE's.)
  4  per-tube duplicate counters: --extensions; for 50,000 tubes tN: `use
     tN`, `put 0 0 60 1 idp:k`, the same put (INSERTED <id> READY),
     `delete <id>`, `use default` (200 tubes, 1,000 commands, a write; ids
     predicted and every reply checked). RSS growth a tube.
  5  peek-reserved: --extensions; 200,000 jobs put in tube `other` and
     reserved by one worker (reserve-batch 1000, replies read), 1 job in
     `mine` reserved by another; a third client does `use mine` then 100
     `peek-reserved`, one at a time: server CPU a call. Then 100 more with
     a fourth client doing put+delete round trips meanwhile: its worst
     round trip that overlapped the peeks (and in a quiet 0.5 s before).
  6  the body check: -b DIR --bodies-on-disk, bodies of 4,096 bytes.
     (a) 100,000 jobs put (64 a write), then one worker reserves and
     deletes them all, unpipelined (reserve, its reply, delete, its reply)
     or 64 reserves a write then their 64 deletes: server CPU a
     reserve+delete (and a put, from the fill).
     (a') the same work with both trees' servers running at once, the
     work alternating between them in 20 chunks of 5,000 jobs (the puts,
     then the reserve+deletes), each chunk's CPU taken: the difference
     the CRC makes is a few µs, less than what the rest of a shared
     machine moves a lone server's figure from run to run; interleaved,
     both servers see the same load. With --aa, a control: BEFORE against
     itself, the same way.
     (b) 200,000 jobs put: RSS growth a job, settled.
     (c) that directory: kill -9, restart, time from the start of the
     process to the first reply to `stats` (and the CPU it used by then),
     --reps times; the same start on an empty directory; and AFTER's
     start on BEFORE's directory (records without a CRC: AFTER takes
     each body's from its bytes). The page cache is warm (just written).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = 1 << 20  # bytes in a MiB

# --------------------------------------------------------------------------
# /proc


def rss(pid: int) -> int:
    """VmRSS in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_ticks(pid: int) -> int:
    """utime+stime of the process (all its threads), in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # (fields 14 and 15 of stat)


def sched_ns(pid: int) -> int:
    """Run time of the process's live threads, ns (schedstat)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            pass
    return total


class Cpu:
    """The server's CPU between start() and stop(): ticks and ns."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.t0 = cpu_ticks(pid)
        self.n0 = sched_ns(pid)
        self.w0 = time.monotonic()

    def stop(self) -> dict:
        return {"ticks": cpu_ticks(self.pid) - self.t0,
                "ms": (cpu_ticks(self.pid) - self.t0) * 1000 / CLK_TCK,
                "sched_ms": (sched_ns(self.pid) - self.n0) / 1e6,
                "wall_s": time.monotonic() - self.w0}


# --------------------------------------------------------------------------
# the server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


COMMANDS: list[str] = []  # every server command line run, for the record


class Server:
    """One server from a tree; started() returns once `stats` is answered."""

    def __init__(self, py: str, tree: str, flags: list[str], log_dir: str) -> None:
        self.port = free_port()
        self.tree = tree
        cmd = [py, "-m", "pybeanstalkd", "-l", "127.0.0.1", "-p", str(self.port)] + flags
        shown = ["DIR" if i and cmd[i - 1] == "-b" else "PORT" if x == str(self.port) else x
                 for i, x in enumerate(cmd)]
        line = f"PYTHONPATH={tree}/src " + " ".join(shown)
        if line not in COMMANDS:
            COMMANDS.append(line)
        self.log_path = os.path.join(log_dir, f"server-{self.port}.log")
        self.log = open(self.log_path, "ab")
        env = dict(os.environ, PYTHONPATH=os.path.join(tree, "src"))
        t0 = time.monotonic()
        self.p = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
        self.pid = self.p.pid
        self.ready_s = self._first_stats(t0)
        self.ready_cpu_ms = cpu_ticks(self.pid) * 1000 / CLK_TCK

    def _first_stats(self, t0: float) -> float:
        """Seconds from the start of the process to the first reply to stats."""
        while True:
            if self.p.poll() is not None:
                self.log.flush()
                with open(self.log_path, "rb") as f:
                    tail = f.read()[-2000:].decode(errors="replace")
                raise RuntimeError(f"server exited {self.p.returncode}: {tail}")
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=600)
            except OSError:
                time.sleep(0.005)
                continue
            try:
                s.sendall(b"stats\r\n")
                data = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                    if data.startswith(b"OK "):
                        n = int(data[3:data.index(b"\r\n")])
                        if len(data) >= data.index(b"\r\n") + 2 + n + 2:
                            return time.monotonic() - t0
            except OSError:
                pass
            finally:
                s.close()
            time.sleep(0.005)

    def rss(self) -> int:
        return rss(self.pid)

    def settle(self, quiet: float = 2.0, most: float = 60.0) -> int:
        """RSS once it moved less than 256 KiB over `quiet` seconds."""
        samples: list[int] = []
        end = time.monotonic() + most
        n = int(quiet / 0.25)
        while time.monotonic() < end:
            samples.append(self.rss())
            last = samples[-n - 1:]
            if len(last) > n and max(last) - min(last) < 256 << 10:
                break
            time.sleep(0.25)
        return samples[-1]

    def kill9(self) -> None:
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()
        self.log.close()

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


# --------------------------------------------------------------------------
# a client


class Client:
    """A blocking connection that reads beanstalkd replies."""

    def __init__(self, port: int) -> None:
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.pos = 0

    def send(self, data: bytes) -> None:
        self.s.sendall(data)

    def _more(self) -> None:
        if self.pos > 1 << 20 and self.pos > len(self.buf) // 2:
            del self.buf[:self.pos]
            self.pos = 0
        chunk = self.s.recv(1 << 20)
        if not chunk:
            raise EOFError("server closed the connection")
        self.buf += chunk

    def line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n", self.pos)
            if i >= 0:
                out = bytes(self.buf[self.pos:i])
                self.pos = i + 2
                return out
            self._more()

    def exact(self, n: int) -> bytes:
        while len(self.buf) - self.pos < n:
            self._more()
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out

    def reply(self) -> tuple[bytes, bytes | None]:
        """A reply's line, and its body if it has one."""
        line = self.line()
        if line.startswith((b"RESERVED ", b"FOUND ")):
            size = int(line.split()[2])
            return line, self.exact(size + 2)[:-2]
        if line.startswith(b"OK "):
            return line, self.exact(int(line[3:]) + 2)[:-2]
        return line, None

    def lines(self, n: int) -> list[bytes]:
        """n replies that are one line each."""
        return [self.line() for _ in range(n)]

    def batch(self) -> list[int]:
        """A RESERVED_BATCH reply: the ids it reserved."""
        line = self.line()
        if not line.startswith(b"RESERVED_BATCH "):
            raise RuntimeError(f"not a batch: {line!r}")
        ids = []
        for _ in range(int(line.split()[1])):
            head, _body = self.reply()
            ids.append(int(head.split()[1]))
        return ids

    def stats(self) -> dict[bytes, bytes]:
        self.send(b"stats\r\n")
        _line, body = self.reply()
        out = {}
        for row in (body or b"").splitlines()[1:]:
            k, _, v = row.partition(b": ")
            out[k] = v
        return out

    def close(self) -> None:
        self.s.close()


def fill(c: Client, n: int, body: bytes, per_write: int, head: bytes = b"put 0 0 60 %d") -> dict:
    """Put n jobs with the given body, per_write puts a write; their replies."""
    one = (head % len(body)) + b"\r\n" + body + b"\r\n"
    inserted = 0
    other: dict[str, int] = {}
    done = 0
    while done < n:
        k = min(per_write, n - done)
        c.send(one * k)
        for r in c.lines(k):
            if r.startswith(b"INSERTED "):
                inserted += 1
            else:
                key = r.decode(errors="replace")
                other[key] = other.get(key, 0) + 1
        done += k
    return {"inserted": inserted, "other": other}


def put_delete(c: Client, put_lines, per_write: int, on_chunk=None) -> dict:
    """For each put line (a body of 1 byte follows): put, then delete; the
    puts of a chunk in one write, their replies read, then their deletes in
    one write and their replies read."""
    inserted = deleted = cycles = 0
    other: dict[str, int] = {}
    chunk: list[bytes] = []

    def run() -> None:
        nonlocal inserted, deleted, cycles
        c.send(b"".join(line + b"\r\nx\r\n" for line in chunk))
        ids = []
        for r in c.lines(len(chunk)):
            if r.startswith(b"INSERTED "):
                inserted += 1
                ids.append(int(r.split()[1]))
            else:
                key = r.decode(errors="replace")[:40]
                other[key] = other.get(key, 0) + 1
        if ids:
            c.send(b"".join(b"delete %d\r\n" % i for i in ids))
            deleted += sum(r == b"DELETED" for r in c.lines(len(ids)))
        cycles += len(chunk)
        chunk.clear()
        if on_chunk is not None:
            on_chunk(cycles)

    for line in put_lines:
        chunk.append(line)
        if len(chunk) == per_write:
            run()
    if chunk:
        run()
    return {"cycles": cycles, "inserted": inserted, "deleted": deleted, "other": other}


def drain(c: Client, n: int, pipelined: bool, body: bytes) -> None:
    """Reserve and delete n jobs (each body checked): one command at a time,
    or 64 reserves in one write, then their 64 deletes in one write."""
    done = 0
    if pipelined:
        while done < n:
            k = min(64, n - done)
            c.send(b"reserve\r\n" * k)
            ids = []
            for _ in range(k):
                head, got = c.reply()
                if got != body:
                    raise RuntimeError(f"reserve: {head!r}")
                ids.append(int(head.split()[1]))
            c.send(b"".join(b"delete %d\r\n" % i for i in ids))
            if c.lines(k) != [b"DELETED"] * k:
                raise RuntimeError("a delete failed")
            done += k
    else:
        for _ in range(n):
            c.send(b"reserve\r\n")
            head, got = c.reply()
            if got != body:
                raise RuntimeError(f"reserve: {head!r}")
            c.send(b"delete %s\r\n" % head.split()[1])
            if c.line() != b"DELETED":
                raise RuntimeError("a delete failed")


# --------------------------------------------------------------------------
# the figures: each runs one measurement on one tree and returns a dict


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.py = args.python
        self.tmp = args.tmpdir
        self.logs = tempfile.mkdtemp(prefix="hostile-logs-", dir=self.tmp)

    def server(self, tree: str, flags: list[str]) -> Server:
        return Server(self.py, tree, flags, self.logs)

    def bindir(self) -> str:
        return tempfile.mkdtemp(prefix="hostile-binlog-", dir=self.tmp)

    # -- 1 ----------------------------------------------------------------

    def fig1(self, tree: str, batch: bool) -> dict:
        d = self.bindir()
        srv = self.server(tree, ["-b", d, "--bodies-on-disk", "--extensions", "-z", "262144",
                                 "--max-memory", "64M"])
        try:
            c = Client(srv.port)
            f = fill(c, 1600, b"b" * 262144, 4)
            rss0 = srv.settle()
            st0 = c.stats()
            hogs = [Client(srv.port) for _ in range(4)]
            for h in hogs:
                h.send(b"reserve-batch 400\r\n" if batch else b"reserve\r\n" * 400)
            rss1 = srv.settle()
            st1 = c.stats()
            out = {"fill": f, "rss0": rss0, "rss1": rss1, "growth": rss1 - rss0,
                   "ram0": int(st0[b"body-bytes-in-ram"]), "ram1": int(st1[b"body-bytes-in-ram"]),
                   "reserved": int(st1[b"current-jobs-reserved"])}
            for h in hogs:
                h.close()
            c.close()
            return out
        finally:
            srv.stop()
            shutil.rmtree(d, ignore_errors=True)

    # -- 2 ----------------------------------------------------------------

    def fig2(self, tree: str, tag: bytes, cap: bool) -> dict:
        srv = self.server(tree, ["--extensions"] + (["--max-memory", "16M"] if cap else []))
        try:
            c = Client(srv.port)
            c.stats()
            rss0 = srv.rss()
            marks = {"max": rss0}

            def on_chunk(n: int) -> None:
                if n % 5000 == 0:
                    marks["max"] = max(marks["max"], srv.rss())
                if n == 100_000:
                    marks["mid"] = srv.rss()

            lines = (b"put 0 0 60 1 %s:%s" % (tag, (b"k%d-" % i).ljust(150, b"x"))
                     for i in range(200_000))
            r = put_delete(c, lines, 500, on_chunk)
            rss1 = srv.settle()
            st = c.stats()
            r.update(rss0=rss0, rss1=rss1, growth=rss1 - rss0, per_cycle=(rss1 - rss0) / 200_000,
                     slope=(rss1 - marks["mid"]) / 100_000, max_rss=max(marks["max"], rss1),
                     jobs_left=int(st[b"current-jobs-ready"]))
            c.close()
            return r
        finally:
            srv.stop()

    # -- 3 ----------------------------------------------------------------

    def fig3(self, tree: str) -> dict:
        srv = self.server(tree, ["--extensions"])
        try:
            c = Client(srv.port)
            c.stats()
            rss0 = srv.rss()

            def line(i: int) -> bytes:
                words = [b"grp:" + (b"%05d.%03d." % (i, w)).ljust(190, b"z") for w in range(107)]
                words.append(b"grp:" + (b"%05d.last." % i).ljust(131, b"z"))
                out = b"put 0 0 60 1 " + b" ".join(words)
                assert len(out) == 21013, len(out)
                return out

            r = put_delete(c, (line(i) for i in range(8192)), 8)
            rss1 = srv.settle()
            r.update(rss0=rss0, rss1=rss1, growth=rss1 - rss0, line_bytes=21013 + 2)
            c.close()
            return r
        finally:
            srv.stop()

    # -- 4 ----------------------------------------------------------------

    def fig4(self, tree: str) -> dict:
        srv = self.server(tree, ["--extensions"])
        try:
            c = Client(srv.port)
            c.stats()
            rss0 = srv.rss()
            jid = 1
            tubes = 50_000
            per = 200
            for start in range(0, tubes, per):
                cmds = []
                want = []
                for t in range(start, min(start + per, tubes)):
                    cmds.append(b"use t%d\r\nput 0 0 60 1 idp:k\r\nx\r\nput 0 0 60 1 idp:k\r\nx\r\n"
                                b"delete %d\r\nuse default\r\n" % (t, jid))
                    want += [b"USING t%d" % t, b"INSERTED %d" % jid, b"INSERTED %d READY" % jid,
                             b"DELETED", b"USING default"]
                    jid += 1
                c.send(b"".join(cmds))
                got = c.lines(len(want))
                if got != want:
                    bad = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
                    raise RuntimeError(f"fig4: reply {got[bad]!r}, wanted {want[bad]!r}")
            rss1 = srv.settle()
            st = c.stats()
            out = {"tubes": tubes, "rss0": rss0, "rss1": rss1, "growth": rss1 - rss0,
                   "per_tube": (rss1 - rss0) / tubes, "current_tubes": int(st[b"current-tubes"])}
            c.close()
            return out
        finally:
            srv.stop()

    # -- 5 ----------------------------------------------------------------

    def fig5(self, tree: str) -> dict:
        srv = self.server(tree, ["--extensions"])
        try:
            p = Client(srv.port)
            p.send(b"use other\r\n")
            p.line()
            f = fill(p, 200_000, b"x", 1000)
            assert f["inserted"] == 200_000, f
            p.send(b"use mine\r\nput 0 0 60 1\r\nx\r\n")
            p.line()
            mine = int(p.line().split()[1])
            w1 = Client(srv.port)
            w1.send(b"watch other\r\nignore default\r\n")
            w1.lines(2)
            got = 0
            while got < 200_000:
                w1.send(b"reserve-batch 1000\r\n")
                n = len(w1.batch())
                if not n:
                    raise RuntimeError("fig5: an empty batch before 200,000")
                got += n
            w2 = Client(srv.port)
            w2.send(b"watch mine\r\nignore default\r\nreserve\r\n")
            w2.lines(2)
            head, _ = w2.reply()
            assert head.startswith(b"RESERVED %d " % mine), head
            q = Client(srv.port)
            q.send(b"use mine\r\n")
            q.line()
            want = b"FOUND %d 1" % mine

            def peeks() -> tuple[float, float]:
                t0 = time.monotonic()
                for _ in range(100):
                    q.send(b"peek-reserved\r\n")
                    head, body = q.reply()
                    if head != want:
                        raise RuntimeError(f"fig5: {head!r}")
                return t0, time.monotonic()

            cpu = Cpu(srv.pid)
            peeks()
            a = cpu.stop()
            # ... again, with a client doing put+delete round trips meanwhile
            probe = Client(srv.port)
            probe.send(b"use probe\r\n")
            probe.line()
            times: list[tuple[float, float]] = []
            stop = threading.Event()

            def run_probe() -> None:
                while not stop.is_set():
                    t0 = time.monotonic()
                    probe.send(b"put 0 0 60 1\r\nx\r\n")
                    r = probe.line()
                    probe.send(b"delete %s\r\n" % r.split()[1])
                    probe.line()
                    times.append((t0, time.monotonic()))

            th = threading.Thread(target=run_probe)
            th.start()
            time.sleep(0.5)
            quiet = [b - a_ for a_, b in times]
            t0, t1 = peeks()
            time.sleep(0.05)
            stop.set()
            th.join()
            during = [b - a_ for a_, b in times if b >= t0 and a_ <= t1]
            out = {"cpu": a, "ms_per_call": a["ms"] / 100, "sched_ms_per_call": a["sched_ms"] / 100,
                   "wall_ms_per_call": a["wall_s"] * 10,
                   "probe_max_ms": max(during) * 1000 if during else None,
                   "probe_n": len(during),
                   "probe_p50_ms": statistics.median(during) * 1000 if during else None,
                   "quiet_max_ms": max(quiet) * 1000 if quiet else None,
                   "peeks_wall_ms": (t1 - t0) * 1000}
            for x in (p, w1, w2, q, probe):
                x.close()
            return out
        finally:
            srv.stop()

    # -- 6 ----------------------------------------------------------------

    BODY = bytes(range(256)) * 16  # 4,096 bytes

    def fig6a(self, tree: str, pipelined: bool) -> dict:
        d = self.bindir()
        srv = self.server(tree, ["-b", d, "--bodies-on-disk"])
        try:
            c = Client(srv.port)
            n = 100_000
            cpu = Cpu(srv.pid)
            f = fill(c, n, self.BODY, 64)
            put = cpu.stop()
            assert f["inserted"] == n, f
            srv.settle(quiet=1.0)
            st = c.stats()
            cpu = Cpu(srv.pid)
            drain(c, n, pipelined, self.BODY)
            r = cpu.stop()
            c.close()
            return {"us_per_op": r["ms"] * 1000 / n, "sched_us_per_op": r["sched_ms"] * 1000 / n,
                    "wall_s": r["wall_s"], "put_us": put["ms"] * 1000 / n,
                    "put_sched_us": put["sched_ms"] * 1000 / n,
                    "on_disk": int(st[b"body-bytes-on-disk"]), "in_ram": int(st[b"body-bytes-in-ram"])}
        finally:
            srv.stop()
            shutil.rmtree(d, ignore_errors=True)

    def fig6p(self, trees: dict[str, str], pipelined: bool, rep: int,
              chunks: int = 20, per: int = 5000) -> dict[str, dict]:
        """6a interleaved: both trees' servers run at once, and the work
        alternates between them in chunks of `per` jobs (puts, then
        reserve+delete), so that both see the same load from the rest of
        the machine; CPU is taken per chunk (schedstat) and in total."""
        sides = ("before", "after")
        dirs = {x: self.bindir() for x in sides}
        srvs: dict[str, Server] = {}
        try:
            for x in sides:
                srvs[x] = self.server(trees[x], ["-b", dirs[x], "--bodies-on-disk"])
            cs = {x: Client(srvs[x].port) for x in sides}
            put = {x: [] for x in sides}
            ops = {x: [] for x in sides}
            ticks = {x: 0 for x in sides}
            for k in range(chunks):
                for x in (sides if (k + rep) % 2 == 0 else sides[::-1]):
                    cpu = Cpu(srvs[x].pid)
                    f = fill(cs[x], per, self.BODY, 64)
                    assert f["inserted"] == per, f
                    put[x].append(cpu.stop()["sched_ms"])
            for x in sides:
                srvs[x].settle(quiet=1.0)
            for k in range(chunks):
                for x in (sides if (k + rep) % 2 == 0 else sides[::-1]):
                    cpu = Cpu(srvs[x].pid)
                    drain(cs[x], per, pipelined, self.BODY)
                    r = cpu.stop()
                    ops[x].append(r["sched_ms"])
                    ticks[x] += r["ticks"]
            n = chunks * per
            out = {}
            for x in sides:
                out[x] = {"us_per_op": ticks[x] * 1e6 / CLK_TCK / n,
                          "sched_us_per_op": sum(ops[x]) * 1000 / n,
                          "put_sched_us": sum(put[x]) * 1000 / n}
            ratios = [a / b for a, b in zip(ops["after"], ops["before"])]
            out["after"]["chunk_ratios"] = ratios
            out["after"]["chunk_ratio_median"] = statistics.median(ratios)
            out["after"]["extra_us"] = (sum(ops["after"]) - sum(ops["before"])) * 1000 / n
            out["after"]["put_extra_us"] = (sum(put["after"]) - sum(put["before"])) * 1000 / n
            for c in cs.values():
                c.close()
            return out
        finally:
            for srv in srvs.values():
                srv.stop()
            for d in dirs.values():
                shutil.rmtree(d, ignore_errors=True)

    def fig6b(self, tree: str) -> tuple[dict, str]:
        """RSS a job; leaves the directory (returned) for fig6c."""
        d = self.bindir()
        srv = self.server(tree, ["-b", d, "--bodies-on-disk"])
        c = Client(srv.port)
        c.stats()
        rss0 = srv.rss()
        n = 200_000
        f = fill(c, n, self.BODY, 64)
        assert f["inserted"] == n, f
        rss1 = srv.settle()
        st = c.stats()
        c.close()
        srv.kill9()
        size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
        return ({"rss0": rss0, "rss1": rss1, "per_job": (rss1 - rss0) / n,
                 "in_ram": int(st[b"body-bytes-in-ram"]), "on_disk": int(st[b"body-bytes-on-disk"]),
                 "dir_bytes": size}, d)

    def start_on(self, tree: str, d: str) -> dict:
        """Start a server on directory d: seconds to its first stats reply,
        its CPU by then, its RSS and the jobs it recovered; then kill -9."""
        srv = self.server(tree, ["-b", d, "--bodies-on-disk"])
        c = Client(srv.port)
        st = c.stats()
        out = {"ready_s": srv.ready_s, "cpu_ms": srv.ready_cpu_ms, "rss": srv.rss(),
               "jobs": int(st[b"current-jobs-ready"])}
        c.close()
        srv.kill9()
        return out


# --------------------------------------------------------------------------
# the run and the table


def rng(xs: list[float], fmt: str) -> str:
    lo, hi = min(xs), max(xs)
    if fmt % lo == fmt % hi:
        return fmt % lo
    return (fmt % lo) + "–" + (fmt % hi)


def ratio(b: float | None, a: float | None) -> str:
    if not b or a is None:
        return "–"
    r = a / b
    return "%.3g×" % r



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", help="the BEFORE tree (its src/ holds pybeanstalkd)")
    ap.add_argument("after", help="the AFTER tree")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter the servers run on (default: this one)")
    ap.add_argument("--only", default="1,2,3,4,5,6",
                    help="figures to run, e.g. 1,6 (6a, 6bc: parts of 6)")
    ap.add_argument("--reps", type=int, default=3, help="runs of each CPU figure (default 3)")
    ap.add_argument("--tmpdir", default="/var/tmp", help="where binlog directories go")
    ap.add_argument("--json", help="write every raw figure here")
    ap.add_argument("--aa", action="store_true",
                    help="6a': also run BEFORE against itself, interleaved the same way (a "
                         "control: what the method reads when nothing changed)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if "6" in only:
        only |= {"6a", "6bc"}
    if "6a" in only:
        only |= {"6p"}
    b = Bench(args)
    trees = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    R: dict = {"before": {}, "after": {}}

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def both(name: str, fn, rep: int = 0) -> None:
        order = ("before", "after") if rep % 2 == 0 else ("after", "before")
        for side in order:
            log(f"{name} {side}")
            r = fn(trees[side])
            R[side].setdefault(name, []).append(r)
            log(f"  {json.dumps(r)}")

    t_start = time.monotonic()
    if "1" in only:
        both("1 reserve-batch", lambda t: b.fig1(t, True))
        both("1 reserve", lambda t: b.fig1(t, False), 1)
    if "2" in only:
        both("2 con", lambda t: b.fig2(t, b"con", False))
        both("2 aft", lambda t: b.fig2(t, b"aft", False), 1)
        both("2 con 16M", lambda t: b.fig2(t, b"con", True))
        both("2 aft 16M", lambda t: b.fig2(t, b"aft", True), 1)
    if "3" in only:
        both("3 lines", b.fig3)
    if "4" in only:
        both("4 tubes", b.fig4)
    if "5" in only:
        for rep in range(args.reps):
            both("5 peek-reserved", b.fig5, rep)
    if "6a" in only:
        for rep in range(args.reps):
            both("6a unpipelined", lambda t: b.fig6a(t, False), rep)
            both("6a pipelined", lambda t: b.fig6a(t, True), rep + 1)
    if "6p" in only:
        for rep in range(args.reps):
            for mode, pipelined in (("unpipelined", False), ("pipelined", True)):
                name = f"6p {mode}"
                log(f"{name} (both at once)")
                r = b.fig6p(trees, pipelined, rep)
                for side in ("before", "after"):
                    R[side].setdefault(name, []).append(r[side])
                log(f"  {json.dumps(r)}")
                if args.aa:
                    log(f"{name}: control, BEFORE against itself")
                    r = b.fig6p({"before": trees["before"], "after": trees["before"]}, pipelined,
                                rep)
                    R["after"].setdefault(name + " control", []).append(r["after"])
                    log(f"  {json.dumps(r)}")
    if "6bc" in only:
        dirs = {}
        for side in ("before", "after"):
            log(f"6b {side}")
            r, dirs[side] = b.fig6b(trees[side])
            R[side]["6b"] = [r]
            log(f"  {json.dumps(r)}")
        for rep in range(args.reps):
            for side in (("before", "after") if rep % 2 == 0 else ("after", "before")):
                r = b.start_on(trees[side], dirs[side])
                R[side].setdefault("6c own", []).append(r)
                log(f"6c {side} on its own directory: {json.dumps(r)}")
                empty = b.bindir()
                r = b.start_on(trees[side], empty)
                shutil.rmtree(empty, ignore_errors=True)
                R[side].setdefault("6c empty", []).append(r)
                log(f"6c {side} on an empty directory: {json.dumps(r)}")
            r = b.start_on(trees["after"], dirs["before"])
            R["after"].setdefault("6c before's dir", []).append(r)
            log(f"6c after on before's directory: {json.dumps(r)}")
        for d in dirs.values():
            shutil.rmtree(d, ignore_errors=True)
    elapsed = time.monotonic() - t_start

    # -- the table --------------------------------------------------------
    rows: list[tuple[str, str, str, str, str]] = []

    def vals(side: str, name: str, key: str, scale: float = 1.0) -> list[float]:
        return [r[key] * scale for r in R[side].get(name, []) if r.get(key) is not None]

    def row(fig: str, what: str, name: str, key: str, fmt: str, scale: float = 1.0,
            zero: str | None = None) -> None:
        """zero: what to show for 0 (a figure under the measure's resolution)."""
        bs, as_ = vals("before", name, key, scale), vals("after", name, key, scale)
        if not bs and not as_:
            return

        def show(xs: list[float]) -> str:
            if not xs:
                return "–"
            if zero is not None and min(xs) == 0:
                return zero if max(xs) == 0 else zero + "–" + fmt % max(xs)
            return rng(xs, fmt)
        mb = statistics.median(bs) if bs else None
        ma = statistics.median(as_) if as_ else None
        rows.append((fig, what, show(bs), show(as_),
                     "–" if zero is not None and 0 in (mb, ma) else ratio(mb, ma)))

    M = 1 / PAGE
    row("1", "reserve-batch 400 ×4, not read: RSS growth", "1 reserve-batch", "growth",
        "%.1f MiB", M)
    row("1", "… stats body-bytes-in-ram then", "1 reserve-batch", "ram1", "%.0f")
    row("1", "… jobs reserved", "1 reserve-batch", "reserved", "%.0f")
    row("1", "400 pipelined reserve ×4, not read: RSS growth", "1 reserve", "growth",
        "%.1f MiB", M)
    row("1", "… stats body-bytes-in-ram then", "1 reserve", "ram1", "%.0f")
    row("1", "… jobs reserved", "1 reserve", "reserved", "%.0f")
    for tag in ("con", "aft"):
        row("2", f"{tag}: 200,000 put+delete: RSS growth", f"2 {tag}", "growth", "%.1f MiB", M)
        row("2", "… bytes a cycle, over all 200,000", f"2 {tag}", "per_cycle", "%.0f")
        row("2", "… bytes a cycle, over the second 100,000", f"2 {tag}", "slope", "%.0f")
        row("2", "… --max-memory 16M: puts INSERTED (of 200,000)", f"2 {tag} 16M", "inserted",
            "%.0f")
        row("2", "… --max-memory 16M: RSS growth", f"2 {tag} 16M", "growth", "%.1f MiB", M)
        row("2", "… --max-memory 16M: highest RSS", f"2 {tag} 16M", "max_rss", "%.1f MiB", M)
    row("3", "8,192 put lines of 21,015 B, put+delete: RSS growth", "3 lines", "growth",
        "%.1f MiB", M)
    row("4", "50,000 tubes with a duplicate put: RSS growth", "4 tubes", "growth", "%.1f MiB", M)
    row("4", "… bytes a tube", "4 tubes", "per_tube", "%.0f")
    row("5", "peek-reserved, 200,000 reserved: CPU ms a call (ticks)", "5 peek-reserved",
        "ms_per_call", "%.2f", zero="<0.10")
    row("5", "… CPU ms a call (schedstat)", "5 peek-reserved", "sched_ms_per_call", "%.3f")
    row("5", "… wall ms a call", "5 peek-reserved", "wall_ms_per_call", "%.3f")
    row("5", "… probe put+delete: worst round trip during 100 peeks, ms", "5 peek-reserved",
        "probe_max_ms", "%.1f")
    row("5", "… probe put+delete: median round trip during 100 peeks, ms", "5 peek-reserved",
        "probe_p50_ms", "%.2f")
    row("5", "… probe round trips during the 100 peeks", "5 peek-reserved", "probe_n", "%.0f")
    row("5", "… probe worst round trip in a quiet 0.5 s, ms", "5 peek-reserved", "quiet_max_ms",
        "%.1f")
    row("6a", "reserve+delete unpipelined: CPU µs each (ticks)", "6a unpipelined", "us_per_op",
        "%.1f")
    row("6a", "… (schedstat)", "6a unpipelined", "sched_us_per_op", "%.1f")
    row("6a", "reserve+delete 64 a write: CPU µs each (ticks)", "6a pipelined", "us_per_op",
        "%.1f")
    row("6a", "… (schedstat)", "6a pipelined", "sched_us_per_op", "%.1f")
    row("6a", "put, 64 a write (the fills): CPU µs each (ticks)", "6a pipelined", "put_us",
        "%.1f")
    row("6a", "… (schedstat)", "6a pipelined", "put_sched_us", "%.1f")
    for mode in ("unpipelined", "pipelined"):
        name = f"6p {mode}"
        row("6a'", f"interleaved, {mode}: CPU µs a reserve+delete (ticks)", name, "us_per_op",
            "%.1f")
        row("6a'", "… (schedstat)", name, "sched_us_per_op", "%.1f")
        row("6a'", "… AFTER less BEFORE, µs (schedstat)", name, "extra_us", "%+.1f")
        row("6a'", "… AFTER/BEFORE of each chunk's CPU: median", name, "chunk_ratio_median", "%.3f")
        row("6a'", f"… the fills: CPU µs a put (schedstat)", name, "put_sched_us", "%.1f")
        row("6a'", "… AFTER less BEFORE, µs a put", name, "put_extra_us", "%+.1f")
        row("6a'", "… control, BEFORE less BEFORE, µs a reserve+delete", name + " control",
            "extra_us", "%+.1f")
        row("6a'", "… control: chunk ratio median", name + " control", "chunk_ratio_median",
            "%.3f")
        row("6a'", "… control, BEFORE less BEFORE, µs a put", name + " control",
            "put_extra_us", "%+.1f")
    for side in ("before", "after"):
        for r in R[side].get("6b", []):
            r["growth"] = r["rss1"] - r["rss0"]
    row("6b", "200,000 jobs of 4 KiB: RSS growth", "6b", "growth", "%.1f MiB", M)
    row("6b", "… RSS bytes a job", "6b", "per_job", "%.0f")
    row("6b", "… stats body-bytes-in-ram", "6b", "in_ram", "%.0f")
    row("6c", "restart on that directory (kill -9): s to the first stats reply", "6c own",
        "ready_s", "%.2f")
    row("6c", "… its CPU by then, s", "6c own", "cpu_ms", "%.2f", 1e-3)
    row("6c", "… its RSS then", "6c own", "rss", "%.0f MiB", M)
    row("6c", "… jobs recovered", "6c own", "jobs", "%.0f")
    row("6c", "start on an empty directory: s to the first reply", "6c empty", "ready_s", "%.2f")
    row("6c", "… its CPU by then, s", "6c empty", "cpu_ms", "%.2f", 1e-3)
    row("6c", "AFTER on BEFORE's directory (no CRCs in it): s", "6c before's dir", "ready_s",
        "%.2f")
    row("6c", "… its CPU by then, s", "6c before's dir", "cpu_ms", "%.2f", 1e-3)

    w = [max(len(r[i]) for r in rows + [("fig", "measure", "BEFORE", "AFTER", "AFTER/BEFORE")])
         for i in range(5)]
    head = ("fig", "measure", "BEFORE", "AFTER", "AFTER/BEFORE")
    print("  ".join(h.ljust(w[i]) for i, h in enumerate(head)))
    print("  ".join("-" * x for x in w))
    for r in rows:
        print("  ".join(r[i].ljust(w[i]) if i < 2 else r[i].rjust(w[i]) for i in range(5)))
    print(f"\nBEFORE: {trees['before']}\nAFTER:  {trees['after']}\n"
          f"ranges: min–max of {args.reps} runs where a figure ran more than once; "
          f"ratios: of the medians. {elapsed:.0f} s.")
    print("\nServer commands run (PORT: a free port; DIR: a new directory):")
    for line in COMMANDS:
        print("  " + line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"trees": trees, "results": R, "commands": COMMANDS, "seconds": elapsed},
                      f, indent=1)
    shutil.rmtree(b.logs, ignore_errors=True)


if __name__ == "__main__":
    main()

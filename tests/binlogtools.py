"""Helpers for the black-box binlog tests (test_binlog_interop.py, test_binlog_crash.py).

Everything here treats a server as a black box: it is started with ``-b DIR``,
driven over the wire, killed, and its directory is inspected with an
independent reader of the on-disk format. The format reader/writer is written
from the behaviour notes on beanstalkd, section 4.2 (version 7, x86-64 / LP64 layout,
little-endian; and version 5 from beanstalkd 1.4.x), not from any server code.

Server kinds are "reference" (/usr/bin/beanstalkd) and "ours" (python -m
pybeanstalkd); every test takes the writer and the reader of a binlog
directory as parameters drawn from these two.
"""
from __future__ import annotations

import os
import re
import signal
import struct
import subprocess
import threading
import time
from dataclasses import dataclass, field

from support import Client, Server, ours_argv, require_reference

KINDS = ("reference", "ours")
PAIRS = [(w, r) for w in KINDS for r in KINDS]
PAIR_IDS = [f"{w}-writes-{r}-reads" for w, r in PAIRS]


def argv_for(kind: str) -> list[str]:
    if kind == "reference":
        return [require_reference()]
    if kind == "ours":
        return ours_argv()
    raise ValueError(kind)


# ---------------------------------------------------------------------------
# Starting and stopping servers


@dataclass
class Exited:
    """A server process that has ended: how, and what it printed."""

    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return self.stderr.decode(errors="replace")


class BinlogServer(Server):
    """A server started with ``-b DIR`` and extra flags.

    Unlike support.Server, a process that exits before it listens does not raise:
    ``self.exited`` then holds its exit code and output (use launch() for that case;
    the constructor raises like Server does).
    """

    def __init__(self, kind: str, wal_dir, extra=(), *, allow_exit=False, nofile: int | None = None):
        self.kind = kind
        self.wal_dir = str(wal_dir)
        self.exited: Exited | None = None
        self._allow_exit = allow_exit
        super().__init__(argv_for(kind), ["-b", self.wal_dir, *extra], nofile=nofile)

    def _wait_listening(self, timeout=15.0):
        # Drain stdout/stderr from the start: a server that logs a lot must never
        # block on a full pipe (and we want everything it printed).
        self._out = bytearray()
        self._err = bytearray()
        self._pumps = [
            threading.Thread(target=_pump, args=(self.proc.stdout, self._out), daemon=True),
            threading.Thread(target=_pump, args=(self.proc.stderr, self._err), daemon=True),
        ]
        for t in self._pumps:
            t.start()
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                self.exited = self._collect()
                if self._allow_exit:
                    return
                raise RuntimeError(
                    f"{self.kind} server exited {self.proc.returncode} before listening: {self.exited.text!r}"
                )
            # The reference binds its socket before it replays the binlog, so a
            # successful connect is not enough: wait for a reply to a command.
            try:
                sock = self.connect(timeout=max(0.1, end - time.monotonic()))
                try:
                    sock.sendall(b"list-tube-used\r\n")
                    if Client(sock).line() == b"USING default\r\n":
                        return
                finally:
                    sock.close()
            except (OSError, EOFError):
                pass
            time.sleep(0.01)
        self.proc.kill()
        self.proc.wait()
        self.exited = self._collect()
        raise RuntimeError(f"{self.kind} server did not start listening within {timeout} s: {self.exited.text!r}")

    def _collect(self) -> Exited:
        for t in self._pumps:
            t.join(10)
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()
        return Exited(self.proc.returncode, bytes(self._out), bytes(self._err))

    def stderr_so_far(self) -> bytes:
        return bytes(self._err)

    def client(self) -> Conn:
        return Conn(self.connect())

    def kill9(self) -> Exited:
        """SIGKILL: nothing can be flushed after this; return what it printed."""
        return self._end(signal.SIGKILL)

    def term(self, timeout: float = 10.0) -> Exited:
        """SIGTERM and wait for the process to end on its own (fails if it hangs)."""
        return self._end(signal.SIGTERM, timeout)

    def _end(self, sig, timeout: float = 10.0) -> Exited:
        if self.exited is not None:
            return self.exited
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.exited = self._collect()
                raise AssertionError(f"{self.kind} server did not exit within {timeout} s of signal {sig!r}") from None
        self.exited = self._collect()
        return self.exited

    def stop(self):
        if self.exited is None:
            self.kill9()


PUMP_LIMIT = 4 << 20  # keep at most this much of a stream (a count of the rest is kept)


def _pump(f, buf: bytearray):
    try:
        while True:
            chunk = f.read1(65536) if hasattr(f, "read1") else f.read(65536)
            if not chunk:
                return
            if len(buf) < PUMP_LIMIT:
                buf += chunk[: PUMP_LIMIT - len(buf)]
    except (OSError, ValueError):
        return


def start(kind: str, wal_dir, *extra) -> BinlogServer:
    """Start a server on wal_dir; raise if it does not come up."""
    return BinlogServer(kind, wal_dir, extra)


def launch(kind: str, wal_dir, *extra) -> BinlogServer:
    """Start a server that may legitimately refuse to run; check ``.exited``."""
    return BinlogServer(kind, wal_dir, extra, allow_exit=True)


def normalize_prog(text: str | bytes, kind: str):
    """Replace the program-name prefix of diagnostics with ``PROG:``."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    argv0 = argv_for(kind)[0]
    names = sorted({"beanstalkd", "pybeanstalkd", argv0, os.path.basename(argv0)}, key=len, reverse=True)
    out = []
    for line in text.splitlines(keepends=True):
        for n in names:
            if line.startswith(n + ": "):
                line = "PROG: " + line[len(n) + 2 :]
                break
        out.append(line)
    return "".join(out)


# ---------------------------------------------------------------------------
# A small client


class ProtocolError(AssertionError):
    pass


class Conn(Client):
    """support.Client with helpers that assert on the replies."""

    def expect(self, cmd: bytes, reply: bytes) -> bytes:
        got = self.cmd(cmd)
        if got != reply:
            raise ProtocolError(f"{cmd!r}: expected {reply!r}, got {got!r}")
        return got

    def use(self, tube: str):
        self.expect(b"use %s\r\n" % tube.encode(), b"USING %s\r\n" % tube.encode())

    def watch(self, tube: str) -> bytes:
        return self.cmd(b"watch %s\r\n" % tube.encode())

    def put(self, body: bytes, pri=0, delay=0, ttr=60) -> int:
        got = self.cmd(b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body))
        m = re.fullmatch(rb"INSERTED (\d+)\r\n", got)
        if not m:
            raise ProtocolError(f"put: {got!r}")
        return int(m.group(1))

    def reserve_job(self, jid: int) -> bytes:
        got = self.cmd(b"reserve-job %d\r\n" % jid)
        if not got.startswith(b"RESERVED %d " % jid):
            raise ProtocolError(f"reserve-job {jid}: {got!r}")
        return got

    def reserve(self, timeout=0) -> int | None:
        got = self.cmd(b"reserve-with-timeout %d\r\n" % timeout)
        if got == b"TIMED_OUT\r\n":
            return None
        m = re.match(rb"RESERVED (\d+) ", got)
        if not m:
            raise ProtocolError(f"reserve: {got!r}")
        return int(m.group(1))

    def bury(self, jid: int, pri: int):
        self.expect(b"bury %d %d\r\n" % (jid, pri), b"BURIED\r\n")

    def release(self, jid: int, pri: int, delay: int):
        self.expect(b"release %d %d %d\r\n" % (jid, pri, delay), b"RELEASED\r\n")

    def delete(self, jid: int):
        self.expect(b"delete %d\r\n" % jid, b"DELETED\r\n")

    def kick(self, n: int) -> int:
        got = self.cmd(b"kick %d\r\n" % n)
        m = re.fullmatch(rb"KICKED (\d+)\r\n", got)
        if not m:
            raise ProtocolError(f"kick: {got!r}")
        return int(m.group(1))

    def kick_job(self, jid: int):
        self.expect(b"kick-job %d\r\n" % jid, b"KICKED\r\n")

    def peek(self, jid: int) -> bytes | None:
        got = self.cmd(b"peek %d\r\n" % jid)
        if got == b"NOT_FOUND\r\n":
            return None
        head, _, rest = got.partition(b"\r\n")
        m = re.fullmatch(rb"FOUND (\d+) (\d+)", head)
        if not m or int(m.group(1)) != jid or len(rest) != int(m.group(2)) + 2:
            raise ProtocolError(f"peek {jid}: {got!r}")
        return rest[:-2]

    def peek_kind(self, what: str) -> int | None:
        got = self.cmd(b"peek-%s\r\n" % what.encode())
        if got == b"NOT_FOUND\r\n":
            return None
        m = re.match(rb"FOUND (\d+) ", got)
        if not m:
            raise ProtocolError(f"peek-{what}: {got!r}")
        return int(m.group(1))

    def yaml(self, cmd: bytes):
        got = self.cmd(cmd)
        if got == b"NOT_FOUND\r\n":
            return None
        if not got.startswith(b"OK "):
            raise ProtocolError(f"{cmd!r}: {got!r}")
        return parse_yaml(got.partition(b"\r\n")[2][:-2])

    def stats_job(self, jid: int) -> dict | None:
        return self.yaml(b"stats-job %d\r\n" % jid)

    def stats_tube(self, tube: str) -> dict | None:
        return self.yaml(b"stats-tube %s\r\n" % tube.encode())

    def list_tubes(self) -> list[str]:
        return self.yaml(b"list-tubes\r\n")

    def stats(self) -> dict:
        return self.yaml(b"stats\r\n")


def _scalar(v: str):
    if len(v) >= 2 and v[0] == v[-1] == '"':
        return v[1:-1]
    if re.fullmatch(r"-?\d+", v):
        return int(v)
    return v


def parse_yaml(data: bytes):
    """The flat YAML beanstalkd sends: a dict of scalars or a list of names.
    Both the 1.12 (unquoted) and 1.13 (quoted) string styles are accepted."""
    lines = data.decode().split("\n")
    assert lines[0] == "---", data
    lines = [ln for ln in lines[1:] if ln]
    if lines and lines[0].startswith("- "):
        return [_scalar(ln[2:]) for ln in lines]
    out = {}
    for ln in lines:
        k, _, v = ln.partition(": ")
        out[k] = _scalar(v)
    return out


# ---------------------------------------------------------------------------
# State snapshots

# The stats-job keys that must survive a restart (age and time-left move with the clock).
JOB_KEYS = ("id", "tube", "state", "pri", "delay", "ttr", "file", "reserves", "timeouts", "releases", "buries", "kicks")
TUBE_COUNT_KEYS = (
    "current-jobs-urgent",
    "current-jobs-ready",
    "current-jobs-reserved",
    "current-jobs-delayed",
    "current-jobs-buried",
)


@dataclass
class JobState:
    fields: dict  # JOB_KEYS
    body: bytes
    age: int
    time_left: int
    taken_at: float  # time.time() when stats-job was read

    def key(self) -> dict:
        return dict(self.fields, body=self.body)


@dataclass
class Snapshot:
    taken_at: float
    jobs: dict  # id -> JobState | None (None: NOT_FOUND)
    tubes: dict  # name -> {current-jobs-*}
    tube_order: list

    def live(self) -> dict:
        return {i: j for i, j in self.jobs.items() if j is not None}


def job_state(c: Conn, jid: int) -> JobState | None:
    st = c.stats_job(jid)
    if st is None:
        assert c.peek(jid) is None, f"job {jid}: stats-job says NOT_FOUND but peek finds it"
        return None
    body = c.peek(jid)
    assert body is not None, f"job {jid}: stats-job finds it but peek says NOT_FOUND"
    return JobState({k: st[k] for k in JOB_KEYS}, body, st["age"], st["time-left"], time.time())


def snapshot(srv_or_conn, ids) -> Snapshot:
    """Every job in ids (stats-job + peek), and every tube (list-tubes + stats-tube)."""
    c = srv_or_conn if isinstance(srv_or_conn, Conn) else srv_or_conn.client()
    try:
        now = time.time()
        jobs = {i: job_state(c, i) for i in ids}
        order = c.list_tubes()
        tubes = {}
        for name in order:
            st = c.stats_tube(name)
            tubes[name] = {k: st[k] for k in TUBE_COUNT_KEYS}
        return Snapshot(now, jobs, tubes, order)
    finally:
        if c is not srv_or_conn:
            c.close()


def tube_counts(jobs: dict) -> dict:
    """The stats-tube counts implied by a set of job states (urgent: ready and pri < 1024)."""
    out: dict = {}
    for j in jobs.values():
        f = j["fields"] if isinstance(j, dict) else j.fields
        t = out.setdefault(f["tube"], {k: 0 for k in TUBE_COUNT_KEYS})
        t[f"current-jobs-{f['state']}"] += 1
        if f["state"] == "ready" and f["pri"] < 1024:
            t["current-jobs-urgent"] += 1
    return out


# ---------------------------------------------------------------------------
# The binlog format (section 4.2), read and written independently of any server

STATE_NAMES = {0: "invalid", 1: "ready", 2: "reserved", 3: "buried", 4: "delayed"}
STATE_CODES = {v: k for k, v in STATE_NAMES.items()}
MAX_TUBE_NAME_LEN = 201  # namelen must be below this
NS = 1_000_000_000

# Jobrec (v7): u64 id, u32 pri, pad4, i64 delay, i64 ttr, i32 body_size, pad4,
# i64 created_at, i64 deadline_at, u32 x5 counters, u8 state, pad3 -> 80 bytes.
JOBREC7 = struct.Struct("<QI4xqqi4xqqIIIIIB3x")
# Jobrec5: the same fields with times in microseconds, ending at the state byte -> 77 bytes.
JOBREC5 = struct.Struct("<QI4xQQi4xQQIIIIIB")
assert JOBREC7.size == 80 and JOBREC5.size == 77
SHORT7_SIZE = 4 + JOBREC7.size  # 84


@dataclass
class Record:
    offset: int  # where the record starts in the file
    end: int  # just past it
    tube: str | None  # None for a short record
    id: int
    pri: int
    delay: int  # ns (v5 values are converted)
    ttr: int  # ns
    body_size: int  # including the trailing CRLF
    created_at: int  # ns
    deadline_at: int  # ns
    reserve_ct: int
    timeout_ct: int
    release_ct: int
    bury_ct: int
    kick_ct: int
    state: int
    body: bytes | None = None  # full records only; includes the CRLF
    fields_at: int = 0  # offset of the Jobrec

    @property
    def full(self) -> bool:
        return self.tube is not None

    @property
    def state_name(self) -> str:
        return STATE_NAMES.get(self.state, f"?{self.state}")


@dataclass
class BinlogFile:
    path: str
    seq: int
    size: int  # bytes on disk
    version: int | None
    records: list = field(default_factory=list)
    stop: str = ""  # "eof", "zeros", or "error: ..." (why reading ended)
    stop_offset: int = 0


def binlog_files(d) -> list[tuple[int, str]]:
    """(N, path) for every binlog.N in d whose whole suffix is a decimal number, by N."""
    out = []
    for name in os.listdir(d):
        if name.startswith("binlog.") and re.fullmatch(r"\d+", name[7:]):
            out.append((int(name[7:]), os.path.join(str(d), name)))
    return sorted(out)


def parse_binlog(path, seq: int | None = None) -> BinlogFile:
    """Read one binlog file the way section 4.2 describes it, listing its records."""
    data = open(path, "rb").read()
    if seq is None:
        seq = int(os.path.basename(str(path)).rpartition(".")[2])
    bf = BinlogFile(str(path), seq, len(data), None)
    if len(data) < 4:
        bf.stop, bf.stop_offset = f"error: short version header ({len(data)} bytes)", 0
        return bf
    (bf.version,) = struct.unpack_from("<i", data, 0)
    if bf.version == 7:
        nl_fmt, rec, us = "<i", JOBREC7, 1
    elif bf.version == 5:
        nl_fmt, rec, us = "<Q", JOBREC5, 1000
    else:
        bf.stop, bf.stop_offset = f"error: unknown version {bf.version}", 0
        return bf
    nl_size = struct.calcsize(nl_fmt)
    pos = 4
    while True:
        start = pos
        if len(data) - pos < nl_size:
            bf.stop = "eof" if pos == len(data) else f"error: torn namelen ({len(data) - pos} bytes)"
            break
        (namelen,) = struct.unpack_from(nl_fmt, data, pos)
        pos += nl_size
        if namelen < 0 or namelen >= MAX_TUBE_NAME_LEN:
            bf.stop = f"error: bad namelen {namelen}"
            break
        if len(data) - pos < namelen:
            bf.stop = "error: torn tube name"
            break
        tube = data[pos : pos + namelen].decode("latin-1") if namelen else None
        pos += namelen
        if len(data) - pos < rec.size:
            bf.stop = "error: torn job struct"
            break
        v = rec.unpack_from(data, pos)
        fields_at = pos
        pos += rec.size
        if v[0] == 0:
            bf.stop = "zeros"
            break
        r = Record(
            start, pos, tube, v[0], v[1], v[2] * us, v[3] * us, v[4], v[5] * us, v[6] * us,
            v[7], v[8], v[9], v[10], v[11], v[12], fields_at=fields_at,
        )
        if tube is not None:
            if r.body_size < 0 or len(data) - pos < r.body_size:
                bf.stop = "error: torn job body"
                break
            r.body = data[pos : pos + r.body_size]
            pos += r.body_size
            r.end = pos
        bf.records.append(r)
    bf.stop_offset = start
    return bf


def parse_dir(d) -> list[BinlogFile]:
    """The directory's files as they are now. Ours unlinks a file let go
    once the records after it are synced (with -f, after the reply that
    let it go): one listed may be gone when it is read, and is passed over."""
    files = []
    for n, p in binlog_files(d):
        try:
            files.append(parse_binlog(p, n))
        except FileNotFoundError:
            continue
    return files


@dataclass
class ModelJob:
    """What the log says about one job: its last record's fields, its body, and
    the number of the file holding its latest full record."""

    rec: Record
    tube: str
    body: bytes
    file: int
    first_seen: int  # order of first appearance
    last_bury_at: tuple | None = None  # (file, offset) of its latest Buried record

    def fields(self) -> dict:
        r = self.rec
        state = "ready" if r.state == 2 else r.state_name
        return {
            "id": r.id,
            "tube": self.tube,
            "state": state,
            "pri": r.pri,
            "delay": r.delay // NS,
            "ttr": r.ttr // NS,
            "file": self.file,
            "reserves": r.reserve_ct,
            "timeouts": r.timeout_ct,
            "releases": r.release_ct,
            "buries": r.bury_ct,
            "kicks": r.kick_ct,
        }


def replay(files: list[BinlogFile]) -> dict:
    """The jobs a reader should recover from these files (section 4.7 step 2):
    a full record for an unknown id creates the job, any record for a known id
    replaces its fields, a short record for an unknown id is ignored, Invalid
    removes the job, Reserved counts as Ready."""
    jobs: dict[int, ModelJob] = {}
    seen = 0
    for bf in files:
        for r in bf.records:
            j = jobs.get(r.id)
            if r.state == 0:
                jobs.pop(r.id, None)
                continue
            if j is None:
                if not r.full:
                    continue
                seen += 1
                j = jobs[r.id] = ModelJob(r, r.tube, r.body[:-2], bf.seq, seen)
            j.rec = r
            if r.full:
                j.tube, j.body, j.file = r.tube, r.body[:-2], bf.seq
            if r.state == 3:
                j.last_bury_at = (bf.seq, r.offset)
    return jobs


def next_id_after_replay(files: list[BinlogFile]) -> int:
    """The id the first put gets after a reader replays these files: one more
    than the largest id that a full record with a live state (1-4) brought into
    being while reading, even if a later record deleted it (docs 4.7 step 2).
    Ids are reused only once every such record has been collected."""
    ids = [r.id for bf in files for r in bf.records if r.full and 1 <= r.state <= 4]
    return max(ids, default=0) + 1


# Writers for hand-made files (version 7 and version 5)


def jobrec(version: int, id, pri=0, delay=0, ttr=NS, body_size=2, created_at=None, deadline_at=0,
           reserve_ct=0, timeout_ct=0, release_ct=0, bury_ct=0, kick_ct=0, state=1) -> bytes:
    """Times are given in ns; version 5 stores them in microseconds."""
    if created_at is None:
        created_at = time.time_ns()
    if version == 7:
        return JOBREC7.pack(id, pri, delay, ttr, body_size, created_at, deadline_at,
                            reserve_ct, timeout_ct, release_ct, bury_ct, kick_ct, state)
    if version == 5:
        us = 1000
        return JOBREC5.pack(id, pri, delay // us, ttr // us, body_size, created_at // us, deadline_at // us,
                            reserve_ct, timeout_ct, release_ct, bury_ct, kick_ct, state)
    raise ValueError(version)


def full_record(version: int, tube: str, body: bytes, **kw) -> bytes:
    """A full record for a job whose body is ``body`` (the CRLF is added)."""
    data = body + b"\r\n"
    nl = struct.pack("<i" if version == 7 else "<Q", len(tube))
    return nl + tube.encode() + jobrec(version, body_size=len(data), **kw) + data


def short_record(version: int, **kw) -> bytes:
    nl = struct.pack("<i" if version == 7 else "<Q", 0)
    return nl + jobrec(version, **kw)


def write_binlog(path, version: int, *records: bytes, mode=0o400) -> None:
    with open(path, "wb") as f:
        f.write(struct.pack("<i", version))
        for r in records:
            f.write(r)
    os.chmod(path, mode)

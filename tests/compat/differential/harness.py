"""Differential-test engine: parse transcripts, play them against two servers, compare.

The transcript format is described in tests/compat/differential/README.md.  This module is imported by
tests/compat/test_differential.py and can also be run directly to play cases against the reference only
(handy when writing transcripts):

    PYTHONPATH=tests .venv/bin/python tests/compat/differential/harness.py [-k SUBSTRING] [--ours] [--ref-vs-ref]

(PYTHONPATH=tests, as pytest's `pythonpath` setting gives the tests: `support` is there.)
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from support import REFERENCE, Server, ours_argv

HERE = Path(__file__).resolve().parent

REPLY_TIMEOUT = 5.0  # seconds to wait for one complete reply / for EOF
SILENCE = 0.3  # default length of a `silent` check

# --------------------------------------------------------------------------------------------------
# Transcript parsing
# --------------------------------------------------------------------------------------------------


class TranscriptError(Exception):
    pass


@dataclasses.dataclass
class Step:
    file: str
    lineno: int
    text: str  # the source line, for messages
    verb: str  # send cmd recv eof silent open close shut sleep signal
    conn: int = 1
    data: bytes = b""  # send / cmd
    count: int = 1  # recv
    seconds: float = 0.0  # sleep / silent
    signame: str = ""  # signal
    expect: bytes | None = None  # `=> TEXT`: exact reply, checked on both sides
    expect113: bytes | None = None  # `=>1.13 TEXT`: replaces a 1.12 reference's reply

    @property
    def where(self) -> str:
        return f"{self.file}:{self.lineno}"


@dataclasses.dataclass
class Case:
    name: str
    file: str
    lineno: int
    flags: list[str] = dataclasses.field(default_factory=list)
    tolerate: set[str] = dataclasses.field(default_factory=set)
    unix: bool = False
    steps: list[Step] = dataclasses.field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{Path(self.file).stem}.{self.name}"


_SIMPLE_ESCAPES = {"r": b"\r", "n": b"\n", "t": b"\t", "0": b"\0", "s": b" ", "\\": b"\\"}


def unescape(text: str) -> bytes:
    """Decode the escape language of transcripts (see README.md)."""
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\":
            out += ch.encode("utf-8")
            i += 1
            continue
        if i + 1 >= len(text):
            raise TranscriptError(f"dangling backslash in {text!r}")
        e = text[i + 1]
        if e in _SIMPLE_ESCAPES:
            out += _SIMPLE_ESCAPES[e]
            i += 2
        elif e == "x":
            hexdigits = text[i + 2 : i + 4]
            if not re.fullmatch(r"[0-9a-fA-F]{2}", hexdigits):
                raise TranscriptError(f"bad \\x escape in {text!r}")
            out.append(int(hexdigits, 16))
            i += 4
        elif e == "{":
            end = text.find("}", i)
            m = re.fullmatch(r"\{(\d+)\*(.+)\}", text[i + 1 : end + 1]) if end > 0 else None
            if not m:
                raise TranscriptError(f"bad repeat escape (want \\{{N*TEXT}}) in {text!r}")
            out += unescape(m.group(2)) * int(m.group(1))
            i = end + 1
        else:
            raise TranscriptError(f"unknown escape \\{e} in {text!r}")
    return bytes(out)


def _expected_reply(text: str) -> bytes:
    data = unescape(text)
    if not data.endswith(b"\r\n"):
        data += b"\r\n"
    # `OK *`, `FOUND <id> *`, `RESERVED <id> *`: the harness fills in the body's length
    m = re.match(rb"^(OK|FOUND \d+|RESERVED \d+) \*\r\n", data)
    if m:
        body = data[m.end() :]
        data = m.group(1) + b" %d\r\n" % (len(body) - 2) + body
    return data


_STEP_RE = re.compile(r"^(?:c(?P<conn>\d+)\s+)?(?P<verb>[a-z]+)(?: (?P<rest>.*))?$")


def parse_file(path: Path) -> list[Case]:
    cases: list[Case] = []
    case: Case | None = None
    fname = f"{path.parent.name}/{path.name}"
    for lineno, raw in enumerate(path.read_text("utf-8").split("\n"), 1):
        where = f"{fname}:{lineno}"
        if raw != raw.rstrip():
            raise TranscriptError(f"{where}: trailing whitespace (write \\s or \\x20 for a space)")
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("==="):
            name = line[3:].strip()
            if not re.fullmatch(r"[A-Za-z0-9_\-]+", name):
                raise TranscriptError(f"{where}: bad case name {name!r}")
            case = Case(name=name, file=fname, lineno=lineno)
            cases.append(case)
            continue
        if case is None:
            raise TranscriptError(f"{where}: step outside of a case")
        key, sep, value = line.partition(":")
        if sep and key in ("flags", "tolerate", "listen"):
            if case.steps:
                raise TranscriptError(f"{where}: {key}: must come before the steps")
            if key == "flags":
                case.flags = value.split()
            elif key == "tolerate":
                case.tolerate = set(value.split())
            elif value.strip() == "unix":
                case.unix = True
            else:
                raise TranscriptError(f"{where}: listen: must be `unix`")
            continue
        case.steps.append(_parse_step(line, fname, lineno))
    names = [c.name for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise TranscriptError(f"{fname}: duplicate case names {sorted(dup)}")
    return cases


def _parse_step(line: str, fname: str, lineno: int) -> Step:
    where = f"{fname}:{lineno}"
    m = _STEP_RE.match(line)
    if not m:
        raise TranscriptError(f"{where}: cannot parse step {line!r}")
    verb, rest = m.group("verb"), m.group("rest")
    step = Step(file=fname, lineno=lineno, text=line, verb=verb, conn=int(m.group("conn") or 1))
    expect = expect113 = None
    if rest is not None and verb in ("cmd", "recv"):
        for marker in (" =>1.13 ", " => "):
            if marker in " " + rest:
                rest, _, exp = (" " + rest).partition(marker)
                rest = rest[1:]
                if marker == " => ":
                    expect = _expected_reply(exp)
                else:
                    expect113 = _expected_reply(exp)
                break
    step.expect, step.expect113 = expect, expect113
    try:
        if verb == "send":
            if not rest:
                raise TranscriptError("send needs bytes")
            step.data = unescape(rest)
        elif verb == "cmd":
            step.data = unescape(rest or "") + b"\r\n"
        elif verb == "recv":
            step.count = int(rest) if rest else 1
            if (expect or expect113) and step.count != 1:
                raise TranscriptError("=> only allowed when reading exactly one reply")
        elif verb == "silent":
            step.seconds = float(rest) if rest else SILENCE
        elif verb == "sleep":
            step.seconds = float(rest)
        elif verb == "signal":
            if rest not in ("USR1",):
                raise TranscriptError("only `signal USR1` is supported")
            step.signame = rest
        elif verb in ("open", "close", "shut", "eof"):
            if rest:
                raise TranscriptError(f"{verb} takes no argument")
        else:
            raise TranscriptError(f"unknown verb {verb!r}")
    except (TranscriptError, ValueError) as exc:
        raise TranscriptError(f"{where}: {exc}") from None
    return step


def load_cases(directory: Path = HERE) -> list[Case]:
    cases: list[Case] = []
    for path in sorted(directory.glob("*.txt")):
        cases.extend(parse_file(path))
    ids = [c.id for c in cases]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise TranscriptError(f"duplicate case ids {sorted(dup)}")
    return cases


# --------------------------------------------------------------------------------------------------
# Talking to one server
# --------------------------------------------------------------------------------------------------

_BODY_HDR = re.compile(rb"^(?:(?:FOUND|RESERVED) \d+ (\d+)|OK (\d+))\r\n$")


@dataclasses.dataclass
class Obs:
    """What one side observed at one reading step (one per reply)."""

    step: Step
    kind: str  # reply | eof | timeout | silence | data | send-error
    data: bytes = b""
    sent: bytes = b""  # the last bytes sent on this connection before the observation

    def show(self) -> str:
        if self.kind == "reply":
            return _show(self.data)
        if self.kind == "silence":
            return "<silence>"
        if self.kind == "data":
            return f"<unexpected bytes> {_show(self.data)}"
        if self.kind == "eof":
            return f"<EOF after {_show(self.data)}>" if self.data else "<EOF>"
        if self.kind == "timeout":
            return f"<no complete reply within {REPLY_TIMEOUT:g}s; got {_show(self.data)}>"
        return f"<{self.kind}> {self.data.decode(errors='replace')}"

    def key(self):
        return (self.kind, self.data)


def _show(data: bytes, limit: int = 400) -> str:
    text = repr(data)  # long runs of one character are collapsed so big bodies stay readable
    text = re.sub(r"(.)\1{39,}", lambda m: f"{m.group(1)}<x{len(m.group(0))}>", text)
    return text if len(text) <= limit else text[:limit] + f"...<{len(data)} bytes>"


class Conn:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""
        self.eof = False
        self.last_sent = b""

    def _fill(self, deadline: float) -> bool:
        """Read more bytes; False on EOF.  Raises TimeoutError at the deadline."""
        if self.eof:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            raise TimeoutError from None
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""  # an RST after close with unread input is just a close
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def reply(self, timeout: float = REPLY_TIMEOUT) -> tuple[str, bytes]:
        deadline = time.monotonic() + timeout
        try:
            while True:
                end = self.buf.find(b"\r\n")
                if end >= 0:
                    line = self.buf[: end + 2]
                    m = _BODY_HDR.match(line)
                    need = len(line) + (int(m.group(1) or m.group(2)) + 2 if m else 0)
                    if len(self.buf) >= need:
                        out, self.buf = self.buf[:need], self.buf[need:]
                        return "reply", out
                if not self._fill(deadline):
                    out, self.buf = self.buf, b""
                    return "eof", out
        except TimeoutError:
            return "timeout", self.buf

    def silent(self, seconds: float) -> tuple[str, bytes]:
        deadline = time.monotonic() + seconds
        try:
            while not self.buf:
                if not self._fill(deadline):
                    out, self.buf = self.buf, b""
                    return "eof", out
        except TimeoutError:
            return "silence", b""
        out, self.buf = self.buf, b""
        return "data", out

    def until_eof(self) -> tuple[str, bytes]:
        deadline = time.monotonic() + REPLY_TIMEOUT
        try:
            while self._fill(deadline):
                pass
        except TimeoutError:
            return "timeout", self.buf
        out, self.buf = self.buf, b""
        return "eof", out

    def poll_leftover(self) -> bytes:
        """Whatever the server has already sent that the transcript never read."""
        try:
            while not self.eof and select.select([self.sock], [], [], 0)[0]:
                if not self._fill(time.monotonic() + 0.5):
                    break
        except (TimeoutError, OSError):
            pass
        return self.buf


# --------------------------------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------------------------------

# 1.13 quotes these string values (only in these documents)
_QUOTED = {"stats": {"version", "hostname", "os", "platform"}, "stats-tube": {"name"}, "stats-job": {"tube"}}
# values that differ between any two runs: masked on both sides (stats only)
_MASKED = {"pid", "uptime", "rusage-utime", "rusage-stime", "id", "hostname", "version", "os", "platform"}
_OK_RE = re.compile(rb"^OK (\d+)\r\n")


def _yaml_kind(lines: list[bytes]) -> str | None:
    if len(lines) < 3 or lines[0] != b"---":
        return None
    if lines[1].startswith(b"current-jobs-urgent: "):
        return "stats"
    if lines[1].startswith(b"name: "):
        return "stats-tube"
    if lines[1].startswith(b"id: ") and lines[2].startswith(b"tube: "):
        return "stats-job"
    return None


def _split_yaml(reply: bytes):
    """(yaml lines, kind) of a well-framed `OK <n>` reply, or None."""
    m = _OK_RE.match(reply)
    if not m:
        return None
    body = reply[m.end() :]
    if not body.endswith(b"\r\n") or len(body) - 2 != int(m.group(1)):
        return None  # framing is broken: leave it alone so that the diff shows it
    yaml = body[:-2]
    if not yaml.endswith(b"\n"):
        return None
    lines = yaml[:-1].split(b"\n")
    return lines, _yaml_kind(lines)


def _join_yaml(lines: list[bytes]) -> bytes:
    yaml = b"\n".join(lines) + b"\n"
    return b"OK %d\r\n" % len(yaml) + yaml + b"\r\n"


def normalise(reply: bytes, legacy_112: bool) -> bytes:
    """Upgrade a 1.12 YAML reply to 1.13 quoting, and mask the volatile stats values."""
    split = _split_yaml(reply)
    if not split or not split[1]:
        return reply
    lines, kind = split
    out = []
    for line in lines:
        key, sep, value = line.partition(b": ")
        k = key.decode("latin-1")
        if sep and legacy_112 and k in _QUOTED[kind]:
            value = b'"' + value + b'"'
        if sep and kind == "stats" and k in _MASKED:
            quoted = len(value) >= 2 and value.startswith(b'"') and value.endswith(b'"')
            value = b'"*"' if quoted else b"*"
        out.append(key + sep + value)
    return _join_yaml(out)


def apply_tolerance(ref: bytes, ours: bytes, keys: set[str]) -> bytes:
    """Return `ours` with each integer value of a key in `keys` replaced by the reference's value
    when the two differ by at most 1 (timing jitter in age/time-left/pause-time-left)."""
    if not keys:
        return ours
    a, b = _split_yaml(ref), _split_yaml(ours)
    if not a or not b or len(a[0]) != len(b[0]):
        return ours
    out = []
    for la, lb in zip(a[0], b[0]):
        ka, _, va = la.partition(b": ")
        kb, _, vb = lb.partition(b": ")
        if ka == kb and ka.decode("latin-1") in keys and la != lb:
            try:
                if abs(int(va) - int(vb)) <= 1:
                    lb = la
            except ValueError:
                pass
        out.append(lb)
    return _join_yaml(out)


# --------------------------------------------------------------------------------------------------
# Running a case on one side
# --------------------------------------------------------------------------------------------------


def reference_version() -> tuple[int, int] | None:
    if not REFERENCE:
        return None
    out = subprocess.run([REFERENCE, "-v"], capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


_REF_VERSION = reference_version()
REFERENCE_IS_112 = _REF_VERSION is not None and _REF_VERSION < (1, 13)


@dataclasses.dataclass
class SideResult:
    label: str
    obs: list[Obs]
    stderr: str = ""
    error: str = ""


_START_LOCK = threading.Lock()


def start_server(argv: list[str], flags: list[str], unix_path: str | None) -> Server:
    """Start a server; one at a time, so two servers never pick the same free port, and once more
    if the port was taken by someone else between choosing it and binding it."""
    for attempt in range(3):
        with _START_LOCK:
            try:
                srv = Server(argv, extra=flags, unix_path=unix_path)
                break
            except RuntimeError as exc:
                if "in use" not in str(exc) or attempt == 2:
                    raise
    # Server() probes the port with a connection it closes at once; give the server a moment to
    # notice that close, so that current-connections in the first stats is not racy.
    time.sleep(0.02)
    return srv


def run_side(case: Case, argv: list[str], label: str, legacy_112: bool) -> SideResult:
    """Start a server with argv + the case's flags, play every step, collect observations."""
    tmpdir = tempfile.mkdtemp(prefix="bsdiff-") if case.unix else None
    result = SideResult(label=label, obs=[])
    srv = None
    conns: dict[int, Conn] = {}
    try:
        srv = start_server(argv, case.flags, os.path.join(tmpdir, "sock") if tmpdir else None)
        for step in case.steps:
            _play(step, srv, conns, result.obs, legacy_112)
        for n, conn in sorted(conns.items()):
            left = conn.poll_leftover()
            if left:
                result.obs.append(
                    Obs(Step(case.file, 0, f"(end of case: unread bytes on c{n})", "end", n), "data", left)
                )
    except Exception as exc:  # a harness failure is reported, not raised, so the other side still runs
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        for conn in conns.values():
            conn.sock.close()
        if srv is not None:
            result.stderr = _stop(srv)
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
    return result


def _stop(srv: Server) -> str:
    err = b""
    if srv.proc.poll() is None:
        srv.proc.terminate()
    try:
        _, err = srv.proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        srv.proc.kill()
        _, err = srv.proc.communicate()
    except ValueError:
        pass
    srv.stop()
    return (err or b"").decode(errors="replace")


def _play(step: Step, srv: Server, conns: dict[int, Conn], obs: list[Obs], legacy_112: bool):
    v = step.verb
    if v == "sleep":
        time.sleep(step.seconds)
        return
    if v == "signal":
        os.kill(srv.proc.pid, getattr(signal, "SIG" + step.signame))
        return
    conn = conns.get(step.conn)
    if v in ("close", "shut"):
        if conn is None:
            raise RuntimeError(f"{step.where}: c{step.conn} is not open")
        if v == "close":
            conn.sock.close()
            del conns[step.conn]
        else:
            conn.sock.shutdown(socket.SHUT_WR)
        return
    if conn is None:
        conn = conns[step.conn] = Conn(srv.connect(timeout=REPLY_TIMEOUT))
    elif v == "open":
        raise RuntimeError(f"{step.where}: c{step.conn} is already open")
    if v == "open":
        return
    if v in ("send", "cmd"):
        conn.last_sent = step.data
        try:
            conn.sock.settimeout(REPLY_TIMEOUT)
            conn.sock.sendall(step.data)
        except OSError as exc:
            obs.append(Obs(step, "send-error", type(exc).__name__.encode(), conn.last_sent))
            return
        if v == "send":
            return
    if v in ("cmd", "recv"):
        for _ in range(step.count):
            if step.expect113 is not None and legacy_112:
                # 1.12 answers differently (or blocks): swallow whatever it says, use 1.13's answer
                conn.reply(timeout=SILENCE)
                obs.append(Obs(step, "reply", step.expect113, conn.last_sent))
                continue
            kind, data = conn.reply()
            if kind == "reply":
                data = normalise(data, legacy_112)
            obs.append(Obs(step, kind, data, conn.last_sent))
    elif v == "silent":
        obs.append(Obs(step, *conn.silent(step.seconds), conn.last_sent))
    elif v == "eof":
        obs.append(Obs(step, *conn.until_eof(), conn.last_sent))


# --------------------------------------------------------------------------------------------------
# Running both sides and comparing
# --------------------------------------------------------------------------------------------------


def sides() -> tuple[tuple[list[str], str, bool], tuple[list[str], str, bool]]:
    """((argv, label, legacy) for the reference, (argv, label, legacy) for the server under test).
    PYBEANSTALKD_DIFF_OURS=reference plays the reference against itself (to check the harness)."""
    ref = ([REFERENCE], f"reference {REFERENCE}", REFERENCE_IS_112)
    if os.environ.get("PYBEANSTALKD_DIFF_OURS") == "reference":
        return ref, ([REFERENCE], "reference (again, as ours)", REFERENCE_IS_112)
    return ref, (ours_argv(), "ours", False)


def run_case(case: Case) -> tuple[SideResult, SideResult]:
    (ra, rl, rleg), (oa, ol, oleg) = sides()
    if os.environ.get("PYBEANSTALKD_DIFF_SERIAL"):
        return run_side(case, ra, rl, rleg), run_side(case, oa, ol, oleg)
    box: dict[str, SideResult] = {}
    t = threading.Thread(target=lambda: box.setdefault("ours", run_side(case, oa, ol, oleg)))
    t.start()
    ref = run_side(case, ra, rl, rleg)
    t.join()
    return ref, box["ours"]


def compare(case: Case, ref: SideResult, ours: SideResult) -> list[str]:
    """Problems found, each a readable paragraph; the empty list means the case passed."""
    problems: list[str] = []
    for side in (ref, ours):
        if side.error:
            problems.append(f"{side.label}: harness error: {side.error}")
    n = max(len(ref.obs), len(ours.obs))
    for i in range(n):
        r = ref.obs[i] if i < len(ref.obs) else None
        o = ours.obs[i] if i < len(ours.obs) else None
        step = (r or o).step
        if r and o and r.step is not o.step:
            problems.append(f"observations out of step at {r.step.where} / {o.step.where}")
            break
        okey = o.key() if o else None
        if r and o and r.kind == "reply" and o.kind == "reply":
            okey = ("reply", apply_tolerance(r.data, o.data, case.tolerate))
        if (r.key() if r else None) != okey:
            problems.append(_mismatch(step, r, o, ref.label, ours.label))
        for side, ob in ((ref, r), (ours, o)):
            exp = step.expect if step.expect is not None else step.expect113
            if ob and exp is not None and ob.key() != ("reply", exp):
                problems.append(
                    f"step {step.where}: `{step.text}`\n  expected:  {_show(exp)}\n"
                    f"  {side.label}: {ob.show()}"
                )
    return problems


def _mismatch(step: Step, r: Obs | None, o: Obs | None, rl: str, ol: str) -> str:
    lines = [f"step {step.where}: c{step.conn} `{step.text}`"]
    if r or o:
        lines.append(f"  last sent on c{step.conn}: {_show((r or o).sent, 200)}")
    lines.append(f"  reference: {r.show() if r else '<nothing>'}")
    lines.append(f"  ours:      {o.show() if o else '<nothing>'}")
    if r and o and b"\n---\n" in r.data and b"\n---\n" in o.data:
        diff = difflib.unified_diff(
            r.data.decode("latin-1").splitlines(), o.data.decode("latin-1").splitlines(),
            "reference", "ours", lineterm="", n=1,
        )
        lines += ["  " + d for d in diff]
    return "\n".join(lines)


def report(case: Case, ref: SideResult, ours: SideResult, problems: list[str]) -> str:
    head = f"case {case.id} ({case.file}:{case.lineno}) flags={case.flags or '[]'}"
    body = [head, f"{len(problems)} problem(s); the first one:", problems[0]]
    if len(problems) > 1:
        body.append("further problems:")
        body += problems[1:8]
        if len(problems) > 8:
            body.append(f"... and {len(problems) - 8} more")
    body.append("sent bytes per step (reference run):")
    for ob in ref.obs[:60]:
        body.append(f"  {ob.step.where:<22} {ob.step.text[:70]:<70} -> {ob.show()[:100]}")
    if ours.stderr.strip():
        body.append("stderr of ours (tail):\n" + ours.stderr[-3000:])
    return "\n".join(body)


# --------------------------------------------------------------------------------------------------
# Command line: play cases and print what each side saw
# --------------------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", default="", help="only cases whose id contains this")
    ap.add_argument("--ours", action="store_true", help="compare against our server")
    ap.add_argument("--ref-vs-ref", action="store_true", help="compare the reference with itself")
    ap.add_argument("-q", action="store_true", help="only print failures")
    ap.add_argument("--dir", default=str(HERE), help="directory of transcripts")
    args = ap.parse_args(argv)
    cases = [c for c in load_cases(Path(args.dir)) if args.k in c.id]
    failed = 0
    for case in cases:
        t0 = time.monotonic()
        if args.ours or args.ref_vs_ref:
            if args.ref_vs_ref:
                os.environ["PYBEANSTALKD_DIFF_OURS"] = "reference"
            ref, ours = run_case(case)
            problems = compare(case, ref, ours)
            status = "ok" if not problems else "FAIL"
            failed += bool(problems)
            if problems or not args.q:
                print(f"{status:4} {case.id} ({time.monotonic() - t0:.2f}s)")
            if problems:
                print("     " + problems[0].replace("\n", "\n     "))
        else:
            (ra, rl, rleg), _ = sides()
            res = run_side(case, ra, rl, rleg)
            print(f"=== {case.id} ({time.monotonic() - t0:.2f}s) {res.error}")
            for ob in res.obs:
                exp = ob.step.expect if ob.step.expect is not None else ob.step.expect113
                bad = "  <-- EXPECTED " + _show(exp) if exp is not None and ob.key() != ("reply", exp) else ""
                print(f"  {ob.step.lineno:>4} {ob.step.text[:64]:<64} -> {ob.show()}{bad}")
    if args.ours or args.ref_vs_ref:
        print(f"{len(cases) - failed}/{len(cases)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

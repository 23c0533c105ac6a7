"""pybeanstalkd-admin: look at and operate any beanstalkd-protocol server
(pybeanstalkd or beanstalkd itself) over the protocol alone: stats, tubes,
a live top, peek, kick, bury, delete, put, pause, flush, move, tail and
groups (admin_groups.py); and over pybeanstalkd's HTTP side, a cluster
(`cluster`) and a tube's put-tag keys (`keys`, admin_keys.py).

On a terminal the tables are drawn to its width (low-value columns left out
when it is narrow, never a number cut). When stdout is not a terminal, or
rich is not installed, stats, tubes, top, peek, groups and keys are
tab-separated values with a header line, every number whole and without
thousands separators (admin_plain.py); the cluster report is drawn at its
full width (its JSON without rich); messages never use separators.

It imports nothing of pybeanstalkd outside ops/admin*: the protocol client
is admin_client.py, the connection options admin_options.py (TLS and
tokens: admin_tls.py), what is printed and how admin_out.py, the drawing
(rich, loaded only when something is drawn) admin_views.py, the failures
and their exit statuses admin_errors.py.

Exit status: 0 done; 1 the server refused (NOT_FOUND, JOB_TOO_BIG, ...);
2 bad usage (arguments, tube names, option files); 3 the server cannot be
reached, turned the connection away (TLS, a token) or the connection
broke; 130 interrupted."""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time

from .admin_client import MAX_U32, MAX_U64, Conn, body_text, check_tube
from .admin_errors import AdminError, UsageError
from .admin_groups import register as add_groups
from .admin_keys import register as add_keys
from .admin_options import connect, connection_flags, positive_float, ranged, resolve
from .admin_out import NO_RICH, PROG, console, emit_json, has_rich, jobs, on_terminal, say, views
from .admin_plain import job as plain_job, run_top as plain_top, stats as plain_stats, tubes as plain_tubes

STATES = ("ready", "delayed", "buried")
UNCUT = 10_000  # a width no report reaches: lines are as long as they need


def tube_or_fail(c: Conn, tube: str) -> dict:
    st = c.stats_tube(tube)
    if st is None:
        raise AdminError(f"tube {tube!r} not found on {c.where}")
    return st


# -- the commands; each returns its exit status


def cmd_stats(args) -> int:
    with connect(args) as c:
        stats = c.stats()
    if args.keys:
        missing = [k for k in args.keys if k not in stats]
        if missing:
            raise UsageError(f"no such stats key on {c.where}: {', '.join(missing)}")
        stats = {k: stats[k] for k in args.keys}
        if not args.json:
            for k in args.keys:
                v = stats[k]
                say(str(v).lower() if isinstance(v, bool) else v)
            return 0
    if args.json:
        emit_json(stats)
    elif not on_terminal():
        plain_stats(stats)
    else:
        views().show_stats(console(), stats, c.where)
    return 0


def cmd_tubes(args) -> int:
    with connect(args) as c:
        _, tubes = c.all_tubes()
    tubes.sort(key=lambda t: str(t.get("name")))
    if args.json:
        emit_json(tubes)
    elif not on_terminal():
        plain_tubes(tubes)
    else:
        views().show_tubes(console(), tubes, c.where)
    return 0


def cmd_top(args) -> int:
    run = views().run_top if on_terminal() else plain_top
    with connect(args) as c:
        try:
            run(c, args.interval, args.sort, args.iterations)
        except KeyboardInterrupt:
            pass  # Ctrl-C is how top is left: the terminal is already restored
    return 0


def cmd_peek(args) -> int:
    check_tube(args.tube)
    with connect(args) as c:
        tube_or_fail(c, args.tube)
        c.use(args.tube)
        found = c.peek_state(args.state)
        if found is None:
            raise AdminError(f"no {args.state} job in tube {args.tube!r}")
        job_id, body = found
        stats = c.stats_job(job_id)
    if args.json:
        import base64

        text = body_text(body)
        emit_json({"id": job_id, "stats": stats, "body": text,
                   "body_base64": base64.b64encode(body).decode("ascii")})
    elif not on_terminal():
        plain_job(job_id, stats, body, args.limit)
    else:
        views().show_job(console(), job_id, stats, body, args.limit)
    return 0


def cmd_kick(args) -> int:
    check_tube(args.tube)
    with connect(args) as c:
        before = tube_or_fail(c, args.tube)
        c.use(args.tube)
        n = c.kick(args.count)  # kick 0 answers KICKED 0, as beanstalkd does
    if args.count == 0:
        say(f"kicked 0 jobs in tube {args.tube!r}: a bound of 0 kicks nothing")
    elif n == 0:
        say(f"kicked 0 jobs: tube {args.tube!r} has no buried or delayed jobs")
    else:
        kind = "buried" if before.get("current-jobs-buried") else "delayed"
        say(f"kicked {jobs(n, kind + ' job')} in tube {args.tube!r}")
    return 0


def cmd_kick_job(args) -> int:
    with connect(args) as c:
        if c.kick_job(args.id):
            say(f"kicked job {args.id}")
            return 0
        job = c.stats_job(args.id)
    if job is None:
        raise AdminError(f"job {args.id}: NOT_FOUND: no such job")
    raise AdminError(f"job {args.id}: NOT_FOUND: it is {job.get('state')}; "
                     "only buried or delayed jobs can be kicked")


def cmd_delete(args) -> int:
    with connect(args) as c:
        results = c.delete_many(args.ids)
        failed = [i for i, r in zip(args.ids, results) if r != "DELETED"]
        why = {}
        for i in failed:
            job = c.stats_job(i)
            if job is None:
                why[i] = "no such job"
            elif job.get("state") == "reserved":
                why[i] = ("reserved by another connection: only the connection "
                          "holding it can delete it (or wait for its TTR)")
            else:
                why[i] = f"it is {job.get('state')} now"  # it changed state meanwhile
    for i, r in zip(args.ids, results):
        if r == "DELETED":
            say(f"job {i}: deleted")
        else:
            say(f"job {i}: NOT_FOUND: {why[i]}", err=True)
    return 1 if failed else 0


def cmd_put(args) -> int:
    check_tube(args.tube)
    if args.body is None or args.body == "-":
        if sys.stdin.isatty():
            # Else it would wait without a word for what the user may not know to type.
            say(f"{PROG}: reading the body from the terminal: type it, then Ctrl-D on a line "
                "of its own (or give BODY as an argument, or pipe it in)", err=True)
        body = sys.stdin.buffer.read()
    else:
        body = os.fsencode(args.body)
    with connect(args) as c:
        c.use(args.tube)
        r = c.put(body, args.pri, args.delay, args.ttr)
        if r.status == "INSERTED":
            say(r.int(1))
            return 0
        if r.status == "BURIED" and len(r.words) == 2:
            say(r.int(1))
            say(f"job {r.int(1)} was buried at once: the server is out of memory", err=True)
            return 1
        if r.status == "JOB_TOO_BIG":
            limit = c.stats().get("max-job-size", "?")
            raise AdminError(f"JOB_TOO_BIG: the body is {jobs(len(body), 'byte')}, "
                             f"the server's max-job-size is {limit}")
    msg = {"DRAINING": "the server is draining: it takes no new jobs",
           "OUT_OF_MEMORY": "the server is out of memory (or its binlog disk is full)"}
    raise AdminError(f"{r.status}: {msg.get(r.status, 'the job was not stored')}")


def cmd_pause(args) -> int:
    check_tube(args.tube)
    with connect(args) as c:
        if not c.pause_tube(args.tube, args.seconds):
            raise AdminError(f"tube {args.tube!r} not found on {c.where}")
    say(f"unpaused tube {args.tube!r}" if args.seconds == 0
        else f"paused tube {args.tube!r} for {args.seconds}s")
    return 0


def _flush_tube(args) -> int:
    """flush --flush-tube: the server deletes every job of the tube in one
    command (in slices on its side), reserved ones included."""
    with connect(args) as c:
        r = c.cmd(b"flush-tube %s\r\n" % args.tube.encode())
    if r.status == "FLUSHED":
        say(f"deleted {jobs(r.int(1))} from tube {args.tube!r} (flush-tube: every state)")
        return 0
    if r.status == "NOT_FOUND":
        say(f"deleted 0 jobs from tube {args.tube!r} (flush-tube: every state)")
        say(f"note: tube {args.tube!r} does not exist on {c.where}", err=True)
        return 0
    raise AdminError(f"flush-tube answered {' '.join(w.decode('latin-1') for w in r.words)}: "
                     "the server does not know it (pybeanstalkd needs --extensions)")


def cmd_flush(args) -> int:
    check_tube(args.tube)
    if args.flush_tube:
        if args.state != "all":
            raise UsageError("--flush-tube flushes every state: leave --state out")
        return _flush_tube(args)
    states = STATES if args.state == "all" else (args.state,)
    deleted = dict.fromkeys(states, 0)
    with connect(args) as c:
        before = c.stats_tube(args.tube)
        if before is None:
            # Nothing to flush: a second flush of a tube it emptied (the server
            # then frees the tube) succeeds as the first did.
            say(f"deleted 0 jobs from tube {args.tube!r} ("
                + ", ".join(f"{s} 0" for s in states) + ")")
            say(f"note: tube {args.tube!r} does not exist on {c.where}", err=True)
            return 0
        expected = sum(before.get(f"current-jobs-{s}", 0) for s in states)
        progress = None
        try:
            if expected >= 500 and sys.stderr.isatty() and has_rich():
                from rich.progress import Progress

                progress = Progress(console=views().Console(stderr=True), transient=True)
                progress.start()
                task = progress.add_task(f"flushing {args.tube}", total=expected)
            for deleted in c.flush(args.tube, states):
                if progress:
                    done = sum(deleted.values())
                    progress.update(task, completed=done, total=max(expected, done))
        except KeyboardInterrupt:
            say(f"interrupted: deleted {jobs(sum(deleted.values()))} from tube {args.tube!r}", err=True)
            return 130
        finally:
            if progress:
                progress.stop()
        after = c.stats_tube(args.tube) or {}
    detail = ", ".join(f"{s} {deleted[s]}" for s in states)
    say(f"deleted {jobs(sum(deleted.values()))} from tube {args.tube!r} ({detail})")
    if args.state == "all" and after.get("current-jobs-reserved"):
        n = after["current-jobs-reserved"]
        say(f"{jobs(n, 'reserved job')} left: only the " + (
            "connection holding it can delete it" if n == 1 else
            "connections holding them can delete them"), err=True)
    return 0


def cmd_bury(args) -> int:
    failed = 0
    with connect(args) as c:
        for job_id in args.ids:
            job = c.stats_job(job_id)
            why = None
            if job is None:
                why = "no such job"
            elif job.get("state") == "buried":
                say(f"job {job_id}: already buried")
                continue
            elif job.get("state") == "reserved":
                why = ("reserved by another connection: only the connection holding it "
                       "can bury it (or wait for its TTR)")
            else:
                pri = job.get("pri", 0) if args.pri is None else args.pri
                with _no_interrupt():  # (held between the two: Ctrl-C would make it ready)
                    if c.reserve_job(job_id) is None:
                        why = "reserved by another connection meanwhile, or deleted"
                    elif not c.bury(job_id, pri):
                        why = "gone before it could be buried"
            if why:
                say(f"job {job_id}: NOT_FOUND: {why}", err=True)
                failed += 1
            else:
                say(f"job {job_id}: buried (was {job.get('state')})")
    return 1 if failed else 0


def _move_one(c: Conn, src: str, dst: str, state: str) -> str:
    """Move the head job of a state from src to dst: put into dst, then
    deleted from src; its priority, ttr and (when delayed) the delay left
    are kept, buried jobs arrive ready, as the HTTP move does. 'moved',
    'none' (no job of that state left), 'skipped' (a worker took it
    meanwhile) or, the job left where it was, an AdminError.

    A ready job is held (reserve-job) while it moves, so that no worker
    takes it; a buried or delayed one is not, since a connection's close
    would make a held job ready at once. Ctrl-C waits until the job is
    in one tube. If the delete finds the job gone (a delayed job came due
    and a worker took it), the copy is deleted again: a job is never left
    in both tubes, but a connection lost between the put and the delete
    can leave it there."""
    c.use(src)
    found = c.peek_state(state)
    if found is None:
        return "none"
    job_id, body = found
    job = c.stats_job(job_id)
    if job is None or job.get("state") != state or job.get("tube") != src:
        return "skipped"
    held = state == "ready"
    if held:
        got = c.reserve_job(job_id)
        if got is None:
            return "skipped"
        body = got
    delay = job.get("time-left", 0) if state == "delayed" else 0
    with _no_interrupt():
        c.use(dst)
        r = c.put(body, job["pri"], delay, job["ttr"])
        if r.status in ("INSERTED", "BURIED"):
            if c.delete(job_id):
                return "moved"
            c.delete(r.int(1))  # the original went to a worker: no second copy
            return "skipped"
        if held:
            c.release(job_id, job["pri"], 0)  # back where it was
    msg = {"DRAINING": "the server is draining: it takes no new jobs",
           "OUT_OF_MEMORY": "the server is out of memory",
           "JOB_TOO_BIG": "the job is bigger than max-job-size"}
    raise AdminError(f"job {job_id} stays in {src!r}: put into {dst!r} answered "
                     f"{r.status}: {msg.get(r.status, 'not stored')}")


@contextlib.contextmanager
def _no_interrupt():
    """Hold SIGINT back (Ctrl-C comes after the block): a move's put and
    delete go together."""
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    except (AttributeError, ValueError):  # (no such call here, or not the main thread)
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def cmd_move(args) -> int:
    src, dst = args.tube, args.to
    check_tube(src)
    check_tube(dst)
    if src == dst:
        raise UsageError("a move needs two different tubes")
    moved = 0
    with connect(args) as c:
        before = c.stats_tube(src)
        if before is None:
            say(f"moved 0 jobs from tube {src!r} to {dst!r}")
            say(f"note: tube {src!r} does not exist on {c.where}", err=True)
            return 0
        # As kick, the bound is set at the start: a steady producer cannot keep it going.
        bound = before.get(f"current-jobs-{args.state}", 0)
        if args.count is not None:
            bound = min(bound, args.count)
        try:
            skips = 0
            while moved < bound and skips <= bound:
                outcome = _move_one(c, src, dst, args.state)
                if outcome == "none":
                    break
                if outcome == "moved":
                    moved += 1
                else:
                    skips += 1
        except KeyboardInterrupt:
            say(f"interrupted: moved {jobs(moved)} from tube {src!r} to {dst!r}", err=True)
            return 130
        except AdminError as e:
            if isinstance(e, UsageError) or moved == 0:
                raise
            raise type(e)(f"moved {jobs(moved)} from tube {src!r} to {dst!r}, then: {e}") from None
    say(f"moved {jobs(moved, args.state + ' job')} from tube {src!r} to {dst!r}")
    return 0


TAIL_STATES = ("ready", "reserved", "delayed", "buried")


def tail_changes(prev: dict | None, st: dict | None) -> list[str]:
    """What changed in a tube between two stats-tube samples (None: the tube
    did not exist), as lines; the first sample (prev None) says where it starts."""
    def counts(x):
        return " ".join(f"{s} {x.get('current-jobs-' + s, 0)}" for s in TAIL_STATES)

    if prev is None:
        if st is None:
            return ["no such tube yet: waiting for it"]
        return [f"following: {counts(st)}; {st.get('total-jobs', 0)} put so far"]
    if st is None:
        return ["gone: the server freed it (no jobs, nobody using or watching it)"] if prev else []
    lines = []
    if not prev:
        lines.append(f"created: {counts(st)}")
    puts = st.get("total-jobs", 0) - prev.get("total-jobs", 0)
    deletes = st.get("cmd-delete", 0) - prev.get("cmd-delete", 0)
    if puts < 0 or deletes < 0:  # freed and made again between two polls: counters restarted
        puts, deletes = st.get("total-jobs", 0), st.get("cmd-delete", 0)
    if puts:
        lines.append(f"put {puts} (total {st.get('total-jobs', 0)})")
    if deletes:
        lines.append(f"deleted {deletes}")
    for s in TAIL_STATES:
        a, b = prev.get(f"current-jobs-{s}", 0), st.get(f"current-jobs-{s}", 0)
        if a != b and prev:
            lines.append(f"{s} {a} -> {b}")
    if st.get("pause", 0) != prev.get("pause", 0) and prev:
        lines.append(f"paused for {st['pause']}s" if st.get("pause") else "unpaused")
    return lines


def cmd_tail(args) -> int:
    check_tube(args.tube)
    with connect(args) as c:
        prev, polls = None, 0
        try:
            while True:
                t = time.monotonic()
                st = c.stats_tube(args.tube)
                stamp = time.strftime("%H:%M:%S")
                for line in tail_changes(prev, st):
                    say(f"{stamp} {args.tube} {line}")
                prev = st or {}
                polls += 1
                if args.iterations and polls >= args.iterations:
                    break
                time.sleep(max(0.0, t + args.interval - time.monotonic()))
        except KeyboardInterrupt:
            pass  # Ctrl-C is how tail is left
    return 0


def cmd_cluster(args) -> int:
    from .admin_client import cluster_report, forget_node

    auth = args.http_auth or os.environ.get("PYBEANSTALKD_HTTP_AUTH") or None
    if args.forget is not None:
        where = forget_node(args.http, args.forget, auth, args.timeout)
        if args.json:
            emit_json({"forgot": args.forget, "leader_http": where})
        else:
            say(f"forgot {args.forget}: unregistered by the leader at {where}"
                " (if it starts again, it registers again)")
        return 0
    st, where, warning = cluster_report(args.http, auth, args.timeout)
    if args.json:
        emit_json(dict(st, warning=warning) if warning else st)
    elif not has_rich():
        say(f"{PROG}: the cluster report as JSON: {NO_RICH}", err=True)
        emit_json(dict(st, warning=warning) if warning else st)
    elif not sys.stdout.isatty():
        # A report on a few nodes, for people (scripts have --json): in a pipe
        # it is drawn as on a terminal, but at its full width, nothing cut.
        v = views()
        v.show_cluster(v.Console(width=UNCUT), st, where, warning)
    else:
        views().show_cluster(console(), st, where, warning)
    return 0


# -- arguments


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect and operate a beanstalkd-protocol server (pybeanstalkd or beanstalkd) "
                    "over the protocol.",
        epilog="Output: on a terminal, tables fitted to its width (never a number cut); "
               "otherwise (a pipe, a file) stats, tubes, top, groups and keys print tab-separated values with a "
               "header line and whole numbers without thousands separators, and cluster its "
               "report at full width; --json where offered. Exit status: 0 done, 1 refused by the server (NOT_FOUND, ...), 2 bad usage, "
               "3 cannot reach the server or it turned the connection away (TLS, a token), "
               "130 interrupted.")
    connection_flags(p, None)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    job_id = ranged("job id", 0, MAX_U64)

    def add(name, func, help, protocol=True):
        """A command; protocol: it speaks the protocol (not the HTTP side), so
        it takes the TLS and token options."""
        sp = sub.add_parser(name, help=help, description=help)
        # The connection flags work after the command too; unset there, the main parser's stand.
        connection_flags(sp, argparse.SUPPRESS, protocol)
        sp.set_defaults(func=func, protocol=protocol)
        return sp

    sp = add("stats", cmd_stats, "the server's stats, grouped; with KEYs, just their values")
    sp.add_argument("keys", nargs="*", metavar="KEY", help="print only these keys' values")
    sp.add_argument("--json", action="store_true", default=False, help="JSON for scripts")

    sp = add("tubes", cmd_tubes, "every tube's job counts, connections and pause (tab-separated "
             "when stdout is not a terminal)")
    sp.add_argument("--json", action="store_true", default=False, help="JSON for scripts")

    sp = add("top", cmd_top, "live view of every tube with rates per second (q or Ctrl-C quits)")
    sp.add_argument("-i", "--interval", type=positive_float, default=1.0,
                    help="seconds between refreshes (default 1)")
    sp.add_argument("--sort", choices=("name", "ready", "puts", "deletes"), default="name",
                    help="order of the tubes (default name)")
    sp.add_argument("-n", "--iterations", type=ranged("iterations", 0, 1 << 31), default=0,
                    help="stop after this many refreshes (default 0: until q)")

    sp = add("peek", cmd_peek, "show the next job of a state in a tube: id, stats-job, body")
    sp.add_argument("tube", metavar="TUBE")
    sp.add_argument("state", nargs="?", choices=STATES, default="ready")
    sp.add_argument("--limit", type=ranged("limit", 0, 1 << 40), default=65536,
                    help="show at most this many body bytes (default 65536; 0: all)")
    sp.add_argument("--json", action="store_true", default=False, help="JSON for scripts")

    sp = add("kick", cmd_kick, "kick up to N buried jobs of a tube (delayed ones if none is "
             "buried); N of 0 kicks nothing, as the protocol's kick 0")
    sp.add_argument("tube", metavar="TUBE")
    sp.add_argument("count", metavar="N", type=ranged("N", 0, MAX_U32))

    sp = add("kick-job", cmd_kick_job, "kick one buried or delayed job")
    sp.add_argument("id", type=job_id)

    sp = add("bury", cmd_bury, "bury jobs by id (reserve-job, then bury: beanstalkd 1.12 or "
             "later); not ones reserved by another connection")
    sp.add_argument("ids", nargs="+", metavar="ID", type=job_id)
    sp.add_argument("--pri", type=ranged("pri", 0, MAX_U32), default=None,
                    help="the buried job's priority (default: the one it has)")

    sp = add("delete", cmd_delete, "delete jobs by id (not ones reserved by another connection)")
    sp.add_argument("ids", nargs="+", metavar="ID", type=job_id)

    sp = add("put", cmd_put, "put a job; prints its id")
    sp.add_argument("tube", metavar="TUBE")
    sp.add_argument("body", nargs="?", metavar="BODY", help="the body; '-' or none: read stdin")
    sp.add_argument("--pri", type=ranged("pri", 0, MAX_U32), default=1024, help="priority (default 1024)")
    sp.add_argument("--delay", type=ranged("delay", 0, MAX_U32), default=0, help="seconds (default 0)")
    sp.add_argument("--ttr", type=ranged("ttr", 0, MAX_U32), default=60, help="seconds (default 60)")

    sp = add("pause", cmd_pause, "pause a tube for SECONDS (0 unpauses)")
    sp.add_argument("tube", metavar="TUBE")
    sp.add_argument("seconds", metavar="SECONDS", type=ranged("SECONDS", 0, MAX_U32))

    sp = add("flush", cmd_flush, "delete every job of a state in a tube (reserved ones stay); "
             "a tube that does not exist has 0 to flush")
    sp.add_argument("tube", metavar="TUBE")
    sp.add_argument("--state", choices=STATES + ("all",), default="all",
                    help="which jobs (default all: ready, delayed and buried)")
    sp.add_argument("--flush-tube", action="store_true",
                    help="one flush-tube command instead (a server with --extensions, or "
                         "tuber): every job of the tube, reserved ones included")

    sp = add("move", cmd_move, "move the jobs of a state from TUBE to TO, one at a time over "
             "the protocol: each is put into TO with its priority, ttr and delay left, then "
             "deleted from TUBE (a ready one is held with reserve-job meanwhile). Jobs get "
             "new ids; buried ones arrive ready")
    sp.add_argument("tube", metavar="TUBE")
    sp.add_argument("to", metavar="TO")
    sp.add_argument("--count", metavar="N", type=ranged("N", 0, MAX_U64), default=None,
                    help="at most this many (default: all there are when it starts)")
    sp.add_argument("--state", choices=STATES, default="ready", help="which jobs (default ready)")

    sp = add("tail", cmd_tail, "follow a tube: poll its stats-tube and print a line per change "
             "(puts, deletes, each state's count, pause). Counts, not jobs: what comes and goes "
             "between two polls is seen only in the counters")
    sp.add_argument("tube", metavar="TUBE")
    sp.add_argument("-i", "--interval", type=positive_float, default=1.0,
                    help="seconds between polls (default 1)")
    sp.add_argument("-n", "--iterations", type=ranged("iterations", 0, 1 << 31), default=0,
                    help="stop after this many polls (default 0: until Ctrl-C)")

    sp = add("cluster", cmd_cluster, "a cluster's leader, epoch, in-sync replicas and each "
             "node's lag, from any node's HTTP side (--cluster)", protocol=False)
    sp.add_argument("--http", required=True, metavar="HOST:PORT",
                    help="the HTTP side (--http) of any node; the leader's is asked for the lag")
    sp.add_argument("--http-auth", metavar="USER:PASSWORD",
                    help="for a node started with --http-auth (env PYBEANSTALKD_HTTP_AUTH)")
    sp.add_argument("--forget", metavar="NODE",
                    help="unregister NODE, gone for good: it must be out of the ISR (stopped)")
    sp.add_argument("--json", action="store_true", default=False, help="JSON for scripts")
    add_groups(add)
    add_keys(add)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        resolve(args, args.protocol)
        return args.func(args)
    except AdminError as e:
        say(f"{PROG}: {e}", err=True)
        return e.exit_code
    except KeyboardInterrupt:
        say(f"{PROG}: interrupted", err=True)
        return 130
    except BrokenPipeError:
        # `... | head`: the reader left; say nothing more.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""Two nodes and an etcd on loopback: the leader serves, the follower only
follows; kill -9 of the leader loses no acknowledged put, the follower
takes over within seconds, and its job ids go on from where no leader has
been."""
import asyncio
import inspect
import json
import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
import urllib.error
import urllib.request

import pytest

from history import History
from support import Client, Server, etcd_server, free_port, ours_argv, watch, watched_tails

pytest.importorskip("aetcd")
from pybeanstalkd.cluster.coord import Coordinator  # noqa: E402


@pytest.fixture
def etcd(tmp_path):
    with etcd_server(str(tmp_path / "etcd")) as addr:
        yield addr


def start(tmp_path, etcd, name, cluster="c1", sync="-f0", extra=()):
    peer, http = free_port(), free_port()
    os.makedirs(tmp_path / name, exist_ok=True)
    s = Server(ours_argv(), extra=["-b", str(tmp_path / name), sync, "--cluster", cluster,
                                   "--etcd", etcd if isinstance(etcd, str) else "%s:%d" % etcd,
                                   "--node", name,
                                   "--peer-listen", "127.0.0.1:%d" % peer,
                                   "--http", "127.0.0.1:%d" % http, *extra],
               env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    s.peer = peer
    s.log = tmp_path / f"{name}.log"
    keep_log(s.proc, s.log)
    watch(name, s.proc, s.log)
    s.http = http
    return s


def keep_log(proc, path):
    """The node's output, kept in a file for when a test fails."""
    import threading

    def pump(f, out):
        try:
            while data := f.read1(65536):
                out.write(data)
                out.flush()
        except (OSError, ValueError):
            pass
    out = open(path, "ab")
    for f in (proc.stdout, proc.stderr):
        threading.Thread(target=pump, args=(f, out), daemon=True).start()


def exit_status(srv, timeout: float) -> int:
    """srv's exit status once it exits within timeout; if it does not, its
    threads' stacks (faulthandler, on SIGABRT) and its log fail the test."""
    try:
        return srv.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        srv.proc.send_signal(signal.SIGABRT)
        srv.proc.wait(10)
        time.sleep(0.5)  # (keep_log's threads write the last of it)
        pytest.fail(f"no exit within {timeout} s; its log and stacks:\n"
                    + srv.log.read_text(errors="replace"))


def leader_status(srv) -> int:
    """GET /leader: what HAProxy's health check sees."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/leader" % srv.http, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def ask(srv, line: bytes, timeout=2.0):
    """The reply, or None if the node closes the connection (a follower)."""
    try:
        with srv.connect(timeout) as sock:
            c = Client(sock)
            return c.cmd(line)
    except (OSError, EOFError):
        return None


def wait_for(cond, timeout=60.0, step=0.05):
    """cond()'s first true value. (A busy machine, or tests run side by
    side, can make three nodes and etcd take many seconds to come up: the
    wait ends as soon as cond holds, so it may be long.) If it times out,
    the failure says what it waited for, which of the test's nodes and
    etcd members have exited, and the end of each one's log: a wait that
    fails once in many runs explains itself."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(step)
    time.sleep(0.2)  # (keep_log's threads write what the nodes said last)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {waited_for(cond)}\n"
                         + watched_tails())


def waited_for(cond) -> str:
    """The line of source a wait's condition is on, else its repr."""
    try:
        return inspect.getsource(cond).strip()
    except (OSError, TypeError):
        return repr(cond)


def jobs_on(srv, ids) -> dict:
    """id -> body of each of ids the server holds (peek)."""
    jobs = {}
    with srv.connect(timeout=30) as sock:
        c = Client(sock)
        for i in ids:
            r = c.cmd(b"peek %d\r\n" % i)
            if r.startswith(b"FOUND"):
                jobs[i] = r.split(b"\r\n")[1]
    return jobs


@contextmanager
def pair(tmp_path, etcd, cluster, sync="-f0", extra=()):
    """Nodes a (the leader) and b, once b is in the ISR; both stopped after
    (woken first, if a test paused one)."""
    a, b = start(tmp_path, etcd, "a", cluster, sync, extra), None
    try:
        wait_for(lambda: ask(a, b"list-tube-used\r\n"))  # a leads
        b = start(tmp_path, etcd, "b", cluster, sync, extra)
        wait_for(lambda: (isr(etcd, cluster) or (0, []))[1] == ["a", "b"])
        yield a, b
    finally:
        for node in (a, b):
            if node is not None:
                node.proc.send_signal(signal.SIGCONT)
                node.stop()


def isr(etcd, cluster="c1"):
    async def get():
        c = Coordinator(cluster, "test", *etcd)
        try:
            return await c.isr()
        finally:
            await c.close()
    return asyncio.run(get())


@pytest.mark.parametrize("sync", ["-f0", "-f50"])
def test_the_leader_dies_and_no_acknowledged_put_is_lost(tmp_path, etcd, sync):
    # With -f50 the follower acks what it holds in memory (and has written
    # to its binlog): a kill -9 of the leader still loses nothing.
    with pair(tmp_path, etcd, "c1", sync) as (a, b):
        assert ask(b, b"list-tube-used\r\n") is None  # a follower serves no client
        assert (leader_status(a), leader_status(b)) == (200, 503)
        h = History()
        with a.connect() as sock:
            c = Client(sock)
            for i in range(40):
                body = b"job-%03d" % i
                h.put_sent(body)
                reply = c.cmd(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
                assert reply.startswith(b"INSERTED ")
                h.put_acked(int(reply.split()[1]), body)
            for i in (1, 2, 3):
                h.send_delete(i)
                assert c.cmd(b"delete %d\r\n" % i) == b"DELETED\r\n"
                h.delete_acked(i)
            r = c.cmd(b"reserve-with-timeout 0\r\n")
            assert r.startswith(b"RESERVED 4 ")  # reserved there: ready again after failover
        a.proc.kill()
        a.proc.wait()
        died = time.monotonic()
        wait_for(lambda: (ask(b, b"put 0 0 60 1\r\nz\r\n") or b"").startswith(b"INSERTED"))
        failover = time.monotonic() - died
        assert failover < 10, failover
        print(f"failover: {failover:.2f} s from kill -9 to a put accepted")
        assert h.check(jobs_on(b, range(1, 45))) == []
        with b.connect() as sock:
            c = Client(sock)
            assert c.cmd(b"stats-job 4\r\n").find(b"state: ready") > 0
            r = c.cmd(b"put 0 0 60 1\r\ny\r\n")
            assert int(r.split()[1]) > max(h.acked)  # a new block of ids
        got = isr(etcd)
        assert got[1] == ["b"]  # a was dropped before b acknowledged alone
        assert leader_status(b) == 200


def http_put(srv, body: str):
    """POST /api/v1/tubes/default/put: (status, seconds it took)."""
    return http_action(srv, "/api/v1/tubes/default/put", {"body": body})


def http_action(srv, path: str, req: dict | None = None):
    """POST path (a dashboard action): (status, seconds it took)."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (srv.http, path),
                                 data=json.dumps(req or {}).encode(), method="POST",
                                 headers={"X-Pybeanstalkd": "1"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, time.monotonic() - t0
    except urllib.error.HTTPError as e:
        return e.code, time.monotonic() - t0


def test_a_silent_follower_leaves_the_isr_before_anything_is_acknowledged(tmp_path, etcd):
    with pair(tmp_path, etcd, "c2") as (a, b):
        assert ask(a, b"put 0 0 60 1\r\nx\r\n").startswith(b"INSERTED")
        delayed = int(ask(a, b"put 0 60 60 1\r\nd\r\n").split()[1])  # to kick
        doomed = int(ask(a, b"put 0 60 60 1\r\nk\r\n").split()[1])  # to delete
        assert http_put(b, "on-a-follower")[0] == 503  # only the leader changes jobs
        b.proc.send_signal(signal.SIGSTOP)
        with ThreadPoolExecutor(3) as pool:
            actions = [pool.submit(http_put, a, "y-http"),
                       pool.submit(http_action, a, f"/api/v1/jobs/{delayed}/kick"),
                       pool.submit(http_action, a, f"/api/v1/jobs/{doomed}/delete")]
            t0 = time.monotonic()
            assert ask(a, b"put 0 0 60 1\r\ny\r\n", timeout=10).startswith(b"INSERTED")
            waited = time.monotonic() - t0
            answered = [f.result() for f in actions]
        # Held until b was out of the ISR, in etcd: no ack rested on it; the
        # dashboard's actions (put, kick, delete) too.
        assert waited > 1.5, waited
        assert all(status == 200 and took > 1.5 for status, took in answered), answered
        assert isr(etcd, "c2")[1] == ["a"]
        b.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: (isr(etcd, "c2") or (0, []))[1] == ["a", "b"])  # caught up, back in
        t0 = time.monotonic()
        assert ask(a, b"put 0 0 60 1\r\nz\r\n").startswith(b"INSERTED")
        assert time.monotonic() - t0 < 1


def test_a_paused_leader_steps_down_and_acknowledges_nothing(tmp_path, etcd):
    with pair(tmp_path, etcd, "c3") as (a, b):
        sock = a.connect(timeout=30)
        c = Client(sock)
        assert c.cmd(b"put 0 0 60 2\r\nok\r\n") == b"INSERTED 1\r\n"
        a.proc.send_signal(signal.SIGSTOP)  # longer than its lease
        c.send(b"put 0 0 60 4\r\nlate\r\n")  # waits in the socket meanwhile
        wait_for(lambda: (ask(b, b"put 0 0 60 1\r\nb\r\n") or b"").startswith(b"INSERTED"))
        a.proc.send_signal(signal.SIGCONT)
        # It wakes up, reads the put, and never acknowledges it: its lease is
        # gone and b refuses its epoch. It exits to come back as a follower.
        assert exit_status(a, 15) == 75
        try:
            reply = c.line()
        except (OSError, EOFError):
            reply = None
        assert reply is None, reply
        sock.close()
        assert ask(b, b"peek 1\r\n") == b"FOUND 1 2\r\nok\r\n"
        assert leader_status(b) == 200


def test_a_leader_stopped_with_sigterm_hands_over_at_once(tmp_path, etcd):
    with pair(tmp_path, etcd, "c4") as (a, b):
        assert ask(a, b"put 0 0 60 2\r\nok\r\n") == b"INSERTED 1\r\n"
        t0 = time.monotonic()
        a.stop()  # SIGTERM: it resigns its lease
        wait_for(lambda: (ask(b, b"put 0 0 60 1\r\nb\r\n") or b"").startswith(b"INSERTED"))
        took = time.monotonic() - t0
        print(f"handover after SIGTERM: {took:.2f} s")
        assert took < 2.5, took  # not the 3 s lease: the next poll and the ISR's 1 s
        assert ask(b, b"peek 1\r\n") == b"FOUND 1 2\r\nok\r\n"


def test_with_f_ms_a_reply_does_not_wait_for_the_fsync(tmp_path, etcd):
    # One node in its ISR, fsyncs a second apart: a put is answered once
    # written (as without --cluster), not at the next fsync.
    a = start(tmp_path, etcd, "a", "c6", sync="-f1000")
    try:
        wait_for(lambda: ask(a, b"list-tube-used\r\n"))
        with a.connect() as sock:
            c = Client(sock)
            took = []
            for _i in range(5):
                t0 = time.monotonic()
                assert c.cmd(b"put 0 0 60 1\r\nx\r\n").startswith(b"INSERTED")
                took.append(time.monotonic() - t0)
        assert max(took) < 0.3, took
    finally:
        a.stop()


def test_a_failover_keeps_an_idp_key_and_a_held_aft_job(tmp_path, etcd):
    with pair(tmp_path, etcd, "x1", extra=("--extensions",)) as (a, b):
        with a.connect() as sock:
            c = Client(sock)
            assert c.cmd(b"put 0 0 60 1 idp:k grp:g\r\nm\r\n") == b"INSERTED 1\r\n"
            assert c.cmd(b"put 0 0 60 1 aft:g\r\nh\r\n") == b"INSERTED 2\r\n"
            assert c.cmd(b"put 0 0 60 1 idp:gone:3600\r\nx\r\n") == b"INSERTED 3\r\n"
            assert c.cmd(b"delete 3\r\n") == b"DELETED\r\n"
            assert c.cmd(b"put 5 0 60 1 idp:k\r\nm\r\n") == b"INSERTED 1 READY\r\n"
        a.proc.kill()
        a.proc.wait()
        wait_for(lambda: ask(b, b"list-tube-used\r\n"))  # b leads
        with b.connect() as sock:
            c = Client(sock)
            assert c.cmd(b"put 0 0 60 1 idp:k\r\nm\r\n") == b"INSERTED 1 READY\r\n"
            assert c.cmd(b"put 0 0 60 1 idp:gone\r\nm\r\n") == b"INSERTED 3 DELETED\r\n"
            assert c.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 1\r\nm\r\n"
            assert c.cmd(b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"  # 2: held
            assert b"waiting-jobs: 1\n" in c.cmd(b"stats-group g\r\n")
            assert c.cmd(b"delete 1\r\n") == b"DELETED\r\n"
            assert c.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED 2 1\r\nh\r\n"


def test_bodies_on_disk_survive_a_snapshot_and_a_failover(tmp_path, etcd):
    """--bodies-on-disk on real nodes: a follower that joins a leader whose
    bodies are in its binlog gets them in the snapshot (read back from the
    leader's files), keeps them in its own files, and serves them after a
    kill -9 of the leader, as every acknowledged put."""
    disk = ("--bodies-on-disk", "--body-ram-min", "0")
    a = start(tmp_path, etcd, "a", "d1", extra=disk)
    b = None
    try:
        wait_for(lambda: ask(a, b"list-tube-used\r\n"))  # a leads
        h = History()
        bodies = [b"%03d-" % i + b"x" * (i * 97 % 3000) for i in range(60)]
        with a.connect() as sock:
            c = Client(sock)

            def put(body):
                h.put_sent(body)
                reply = c.cmd(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
                assert reply.startswith(b"INSERTED ")
                h.put_acked(int(reply.split()[1]), body)
            for body in bodies[:30]:  # before the follower: in its snapshot
                put(body)
            assert b"body-bytes-in-ram: 0\n" in c.cmd(b"stats\r\n")
            b = start(tmp_path, etcd, "b", "d1", extra=disk)
            wait_for(lambda: (isr(etcd, "d1") or (0, []))[1] == ["a", "b"])
            for body in bodies[30:]:  # after: in the batches
                put(body)
            for i in (2, 31):
                h.send_delete(i)
                assert c.cmd(b"delete %d\r\n" % i) == b"DELETED\r\n"
                h.delete_acked(i)
        a.proc.kill()
        a.proc.wait()
        wait_for(lambda: ask(b, b"list-tube-used\r\n"))  # b leads
        assert h.check(jobs_on(b, range(1, 62))) == []
        with b.connect() as sock:
            c = Client(sock)
            st = c.cmd(b"stats\r\n")
            assert b"body-bytes-in-ram: 0\n" in st and b"current-jobs-ready: 58\n" in st
            assert c.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 %d\r\n%s\r\n" % (
                len(bodies[0]), bodies[0])
    finally:
        for node in (a, b):
            if node is not None:
                node.stop()


def test_a_wait_that_times_out_says_what_it_waited_for_and_what_the_nodes_said(tmp_path, etcd):
    a = start(tmp_path, etcd, "a", "tails")
    try:
        wait_for(lambda: "a leads" in a.log.read_text())
        a.proc.kill()
        a.proc.wait()
        with pytest.raises(AssertionError) as e:
            wait_for(lambda: ask(a, b"list-tube-used\r\n"), timeout=0.5)  # never: it is gone
    finally:
        a.stop()
    said = str(e.value)
    assert said.startswith("timed out after 0.5 s waiting for wait_for(lambda: ask(a, "), said
    assert "--- a (pid %d): exited -9; the end of %s:\n" % (a.proc.pid, a.log) in said, said
    assert "cluster tails: a leads, epoch " in said
    assert "--- etcd (pid " in said and ": running; the end of %s.log:\n" % (tmp_path / "etcd") in said
    assert "ready to serve client requests" in said, said  # (etcd's own line)

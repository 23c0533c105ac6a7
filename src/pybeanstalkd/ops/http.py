"""The HTTP side (--http): health, /metrics, the JSON API and the dashboard,
served by aiohttp on the protocol server's event loop (docs/HTTP-API.md).

Imported only when --http is given (aiohttp and prometheus_client are slow to
import). The server hands over its Server object (`srv`: the engine, its
reply gate, and flush(), which writes replies and schedules background
slices); this package never imports server/.

Actions run on the loop between protocol events, through the same queue
operations as the protocol (core/admin.py). Work over many jobs runs in the
engine's background slices while the handler awaits its result.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import pathlib
import re
import socket
from time import monotonic_ns

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import CONTENT_TYPE_LATEST

from ..core import admin, extensions, jobmoves
from ..core.job import RESERVED
from ..core.outcome import DONE, Outcome
from ..core.protocol import NS
from . import api, history, httpguard, metrics

DASHBOARD = pathlib.Path(__file__).resolve().parent / "dashboard"
CONTENT_TYPES = {
    ".html": "text/html", ".js": "text/javascript", ".css": "text/css",
    ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon",
    ".json": "application/json", ".map": "application/json", ".txt": "text/plain",
    ".woff2": "font/woff2",
}
STATIC_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")
MOVABLE = ("ready", "delayed", "buried")
# Open to anyone, with any Host: they tell whether to send clients here, and
# load balancers' health checks may send a Host of their own.
OPEN = ("/healthz", "/leader")
DEFAULT_TIMEOUTS = httpguard.Timeouts()  # (frozen: one instance serves every start())
NO_EXTENSIONS = "no put tags here: the server runs without --extensions"


def listen(host: str, port: int) -> socket.socket:
    """A listening socket for the HTTP side (bound before any user switch)."""
    err = None
    for family, kind, proto, _, addr in socket.getaddrinfo(
            host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(128)
        except OSError as e:
            sock.close()
            err = e
            continue
        sock.setblocking(False)
        return sock
    raise err if err is not None else OSError(f"no address for {host}")


def _error(status: int, text: str) -> web.Response:
    return web.json_response({"error": text}, status=status)


# What each action's failed outcome answers, per action: the status and
# the error's text (the protocol's table is core/replies.py). A put's texts
# are the protocol's reply words.
_NOT_LOGGED = (503, "the binlog could not record the delete")
STATUS: dict[str, dict[Outcome, tuple[int, str]]] = {
    "kick-job": {Outcome.NOT_FOUND: (404, "not found"),
                 Outcome.WRONG_STATE: (409, "not buried or delayed"),
                 Outcome.NO_ROOM: (503, "binlog full")},
    "delete": {Outcome.NOT_FOUND: (404, "no such job"), Outcome.NOT_LOGGED: _NOT_LOGGED},
    "put": {Outcome.TOO_BIG: (400, "JOB_TOO_BIG"), Outcome.DRAINING: (503, "DRAINING"),
            Outcome.OVER_CAP: (503, "OUT_OF_MEMORY"), Outcome.NO_ROOM: (503, "OUT_OF_MEMORY"),
            Outcome.IDS_USED_UP: (503, "INTERNAL_ERROR")},
    "move": {Outcome.NO_ROOM: (503, "binlog full"),
             Outcome.IDS_USED_UP: (503, "job ids are used up"), Outcome.NOT_LOGGED: _NOT_LOGGED,
             Outcome.UNREADABLE: (500, "a job's body could not be read from the binlog")},
    "flush": {Outcome.NOT_LOGGED: _NOT_LOGGED},
}


def _failed(action: str, outcome: Outcome, **done) -> web.Response:
    """An action's failure, with what it did before it stopped (`done`)."""
    status, text = STATUS[action][outcome]
    return web.json_response({"error": text, **done}, status=status)


class BodyTimeout(Exception):
    """An action's body did not come in time: 408, and the connection closes."""


class Http:
    def __init__(self, srv, auth: tuple[str, str] | None = None, dashboard=DASHBOARD, *,
                 allowed_hosts=(), listen_host: str | None = None,
                 body_timeout: float = httpguard.BODY_TIMEOUT_S, samples=None):
        self.srv = srv
        # The last minutes of the server's numbers (history.py), for the dashboard.
        self.history = samples if samples is not None else history.History(srv)
        self.auth = None if auth is None else ("%s:%s" % auth).encode()
        self.dashboard = pathlib.Path(dashboard)
        self.hosts = httpguard.Hosts(allowed_hosts, listen_host)
        self.making: dict = {}  # what -> the future of a shared reply being made (_shared)
        self.body_timeout = body_timeout
        # A put's body may be base64 in JSON: 4/3 of the job size, and some.
        size = max(1 << 20, srv.engine.max_job_size * 4 // 3 + (64 << 10))
        self.app = web.Application(middlewares=[self.guard], client_max_size=size)
        r = self.app.router
        r.add_get("/healthz", self.healthz)
        r.add_get("/readyz", self.readyz)
        r.add_get("/leader", self.leader)
        r.add_get("/metrics", self.metrics)
        r.add_get("/", self.index)
        r.add_get("/static/{file}", self.static)
        v1 = "/api/v1"
        r.add_get(v1 + "/stats", self.stats)
        r.add_get(v1 + "/tubes", self.tubes)
        r.add_get(v1 + "/tubes/{tube}", self.tube)
        r.add_get(v1 + "/tubes/{tube}/jobs", self.jobs)
        r.add_get(v1 + "/jobs/{id}", self.job)
        r.add_get(v1 + "/cluster", self.cluster)
        r.add_get(v1 + "/history", self.get_history)
        r.add_get(v1 + "/groups", self.groups)
        r.add_get(v1 + "/keys", self.keys)
        for path, fn in (("/tubes/{tube}/kick", self.kick), ("/tubes/{tube}/pause", self.pause),
                         ("/tubes/{tube}/put", self.put), ("/tubes/{tube}/move", self.move),
                         ("/tubes/{tube}/flush", self.flush), ("/jobs/{id}/kick", self.kick_job),
                         ("/jobs/{id}/delete", self.delete_job), ("/drain", self.drain),
                         ("/undrain", self.undrain),
                         ("/cluster/nodes/{node}/forget", self.forget_node)):
            r.add_post(v1 + path, fn)

    # -- plumbing -------------------------------------------------------------

    @property
    def engine(self):
        return self.srv.engine

    def now(self) -> int:
        """The monotonic clock, also the engine's "now" (for uptime)."""
        n = monotonic_ns()
        e = self.srv.engine
        if n > e.now:
            e.now = n
        return n

    def done(self):
        """After an action: sessions it woke go on, replies and binlog
        records go out, timers and slices are scheduled."""
        self.engine.settle(self.engine.now)
        self.srv.flush()

    async def slices(self, gen):
        """Run a generator of slices as background work (as a big kick) and
        wait for its value; other clients are served between slices."""
        fut = asyncio.get_running_loop().create_future()

        def run():
            try:
                value = yield from gen
            except Exception as e:  # a bug: fail the request, not the loop
                if not fut.done():
                    fut.set_exception(e)
            else:
                if not fut.done():
                    fut.set_result(value)
        self.engine.q.slices.spawn(run())
        self.done()
        return await fut

    @web.middleware
    async def guard(self, request: web.Request, handler):
        conn = httpguard.head_done(request)
        try:
            return await self._guarded(request, handler)
        finally:
            if conn is not None:
                conn.request_done()

    async def _guarded(self, request: web.Request, handler):
        if request.path not in OPEN:
            # Before anything else: a page on a rebound name learns nothing here.
            why = await self.hosts.refused(request.headers.getall("Host", []), request.raw_path)
            if why is not None:
                return _error(400, why)
        if (self.auth is not None and request.path not in OPEN
                and not self._authorized(request, self.auth)):
            return web.Response(status=401, text="authorization required\n",
                                headers={"WWW-Authenticate": 'Basic realm="pybeanstalkd"'})
        if request.method == "POST" and request.headers.get("X-Pybeanstalkd") != "1":
            return _error(403, "actions need the header X-Pybeanstalkd: 1")
        node = self.srv.cluster
        if request.method == "POST" and node is not None and node.role != "leader":
            # A follower's queue is the leader's copy: only the leader changes it.
            return _error(503, "not the cluster's leader")
        if self.srv.replaying and request.path not in ("/healthz", "/readyz", "/leader"):
            # The engine belongs to the replay's thread until it is done.
            return _error(503, "replaying the binlog")
        try:
            response = await handler(request)
        except api.BadRequest as e:
            return _error(400, str(e))
        except BodyTimeout:
            response = _error(408, "the request body took too long to come")
            response.force_close()
            return response
        if request.method == "POST":
            await self.durable()
        return response

    async def durable(self):
        """An action is answered as a protocol command is, by the server's
        reply gate: once the binlog records it wrote are as safe as the
        settings promise (written; with -f0 on disk; in a cluster also on
        every in-sync replica)."""
        await self.srv.gate.wait(self.engine.q.store.lsn)

    def _authorized(self, request, auth: bytes) -> bool:
        kind, _, cred = request.headers.get("Authorization", "").partition(" ")
        if kind.lower() != "basic":
            return False
        try:
            given = base64.b64decode(cred.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(given, auth)

    def _tube(self, request):
        name = api.tube_name(request.match_info["tube"])
        return name, self.engine.q.tubes.get(name)

    def _job_id(self, request) -> int:
        return api.text_integer(request.match_info["id"], "job id", 1)

    async def _body(self, request) -> dict:
        try:
            raw = await asyncio.wait_for(request.read(), self.body_timeout)
        except TimeoutError:
            raise BodyTimeout() from None
        except (HttpProcessingError, web.RequestPayloadError) as e:
            # a body aiohttp cannot decode (Content-Encoding, chunks)
            why = str(getattr(e, "message", None) or e).removeprefix("400, message:")
            raise api.BadRequest("the body cannot be read: "
                                 + httpguard.one_line(why, 100)) from None
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError:
            raise api.BadRequest("the body is not JSON") from None
        except RecursionError:
            raise api.BadRequest("the body is nested too deeply") from None
        if not isinstance(body, dict):
            raise api.BadRequest("the body must be a JSON object")
        return body

    # -- reading --------------------------------------------------------------

    async def healthz(self, request):
        return web.Response(text="ok\n")

    async def readyz(self, request):
        if self.srv.replaying:
            return web.json_response({"ready": False, "reason": "replaying"}, status=503)
        if self.engine.draining:
            return web.json_response({"ready": False, "reason": "draining"}, status=503)
        return web.json_response({"ready": True})

    async def leader(self, request):
        """200 where clients should go (HAProxy's health check): the
        cluster's leader, or a server with no --cluster; 503 elsewhere.
        With --cluster the body is the node's status, as in /api/v1/cluster
        (`leader`: the leader's name; `is_leader`: this node leads)."""
        node = self.srv.cluster
        if node is None:
            ok = not self.srv.replaying and not self.engine.draining
            return web.json_response({"is_leader": ok}, status=200 if ok else 503)
        st = node.status()
        return web.json_response(st, status=200 if st["is_leader"] else 503)

    async def cluster(self, request):
        node = self.srv.cluster
        if node is None:
            return _error(404, "not in a cluster (no --cluster)")
        return web.json_response(node.report())

    async def forget_node(self, request):
        """Unregister a node gone for good (the leader: followers answer 503)."""
        node = self.srv.cluster
        if node is None:
            return _error(404, "not in a cluster (no --cluster)")
        name = request.match_info["node"]
        refused = await node.forget(name)
        if refused is not None:
            kind, why = refused
            return _error({"unknown": 404, "conflict": 409}.get(kind, 503), why)
        return web.json_response({"forgot": name})

    async def metrics(self, request):
        body = await self._shared("metrics", self._render_metrics)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _render_metrics(self) -> bytes:
        # Rendered in parts with other events served in between: a scrape of
        # many active tubes would otherwise hold the loop for its whole time.
        return await self._parts(metrics.render(self.srv, self.now))

    @staticmethod
    async def _parts(gen):
        """A generator's value, other events served where it yields."""
        while True:
            try:
                next(gen)
            except StopIteration as done:
                return done.value
            await asyncio.sleep(0)

    async def _shared(self, what: str, make):
        """make()'s result, one at a time: requests that come while one is
        being made share it (what costs time and memory in the number of
        tubes is made once, however many ask at once)."""
        fut = self.making.get(what)
        if fut is None:
            fut = self.making[what] = asyncio.ensure_future(make())
            fut.add_done_callback(lambda _: self.making.pop(what, None))
        return await asyncio.shield(fut)

    async def stats(self, request):
        self.now()
        return web.json_response(api.stats(self.engine))

    async def get_history(self, request):
        after = request.query.get("after")
        after_ms = None if after is None else api.text_integer(after, "after")
        h = self.history
        return web.json_response({"interval": h.interval, "max": h.samples.maxlen,
                                  "samples": h.since(after_ms)})

    async def tubes(self, request):
        return web.json_response(await self._shared("tubes", self._tubes))

    async def _tubes(self) -> dict:
        # Many tubes are listed a slice at a time, other events served in between.
        now = self.now()
        names = sorted(self.engine.q.tubes.named)
        out = []
        for i in range(0, len(names), api.TUBES_SLICE):
            tubes = self.engine.q.tubes
            ext = self.engine.q.ext
            out += [api.tube_json(t, now, ext) for t in map(tubes.get, names[i:i + api.TUBES_SLICE])
                    if t is not None]
            if i + api.TUBES_SLICE < len(names):
                await asyncio.sleep(0)
        # (mono: when the list was read, on the server's clock in ms: the
        # dashboard's per-tube rates are reckoned from it)
        return {"tubes": out, "mono": now // 1_000_000}

    async def tube(self, request):
        name, t = self._tube(request)
        if t is None:
            return _error(404, "no such tube")
        return web.json_response({"tube": api.tube_json(t, self.now(), self.engine.q.ext)})

    async def groups(self, request):
        ext = self.engine.q.ext
        if ext is None:
            return _error(404, NO_EXTENSIONS)
        return web.json_response(await self._parts(api.groups(ext)))

    async def keys(self, request):
        ext = self.engine.q.ext
        if ext is None:
            return _error(404, NO_EXTENSIONS)
        tube = request.query.get("tube")
        if tube is None:
            raise api.BadRequest("?tube=NAME is required")
        return web.json_response(await self._parts(api.keys(ext, api.tube_name(tube), self.now)))

    async def jobs(self, request):
        name, t = self._tube(request)
        if t is None:
            return _error(404, "no such tube")
        query = request.query
        state = api.state(query.get("state", "ready"), tuple(admin.STATES))
        offset = api.text_integer(query.get("offset", "0"), "offset")
        limit = api.text_integer(query.get("limit", "50"), "limit", 0, api.MAX_LIMIT)
        q = self.engine.q
        total, jobs = await self.slices(admin.page(q, t, admin.STATES[state], offset, limit))
        now = self.now()
        jobs = [j for j in jobs if q.jobs.get(j.id) is j]  # (any deleted since)
        return web.json_response({"tube": name.decode(), "state": state, "total": total,
                                  "offset": offset, "limit": limit,
                                  "jobs": [api.job(j, now, q.tags.job_extra(q, j), q.store)
                                           for j in jobs]})

    async def job(self, request):
        j = self.engine.q.jobs.get(self._job_id(request))
        if j is None:
            return _error(404, "no such job")
        q = self.engine.q
        return web.json_response({"job": api.job(j, self.now(), q.tags.job_extra(q, j), q.store)})

    # -- actions --------------------------------------------------------------

    async def kick(self, request):
        req = await self._body(request)
        _, t = self._tube(request)
        n = api.integer(req.get("n", 1), "n")
        if t is None:
            return _error(404, "no such tube")
        kicked = await self.slices(jobmoves.kick(self.engine.q, t, n, self.now()))
        return web.json_response({"kicked": kicked})

    async def kick_job(self, request):
        await self._body(request)
        outcome = jobmoves.kick_job(self.engine.q, self._job_id(request), self.now())
        self.done()
        if outcome is not DONE:
            return _failed("kick-job", outcome)
        return web.json_response({"kicked": True})

    async def delete_job(self, request):
        await self._body(request)
        q = self.engine.q
        j = q.jobs.get(self._job_id(request))
        if j is None:
            return _failed("delete", Outcome.NOT_FOUND)
        if j.state == RESERVED:
            return _error(409, "the job is reserved: only its worker may delete it")
        outcome = admin.delete(q, j, self.now())
        self.done()
        if outcome is not DONE:
            # As the protocol's INTERNAL_ERROR: the job is gone from memory,
            # but its binlog does not say so, and a restart brings it back.
            return _failed("delete", outcome)
        return web.json_response({"deleted": True})

    async def pause(self, request):
        req = await self._body(request)
        _, t = self._tube(request)
        seconds = api.integer(req.get("seconds"), "seconds", 0, api.U32)
        if t is None:
            return _error(404, "no such tube")
        admin.pause(self.engine.q, t, seconds, self.now())
        self.done()
        return web.json_response({"paused": seconds})

    async def put(self, request):
        req = await self._body(request)
        name = api.tube_name(request.match_info["tube"])
        body = api.body_bytes(req)
        pri = api.integer(req.get("pri", 1024), "pri", 0, api.U32)
        delay = api.integer(req.get("delay", 0), "delay", 0, api.U32)
        ttr = api.integer(req.get("ttr", 60), "ttr", 0, api.U32)
        outcome, id_ = admin.put(self.engine, name, body, pri, delay * NS, ttr * NS, self.now())
        self.done()
        if outcome is not DONE:
            return _failed("put", outcome)
        return web.json_response({"id": id_})

    async def move(self, request):
        req = await self._body(request)
        name, t = self._tube(request)
        to = api.tube_name(req.get("to"))
        if to == name:
            raise api.BadRequest("a move needs another tube")
        state = api.state(req.get("state", "ready"), MOVABLE)
        n = api.integer(req.get("n", (1 << 63) - 1), "n")
        if t is None:
            return _error(404, "no such tube")
        moved, outcome = await self.slices(
            admin.move(self.engine, t, to, admin.STATES[state], n, self.now()))
        if outcome is not DONE:
            return _failed("move", outcome, moved=moved)
        return web.json_response({"moved": moved})

    async def flush(self, request):
        req = await self._body(request)
        _, t = self._tube(request)
        state = api.state(req.get("state"), MOVABLE + ("all", "tube"))
        if state == "tube" and self.engine.q.ext is None:
            raise api.BadRequest('"state": "tube" (flush-tube: every job, reserved ones too) '
                                 "needs a server started with --extensions")
        if t is None:
            return _error(404, "no such tube")
        if state == "tube":
            # flush-tube's jobs (reserved ones too, whoever holds them), in
            # slices; as every action, counted as no cmd-delete.
            flushed, outcome = await self.slices(
                extensions.flush_every(self.engine.q, t, self.now(), count=False))
            if outcome is not DONE:
                return _failed("flush", outcome, flushed=flushed)
            return web.json_response({"flushed": flushed})
        states = MOVABLE if state == "all" else (state,)

        def each_state():  # one state after another, as the CLI's flush --state all
            total = 0
            for s in states:
                n, outcome = yield from admin.flush(self.engine.q, t, admin.STATES[s], self.now())
                total += n
                if outcome is not DONE:
                    return total, outcome
            return total, DONE

        flushed, outcome = await self.slices(each_state())
        if outcome is not DONE:
            return _failed("flush", outcome, flushed=flushed)
        return web.json_response({"flushed": flushed})

    async def drain(self, request):
        await self._body(request)
        self.engine.draining = True
        return web.json_response({"draining": True})

    async def undrain(self, request):
        await self._body(request)
        self.engine.draining = False
        return web.json_response({"draining": False})

    # -- the dashboard (static files, written separately) ---------------------

    def _file(self, name: str) -> web.Response:
        path = self.dashboard / name
        try:
            found = STATIC_NAME.fullmatch(name) is not None and path.is_file()
        except OSError:  # (a name too long for the file system, and the like)
            found = False
        if not found:
            return web.Response(status=404, text="not found\n")
        kind = CONTENT_TYPES.get(path.suffix, "application/octet-stream")
        charset = "utf-8" if kind.startswith("text/") or kind.endswith(("json", "svg+xml")) else None
        return web.Response(body=path.read_bytes(), content_type=kind, charset=charset,
                            headers={"Cache-Control": "no-cache"})

    async def index(self, request):
        if not (self.dashboard / "index.html").is_file():
            return web.Response(status=404, text="the dashboard is not installed\n")
        return self._file("index.html")

    async def static(self, request):
        return self._file(request.match_info["file"])


class Serving:
    """The HTTP side, serving; the caller awaits cleanup() at shutdown."""

    def __init__(self, server, runner: web.AppRunner, samples: history.History | None = None):
        self.server = server  # the loop's, on the listening socket
        self.runner = runner
        self.history = samples

    async def cleanup(self):
        if self.history is not None:
            self.history.stop()
        self.server.close()
        await self.runner.cleanup()


async def start(srv, sock: socket.socket, auth=None, dashboard=DASHBOARD, *, allowed_hosts=(),
                listen_host: str | None = None, max_connections: int = httpguard.MAX_CONNECTIONS,
                timeouts: httpguard.Timeouts = DEFAULT_TIMEOUTS) -> Serving:
    """Serve on `sock`: each connection with its deadlines, at most
    `max_connections` at a time (httpguard.py)."""
    loop = asyncio.get_running_loop()
    log = srv.log if srv.verbose else None
    samples = history.History(srv)
    app = Http(srv, auth, dashboard, allowed_hosts=allowed_hosts, listen_host=listen_host,
               body_timeout=timeouts.body, samples=samples).app
    # (lingering_time: how long a rejected request's body is still read
    # before the close; aiohttp's 10 s would hold a late body's connection
    # that much past its 408)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=timeouts.idle,
                           lingering_time=timeouts.linger, logger=httpguard.ErrorLog(log),
                           shutdown_timeout=timeouts.shutdown)
    await runner.setup()
    conns = httpguard.Connections(loop, runner.server, max_connections, timeouts, log)
    server = await loop.create_server(conns, sock=sock, backlog=128)
    samples.start(loop)
    return Serving(server, runner, samples)


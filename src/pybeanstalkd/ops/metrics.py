"""/metrics: a prometheus_client Collector that reads the engine at scrape time.

No counter is kept twice: every value is read from the engine's state when
Prometheus scrapes, through the same field lists that `stats` and
`stats-tube` print (core/stats.py), so a scrape equals the protocol's view
and moves none of its counters. Names are davidtannock/beanstalkd_exporter's
(`beanstalkd_*`) where it has one; the stats fields it does not export get
names in its style, and our own metrics are `pybeanstalkd_*`
(docs/HTTP-API.md lists them all).
"""
from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from ..core import hist
from ..core.protocol import NS
from ..core.cmdtable import CMD_KEYS
from ..core.stats import server_fields, tube_fields

COUNTER, GAUGE = "counter", "gauge"

# stats key -> (metric name, type, help). A counter's name here is its
# sample's name (prometheus_client adds `_total` to the family's).
SERVER = {
    b"current-jobs-urgent": ("beanstalkd_current_jobs_urgent_count", GAUGE, "Ready jobs with priority < 1024."),
    b"current-jobs-ready": ("beanstalkd_current_jobs_ready_count", GAUGE, "Jobs in the ready queue."),
    b"current-jobs-reserved": ("beanstalkd_current_jobs_reserved_count", GAUGE, "Jobs reserved by all clients."),
    b"current-jobs-delayed": ("beanstalkd_current_jobs_delayed_count", GAUGE, "Delayed jobs."),
    b"current-jobs-buried": ("beanstalkd_current_jobs_buried_count", GAUGE, "Buried jobs."),
    **{b"cmd-" + k.encode(): ("beanstalkd_cmd_%s_total" % k.replace("-", "_"), COUNTER,
                              "The cumulative number of %s commands." % k) for k in CMD_KEYS},
    b"job-timeouts": ("beanstalkd_job_timeouts_count", GAUGE, "The cumulative count of times a job has timed out."),
    b"total-jobs": ("beanstalkd_total_jobs_count", GAUGE, "The cumulative count of jobs created."),
    b"max-job-size": ("beanstalkd_max_job_size_bytes", GAUGE, "The maximum number of bytes in a job (-z)."),
    b"current-tubes": ("beanstalkd_current_tubes_count", GAUGE, "Currently existing tubes."),
    b"current-connections": ("beanstalkd_current_connections_count", GAUGE, "Currently open connections."),
    b"current-producers": ("beanstalkd_current_producers_count", GAUGE, "Open connections that have issued a put."),
    b"current-workers": ("beanstalkd_current_workers_count", GAUGE, "Open connections that have issued a reserve."),
    b"current-waiting": ("beanstalkd_current_waiting_count", GAUGE, "Connections waiting in a reserve."),
    b"total-connections": ("beanstalkd_total_connections_count", GAUGE, "The cumulative count of connections."),
    b"pid": ("beanstalkd_pid", GAUGE, "The server's process id."),
    b"rusage-utime": ("beanstalkd_rusage_utime_seconds_total", COUNTER, "User CPU time of the process."),
    b"rusage-stime": ("beanstalkd_rusage_stime_seconds_total", COUNTER, "System CPU time of the process."),
    b"uptime": ("beanstalkd_uptime_seconds", GAUGE, "Seconds since the server started."),
    b"binlog-oldest-index": ("beanstalkd_binlog_oldest_index", GAUGE, "Index of the oldest binlog file."),
    b"binlog-current-index": ("beanstalkd_binlog_current_index", GAUGE, "Index of the binlog file being written."),
    b"binlog-records-migrated": ("beanstalkd_binlog_records_migrated_total", COUNTER,
                                 "Binlog records rewritten by compaction."),
    b"binlog-records-written": ("beanstalkd_binlog_records_written_total", COUNTER, "Binlog records written."),
    b"binlog-max-size": ("beanstalkd_binlog_max_size_bytes", GAUGE, "Size of each binlog file (-s)."),
}
NOT_NUMERIC = {b"version", b"draining", b"id", b"hostname", b"os", b"platform"}  # draining: pybeanstalkd_draining
# Shown under a name of ours (Scrape._ext, with the other --extensions gauges).
# pybeanstalkd_concurrency_keys; pybeanstalkd_body_bytes (Scrape._rest)
OURS = {b"current-concurrency-keys", b"body-bytes-on-disk", b"body-bytes-in-ram"}

TUBE = {
    b"current-jobs-urgent": ("beanstalkd_tube_current_jobs_urgent_count", GAUGE, "Ready jobs with priority < 1024."),
    b"current-jobs-ready": ("beanstalkd_tube_current_jobs_ready_count", GAUGE, "Jobs in the ready queue."),
    b"current-jobs-reserved": ("beanstalkd_tube_current_jobs_reserved_count", GAUGE, "Jobs reserved."),
    b"current-jobs-delayed": ("beanstalkd_tube_current_jobs_delayed_count", GAUGE, "Delayed jobs."),
    b"current-jobs-buried": ("beanstalkd_tube_current_jobs_buried_count", GAUGE, "Buried jobs."),
    b"total-jobs": ("beanstalkd_tube_total_jobs_count", GAUGE, "The cumulative count of jobs created."),
    b"current-using": ("beanstalkd_tube_current_using_count", GAUGE, "Connections using the tube."),
    b"current-watching": ("beanstalkd_tube_current_watching_count", GAUGE, "Connections watching the tube."),
    b"current-waiting": ("beanstalkd_tube_current_waiting_count", GAUGE, "Connections waiting in a reserve."),
    b"cmd-delete": ("beanstalkd_tube_cmd_delete_total", COUNTER, "The cumulative number of delete commands."),
    b"cmd-pause-tube": ("beanstalkd_tube_cmd_pause_tube_total", COUNTER,
                        "The cumulative number of pause-tube commands."),
    # Gauges despite the suffix: the names are the exporter's.
    b"pause": ("beanstalkd_tube_pause_seconds_total", GAUGE, "Seconds the tube has been paused for."),
    b"pause-time-left": ("beanstalkd_tube_pause_time_left_seconds_total", GAUGE,
                         "Seconds until the tube is unpaused."),
}
OUTCOMES = ("delete", "release", "bury")  # Tube.work_hist's order

# --extensions (the put tags' state, core/tags.py's ExtState): per tube,
# ExtState's counter by tube name -> (metric name, type, help).
EXT_TUBE = {
    "dedup": ("pybeanstalkd_tube_dedup_hits_total", COUNTER,
              "Puts answered with the job already holding their idp: key (or its cooldown)."),
    "held": ("pybeanstalkd_tube_held_jobs", GAUGE, "aft: jobs held until their group completes."),
    "blocked": ("pybeanstalkd_tube_concurrency_blocked_jobs", GAUGE,
                "Ready jobs hidden from reserves while their con: key is at its limit."),
}


def number(key: bytes, v) -> float | int:
    """A stats value as a number (rusage values are text like b"0.120000")."""
    return float(v) if type(v) is bytes else v


def _family(name: str, kind: str, doc: str, labels=None):
    if kind == COUNTER:
        return CounterMetricFamily(name[:-len("_total")], doc, labels=labels)
    return GaugeMetricFamily(name, doc, labels=labels)


def _hist_buckets(h: hist.Hist, exps: tuple[int, ...]):
    out, count, total = h.buckets(exps)
    return [(floatToGoString(le), n) for le, n in out], total / NS


class Part:
    """A collector of a list of families (generate_latest reads any object
    with a collect())."""

    def __init__(self, families: list):
        self.families = families

    def collect(self):
        return self.families


# A part of a scrape is rendered at once; between parts the loop serves
# other events. Sized in sample lines, which is what the rendering costs
# (about 13 us a line): about 1 ms a part.
PART_LINES = 50


class Scrape:
    """One scrape: the families, a part at a time, read from the engine as
    each part is rendered. A tube's samples are read together."""

    def __init__(self, srv, clock):
        self.srv = srv
        self.clock = clock  # monotonic ns

    def parts(self):
        """Lists of families; together, every family of the exposition."""
        e = self.srv.engine
        q = e.q
        self.clock()  # (also brings the engine's now, for uptime, up to date)
        yield [GaugeMetricFamily("beanstalkd_up", "1: the server answers (as the exporter's).", value=1),
               *self._server(e, q)]
        tubes = sorted(q.tubes.named.values(), key=lambda t: t.name)
        part, lines, first = [], 0, True
        per_tube = len(TUBE) + 2 + (len(EXT_TUBE) if q.ext is not None else 0)
        for t in tubes:
            part.append(t)
            lines += per_tube + sum(
                len(hist.JOB_LE) + 3 for h in (t.wait_hist, *(t.work_hist or ())) if h is not None)
            if lines >= PART_LINES:
                yield self._tubes(part, first)
                part, lines, first = [], 0, False
        if part or first:
            yield self._tubes(part, first)
        yield list(self._rest(e))

    def _server(self, e, q):
        for key, v in server_fields(q, e.counts, e):
            if key in NOT_NUMERIC or key in OURS:
                continue
            name, kind, doc = SERVER[key]
            f = _family(name, kind, doc)
            f.add_metric([], number(key, v))
            yield f

    def _tubes(self, tubes, first: bool) -> list:
        """The per-tube families of these tubes: all of them in the first
        part (which fixes their order), only those with samples after."""
        now = self.clock()
        names = [t.name.decode("latin-1") for t in tubes]
        fams = {k: _family(name, kind, doc, ["tube"]) for k, (name, kind, doc) in TUBE.items()}
        for t, label in zip(tubes, names):
            for key, v in tube_fields(t, now):
                f = fams.get(key)
                if f is not None:
                    f.add_metric([label], v)
        wait = HistogramMetricFamily("pybeanstalkd_tube_job_wait_seconds",
                                     "Time from ready to reserved.", labels=["tube"])
        work = HistogramMetricFamily("pybeanstalkd_tube_job_work_seconds",
                                     "Time from reserved (or the last touch) to delete, release or bury.",
                                     labels=["tube", "outcome"])
        timeouts = CounterMetricFamily("pybeanstalkd_tube_timeouts", "TTR expiries.", labels=["tube"])
        buries = CounterMetricFamily("pybeanstalkd_tube_buries", "Buries.", labels=["tube"])
        used_up = CounterMetricFamily("pybeanstalkd_tube_tries_used_up",
                                      "Jobs buried because their tries were used up (--max-tries).",
                                      labels=["tube"])
        # A histogram with no observations is left out (it appears with its
        # first one): most of a scrape's text and time went to idle tubes' series.
        for t, label in zip(tubes, names):
            if t.wait_hist is not None:
                wait.add_metric([label], *_hist_buckets(t.wait_hist, hist.JOB_LE))
            for outcome, h in zip(OUTCOMES, t.work_hist or ()):
                if h.count():
                    work.add_metric([label, outcome], *_hist_buckets(h, hist.JOB_LE))
            timeouts.add_metric([label], t.timeouts)
            buries.add_metric([label], t.buries)
            used_up.add_metric([label], t.tries_used_up)
        out = [*fams.values(), wait, work, timeouts, buries, used_up]
        ext = self.srv.engine.q.ext
        if ext is not None:
            for attr, (name, kind, doc) in EXT_TUBE.items():
                f = _family(name, kind, doc, ["tube"])
                counter = getattr(ext, attr)
                for t, label in zip(tubes, names):
                    f.add_metric([label], counter.get(t.name, 0))
                out.append(f)
        return out if first else [f for f in out if f.samples]

    def _rest(self, e):
        syncer = self.srv.syncer
        wal = syncer.wal if syncer is not None else None
        yield CounterMetricFamily("pybeanstalkd_binlog_bytes_written", "Bytes of records written to the binlog.",
                                  value=wal.written if wal is not None else 0)
        fsync = HistogramMetricFamily("pybeanstalkd_binlog_fsync_seconds", "fsync latency of the binlog.")
        h = syncer.fsync_hist if syncer is not None else hist.Hist()
        fsync.add_metric([], *_hist_buckets(h, hist.FSYNC_LE))
        yield fsync
        yield GaugeMetricFamily("pybeanstalkd_memory_used_bytes", "What stored jobs use, as --max-memory counts.",
                                value=e.q.memory_used())
        yield GaugeMetricFamily("pybeanstalkd_memory_cap_bytes", "--max-memory (0: no cap).",
                                value=e.max_memory or 0)
        yield GaugeMetricFamily("pybeanstalkd_draining", "1 while draining.", value=int(e.draining))
        store = e.q.store
        body = GaugeMetricFamily("pybeanstalkd_body_bytes", "Stored jobs' bodies (CRLFs included), "
                                 "by where they are: in RAM, or left in the binlog's files "
                                 "(--bodies-on-disk).", labels=["where"])
        body.add_metric(["ram"], e.q.body_bytes - store.on_disk)
        body.add_metric(["disk"], store.on_disk)
        yield body
        if e.bodies_on_disk:
            yield CounterMetricFamily("pybeanstalkd_body_read_errors", "Bodies the binlog could not "
                                      "give back (each answered INTERNAL_ERROR).",
                                      value=store.bodies.errors)
            yield CounterMetricFamily("pybeanstalkd_body_checksum_errors", "Of the body read errors: "
                                      "bodies read whole whose bytes failed their CRC-32 (changed "
                                      "on disk).", value=store.bodies.mismatches)
        if e.q.ext is not None:
            yield from self._ext(e.q.ext)
        if self.srv.cluster is not None:
            yield from cluster(self.srv.cluster.report())

    @staticmethod
    def _ext(ext):
        """--extensions: the put tags' server-wide state, each a len() (no
        walk over jobs, groups or keys)."""
        for name, doc, n in (
                ("pybeanstalkd_groups", "Groups named by a grp: or aft: put, until their last member is deleted.",
                 len(ext.groups)),
                ("pybeanstalkd_idempotency_keys", "idp: keys held by a job.", ext.nkeys),
                ("pybeanstalkd_idempotency_cooldowns", "idp: keys kept after their job's delete "
                 "(its TTL; one that has run out may count until the next timer pass).",
                 ext.ncools),
                ("pybeanstalkd_concurrency_keys", "con: keys with reservations held now "
                 "(stats' current-concurrency-keys).", ext.concurrency_keys())):
            yield GaugeMetricFamily(name, doc, value=n)


def cluster(st: dict):
    """--cluster: this node's role, the leader it knows and the epoch (as in
    GET /leader and /api/v1/cluster); on the leader, each node's lag."""
    yield GaugeMetricFamily("pybeanstalkd_cluster_is_leader", "1 on the cluster's leader, 0 elsewhere.",
                            value=int(st["is_leader"]))
    info = GaugeMetricFamily("pybeanstalkd_cluster_leader_info",
                             "1, labelled with the leader's name, while this node knows one.",
                             labels=["leader"])
    if st["leader"]:
        info.add_metric([st["leader"]], 1)
    yield info
    yield GaugeMetricFamily("pybeanstalkd_cluster_epoch", "The epoch led (leader) or followed (follower).",
                            value=st["epoch"])
    if "applied_seq" in st:  # a follower's report (or one still becoming leader)
        yield GaugeMetricFamily("pybeanstalkd_cluster_applied_batch",
                                "The last batch of the followed epoch this follower applied.",
                                value=st["applied_seq"])
        return
    yield GaugeMetricFamily("pybeanstalkd_cluster_isr_members", "Members of the in-sync replica set.",
                            value=len(st["isr"]))
    fams = [GaugeMetricFamily(name, doc, labels=["node"]) for name, doc in (
        ("pybeanstalkd_cluster_replica_in_isr", "1 if the node is in the in-sync replica set."),
        ("pybeanstalkd_cluster_replica_connected", "1 if the leader has a link to the node."),
        ("pybeanstalkd_cluster_replica_lag_batches", "Batches shipped and not yet acked by the node."),
        ("pybeanstalkd_cluster_replica_lag_bytes", "Binlog bytes not yet acked by the node."),
        ("pybeanstalkd_cluster_replica_lag_seconds", "Age of the oldest batch the node has not acked."))]
    in_isr, connected, *lags = fams
    for r in st["nodes"]:
        if r["name"] == st["node"]:
            continue
        in_isr.add_metric([r["name"]], int(r["in_isr"]))
        connected.add_metric([r["name"]], int(r["connected"]))
        if r["connected"]:  # (no lag without a link)
            for f, key in zip(lags, ("lag_batches", "lag_bytes", "lag_seconds")):
                f.add_metric([r["name"]], r[key])
    yield from fams


def render(srv, clock):
    """The exposition (bytes), as a generator: it yields between parts (the
    caller may serve other events there) and returns the text."""
    order: list[bytes] = []  # families, in the order they first appear
    blocks: dict[bytes, list[bytes]] = {}  # name -> [its HELP, TYPE and sample lines]
    for families in Scrape(srv, clock).parts():
        got, fresh, lines = None, False, []
        for line in generate_latest(Part(families)).splitlines(keepends=True):
            if line.startswith(b"# HELP "):
                if lines:
                    got.append(b"".join(lines))  # (one object a family a part, not a line)
                    lines = []
                name = line.split(b" ", 3)[2]
                got = blocks.get(name)
                fresh = got is None
                if fresh:
                    order.append(name)
                    got = blocks[name] = [line]
            elif not line.startswith(b"# TYPE ") or fresh:  # (a later part's TYPE: dropped)
                lines.append(line)
        if lines:
            got.append(b"".join(lines))
        yield
    return b"".join(b"".join(blocks[name]) for name in order)


def render_all(srv, clock) -> bytes:
    """The exposition in one go (for tests and tools)."""
    gen = render(srv, clock)
    while True:
        try:
            next(gen)
        except StopIteration as done:
            return done.value

"""What pybeanstalkd-admin's stats, tubes, top, peek, groups and keys print when
stdout is not a terminal (a pipe, a file) or rich is not installed:
tab-separated values, a header line first, every value whole (no thousands
separators, nothing cut to a width), one token per cell so that `cut -f`,
`awk` and `sort -k` work. No rich needed.

Also top's per-second rates, which both this and the drawn view use."""
from __future__ import annotations

import sys
import time

TUBE_COLUMNS = (("tube", "name"), ("ready", "current-jobs-ready"),
                ("reserved", "current-jobs-reserved"), ("delayed", "current-jobs-delayed"),
                ("buried", "current-jobs-buried"), ("urgent", "current-jobs-urgent"),
                ("waiting", "current-waiting"), ("watching", "current-watching"),
                ("using", "current-using"), ("pause", "pause"),
                ("pause-left", "pause-time-left"), ("total", "total-jobs"))


def cell(v) -> str:
    """One value as a single token: booleans lowercase, None as '-', and tabs or
    newlines (never in the protocol's values) turned into spaces."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    return str(v).replace("\t", " ").replace("\n", " ")


def write_rows(header: list[str], rows, out=None):
    out = out or sys.stdout
    out.write("\t".join(header) + "\n")
    for row in rows:
        out.write("\t".join(cell(v) for v in row) + "\n")
    out.flush()


def stats(stats: dict):
    write_rows(["key", "value"], stats.items())


def job(job_id: int, stats: dict | None, body: bytes, limit: int):
    """peek: `key value` rows (id, stats-job, body-bytes), an empty line, then the
    body's bytes as they are, cut to `limit` (0: all) with a note on stderr."""
    rows = [("id", job_id), *(stats or {}).items(), ("body-bytes", len(body))]
    write_rows(["key", "value"], rows)
    shown = body if not limit or len(body) <= limit else body[:limit]
    sys.stdout.write("\n")
    sys.stdout.flush()
    sys.stdout.buffer.write(shown)
    sys.stdout.buffer.flush()
    if len(shown) < len(body):
        print(f"pybeanstalkd-admin: body cut to {len(shown)} of {len(body)} bytes (--limit 0 shows all)",
              file=sys.stderr)


def tubes(tubes: list[dict]):
    write_rows([h for h, _ in TUBE_COLUMNS],
               ([t.get(k, 0) for _, k in TUBE_COLUMNS] for t in tubes))


GROUP_COLUMNS = (("group", "name"), ("ready", "ready"), ("reserved", "reserved"),
                 ("delayed", "delayed"), ("buried", "buried"), ("waiting", "waiting-jobs"))


def groups(groups: list[dict]):
    """stats-group of each group: waiting, the aft: jobs it holds."""
    write_rows([h for h, _ in GROUP_COLUMNS],
               ([g.get(k, 0) for _, k in GROUP_COLUMNS] for g in groups))


def keys(d: dict):
    """GET /api/v1/keys' answer: the keys held (kind `key`, no end), then
    those in their cooldown (kind `cooldown`, the deleted job, seconds left)."""
    write_rows(["kind", "key", "job", "ends-in-s"],
               [*(["key", k["key"], k["job"], None] for k in d.get("keys", ())),
                *(["cooldown", c["key"], c["job"], c["ends_in_s"]] for c in d.get("cooldowns", ()))])


def rate(r: float | None) -> str:
    return "-" if r is None else f"{r:.1f}"


def top_rows(tubes: list[dict], tube_rates: dict, at: float) -> list[list]:
    """One refresh of top as rows: the time (Unix seconds), then the tube's
    columns and its puts/s and deletes/s ('-' on the first refresh)."""
    stamp = f"{at:.3f}"
    rows = []
    for t in tubes:
        r = tube_rates.get(t.get("name"))
        rows.append([stamp, *(t.get(k, 0) for _, k in TUBE_COLUMNS),
                     rate(r[0] if r else None), rate(r[1] if r else None)])
    return rows


SORTS = {
    "name": lambda t, r: (0, str(t.get("name"))),
    "ready": lambda t, r: (-t.get("current-jobs-ready", 0), str(t.get("name"))),
    "puts": lambda t, r: (-(r or (0, 0))[0], str(t.get("name"))),
    "deletes": lambda t, r: (-(r or (0, 0))[1], str(t.get("name"))),
}
TOP_HEADER = ["time", *(h for h, _ in TUBE_COLUMNS), "puts/s", "deletes/s"]


def run_top(conn, interval: float, sort: str = "name", iterations: int = 0):
    """top without a terminal: the header once, then every tube's row at each
    refresh (like vmstat), until the given number of refreshes or Ctrl-C."""
    rates = Rates()
    write_rows(TOP_HEADER, [])
    done = 0
    while True:
        t = time.monotonic()
        server, tubes_now = conn.all_tubes()
        _, tube_rates = rates.update(t, server, tubes_now)
        order = sorted(tubes_now, key=lambda x: SORTS[sort](x, tube_rates.get(x.get("name"))))
        for row in top_rows(order, tube_rates, time.time()):
            sys.stdout.write("\t".join(cell(v) for v in row) + "\n")
        sys.stdout.flush()
        done += 1
        if iterations and done >= iterations:
            return
        time.sleep(max(0.0, t + interval - time.monotonic()))


class Rates:
    """Per-second rates from counter deltas between two samples. A tube absent
    from the previous sample was created since, at 0; a counter that went down
    (the tube was freed and made again) counts from 0 too."""

    def __init__(self):
        self.prev = None

    def update(self, t: float, server: dict, tubes: list[dict]):
        prev, self.prev = self.prev, (t, server, {x.get("name"): x for x in tubes})
        if prev is None or t <= prev[0]:
            return None, {x.get("name"): None for x in tubes}
        dt = t - prev[0]
        pserver, ptubes = prev[1], prev[2]

        def delta(now: dict, before: dict, *keys):
            a = sum(now.get(k, 0) for k in keys)
            b = sum(before.get(k, 0) for k in keys)
            return (a - b if a >= b else a) / dt

        tube_rates = {}
        for x in tubes:
            before = ptubes.get(x.get("name"), {})
            tube_rates[x.get("name")] = (delta(x, before, "total-jobs"), delta(x, before, "cmd-delete"))
        if server.get("pid") != pserver.get("pid") or server.get("uptime", 0) < pserver.get("uptime", 0):
            return None, tube_rates  # another server process: its counters restarted
        server_rates = {
            "put": delta(server, pserver, "cmd-put"),
            "reserve": delta(server, pserver, "cmd-reserve", "cmd-reserve-with-timeout"),
            "delete": delta(server, pserver, "cmd-delete"),
            "timeouts": delta(server, pserver, "job-timeouts"),
        }
        return server_rates, tube_rates

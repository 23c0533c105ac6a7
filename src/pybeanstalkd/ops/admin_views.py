"""What pybeanstalkd-admin shows, drawn with rich: the grouped stats, the
tubes, groups and keys tables, a peeked job, and `top`'s live view with its rates. Imported
only by the commands that draw something, so `--help`, `--json` and errors
never load rich."""
from __future__ import annotations

import os
import select
import sys
from time import monotonic

from rich import box
from rich.columns import Columns
from rich.console import Console, Group, JustifyMethod
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .admin_client import body_text
from .admin_plain import GROUP_COLUMNS
from .admin_plain import SORTS, Rates  # noqa: F401  (top's rates and orders, shared with the plain output)

CONNECTION_KEYS = ("current-connections", "current-producers", "current-workers",
                   "current-waiting", "total-connections", "current-tubes")
BYTE_KEYS = ("max-job-size", "binlog-max-size")
PLAIN_KEYS = ("pid", "id", "file", "binlog-oldest-index", "binlog-current-index")  # no 1,000 separators


def _group(key: str) -> str:
    if key.startswith("current-jobs-") or key in ("total-jobs", "job-timeouts", "max-job-size"):
        return "Jobs"
    if key in CONNECTION_KEYS:
        return "Connections"
    if key.startswith("cmd-"):
        return "Commands"
    if key.startswith("binlog-"):
        return "Binlog"
    return "Server"


def num(v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    return f"{v:,}" if isinstance(v, int) else str(v)


def duration(seconds: int) -> str:
    d, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    if d:
        return f"{d}d {h}h {m:02d}m"
    if h:
        return f"{h}h {m:02d}m {s:02d}s"
    return f"{m}m {s:02d}s" if m else f"{s}s"


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:,} B" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} GiB"


def _stat_value(key: str, v) -> Text:
    s = num(v)
    if key in PLAIN_KEYS:
        s = str(v)
    elif isinstance(v, float):
        s = f"{v:.6f}"
    elif key == "uptime" and isinstance(v, int):
        s = f"{duration(v)} ({v:,}s)" if v >= 60 else f"{v}s"
    elif key in BYTE_KEYS and isinstance(v, int) and v >= 1024:
        s = f"{v:,} ({size(v)})"
    return Text(s, style="dim" if v == 0 and not isinstance(v, bool) else "")


def _kv_table(items, pairs_per_row: int = 1) -> Table:
    t = Table(box=None, show_header=False, pad_edge=False, padding=(0, 1))
    for _ in range(pairs_per_row):
        t.add_column(style="cyan", no_wrap=True)
        t.add_column(justify="right", no_wrap=True)
    rows = [items[i:i + pairs_per_row] for i in range(0, len(items), pairs_per_row)]
    for row in rows:
        cells = []
        for k, v in row:
            cells += [k, _stat_value(k, v)]
        t.add_row(*cells, *[""] * (2 * pairs_per_row - len(cells)))
    return t


def show_stats(console: Console, stats: dict, where: str):
    groups: dict[str, list[tuple[str, object]]] = {
        g: [] for g in ("Jobs", "Connections", "Server", "Binlog", "Commands")}
    for k, v in stats.items():
        groups[_group(k)].append((k, v))
    title = f"stats of {where}"
    if "version" in stats:
        title += f" (beanstalkd {stats['version']})"
    console.print(Text(title, style="bold"))
    small = [Panel(_kv_table(groups[g]), title=g, title_align="left", box=box.ROUNDED, expand=False)
             for g in ("Jobs", "Connections", "Server", "Binlog") if groups[g]]
    console.print(Columns(small))
    if groups["Commands"]:
        per_row = 3 if console.width >= 120 else 2 if console.width >= 80 else 1
        console.print(Panel(_kv_table(groups["Commands"], per_row), title="Commands",
                            title_align="left", box=box.ROUNDED, expand=False))


JOB_COLUMNS = (("ready", "current-jobs-ready"), ("reserved", "current-jobs-reserved"),
               ("delayed", "current-jobs-delayed"), ("buried", "current-jobs-buried"),
               ("urgent", "current-jobs-urgent"))
CONN_COLUMNS = (("waiting", "current-waiting"), ("watching", "current-watching"),
                ("using", "current-using"))


def _count(v, style: str = "") -> Text:
    if not isinstance(v, int) or isinstance(v, bool):
        return Text(str(v))
    return Text(f"{v:,}", style="dim" if v == 0 else style)


def _pause(t: dict) -> Text:
    if not t.get("pause"):
        return Text("-", style="dim")
    return Text(f"{t['pause']:,}s ({t.get('pause-time-left', 0):,}s left)", style="yellow")


def _total(tubes, key) -> str:
    return f"{sum(t.get(key, 0) for t in tubes if isinstance(t.get(key, 0), int)):,}"


def _pause_short(t: dict) -> Text:
    if not t.get("pause"):
        return Text("-", style="dim")
    return Text(f"{t.get('pause-time-left', 0):,}s", style="yellow")


# The tubes table's columns past the tube name: (name, header, short header,
# drop rank). On a narrow terminal the headers are shortened first, then the
# columns with a rank are left out, lowest rank first, until the table fits:
# numbers are never cut. Only the tube name may be, last, with an ellipsis.
TUBE_COLUMNS = (("ready", "ready", "ready", 0), ("reserved", "reserved", "resv", 0),
                ("delayed", "delayed", "delay", 0), ("buried", "buried", "bury", 0),
                ("urgent", "urgent", "urg", 4), ("waiting", "waiting", "wait", 3),
                ("watching", "watching", "watch", 2), ("using", "using", "use", 1),
                ("puts/s", "puts/s", "put/s", 0), ("deletes/s", "deletes/s", "del/s", 0),
                ("pause", "pause", "pause", 6), ("total", "total", "total", 5))
NAME_WIDTH = 20  # a tube name is cut (with an ellipsis) to no less than this
DROP_ORDER = sorted({rank for *_, rank in TUBE_COLUMNS if rank})
KEYS = dict(JOB_COLUMNS + CONN_COLUMNS)
CONN_COLUMNS_NAMES = tuple(label for label, _ in CONN_COLUMNS)  # no totals under these


def _tubes_table(tubes: list[dict], title, rates, short: bool, dropped: set[str],
                 name_width: int | None = None) -> Table:
    caption = None
    if dropped:
        # (top, the table with rates, has no --json: in a pipe it prints every column)
        caption = (f"not shown: {', '.join(n for n, *_ in TUBE_COLUMNS if n in dropped)} "
                   + ("(widen the terminal, or pipe it for every column)" if rates is not None
                      else "(widen the terminal, or pipe it or --json for every column)"))
    t = Table(title=title, box=box.SIMPLE_HEAD, show_footer=len(tubes) > 1, title_justify="left",
              header_style="bold", caption=caption, caption_justify="left", caption_style="dim")
    t.add_column("tube", footer=f"{len(tubes)} tube{'' if len(tubes) == 1 else 's'}", style="cyan",
                 overflow="ellipsis", max_width=name_width)
    styles = {"ready": "green", "reserved": "blue", "buried": "red", "urgent": "magenta"}
    shown = [c for c in TUBE_COLUMNS if c[0] not in dropped
             and (rates is not None or c[0] not in ("puts/s", "deletes/s"))]
    for name, header, abbrev, _ in shown:
        key = KEYS.get(name, "total-jobs" if name == "total" else None)
        footer = _total(tubes, key) if key and name not in CONN_COLUMNS_NAMES else ""
        t.add_column(abbrev if short else header, justify="right", footer=footer, no_wrap=True)
    for tube in tubes:
        row = [Text(str(tube.get("name", "?")))]
        r = rates.get(tube.get("name")) if rates is not None else None
        for name, *_ in shown:
            if name == "puts/s":
                row.append(rate_text(r[0] if r else None))
            elif name == "deletes/s":
                row.append(rate_text(r[1] if r else None))
            elif name == "pause":
                row.append(_pause_short(tube) if short else _pause(tube))
            elif name == "total":
                row.append(_count(tube.get("total-jobs", 0)))
            else:
                row.append(_count(tube.get(KEYS[name], 0), styles.get(name, "")))
        t.add_row(*row)
    return t


def _natural_width(table: Table) -> int:
    measure = Console(width=100_000, file=open(os.devnull, "w"))  # noqa: SIM115
    try:
        return measure.measure(table).maximum
    finally:
        measure.file.close()


def tubes_table(tubes: list[dict], title: str | None = None, rates: dict | None = None,
                width: int | None = None) -> Table:
    """The tubes as beanstool shows them; with rates ({name: (puts/s, deletes/s) or None}),
    top's columns too. Fitted to width (when given) as TUBE_COLUMNS says."""
    table = _tubes_table(tubes, title, rates, False, set())
    if width is None or _natural_width(table) <= width:
        return table
    # Long tube names give way first, down to NAME_WIDTH; then headers and columns.
    dropped: set[str] = set()
    for short, rank in [(False, 0), (True, 0), *((True, r) for r in DROP_ORDER)]:
        dropped |= {n for n, *_, r in TUBE_COLUMNS if r == rank and rank}
        if _natural_width(_tubes_table(tubes, title, rates, short, dropped, NAME_WIDTH)) <= width:
            break
    return _tubes_table(tubes, title, rates, short, dropped)


def show_tubes(console: Console, tubes: list[dict], where: str):
    console.print(tubes_table(tubes, title=f"tubes on {where}", width=console.width))


def show_groups(console: Console, groups: list[dict], where: str):
    """stats-group of each group: its jobs by state, and (waiting) the aft:
    jobs it holds until none of them is left."""
    t = Table(title=f"groups on {where}", box=box.SIMPLE_HEAD, title_justify="left",
              header_style="bold", caption="waiting: aft: jobs held until the group has no job left",
              caption_justify="left", caption_style="dim")
    # A long name is cut with an ellipsis, as tubes cuts a tube's: one line a group.
    t.add_column("group", style="cyan", overflow="ellipsis")
    styles = {"ready": "green", "reserved": "blue", "buried": "red", "waiting": "yellow"}
    for header, _ in GROUP_COLUMNS[1:]:
        t.add_column(header, justify="right", no_wrap=True)
    for g in groups:
        t.add_row(Text(str(g.get("name", "?"))),
                  *(_count(g.get(k, 0), styles.get(h, "")) for h, k in GROUP_COLUMNS[1:]))
    console.print(t)


def show_keys(console: Console, d: dict, where: str):
    """GET /api/v1/keys' answer: the tube's idp: keys with the job holding
    each; then the keys in their cooldown, with the deleted job and the
    time left. Long keys are folded, numbers never cut."""
    tube = d.get("tube", "?")
    more = "the first 1,000 by key: the tube has more" if d.get("truncated") else None
    keys, cools = d.get("keys", []), d.get("cooldowns", [])
    title = f"idp: keys of {tube} on {where}"
    # (as wide as its title, so that it is not folded over a narrow table)
    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", header_style="bold",
              min_width=min(len(title), console.width))
    t.add_column("key", style="cyan", overflow="fold")
    t.add_column("job", justify="right", no_wrap=True)
    for k in keys:
        t.add_row(Text(str(k.get("key", "?"))), Text(str(k.get("job", "?"))))
    if not keys:
        t.add_row(Text("(none)", style="dim"), Text(""))
    console.print(t)
    title = "cooldowns (a deleted job's key, taken until its TTL ends)"
    c = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", header_style="bold",
              caption=more, caption_justify="left", caption_style="dim",
              min_width=min(len(title), console.width))
    c.add_column("key", style="cyan", overflow="fold")
    c.add_column("job", justify="right", no_wrap=True)
    c.add_column("ends in", justify="right", no_wrap=True)
    for cd in cools:
        c.add_row(Text(str(cd.get("key", "?"))), Text(str(cd.get("job", "?"))),
                  Text(duration(cd.get("ends_in_s", 0)), style="yellow"))
    if not cools:
        c.add_row(Text("(none)", style="dim"), Text(""), Text(""))
    console.print(c)


def hexdump(data: bytes) -> str:
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off:off + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}  {hexes[:23]:<23}  {hexes[24:]:<23}  |{text}|")
    return "\n".join(lines)


def show_job(console: Console, job_id: int, stats: dict | None, body: bytes, limit: int):
    where = f" in tube {stats['tube']!r}" if stats else ""
    console.print(Text(f"job {job_id}{where}", style="bold"))
    if stats:
        console.print(Panel(_kv_table(list(stats.items()), 2), title="stats-job", title_align="left",
                            box=box.ROUNDED, expand=False))
    else:
        console.print(Text("(the job was deleted before its stats could be read)", style="yellow"))
    shown = body if not limit or len(body) <= limit else body[:limit]
    text = body_text(shown)
    kind = "text" if text is not None else "binary, hex dump"
    console.print(Text(f"body: {len(body):,} byte{'' if len(body) == 1 else 's'} ({kind})", style="bold"))
    console.print(Text(text if text is not None else hexdump(shown)), soft_wrap=True)
    if len(shown) < len(body):
        more = len(body) - len(shown)
        console.print(Text(f"... {more:,} more byte{'' if more == 1 else 's'} (--limit 0 shows all)",
                           style="dim"))


# -- top


def rate_text(r: float | None) -> Text:
    if r is None:
        return Text("…", style="dim")
    if r == 0:
        return Text("0", style="dim")
    return Text(f"{r:,.1f}" if r < 100 else f"{r:,.0f}", style="bold green")


def top_frame(server: dict, tubes: list[dict], server_rates, tube_rates, where: str,
              interval: float, sort: str, width: int | None = None):
    g = server.get
    head = Text()
    head.append(f"{where}", style="bold")
    if "version" in server:
        head.append(f"  beanstalkd {g('version')}")
    uptime = g("uptime")
    if isinstance(uptime, int):
        head.append(f"  up {duration(uptime)}")
    head.append(f"  every {interval:g}s")
    conns = Text("connections ")
    conns.append(num(g("current-connections", 0)), style="bold")
    for label, key in (("producers", "current-producers"), ("workers", "current-workers"),
                       ("waiting", "current-waiting")):
        conns.append(f"  {label} ")
        conns.append(num(g(key, 0)), style="bold")
    jobs = Text("jobs")
    for label, key in JOB_COLUMNS:
        jobs.append(f"  {label} ")
        jobs.append(num(g(key, 0)), style="bold")
    rates = Text("server")
    for label in ("put", "reserve", "delete", "timeouts"):
        rates.append(f"  {label}/s ")
        rates.append_text(rate_text(server_rates[label] if server_rates else None))
    order = sorted(tubes, key=lambda t: SORTS[sort](t, tube_rates.get(t.get("name"))))
    table = tubes_table(order, rates=tube_rates, width=width)
    hint = Text("q or Ctrl-C quits", style="dim")
    return Group(head, conns, jobs, rates, table, hint)


class Keys:
    """Keys typed while top runs: stdin in cbreak mode (no echo, no line
    buffering; Ctrl-C still interrupts), restored on exit."""

    def __init__(self):
        self.fd = sys.stdin.fileno() if sys.stdin and sys.stdin.isatty() else None
        self.saved = None

    def __enter__(self):
        if self.fd is not None:
            import termios
            import tty

            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)

    def quit_within(self, seconds: float) -> bool:
        """Wait up to seconds; True as soon as q is typed."""
        end = monotonic() + seconds
        while (left := end - monotonic()) > 0:
            if self.fd is None:
                select.select([], [], [], left)
                continue
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                data = os.read(self.fd, 64)
                if not data or b"q" in data.lower():
                    return True
        return False


def run_top(conn, interval: float, sort: str = "name", iterations: int = 0):
    """The live view, refreshed every interval seconds until q, Ctrl-C or the
    given number of refreshes; on the alternate screen when stdout is a terminal."""
    console = Console()
    rates = Rates()
    with Keys() as keys, Live(console=console, auto_refresh=False, screen=console.is_terminal,
                              redirect_stdout=False, redirect_stderr=False) as live:
        done = 0
        while True:
            t = monotonic()
            server, tubes = conn.all_tubes()
            server_rates, tube_rates = rates.update(t, server, tubes)
            live.update(top_frame(server, tubes, server_rates, tube_rates, conn.where, interval, sort,
                                  console.width), refresh=True)
            done += 1
            if iterations and done >= iterations:
                return
            if keys.quit_within(max(0.0, t + interval - monotonic())):
                return


# -- cluster


LAG_FORMATS = (("lag_batches", lambda v: f"{v:,}"), ("lag_bytes", size),
               ("lag_seconds", lambda v: f"{v:.2f} s"))


def _lag(row: dict, key: str, fmt) -> Text:
    if not row.get("connected") or key not in row:
        return Text("-", style="dim")
    v = row[key]
    return Text(fmt(v), style="dim" if not v else "bold yellow")


# The cluster table's columns: (name, justify, drop rank). On a narrow
# terminal the ranked ones are left out, lowest first, until it fits; the
# node name and http address may be cut (with an ellipsis), numbers never.
CLUSTER_COLUMNS: tuple[tuple[str, JustifyMethod, int], ...] = (("node", "left", 0), ("role", "left", 0), ("ISR", "center", 0),
                   ("link", "center", 0), ("acked", "right", 0), ("behind", "right", 0),
                   ("bytes", "right", 3), ("age", "right", 2), ("peer", "left", 1),
                   ("http", "left", 4))
CUT = {"node": 12, "http": 16}  # may be cut to no less than this


def _cluster_table(st: dict, dropped: set[str], cut: bool) -> Table:
    leads = st.get("role") == "leader"
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
    shown = [c for c in CLUSTER_COLUMNS if c[0] not in dropped]
    for name, justify, _ in shown:
        t.add_column(name, justify=justify, no_wrap=name not in CUT, overflow="ellipsis",
                     max_width=CUT.get(name) if cut else None)
    for row in st.get("nodes", ()):
        name = row.get("name", "?")
        role = "leader" if name == st.get("leader") else "follower"
        in_isr = name in st.get("isr", ())
        if not leads:  # a follower's view: no lag to show
            lag = [Text("?", style="dim")] * 5
        elif name == st.get("node"):
            lag = [Text("self", style="dim"), Text(f"{row.get('acked_seq', 0):,}"),
                   *(_lag(dict(row, connected=True), k, f) for k, f in LAG_FORMATS)]
        else:
            up = row.get("connected")
            lag = [Text("up", style="green") if up else Text("down", style="bold red"),
                   Text(f"{row['acked_seq']:,}") if up else Text("-", style="dim"),
                   *(_lag(row, k, f) for k, f in LAG_FORMATS)]
        cells = dict(zip(("link", "acked", "behind", "bytes", "age"), lag))
        cells.update(node=Text(name, style="bold" if role == "leader" else ""),
                     role=Text(role, style="bold green" if role == "leader" else ""),
                     ISR=Text("✓", style="green") if in_isr else Text("✗", style="bold red"),
                     peer=Text(row.get("peer", "")), http=Text(row.get("http", "")))
        t.add_row(*(cells[n] for n, *_ in shown))
    return t


def cluster_table(st: dict, width: int = 120) -> Table:
    dropped: set[str] = set()
    for rank in sorted({r for *_, r in CLUSTER_COLUMNS}):
        dropped |= {n for n, _, r in CLUSTER_COLUMNS if r == rank and rank}
        if _natural_width(_cluster_table(st, dropped, True)) <= width:
            break
    return _cluster_table(st, dropped, False)


def show_cluster(console: Console, st: dict, where: str, warning: str | None):
    title = Text(f"cluster {st.get('cluster')}", style="bold")
    leader = st.get("leader") or "none"
    title.append(f"  leader {leader}, epoch {st.get('epoch', 0)}, ISR {', '.join(st.get('isr', ())) or '-'}",
                 style="")
    console.print(title)
    console.print(Text(f"as {st.get('node')} at {where} sees it"
                       + (f"; {st['seq']:,} batch{'' if st['seq'] == 1 else 'es'} shipped this epoch"
                          if 'seq' in st else ""),
                       style="dim"))
    console.print(cluster_table(st, console.width))
    for row in st.get("nodes", ()):
        if row.get("link_error"):
            console.print(Text(f"{row.get('name')}: no link: {row['link_error']}", style="red"))
    if st.get("role") == "leader":
        console.print(Text("acked: the last batch a node has (fsynced with -f0); behind: batches "
                           "(bytes) shipped and not acked yet; age: how long the oldest has waited",
                           style="dim"))
    if warning:
        console.print(Text(f"warning: {warning}", style="bold yellow"))

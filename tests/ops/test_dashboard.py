"""The dashboard (GET / of --http) in Debian's headless Chromium, driven by
selenium: what it shows must equal what the protocol says, and its buttons
(through the in-page confirmation modal) must act, as the protocol then sees.

These tests never skip: without /usr/bin/chromium and /usr/bin/chromedriver
they fail (.ci/run installs the `chromium` and `chromium-driver` packages)."""
from __future__ import annotations

import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request

import greenstalk
import pytest

from dashtools import HttpServer, open_page, wait_for

TUBE_KEYS = [
    "current-jobs-ready", "current-jobs-urgent", "current-jobs-reserved", "current-jobs-delayed",
    "current-jobs-buried", "total-jobs", "current-using", "current-watching", "current-waiting",
]
KPI_KEYS = {
    "kpi-ready": "current-jobs-ready", "kpi-urgent": "current-jobs-urgent",
    "kpi-reserved": "current-jobs-reserved", "kpi-delayed": "current-jobs-delayed",
    "kpi-buried": "current-jobs-buried", "kpi-connections": "current-connections",
    "kpi-tubes": "current-tubes", "kpi-puts-total": "cmd-put",
    "kpi-deletes-total": "cmd-delete", "kpi-timeouts": "job-timeouts",
}


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def server():
    srv = HttpServer()
    clients = []
    srv.clients = clients
    yield srv
    for c in clients:
        try:
            c.close()
        except OSError:
            pass
    srv.stop()


# ---------------------------------------------------------------- helpers


def put_many(addr, tube: str, n: int, body=b"bulk") -> None:
    """n pipelined puts into tube, over one raw connection."""
    with socket.create_connection(addr) as s:
        s.sendall(b"use %s\r\n" % tube.encode() + b"put 1024 0 60 %d\r\n%s\r\n" % (len(body), body) * n)
        buf = b""
        while buf.count(b"\r\n") < n + 1:
            chunk = s.recv(65536)
            assert chunk, "connection closed"
            buf += chunk
        assert buf.count(b"INSERTED ") == n


def populate(srv: HttpServer) -> dict:
    """Jobs in every state in several tubes; returns what the job browser must list."""
    prod = srv.client(use="alpha")
    worker = srv.client(watch="alpha")   # buries; kept open
    holder = srv.client(watch="alpha")   # holds two reservations; kept open
    srv.clients += [prod, worker, holder]

    ready = []
    for i, pri in enumerate([500, 1024, 10, 1024, 2000, 10, 0, 99999]):
        body = f"alpha job {i}: " + "xy" * i
        ready.append((pri, prod.put(body, priority=pri), body))
    delayed = [(d, prod.put(f"later {d}", delay=d)) for d in (300, 100, 200)]
    to_bury = [prod.put(f"bury me {i}", priority=7) for i in range(3)]
    bury_order = [to_bury[2], to_bury[0], to_bury[1]]
    for jid in bury_order:
        worker.bury(worker.reserve_job(jid))
    slow = prod.put("slow worker", ttr=500)
    fast = prod.put("fast worker", ttr=200)
    holder.reserve_job(slow)
    holder.reserve_job(fast)

    beta = srv.client(use="beta", watch="beta")
    srv.clients.append(beta)
    beta_ids = [beta.put(f"beta {i}") for i in range(9)]
    for jid in beta_ids[5:]:
        beta.bury(beta.reserve_job(jid))

    binc = srv.client(use="bin", encoding=None)
    srv.clients.append(binc)
    bin_id = binc.put(b"\x00\x01\x02\xffhello")

    put_many(srv.addr, "bulk", 1500)
    return {
        "ready": [jid for _, jid, _ in sorted(ready)],
        "bodies": {jid: body for _, jid, body in ready},
        "pris": {jid: pri for pri, jid, _ in ready},
        "delayed": [jid for _, jid in sorted(delayed)],
        "buried": bury_order,
        "reserved": [fast, slow],
        "beta_buried": beta_ids[5:],
        "bin": bin_id,
    }


TUBE_TABLE_JS = """
return [...document.querySelectorAll('#tubes-body tr[data-tube]')].map(tr => ({
  name: tr.dataset.tube,
  cells: Object.fromEntries([...tr.querySelectorAll('td[data-col]')].map(td => [td.dataset.col,
    {value: td.dataset.value, text: td.textContent, flash: td.classList.contains('flash'),
     pause: td.dataset.pause || null}]))
}));
"""

JOBS_JS = """
const st = window.pybeanstalkdDashboard.jobs();
const range = document.querySelector('#jobs-range');
return {
  tube: st.tube, state: st.state, offset: st.offset, range: range.textContent, total: range.dataset.total,
  rows: [...document.querySelectorAll('#jobs-body tr[data-job-id]')].map(tr => ({
    id: +tr.dataset.jobId, state: tr.dataset.state,
    cells: Object.fromEntries([...tr.querySelectorAll('td[data-col]')].filter(td => td.dataset.col !== 'body')
      .map(td => [td.dataset.col, td.dataset.value])),
    body: tr.querySelector('[data-testid=job-preview]').textContent,
    mode: tr.querySelector('td[data-col=body]').dataset.mode,
    bin: !!tr.querySelector('.badge.bin'),
    kick: !!tr.querySelector('[data-testid=job-kick]'),
    deleteDisabled: tr.querySelector('[data-testid=job-delete]').disabled,
  })),
};
"""


def tube_table(driver) -> dict:
    return {t["name"]: t["cells"] for t in driver.execute_script(TUBE_TABLE_JS)}


def jobs_view(driver) -> dict:
    return driver.execute_script(JOBS_JS)


def jobs_shown(driver, tube, state, n=None):
    """Wait until the job browser shows `state` jobs of `tube` (n rows if given)."""
    def ready():
        v = jobs_view(driver)
        ok = v["tube"] == tube and v["state"] == state and v["total"] not in ("", None)
        ok = ok and all(r["state"] == state for r in v["rows"])
        if n is not None:
            ok = ok and len(v["rows"]) == n
        return v if ok else None
    return wait_for(ready, what=f"{n} {state} jobs of {tube} in the job browser")


def css(driver, selector):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def click(driver, selector_or_el):
    el = css(driver, selector_or_el) if isinstance(selector_or_el, str) else selector_or_el
    driver.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'})", el)
    el.click()
    return el


def modal_open(driver) -> bool:
    return driver.execute_script("return !document.querySelector('#modal').hidden")


def answer_modal(driver, fields=None, confirm=True, title=None):
    """Fill the confirmation modal's fields, then confirm (or cancel) it."""
    from selenium.webdriver.support.ui import Select

    wait_for(lambda: modal_open(driver), what="the confirmation modal")
    if title is not None:
        assert title in css(driver, "[data-testid=modal-title]").get_attribute("textContent")
    for name, value in (fields or {}).items():
        el = css(driver, f'[data-testid="modal-field-{name}"]')
        if el.tag_name == "select":
            Select(el).select_by_value(str(value))
        else:
            el.clear()
            el.send_keys(str(value))
    css(driver, "[data-testid=modal-confirm]" if confirm else "[data-testid=modal-cancel]").click()
    wait_for(lambda: not modal_open(driver), what="the modal to close")


def take_toast(driver, kind="ok") -> str:
    """The text of the newest toast of that kind; then every toast is dismissed."""
    text = wait_for(lambda: driver.execute_script(
        "const t = [...document.querySelectorAll('[data-testid=toast]')]"
        ".filter(t => t.dataset.kind === arguments[0]);"
        "return t.length ? t[t.length - 1].querySelector('.toast-text').textContent : null;", kind),
        what=f"a toast ({kind})")
    driver.execute_script("document.querySelectorAll('[data-testid=toast]').forEach(t => t.remove())")
    return text


def no_error_toasts(driver):
    errs = driver.execute_script(
        "return [...document.querySelectorAll('[data-testid=toast][data-kind=err]')].map(t => t.textContent)")
    assert not errs, errs


# ---------------------------------------------------------------- tests


def test_tube_table_and_server_numbers_equal_the_protocol(browser, server):
    populate(server)
    observer = server.client()
    server.clients.append(observer)
    open_page(browser, server)
    want_tubes = observer.tubes()
    table = wait_for(lambda: (lambda t: t if sorted(t) == sorted(want_tubes) else None)(tube_table(browser)),
                     what="every tube in the table")
    assert list(table) == sorted(want_tubes), "tubes are listed by name"

    for name, cells in table.items():
        st = observer.stats_tube(name)
        for key in TUBE_KEYS:
            assert int(cells[key]["value"]) == st[key], (name, key)
            assert cells[key]["text"] == f"{st[key]:,}", (name, key)   # thousands separators
        assert int(cells["pause"]["value"]) == st["pause-time-left"]
    assert table["bulk"]["current-jobs-ready"]["text"] == "1,500"
    assert table["alpha"]["current-jobs-buried"]["text"] == "3"
    assert table["alpha"]["current-jobs-reserved"]["text"] == "2"
    assert table["alpha"]["current-jobs-urgent"]["text"] == "4"

    stats = observer.stats()
    for testid, key in KPI_KEYS.items():
        value = browser.execute_script(f"return document.querySelector('[data-testid={testid}]').dataset.value")
        assert int(value) == stats[key], (testid, key)
    assert css(browser, "[data-testid=stat-version]").text == str(stats["version"])
    assert css(browser, "[data-testid=stat-pid]").text == str(stats["pid"])
    assert css(browser, "[data-testid=kpi-ready]").text == f"{stats['current-jobs-ready']:,}"
    # The totals row sums the tubes.
    foot = browser.execute_script(
        "return document.querySelector('#tubes-foot td[data-col=\"current-jobs-ready\"]').dataset.value")
    assert int(foot) == sum(observer.stats_tube(t)["current-jobs-ready"] for t in want_tubes)
    no_error_toasts(browser)


def test_job_browser_lists_jobs_in_serve_order_with_previews(browser, server):
    want = populate(server)
    open_page(browser, server, "tube=alpha&state=ready")

    v = jobs_shown(browser, "alpha", "ready", len(want["ready"]))
    assert [r["id"] for r in v["rows"]] == want["ready"], "ready: by priority, then id"
    for r in v["rows"]:
        assert int(r["cells"]["pri"]) == want["pris"][r["id"]]
        assert r["body"] == want["bodies"][r["id"]]
        assert r["mode"] == "text"
        assert int(r["cells"]["size"]) == len(want["bodies"][r["id"]])
        assert r["kick"] is False and r["deleteDisabled"] is False
    assert v["range"] == "1–8 of 8"

    click(browser, "[data-testid=state-tab-delayed]")
    v = jobs_shown(browser, "alpha", "delayed", 3)
    assert [r["id"] for r in v["rows"]] == want["delayed"], "delayed: by the time they become ready"
    assert [int(r["cells"]["delay"]) for r in v["rows"]] == [100, 200, 300]
    assert all(r["kick"] for r in v["rows"])

    click(browser, "[data-testid=state-tab-buried]")
    v = jobs_shown(browser, "alpha", "buried", 3)
    assert [r["id"] for r in v["rows"]] == want["buried"], "buried: oldest bury first"
    assert all(int(r["cells"]["buries"]) == 1 and int(r["cells"]["reserves"]) == 1 for r in v["rows"])

    click(browser, "[data-testid=state-tab-reserved]")
    v = jobs_shown(browser, "alpha", "reserved", 2)
    assert [r["id"] for r in v["rows"]] == want["reserved"], "reserved: by TTR deadline"
    assert all(r["deleteDisabled"] for r in v["rows"]), "only the worker may delete a reserved job"
    assert [int(r["cells"]["ttr"]) for r in v["rows"]] == [200, 500]
    assert 0 < int(v["rows"][0]["cells"]["time-left"]) <= 200

    # Hex: a binary body is always shown as hex; a text body once switched.
    from selenium.webdriver.support.ui import Select

    Select(css(browser, "[data-testid=jobs-tube]")).select_by_value("bin")
    click(browser, "[data-testid=state-tab-ready]")
    v = jobs_shown(browser, "bin", "ready", 1)
    assert v["rows"][0]["id"] == want["bin"]
    assert v["rows"][0]["bin"] and v["rows"][0]["mode"] == "hex"
    assert v["rows"][0]["body"] == "00 01 02 ff 68 65 6c 6c 6f"
    Select(css(browser, "[data-testid=jobs-tube]")).select_by_value("alpha")
    jobs_shown(browser, "alpha", "ready", len(want["ready"]))
    click(browser, "[data-testid=body-mode-hex]")
    first = want["ready"][0]
    row = wait_for(lambda: next((r for r in jobs_view(browser)["rows"] if r["id"] == first and r["mode"] == "hex"), None))
    assert row["body"].startswith(" ".join(f"{b:02x}" for b in want["bodies"][first].encode()[:20]))
    click(browser, "[data-testid=body-mode-text]")

    # A click on a row shows the whole preview, text and hexdump.
    click(browser, f'#jobs-body tr[data-job-id="{first}"] td[data-col="id"]')
    text = wait_for(lambda: css(browser, f'tr[data-detail-for="{first}"] [data-testid=job-detail-text]').text)
    assert text == want["bodies"][first]
    hexdump = css(browser, f'tr[data-detail-for="{first}"] [data-testid=job-detail-hex]').text
    assert hexdump.startswith("00000000  61 6c 70 68 61")

    # Paging through 1,500 jobs, 25 at a time.
    Select(css(browser, "[data-testid=jobs-tube]")).select_by_value("bulk")
    Select(css(browser, "[data-testid=jobs-limit]")).select_by_value("25")
    v = jobs_shown(browser, "bulk", "ready", 25)
    assert v["range"] == "1–25 of 1,500"
    ids = [r["id"] for r in v["rows"]]
    assert ids == sorted(ids)
    click(browser, "[data-testid=jobs-next]")
    v = wait_for(lambda: (lambda v: v if v["offset"] == 25 and v["range"] == "26–50 of 1,500" and len(v["rows"]) == 25 else None)(jobs_view(browser)))
    assert [r["id"] for r in v["rows"]] == list(range(ids[-1] + 1, ids[-1] + 26))
    click(browser, "[data-testid=jobs-last]")
    v = wait_for(lambda: (lambda v: v if v["range"] == "1,476–1,500 of 1,500" and len(v["rows"]) == 25 else None)(jobs_view(browser)))
    assert v["rows"][-1]["id"] == ids[0] + 1499
    no_error_toasts(browser)


def test_kick_a_tube_through_the_modal(browser, server):
    populate(server)
    observer = server.client()
    server.clients.append(observer)
    open_page(browser, server)
    assert observer.stats_tube("beta")["current-jobs-buried"] == 4

    # Cancel does nothing.
    click(browser, 'tr[data-tube="beta"] [data-testid=tube-kick]')
    wait_for(lambda: modal_open(browser))
    assert css(browser, "[data-testid=modal-field-n]").get_attribute("value") == "4"
    answer_modal(browser, confirm=False)
    time.sleep(0.5)
    assert observer.stats_tube("beta")["current-jobs-buried"] == 4

    click(browser, 'tr[data-tube="beta"] [data-testid=tube-kick]')
    answer_modal(browser, {"n": 3}, title="beta")
    assert take_toast(browser) == "Kicked 3 jobs in beta."
    st = observer.stats_tube("beta")
    assert (st["current-jobs-buried"], st["current-jobs-ready"]) == (1, 8)
    wait_for(lambda: tube_table(browser)["beta"]["current-jobs-buried"]["value"] == "1",
             what="the table to show the kick")


def test_delete_and_kick_jobs_through_the_modal(browser, server):
    want = populate(server)
    observer = server.client()
    server.clients.append(observer)
    open_page(browser, server, "tube=alpha&state=buried")
    jobs_shown(browser, "alpha", "buried", 3)
    victim, kicked, kept = want["buried"]

    click(browser, f'#jobs-body tr[data-job-id="{victim}"] [data-testid=job-delete]')
    answer_modal(browser, title=f"Delete job {victim}")
    assert take_toast(browser) == f"Deleted job {victim}."
    with pytest.raises(greenstalk.NotFoundError):
        observer.peek(victim)
    v = jobs_shown(browser, "alpha", "buried", 2)
    assert [r["id"] for r in v["rows"]] == [kicked, kept]

    click(browser, f'#jobs-body tr[data-job-id="{kicked}"] [data-testid=job-kick]')
    answer_modal(browser, title=f"Kick job {kicked}")
    assert take_toast(browser) == f"Kicked job {kicked}."
    assert observer.stats_job(kicked)["state"] == "ready"
    assert observer.stats_job(kicked)["kicks"] == 1
    v = jobs_shown(browser, "alpha", "buried", 1)
    assert v["rows"][0]["id"] == kept
    assert observer.stats_tube("alpha")["current-jobs-buried"] == 1

    # A delayed job can be kicked one by one too.
    click(browser, "[data-testid=state-tab-delayed]")
    jobs_shown(browser, "alpha", "delayed", 3)
    first = want["delayed"][0]
    click(browser, f'#jobs-body tr[data-job-id="{first}"] [data-testid=job-kick]')
    answer_modal(browser)
    assert take_toast(browser) == f"Kicked job {first}."
    assert observer.stats_job(first)["state"] == "ready"
    jobs_shown(browser, "alpha", "delayed", 2)


def test_a_failed_action_shows_an_error_toast(browser, server):
    want = populate(server)
    observer = server.client()
    server.clients.append(observer)
    open_page(browser, server, "tube=alpha&state=buried")
    jobs_shown(browser, "alpha", "buried", 3)
    gone = want["buried"][0]
    click(browser, f'#jobs-body tr[data-job-id="{gone}"] [data-testid=job-delete]')
    wait_for(lambda: modal_open(browser))
    observer.delete(gone)          # someone else is faster
    answer_modal(browser)
    text = take_toast(browser, "err")
    assert text.startswith(f"Delete job {gone} failed: ")
    jobs_shown(browser, "alpha", "buried", 2)


def test_pause_flush_and_drain_through_the_modal(browser, server):
    populate(server)
    observer = server.client()
    server.clients.append(observer)
    open_page(browser, server, "tube=alpha&state=delayed")
    jobs_shown(browser, "alpha", "delayed", 3)

    click(browser, 'tr[data-tube="alpha"] [data-testid=tube-pause]')
    answer_modal(browser, {"seconds": 120}, title="Pause alpha")
    assert take_toast(browser) == "Paused alpha for 2m."
    assert observer.stats_tube("alpha")["pause"] == 120
    cell = wait_for(lambda: (lambda c: c if c["pause"] == "120" else None)(tube_table(browser)["alpha"]["pause"]),
                    what="the pause in the table")
    assert cell["text"].endswith("/ 2m")
    click(browser, 'tr[data-tube="alpha"] [data-testid=tube-pause]')
    answer_modal(browser, title="Resume alpha")
    assert take_toast(browser) == "Resumed alpha."
    assert observer.stats_tube("alpha")["pause"] == 0

    click(browser, "[data-testid=btn-tube-flush]")
    wait_for(lambda: modal_open(browser))
    assert css(browser, "[data-testid=modal-field-state]").get_attribute("value") == "delayed"
    answer_modal(browser)
    assert take_toast(browser) == "Flushed 3 delayed jobs from alpha."
    st = observer.stats_tube("alpha")
    assert st["current-jobs-delayed"] == 0 and st["current-jobs-buried"] == 3
    wait_for(lambda: css(browser, "[data-testid=jobs-empty]").is_displayed(), what="an empty delayed list")

    click(browser, 'tr[data-tube="beta"] [data-testid=tube-flush]')
    answer_modal(browser, {"state": "buried"})
    assert take_toast(browser) == "Flushed 4 buried jobs from beta."
    assert observer.stats_tube("beta")["current-jobs-buried"] == 0

    click(browser, "[data-testid=btn-drain]")
    answer_modal(browser, title="Drain")
    assert take_toast(browser) == "Draining: puts are refused."
    with pytest.raises(greenstalk.DrainingError):
        observer.put("refused")
    wait_for(lambda: css(browser, "[data-testid=drain-banner]").is_displayed(), what="the draining banner")
    assert css(browser, "[data-testid=btn-drain]").text == "Undrain"
    click(browser, "[data-testid=btn-drain]")
    answer_modal(browser, title="Undrain")
    assert take_toast(browser) == "Undrained: puts are accepted again."
    assert observer.put("accepted") > 0
    wait_for(lambda: not css(browser, "[data-testid=drain-banner]").is_displayed())


def test_the_table_follows_protocol_changes_and_flashes_them(browser, server):
    populate(server)
    open_page(browser, server)
    before = int(tube_table(browser)["alpha"]["current-jobs-ready"]["value"])
    c = server.client(use="alpha")
    server.clients.append(c)
    for i in range(7):
        c.put(f"more {i}")

    def flashed():
        cell = tube_table(browser)["alpha"]["current-jobs-ready"]
        return cell["value"] == str(before + 7) and cell["flash"]
    wait_for(flashed, what="the ready count to change, with a flash")
    assert c.stats_tube("alpha")["current-jobs-ready"] == before + 7

    # A new tube shows up; once empty and unused, it goes away.
    fresh = server.client(use="fresh-tube")
    jid = fresh.put("hello")
    wait_for(lambda: tube_table(browser).get("fresh-tube", {}).get("current-jobs-ready", {}).get("value") == "1",
             what="the new tube's row")
    fresh.delete(jid)
    fresh.close()
    wait_for(lambda: "fresh-tube" not in tube_table(browser), what="the emptied tube to go away")

    # Sorting by a column puts the biggest first.
    click(browser, '#tubes-head th[data-sort="current-jobs-ready"]')
    wait_for(lambda: browser.execute_script(TUBE_TABLE_JS)[0]["name"] == "bulk", what="sorting by ready")
    # The filter narrows the rows.
    css(browser, "[data-testid=tube-filter]").send_keys("alp")
    wait_for(lambda: list(tube_table(browser)) == ["alpha"], what="the filter")


def test_charts_draw_the_last_minutes(browser, server):
    stop = threading.Event()

    def churn():
        with server.client(use="load", watch="load") as c:
            while not stop.is_set():
                for _ in range(20):
                    c.put("work")
                for _ in range(15):
                    c.delete(c.reserve(timeout=1))
                time.sleep(0.02)

    t = threading.Thread(target=churn, daemon=True)
    t.start()
    try:
        open_page(browser, server, refresh=250)
        # (the server samples once a second, whatever the page's refresh)
        wait_for(lambda: browser.execute_script("return window.pybeanstalkdDashboard.samples()") >= 10,
                 what="ten samples")
        for chart, series in (("chart-throughput", ["put", "res", "del"]),
                              ("chart-depth", ["ready", "reserved", "delayed", "buried"])):
            info = browser.execute_script(
                "const svg = document.querySelector(`[data-testid=${arguments[0]}] svg`);"
                "if (!svg) return null;"
                "return {w: svg.getBoundingClientRect().width, ticks: svg.querySelectorAll('text.tick').length,"
                " series: Object.fromEntries([...svg.querySelectorAll('path.series')].map("
                "   p => [p.dataset.series, +p.dataset.points]))};", chart)
            assert info and info["w"] > 300, chart
            assert info["ticks"] >= 4, "axes have labels"
            assert sorted(info["series"]) == sorted(series)
            assert all(n >= 8 for n in info["series"].values()), info
            legend = css(browser, f"[data-testid=legend-{chart.split('-')[1]}]").text
            assert all(s in legend for s in (["Puts", "Reserves", "Deletes"] if "throughput" in chart
                                             else ["Ready", "Reserved", "Delayed", "Buried"]))
        # Queue depth: a log scale by default (0, 1, 10, ...), linear on demand.
        labels_js = "return [...document.querySelectorAll('[data-testid=chart-depth] text.tick')].map(t => t.textContent)"
        log_labels = browser.execute_script(labels_js)
        assert {"0", "10", "100"} <= set(log_labels), log_labels
        click(browser, "[data-testid=depth-scale-lin]")
        wait_for(lambda: browser.execute_script(labels_js) != log_labels, what="a linear depth axis")
        assert "active" in css(browser, "[data-testid=depth-scale-lin]").get_attribute("class")
        click(browser, "[data-testid=depth-scale-log]")
        rate = browser.execute_script("return +document.querySelector('[data-testid=kpi-puts-rate]').dataset.value")
        assert rate > 0
        # The puts line leaves the zero axis.
        ys, axis = browser.execute_script(
            "const svg = document.querySelector('[data-testid=chart-throughput] svg');"
            "const p = svg.querySelector('path.series[data-series=put]');"
            "const ys = p.getAttribute('d').split(/[ML]/).filter(Boolean).map(xy => +xy.split(',')[1]);"
            "return [ys, +svg.querySelector('line.axis').getAttribute('y1')];")
        assert min(ys) < axis - 5
    finally:
        stop.set()
        t.join(5)


def test_the_dashboard_works_behind_http_auth(browser):
    """--http-auth: once the browser has the credentials (a person types
    them into its prompt; here DevTools adds the header a browser then
    sends), every request the page makes, its actions included, works."""
    server = HttpServer(auth="ops:s3cret-pw")
    server.clients = []
    try:
        browser.execute_cdp_cmd("Network.enable", {})
        browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": server.headers})
        populate(server)
        observer = server.client()
        server.clients.append(observer)
        # Without credentials: 401, for the page and for its data.
        for path in ("/", "/api/v1/tubes"):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(server.base + path, timeout=5)
            assert e.value.code == 401
        open_page(browser, server)
        table = wait_for(lambda: (lambda t: t if "beta" in t else None)(tube_table(browser)),
                         what="the tube table")
        assert int(table["beta"]["current-jobs-buried"]["value"]) == 4
        click(browser, 'tr[data-tube="beta"] [data-testid=tube-kick]')
        answer_modal(browser, {"n": 2}, title="beta")
        assert take_toast(browser) == "Kicked 2 jobs in beta."
        assert observer.stats_tube("beta")["current-jobs-buried"] == 2
        no_error_toasts(browser)
    finally:
        browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}})
        for c in server.clients:
            c.close()
        server.stop()


HELD = ("current-jobs-ready", "current-jobs-reserved", "current-jobs-delayed", "current-jobs-buried")


def kpi(driver, testid) -> tuple[str, str]:
    """A KPI's data-value, and the text of the line it is in."""
    return tuple(driver.execute_script(
        "const el = document.querySelector(`[data-testid=${arguments[0]}]`);"
        "return [el.dataset.value, el.parentElement.textContent.trim()];", testid))


def test_counts_are_the_jobs_held_now_and_cumulative_ones_say_so(browser, server):
    """The tubes card and the table's Held column count the jobs held now,
    which differ from total-jobs (every job put since start) once jobs are
    deleted; the job browser opens on the tube that holds the most; no
    "1 jobs" anywhere."""
    c = server.client(use="small", watch="small")
    server.clients.append(c)
    put_many(server.addr, "big", 40)
    put_many(server.addr, "middle", 25)
    for i in range(30):          # 30 put, 29 deleted: one held, total-jobs 30
        jid = c.put(f"small {i}")
        if i:
            c.delete(jid)
    c.bury(c.reserve())          # ... and that one buried
    for jid in [c.put("gone", delay=600) for _ in range(3)][:2]:
        c.delete(jid)            # one delayed
    big = server.client(watch="big")
    server.clients.append(big)
    for _ in range(15):          # 15 of big's 40 deleted, 2 reserved
        big.delete(big.reserve())
    big.reserve(), big.reserve()

    observer = server.client()
    server.clients.append(observer)
    open_page(browser, server)
    stats = observer.stats()
    held = sum(stats[k] for k in HELD)
    assert held == 25 + 25 + 2 and held != stats["total-jobs"]
    value, line = wait_for(lambda: (lambda v: v if v[0] == str(held) else None)(kpi(browser, "kpi-held-jobs")),
                           what="the jobs held in the tubes card")
    assert line == f"{held} jobs held"
    assert kpi(browser, "kpi-puts-total")[1] == f"{stats['cmd-put']} since start"

    table = tube_table(browser)
    for name in ("big", "middle", "small"):
        st = observer.stats_tube(name)
        assert int(table[name]["held"]["value"]) == sum(st[k] for k in HELD), name
        assert int(table[name]["total-jobs"]["value"]) == st["total-jobs"], name
    assert (table["small"]["held"]["value"], table["small"]["total-jobs"]["value"]) == ("2", "33")
    foot = browser.execute_script("return document.querySelector('#tubes-foot td[data-col=\"held\"]').dataset.value")
    assert int(foot) == held
    head = browser.execute_script(
        "return [...document.querySelectorAll('#tubes-head th')].map(th => th.textContent.trim())")
    assert "Held" in head and "Put since start" in head and "Total" not in head

    # The busiest tube: middle holds 25 ready, big 23 ready and 2 reserved;
    # the first by name of equals.
    jobs_shown(browser, "big", "ready", 23)
    info = css(browser, "[data-testid=jobs-tube-info]").text
    assert "25 jobs held · 40 put since start" in info

    # One of something is singular, wherever it is shown.
    kpis = css(browser, "[data-testid=kpis]").text
    assert "in 1 tube\n" in kpis + "\n" and "in 1 tubes" not in kpis, kpis
    body = browser.execute_script("return document.body.innerText")
    assert not re.search(r"(?<![\d,.])1 (jobs|tubes|timeouts|batches)\b", body), body
    no_error_toasts(browser)


def test_a_new_page_opens_with_the_servers_history(browser, server):
    """The charts' samples are the server's (GET /api/v1/history, a sample a
    second): a page opened later shows them from the start, and rates are
    the server's counts over the server's clock."""
    stop = threading.Event()

    def load():
        with server.client(use="load", watch="load") as c:
            while not stop.is_set():
                for _ in range(10):
                    c.put("work")
                for _ in range(10):
                    c.delete(c.reserve(timeout=1))
                time.sleep(0.05)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        time.sleep(4.5)
        open_page(browser, server)
        first = browser.execute_script("return window.pybeanstalkdDashboard.span()")
        with urllib.request.urlopen(server.base + "/api/v1/history", timeout=5) as r:
            hist = json.load(r)["samples"]
        assert browser.execute_script("return window.pybeanstalkdDashboard.samples()") >= 4, \
            "a page opened now has the past seconds at once"
        assert first["first"] == hist[0]["mono"] and first["firstWall"] == hist[0]["time"]

        time.sleep(3)
        open_page(browser, server)        # a second page, opened later
        again = browser.execute_script("return window.pybeanstalkdDashboard.span()")
        assert again["first"] == hist[0]["mono"], "the second page has the history from the start"
        # 7 ticks of a second on the loop's clock (uvloop's: whole ms,
        # read at the start of a pass), each stamped from time.monotonic_ns
        # in whole ms: the span can come out a ms short (6,999 seen)
        assert again["last"] - again["first"] >= 7000 - 7
        n = browser.execute_script("return window.pybeanstalkdDashboard.samples()")
        assert n >= 7
        points = browser.execute_script(
            "return Object.fromEntries([...document.querySelectorAll('[data-testid=chart-depth] path.series')]"
            ".map(p => [p.dataset.series, +p.dataset.points]))")
        assert all(v >= n - 1 for v in points.values()), (points, n)

        # Reserves and deletes move together here: both lines are drawn,
        # deletes dashed over reserves.
        style = browser.execute_script(
            "const svg = document.querySelector('[data-testid=chart-throughput] svg');"
            "const ps = [...svg.querySelectorAll('path.series')];"
            "return ps.map(p => [p.dataset.series, p.style.strokeDasharray]);")
        assert [k for k, _ in style][-1] == "del" and style[-1][1] != ""
        assert dict(style)["res"] == ""

        # The puts rate shown is the server's: its count over its clock, across
        # the last three seconds of samples the page holds.
        last, shown = browser.execute_script(
            "return [window.pybeanstalkdDashboard.span().last,"
            " +document.querySelector('[data-testid=kpi-puts-rate]').dataset.value]")
        with urllib.request.urlopen(server.base + "/api/v1/history", timeout=5) as r:
            hist = [smp for smp in json.load(r)["samples"] if smp["mono"] <= last]
        b = hist[-1]
        assert b["mono"] == last
        # (the page's rule: whole sample intervals back from the last, until
        # they span 3 s; as many as the server's sampling spacing takes)
        i = len(hist) - 1
        while i > 0 and b["mono"] - hist[i - 1]["mono"] < 3000:
            i -= 1
        a = hist[i - 1] if i > 0 else hist[0]
        assert shown == pytest.approx((b["put"] - a["put"]) / ((b["mono"] - a["mono"]) / 1000))
        assert shown > 0
    finally:
        stop.set()
        t.join(5)

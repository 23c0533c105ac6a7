"""The dashboard and the put tags (--extensions), in headless Chromium as
test_dashboard.py: the Groups panel lists GET /api/v1/groups and follows
its changes; the tube table has the tags' columns (aft-held, blocked,
dedup) equal to the tube JSON; the Keys panel lists the selected tube's
idp: keys and cooldowns (GET /api/v1/keys); "Flush tube…" deletes every
job of the tube, reserved ones too (flush-tube); without --extensions
there is none of it.

These tests never skip: they need /usr/bin/chromium and chromedriver."""
from __future__ import annotations

import json
import socket
import urllib.request

from dashtools import HttpServer, open_page, wait_for
from test_dashboard import answer_modal, click, css, modal_open, no_error_toasts, take_toast, tube_table

GROUPS_JS = """
const panel = document.querySelector('#groups-panel');
return {
  hidden: panel.hidden, sub: document.querySelector('#groups-sub').textContent,
  note: document.querySelector('#groups-note').hidden ? null : document.querySelector('#groups-note').textContent,
  rows: [...document.querySelectorAll('#groups-body tr[data-group]')].map(tr => [tr.dataset.group,
    ...[...tr.querySelectorAll('td[data-col]')].map(td => Number(td.dataset.value))]),
};
"""


class Raw:
    """One protocol connection (greenstalk sends no put tags)."""

    def __init__(self, addr):
        self.s = socket.create_connection(addr)
        self.buf = b""

    def _fill(self, n: int = 0):
        while b"\r\n" not in self.buf or len(self.buf) < n:
            chunk = self.s.recv(65536)
            assert chunk, "connection closed"
            self.buf += chunk

    def cmd(self, line: bytes) -> bytes:
        """The reply's line (a RESERVED's body read and dropped)."""
        self.s.sendall(line)
        self._fill()
        reply, _, self.buf = self.buf.partition(b"\r\n")
        if reply.startswith(b"RESERVED "):
            size = int(reply.split()[2]) + 2
            self._fill(size)
            self.buf = self.buf[size:]
        return reply

    def put(self, tube: bytes, tags: bytes, pri: int = 0) -> int:
        assert self.cmd(b"use %s\r\n" % tube).startswith(b"USING")
        tail = b" " + tags if tags else b""  # (a blank tail is the reference's BAD_FORMAT)
        reply = self.cmd(b"put %d 0 60 1%s\r\nx\r\n" % (pri, tail))
        assert reply.startswith(b"INSERTED "), reply
        return int(reply.split()[1])

    def close(self):
        self.s.close()


KEYS_JS = """
const rows = (sel) => [...document.querySelectorAll(sel + ' tr[data-key]')].map(tr => [tr.dataset.key,
  ...[...tr.querySelectorAll('td[data-col]')].map(td => Number(td.dataset.value))]);
const shown = (sel) => !document.querySelector(sel).hidden;
return {
  hidden: document.querySelector('#keys-panel').hidden,
  sub: document.querySelector('#keys-sub').textContent,
  keys: rows('#keys-body'), cools: rows('#cools-body'),
  keysEmpty: shown('#keys-empty'), coolsEmpty: shown('#cools-empty'),
  keysTable: shown('#keys-table'), coolsTable: shown('#cools-table'),
  ends: [...document.querySelectorAll('#cools-body td[data-col="ends_in_s"]')].map(td => td.textContent),
};
"""


def keys_view(driver) -> dict:
    return driver.execute_script(KEYS_JS)


def api(srv, path):
    with urllib.request.urlopen(srv.base + "/api/v1" + path, timeout=5) as r:
        return json.loads(r.read())


def groups_view(driver) -> dict:
    return driver.execute_script(GROUPS_JS)


def test_groups_panel_and_the_tags_columns(browser):
    srv = HttpServer("--extensions")
    prod, worker = Raw(srv.addr), Raw(srv.addr)
    try:
        members = [prod.put(b"mail", b"grp:batch-2") for _ in range(3)]
        prod.put(b"mail", b"aft:batch-2")
        prod.put(b"mail", b"aft:batch-2")
        prod.put(b"mail", b"grp:batch-1")
        for _ in range(2):
            prod.put(b"mail", b"idp:same")  # one job, one duplicate answered
        prod.put(b"work", b"con:k:1")
        prod.put(b"work", b"con:k:1")
        assert worker.cmd(b"watch work\r\n").startswith(b"WATCHING")
        assert worker.cmd(b"ignore default\r\n").startswith(b"WATCHING")
        assert worker.cmd(b"reserve-with-timeout 0\r\n").startswith(b"RESERVED")
        assert worker.cmd(b"reserve-with-timeout 0\r\n") == b"TIMED_OUT"  # (the other one hidden)
        assert worker.cmd(b"reserve-job %d\r\n" % members[0]).startswith(b"RESERVED")
        assert worker.cmd(b"bury %d 0\r\n" % members[0]) == b"BURIED"

        open_page(browser, srv)
        view = wait_for(lambda: (lambda v: v if len(v["rows"]) == 2 else None)(groups_view(browser)),
                        what="the groups panel")
        assert not view["hidden"] and view["note"] is None
        assert view["sub"] == "2 groups"
        assert view["rows"] == [["batch-1", 1, 0, 0], ["batch-2", 3, 1, 2]]
        assert view["rows"] == [[g["name"], g["members"], g["buried"], g["waiting"]]
                                for g in api(srv, "/groups")["groups"]]

        table = tube_table(browser)
        for name in ("mail", "work", "default"):
            tube = api(srv, "/tubes/" + name)["tube"]
            for key in ("held-jobs", "blocked-jobs", "dedup-hits"):
                assert int(table[name][key]["value"]) == tube[key], (name, key)
        assert (table["mail"]["held-jobs"]["value"], table["mail"]["dedup-hits"]["value"]) == ("2", "1")
        assert table["work"]["blocked-jobs"]["value"] == "1"
        # Held: every job the tube holds, the held aft: ones too (8 put, a
        # duplicate not a job); and so the jobs-held figure at the top.
        assert table["mail"]["held"]["value"] == "7"
        kpi = browser.execute_script(
            "return document.querySelector('[data-testid=\"kpi-held-jobs\"]').textContent")
        assert kpi.strip() == "9"
        head = browser.execute_script(
            "return [...document.querySelectorAll('#tubes-head th')].map(th => th.textContent.trim())")
        assert head.index("Held") < head.index("Aft-held") < head.index("Blocked") < head.index("Dedup")
        foot = browser.execute_script(
            "return document.querySelector('#tubes-foot td[data-col=\"held-jobs\"]').dataset.value")
        assert foot == "2"

        # The group's last jobs deleted: gone from the panel, its held jobs ready.
        for jid in members:
            assert prod.cmd(b"delete %d\r\n" % jid) == b"DELETED"
        view = wait_for(lambda: (lambda v: v if len(v["rows"]) == 1 else None)(groups_view(browser)),
                        what="the completed group to go")
        assert view["rows"] == [["batch-1", 1, 0, 0]] and view["sub"] == "1 group"
        wait_for(lambda: tube_table(browser)["mail"]["held-jobs"]["value"] == "0",
                 what="the held jobs released")
        no_error_toasts(browser)
    finally:
        prod.close()
        worker.close()
        srv.stop()


def test_keys_panel_and_flush_tube(browser):
    srv = HttpServer("--extensions")
    prod, worker = Raw(srv.addr), Raw(srv.addr)
    try:
        kept = {name: prod.put(b"mail", b"idp:" + name) for name in (b"order-18", b"order-17")}
        gone = prod.put(b"mail", b"idp:invoice-9:600")
        assert prod.cmd(b"delete %d\r\n" % gone) == b"DELETED"
        prod.put(b"mail", b"")  # (no key)
        assert prod.cmd(b"put 0 500 60 1\r\nd\r\n").startswith(b"INSERTED")  # delayed
        prod.put(b"other", b"idp:elsewhere")
        assert worker.cmd(b"watch mail\r\n").startswith(b"WATCHING")
        assert worker.cmd(b"reserve-job %d\r\n" % kept[b"order-17"]).startswith(b"RESERVED")

        open_page(browser, srv, "tube=mail&state=ready")
        view = wait_for(lambda: (lambda v: v if v["keys"] and v["cools"] else None)(keys_view(browser)),
                        what="the keys panel")
        assert not view["hidden"] and view["sub"] == "mail · 2 keys · 1 cooldown"
        assert view["keys"] == [["order-17", kept[b"order-17"]], ["order-18", kept[b"order-18"]]]
        assert view["cools"][0][:2] == ["invoice-9", gone]
        want = api(srv, "/keys?tube=mail")
        assert view["keys"] == [[k["key"], k["job"]] for k in want["keys"]]
        assert [c[:2] for c in view["cools"]] == [[c["key"], c["job"]] for c in want["cooldowns"]]
        assert 590 <= view["cools"][0][2] <= 600 and view["ends"][0].startswith(("9m", "10m"))
        assert (view["keysEmpty"], view["coolsEmpty"]) == (False, False)

        # Another tube: its own keys.
        browser.execute_script("const s = document.querySelector('#jobs-tube');"
                               "s.value = 'other'; s.dispatchEvent(new Event('change'));")
        view = wait_for(lambda: (lambda v: v if v["sub"].startswith("other") else None)(keys_view(browser)),
                        what="the other tube's keys")
        assert view["keys"] == [["elsewhere", api(srv, "/keys?tube=other")["keys"][0]["job"]]]
        assert view["cools"] == [] and view["coolsEmpty"] and not view["coolsTable"]
        browser.execute_script("const s = document.querySelector('#jobs-tube');"
                               "s.value = 'mail'; s.dispatchEvent(new Event('change'));")
        wait_for(lambda: keys_view(browser)["sub"].startswith("mail"), what="mail's keys again")

        # A state's flush offers the whole tube too; cancelled here.
        click(browser, 'tr[data-tube="mail"] [data-testid=tube-flush]')
        wait_for(lambda: modal_open(browser), what="the flush modal")
        options = browser.execute_script(
            "return [...document.querySelectorAll('[data-testid=modal-field-state] option')].map(o => o.value)")
        assert options == ["ready", "delayed", "buried", "tube"]
        answer_modal(browser, confirm=False)

        # "Flush tube…": every job, the reserved one too, and the keys.
        button = css(browser, "[data-testid=btn-tube-flush-all]")
        assert button.is_displayed() and button.text == "Flush tube…"
        click(browser, button)
        wait_for(lambda: modal_open(browser), what="the flush modal")
        assert css(browser, "[data-testid=modal-field-state]").get_attribute("value") == "tube"
        assert "reserved ones too" in css(browser, "[data-testid=modal-body]").get_attribute("textContent")
        answer_modal(browser, title="Flush mail")
        assert take_toast(browser) == "Flushed 4 jobs from mail (the whole tube)."
        tube = api(srv, "/tubes/mail")["tube"]
        assert [tube[f"current-jobs-{k}"] for k in ("ready", "reserved", "delayed", "buried")] == [0] * 4
        assert tube["cmd-delete"] == 1  # (the protocol's delete only: the HTTP side counts none)
        assert worker.cmd(b"delete %d\r\n" % kept[b"order-17"]) == b"NOT_FOUND"
        view = wait_for(lambda: (lambda v: v if not v["keys"] and not v["cools"] else None)(keys_view(browser)),
                        what="the keys to go")
        assert view["keysEmpty"] and view["coolsEmpty"] and view["sub"] == "mail · 0 keys · 0 cooldowns"
        assert api(srv, "/keys?tube=other")["keys"]  # (another tube's stay)
        no_error_toasts(browser)
    finally:
        prod.close()
        worker.close()
        srv.stop()


def test_without_extensions_no_groups_panel_nor_tags_columns(browser):
    srv = HttpServer()
    try:
        open_page(browser, srv)
        wait_for(lambda: browser.execute_script(
            "return performance.getEntriesByType('resource').some(e => e.name.endsWith('/api/v1/groups'))"),
            what="the page to ask for the groups")
        assert groups_view(browser)["hidden"] is True
        head = browser.execute_script(
            "return [...document.querySelectorAll('#tubes-head th')].map(th => th.textContent.trim())")
        assert "Held" in head and not {"Aft-held", "Blocked", "Dedup"} & set(head)
        assert not set(tube_table(browser)["default"]) & {"held-jobs", "blocked-jobs", "dedup-hits"}
        # asked once: a 404 is not asked again (until the server restarts)
        browser.execute_script("window.pybeanstalkdDashboard.refresh()")
        browser.execute_script("window.pybeanstalkdDashboard.refresh()")
        asked = browser.execute_script(
            "return performance.getEntriesByType('resource').filter(e => e.name.endsWith('/api/v1/groups')).length")
        assert asked == 1
        # nor keys, nor a whole-tube flush
        assert browser.execute_script("return document.querySelector('#keys-panel').hidden") is True
        assert not css(browser, "[data-testid=btn-tube-flush-all]").is_displayed()
        assert not browser.execute_script(
            "return performance.getEntriesByType('resource').some(e => e.name.includes('/api/v1/keys'))")
        click(browser, 'tr[data-tube="default"] [data-testid=tube-flush]')
        wait_for(lambda: modal_open(browser), what="the flush modal")
        options = browser.execute_script(
            "return [...document.querySelectorAll('[data-testid=modal-field-state] option')].map(o => o.value)")
        assert options == ["ready", "delayed", "buried"]
        answer_modal(browser, confirm=False)
        no_error_toasts(browser)
    finally:
        srv.stop()

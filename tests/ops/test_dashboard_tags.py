"""The dashboard and the put tags (--extensions), in headless Chromium as
test_dashboard.py: the Groups panel lists GET /api/v1/groups and follows
its changes; the tube table has the tags' columns (aft-held, blocked,
dedup) equal to the tube JSON; without --extensions there is neither.

These tests never skip: they need /usr/bin/chromium and chromedriver."""
from __future__ import annotations

import json
import socket
import urllib.request

from dashtools import HttpServer, open_page, wait_for
from test_dashboard import no_error_toasts, tube_table

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
        reply = self.cmd(b"put %d 0 60 1 %s\r\nx\r\n" % (pri, tags))
        assert reply.startswith(b"INSERTED "), reply
        return int(reply.split()[1])

    def close(self):
        self.s.close()


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
        no_error_toasts(browser)
    finally:
        srv.stop()

"""The dashboard's test kit: a server with --http, a headless Chromium, and
waiting on what a page shows."""
from __future__ import annotations

import base64
import os
import time
import urllib.request

import greenstalk
import pytest

from support import Server, drain_pipes, free_port, ours_argv

CHROMIUM = os.environ.get("PYBEANSTALKD_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("PYBEANSTALKD_CHROMEDRIVER", "/usr/bin/chromedriver")

CHROMIUM_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--no-first-run", "--window-size=1280,800",
]


def _require_browser():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (os.path.isfile(p) and os.access(p, os.X_OK))]
    if missing:
        pytest.fail(
            "the dashboard's browser tests need Debian's headless Chromium and its driver; missing: "
            + ", ".join(missing) + " (apt-get install chromium chromium-driver; .ci/run does it)",
            pytrace=False,
        )
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.fail("selenium is not installed: pip install -e '.[test]'", pytrace=False)


def browser_session(tmp_path_factory):
    """A headless Chromium for the module (conftest.py's `browser`)."""
    _require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # never let selenium-manager look for drivers online
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in CHROMIUM_ARGS:
        opts.add_argument(arg)
    opts.add_argument("--user-data-dir=" + str(tmp_path_factory.mktemp("chromium-profile")))
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


class HttpServer:
    """pybeanstalkd with --http on its own port."""

    def __init__(self, *extra, auth: str | None = None):
        self.http_port = free_port()
        if auth is not None:
            extra = ("--http-auth", auth, *extra)
        self.srv = Server(ours_argv(), ["--http", f"127.0.0.1:{self.http_port}", *extra])
        drain_pipes(self.srv.proc)
        self.addr = ("127.0.0.1", self.srv.port)
        self.base = f"http://127.0.0.1:{self.http_port}"
        headers = self.headers = {}
        if auth is not None:
            headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
        end = time.monotonic() + 10
        while True:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{self.http_port}/readyz", headers=headers)
                with urllib.request.urlopen(req, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > end:
                    raise RuntimeError("the HTTP side did not come up") from None
                time.sleep(0.02)

    def client(self, **kw) -> greenstalk.Client:
        return greenstalk.Client(self.addr, **kw)

    def stop(self):
        self.srv.stop()


def wait_for(fn, timeout=30.0, what="the condition"):
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    end = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = fn()
        except (StaleElementReferenceException, WebDriverException, AssertionError) as e:
            last = e
        else:
            if last:
                return last
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}; last: {last!r}")
        time.sleep(0.05)


def open_page(driver, srv: HttpServer, fragment: str = "", refresh: int = 300):
    driver.get(f"{srv.base}/?refresh={refresh}" + (f"#{fragment}" if fragment else ""))
    wait_for(lambda: driver.execute_script(
        "return document.querySelector('#conn-status').dataset.state === 'live'"
        " && document.querySelectorAll('#tubes-body tr[data-tube]').length > 0"), what="the page to load")

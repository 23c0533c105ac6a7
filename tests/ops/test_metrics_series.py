"""/metrics leaves out the histograms of tubes that have no observations
(most of a scrape went to idle tubes' empty series) and shows them with the
first one: the collector on a real engine, rendered by prometheus_client."""
from __future__ import annotations

import asyncio
from time import monotonic_ns

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pybeanstalkd.core.engine import Engine
from pybeanstalkd.ops import metrics
from pybeanstalkd.server.gate import Outlet
from pybeanstalkd.server.transport import Server


class Pipe:
    def write(self, b):
        pass

    def is_closing(self):
        return False


def scrape(srv) -> str:
    return metrics.render_all(srv, monotonic_ns).decode()


@pytest.fixture
def world():
    """An engine, its transport Server (which /metrics reads) and a session."""
    loop = asyncio.new_event_loop()
    try:
        e = Engine(monotonic_ns(), log=lambda m: None)
        srv = Server(loop, e)
        s = e.connect()
        s.transport = Outlet(Pipe())
        yield e, srv, s
    finally:
        loop.close()


def test_histograms_appear_with_their_first_observation(world):
    e, srv, s = world
    e.data(s, b"use idle\r\nput 0 0 60 1\r\nx\r\nuse busy\r\nput 0 0 60 1\r\nx\r\n", monotonic_ns())
    text = scrape(srv)
    assert 'pybeanstalkd_tube_job_wait_seconds_count{tube="busy"}' not in text
    assert 'beanstalkd_tube_current_jobs_ready_count{tube="idle"} 1.0' in text
    e.data(s, b"watch busy\r\nreserve\r\ndelete 2\r\n", monotonic_ns())
    text = scrape(srv)
    assert 'pybeanstalkd_tube_job_wait_seconds_count{tube="busy"} 1.0' in text
    assert 'pybeanstalkd_tube_job_work_seconds_count{outcome="delete",tube="busy"} 1.0' in text
    # Nothing for the idle tube, nor for outcomes that never happened.
    assert 'job_wait_seconds_count{tube="idle"}' not in text
    assert 'outcome="release"' not in text and 'outcome="bury"' not in text


def test_a_scrape_of_many_active_tubes_is_rendered_in_parts_and_merged(world):
    e, srv, s = world
    for i in range(40):  # each tube: a wait and a delete histogram
        e.data(s, b"use t%02d\r\nwatch t%02d\r\nput 0 0 60 1\r\nx\r\n" % (i, i), monotonic_ns())
        e.data(s, b"reserve\r\n", monotonic_ns())
        jid = int(b"".join(s.out).rsplit(b"RESERVED ", 1)[1].split()[0])
        e.data(s, b"delete %d\r\n" % jid, monotonic_ns())
    e.data(s, b"use t00\r\nput 0 100 60 1\r\nx\r\n", monotonic_ns())
    gen = metrics.render(srv, monotonic_ns)
    parts = 0
    while True:
        try:
            next(gen)
            parts += 1
        except StopIteration as done:
            text = done.value.decode()
            break
    # 41 tubes of about 50 lines: parts of about PART_LINES lines.
    assert parts >= 41 * 50 // (2 * metrics.PART_LINES)
    # Merged: one HELP and TYPE per family, and the same families and
    # samples as one rendering of every family at once.
    helps = [line for line in text.splitlines() if line.startswith("# HELP ")]
    assert len(helps) == len(set(helps))
    whole = generate_latest(metrics.Part(
        [f for part in metrics.Scrape(srv, monotonic_ns).parts() for f in part]))

    def samples(t):
        out = {}
        for fam in text_string_to_metric_families(t):
            for smp in fam.samples:
                if smp.name not in ("beanstalkd_uptime_seconds", "beanstalkd_rusage_utime_seconds_total",
                                    "beanstalkd_rusage_stime_seconds_total"):
                    out[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
        return out
    got, want = samples(text), samples(whole.decode())
    assert got == want
    assert got[("beanstalkd_tube_current_jobs_delayed_count", (("tube", "t00"),))] == 1
    assert got[("pybeanstalkd_tube_job_work_seconds_count", (("outcome", "delete"), ("tube", "t39")))] == 1
    assert len({k[1] for k in got if k[0] == "beanstalkd_tube_total_jobs_count"}) == 41

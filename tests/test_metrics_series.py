"""/metrics leaves out the histograms of tubes that have no observations
(most of a scrape went to idle tubes' empty series) and shows them with the
first one: the collector on a real engine, rendered by prometheus_client."""
from __future__ import annotations

import asyncio
from time import monotonic_ns

from prometheus_client import CollectorRegistry, generate_latest

from pybeanstalkd.core.engine import Engine
from pybeanstalkd.ops.metrics import EngineCollector
from pybeanstalkd.server.transport import Server


class Pipe:
    def write(self, b):
        pass

    def is_closing(self):
        return False


def scrape(srv) -> str:
    reg = CollectorRegistry()
    reg.register(EngineCollector(srv, monotonic_ns))
    return generate_latest(reg).decode()


def test_histograms_appear_with_their_first_observation():
    loop = asyncio.new_event_loop()
    try:
        e = Engine(monotonic_ns(), log=lambda m: None)
        srv = Server(loop, e)
        s = e.connect()
        s.transport = Pipe()
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
    finally:
        loop.close()

import pytest

import support


@pytest.fixture(autouse=True)
def _watched():
    """Each test's failed waits show its own processes' logs, not those an
    earlier test started in this worker. (Autouse: set up before the
    test's own fixtures, which start etcd and the nodes.)"""
    support.WATCHED.clear()
    yield

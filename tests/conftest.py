import pytest

import dashtools
import fakeclock
from binlogtools import launch, start
from support import Server, ours_argv, require_reference


@pytest.fixture(autouse=True)
def _close_binlogs():
    """Close what each test's with_binlog binlogs hold (fds)."""
    yield
    while fakeclock.OPEN_WALS:
        fakeclock.OPEN_WALS.pop().close()


@pytest.fixture
def ours():
    srv = Server(ours_argv())
    yield srv
    srv.stop()


@pytest.fixture
def reference():
    srv = Server([require_reference()])
    yield srv
    srv.stop()


@pytest.fixture
def servers():
    """Binlog tests start servers through this so that every one is killed at teardown."""
    started = []

    def _start(kind, wal_dir, *extra, may_exit=False):
        srv = (launch if may_exit else start)(kind, wal_dir, *extra)
        started.append(srv)
        return srv

    yield _start
    for s in started:
        s.stop()


@pytest.fixture
def wal(tmp_path):
    """An empty binlog directory."""
    d = tmp_path / "wal"
    d.mkdir()
    return str(d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A CA, server and client certificates (tlstools.make_certs), made with
    the cryptography package for this run, never committed."""
    from tlstools import make_certs

    d = tmp_path_factory.mktemp("certs")
    make_certs(d)
    return d


browser = pytest.fixture(scope="module")(dashtools.browser_session)

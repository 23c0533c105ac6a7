import pytest

from support import Server, ours_argv, require_reference


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

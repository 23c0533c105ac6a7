"""free_port() never hands out a port another test process was handed
moments ago, though its server has not bound it yet."""
import os
import socket
import subprocess
import sys

import pytest

import support
from support import free_port


def test_a_port_handed_out_is_held_from_every_process_until_its_hold_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(support, "_HELD", str(tmp_path / "held"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        one = range(s.getsockname()[1], s.getsockname()[1] + 1)  # (free once s closes)
    port = free_port(one)
    assert port == one[0]
    # Nothing binds it yet, and it is not handed out again: not here...
    with pytest.raises(RuntimeError, match="no free port"):
        free_port(one)
    # ... nor to another process.
    other = subprocess.run(
        [sys.executable, "-c", "import sys, support; support._HELD = sys.argv[1]; "
         "print(support._hold(int(sys.argv[2])))", support._HELD, str(port)],
        capture_output=True, text=True, timeout=30, cwd=os.path.dirname(support.__file__))
    assert other.stdout == "False\n", other.stderr
    # A hold that has ended holds nothing.
    assert support._hold(port + 1, hold_s=-1)
    assert support._hold(port + 1)

"""Files that reload when they change (server/reload.py: the TLS
certificates and the auth tokens), on a fake clock."""
import os

import pytest

from pybeanstalkd.reload import CHECK_S, Reloading


class Bad(Exception):
    pass


class Files:
    """Two files whose build is their joined text; "bad" in one fails."""

    def __init__(self, tmp_path):
        self.a, self.b = tmp_path / "a", tmp_path / "b"
        self.a.write_text("a1")
        self.b.write_text("b1")
        self.now = 100.0
        self.builds, self.warned, self.logged = 0, [], []
        self.r = Reloading([str(self.a), None, str(self.b)], self.build, Bad,
                           self.warned.append, self.logged.append, clock=lambda: self.now)

    def build(self):
        self.builds += 1
        try:
            text = self.a.read_text() + self.b.read_text()
        except OSError as e:  # (as the real builds do)
            raise Bad(e.strerror) from None
        if "bad" in text:
            raise Bad(f"cannot use {text}")
        return text

    def at(self, dt):
        self.now += dt
        return self.r.current()


def test_a_change_is_seen_at_the_first_ask_a_second_after_the_last_look(tmp_path):
    f = Files(tmp_path)
    assert (f.r.value, f.builds) == ("a1b1", 1)
    f.a.write_text("a2")
    assert f.at(CHECK_S / 2) == "a1b1"  # not looked at yet
    assert f.at(CHECK_S / 2) == "a2b1"
    assert f.builds == 2 and f.logged == [f"reloaded {f.a}, {f.b}"]
    for _ in range(5):  # unchanged: looked at, not built again
        assert f.at(CHECK_S) == "a2b1"
    assert f.builds == 2 and f.warned == []


def test_a_change_that_does_not_build_keeps_the_old_and_is_said_once(tmp_path):
    f = Files(tmp_path)
    f.b.write_text("bad")
    for _ in range(4):
        assert f.at(CHECK_S) == "a1b1"
    assert f.warned == ["cannot use a1bad; what was loaded before stays in use"]
    assert f.builds == 2  # built once for that change, not at every look
    f.b.write_text("b3")  # mended
    assert f.at(CHECK_S) == "a1b3"
    f.b.write_text("bad again")  # a new failure is said again
    assert f.at(CHECK_S) == "a1b3"
    assert len(f.warned) == 2 and f.logged == [f"reloaded {f.a}, {f.b}"]


def test_a_file_renamed_away_mid_rotation_is_taken_when_it_is_back(tmp_path):
    f = Files(tmp_path)
    os.rename(f.a, tmp_path / "a.old")
    assert f.at(CHECK_S) == "a1b1"
    assert f.warned == ["No such file or directory; what was loaded before stays in use"]
    (tmp_path / "new").write_text("a4")
    os.rename(tmp_path / "new", f.a)
    assert f.at(CHECK_S) == "a4b1"


def test_an_error_at_start_is_the_callers(tmp_path):
    def build():
        raise Bad("x")
    warned = []
    with pytest.raises(Bad):
        Reloading([str(tmp_path / "a")], build, Bad, warned.append)
    assert warned == []

"""The history checker the cluster's fault tests rely on: it must catch
each kind of loss, and let every allowed outcome of an ambiguous command
through."""
from history import History


def base() -> History:
    h = History()
    for i, body in ((1, b"a"), (2, b"b"), (3, b"c")):
        h.put_sent(body)
        h.put_acked(i, body)
    h.reserved(2, b"b")
    h.send_delete(2)
    h.delete_acked(2)
    return h


def test_a_faithful_survivor_passes():
    assert base().check({1: b"a", 3: b"c"}) == []


def test_a_missing_acknowledged_put_is_caught():
    assert base().check({1: b"a"}) == ["job 3: acknowledged put is missing"]


def test_a_deleted_job_coming_back_is_caught():
    assert base().check({1: b"a", 2: b"b", 3: b"c"}) == ["job 2: acknowledged delete has come back"]


def test_an_id_used_twice_is_caught():
    h = base()
    assert h.check({1: b"a", 3: b"zz"}) == ["job 3: holds b'zz', but it was put as b'c'"]
    h.put_sent(b"d")
    h.put_acked(3, b"d")  # a new leader handed out an old id again
    assert "one id, two jobs" in h.check({1: b"a", 3: b"c"})[0]
    h = base()
    h.reserved(1, b"c")
    assert "one id, two jobs" in h.check({1: b"a", 3: b"c"})[0]


def test_a_job_nobody_put_is_caught():
    h = base()
    assert h.check({1: b"a", 3: b"c", 9: b"ghost"}) == ["job 9: nobody put it: b'ghost'"]
    h.reserved(8, b"ghost")
    assert h.check({1: b"a", 3: b"c"}) == ["job 8: reserved with a body nobody put: b'ghost'"]


def test_ambiguous_commands_may_go_either_way():
    h = base()
    h.put_sent(b"e")  # no reply: the leader died
    h.send_delete(3)  # no reply either
    assert h.check({1: b"a", 3: b"c", 4: b"e"}) == []  # both did not happen, or the put did
    assert h.check({1: b"a"}) == []  # the delete did, the put did not

"""A put whose one tag is idp:KEY: the fast path hands on the key alone
as its tags until the put's tags' stage (commands.py). Each case is run on
an engine with the fast path, its put lines parsed before or not, and on
one without it (Engine.fast = False, as with -V -V): the replies and the
extensions' state (the keys, their count, the tags by id, the next id)
must come out the same."""
import pytest

from fakeclock import Harness
from pybeanstalkd.core.store import Store


class Refusing(Store):
    """A binlog with no room for a put (NO_ROOM) while `full`."""

    full = False

    def reserve_put(self, j):
        return not self.full


def _key_ids(ext):
    """ext.keys with each holder's id for the job (what two servers share)."""
    return {t: {k: j.id for k, j in m.items()} for t, m in ext.keys.items()}


def _state(h):
    ext = h.e.q.ext
    return (_key_ids(ext), ext.nkeys, {j.id: j.tags for j in h.e.q.jobs.values() if j.tags},
            ext.tagged, h.e.q.ids.next, sorted(h.e.q.jobs))


def _pair(known=False):
    fast, slow = Harness(extensions=True), Harness(extensions=True)
    if known:
        fast.e.lines = _warm_lines()
    slow.e.fast = False
    for h in (fast, slow):
        h.e.q.store = Refusing()
    return fast, slow, fast.conn(), slow.conn()


def _both(fast, slow, cf, cs, data):
    a, b = fast.send(cf, data), slow.send(cs, data)
    assert a == b, data
    assert _state(fast) == _state(slow), data
    return a


CASES = {
    # (the steps before, the put under test, its expected reply)
    "first key of its tube": ([], b"put 0 0 60 1 idp:a\r\nx\r\n", b"INSERTED 1\r\n"),
    "a new key": ([b"put 0 0 60 1 idp:a\r\nx\r\n"], b"put 0 0 60 1 idp:b\r\nx\r\n",
                  b"INSERTED 2\r\n"),
    # (after a keyed put, lines that start as it did: PutLines.keyed_front)
    "a new key with a TTL": ([b"put 0 0 60 1 idp:a\r\nx\r\n"], b"put 0 0 60 1 idp:b:30\r\nx\r\n",
                             b"INSERTED 2\r\n"),
    "a new key, then a tag": ([b"put 0 0 60 1 idp:a\r\nx\r\n"],
                              b"put 0 0 60 1 idp:b con:c\r\nx\r\n", b"INSERTED 2\r\n"),
    "an ill-formed key": ([b"put 0 0 60 1 idp:a\r\nx\r\n"], b"put 0 0 60 1 idp:-b\r\nx\r\n",
                          b"BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n"),
    "a duplicate": ([b"put 0 0 60 1 idp:a\r\nx\r\n"], b"put 0 0 60 1 idp:a\r\nx\r\n",
                    b"INSERTED 1 READY\r\n"),
    "a duplicate, lower priority": ([b"put 9 0 60 1 idp:a\r\nx\r\n"], b"put 0 0 60 1 idp:a\r\nx\r\n",
                                    b"INSERTED 1 READY 0\r\n"),
    "a key in its cooldown": ([b"put 0 0 60 1 idp:a:30\r\nx\r\n", b"delete 1\r\n"],
                              b"put 0 0 60 1 idp:a\r\nx\r\n", b"INSERTED 1 DELETED\r\n"),
    "a key in its cooldown, the tube with keys": (
        [b"put 0 0 60 1 idp:a:30\r\nx\r\n", b"put 0 0 60 1 idp:b\r\nx\r\n", b"delete 1\r\n"],
        b"put 0 0 60 1 idp:a\r\nx\r\n", b"INSERTED 1 DELETED\r\n"),
    "another key while one cools": ([b"put 0 0 60 1 idp:a:30\r\nx\r\n", b"delete 1\r\n"],
                                    b"put 0 0 60 1 idp:b\r\nx\r\n", b"INSERTED 2\r\n"),
    "a deleted job's key": ([b"put 0 0 60 1 idp:a\r\nx\r\n", b"put 0 0 60 1 idp:b\r\nx\r\n",
                             b"delete 1\r\n"], b"put 0 0 60 1 idp:a\r\nx\r\n", b"INSERTED 3\r\n"),
    "draining": ([b"put 0 0 60 1 idp:a\r\nx\r\n", b"drain\r\n"], b"put 0 0 60 1 idp:b\r\nx\r\n",
                 b"DRAINING\r\n"),
    "another tube": ([b"put 0 0 60 1 idp:a\r\nx\r\n", b"use t\r\n", b"put 0 0 60 1 idp:b\r\nx\r\n"],
                     b"put 0 0 60 1 idp:a\r\nx\r\n", b"INSERTED 3\r\n"),
    "a body without its CRLF": ([b"put 0 0 60 1 idp:a\r\nx\r\n"], b"put 0 0 60 1 idp:b\r\nxy\r\n",
                                b"EXPECTED_CRLF\r\n"),
}


def _warm_lines():
    """An engine's put lines once every case's lines have been parsed."""
    h = Harness(extensions=True)
    c = h.conn()
    for before, data, _ in CASES.values():
        for step in [*before, data]:
            h.send(c, step)
    assert h.e.lines.known
    return h.e.lines


@pytest.mark.parametrize("known", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_alike_on_both_paths(case, known):
    before, data, expected = CASES[case]
    fast, slow, cf, cs = _pair(known)
    for step in before:
        _both(fast, slow, cf, cs, step)
    assert _both(fast, slow, cf, cs, data) == expected
    # and the key holds after it: the same put again answers the same job
    again = _both(fast, slow, cf, cs, data)
    if expected.startswith(b"INSERTED"):
        assert again.startswith(b"INSERTED " + expected.split()[1] + b" ")


def test_no_room_uses_the_id_and_keeps_no_key():
    """The binlog has no room: NO_ROOM (as store_put answers), the id
    stays used, and the key is free for the next put."""
    fast, slow, cf, cs = _pair()
    _both(fast, slow, cf, cs, b"put 0 0 60 1 idp:a\r\nx\r\n")
    for h in (fast, slow):
        h.e.q.store.full = True
    assert _both(fast, slow, cf, cs, b"put 0 0 60 1 idp:b\r\nx\r\n") == b"OUT_OF_MEMORY\r\n"
    for h in (fast, slow):
        h.e.q.store.full = False
    assert _both(fast, slow, cf, cs, b"put 0 0 60 1 idp:b\r\nx\r\n") == b"INSERTED 3\r\n"
    assert _key_ids(fast.e.q.ext)[b"default"] == {b"a": 1, b"b": 3}
    assert fast.e.q.ext.nkeys == 2


def test_the_keys_count_and_the_key_map():
    """Keys put on the keyed path are counted, found and cleared as any."""
    fast, slow, cf, cs = _pair()
    for n in range(5):
        _both(fast, slow, cf, cs, b"put 0 0 60 1 idp:k%d\r\nx\r\n" % n)
    ext = fast.e.q.ext
    assert ext.nkeys == 5
    assert _key_ids(ext)[b"default"] == {b"k%d" % n: n + 1 for n in range(5)}
    tags = fast.e.q.jobs[3].tags
    assert tags.idp == b"k2" and tags.ttl == 0 and tags.con is None
    assert _both(fast, slow, cf, cs, b"delete 3\r\n") == b"DELETED\r\n"
    assert ext.nkeys == 4 and b"k2" not in ext.keys[b"default"]
    assert _both(fast, slow, cf, cs, b"put 0 0 60 1 idp:k2\r\nx\r\n") == b"INSERTED 6\r\n"
    assert b"\nidempotency-key: k2\nidempotency-ttl: 0\n" in fast.send(cf, b"stats-job 6\r\n")


def test_ids_used_up():
    """The last id is handed out, then a keyed put is refused as any put
    is (no id, no key): at its line, or at its body when another
    connection took the last id in between."""
    fast, slow, cf, cs = _pair()
    _both(fast, slow, cf, cs, b"put 0 0 60 1 idp:a\r\nx\r\n")
    for h in (fast, slow):
        h.e.q.ids.bound(2)
    df, ds = fast.conn(), slow.conn()
    assert _both(fast, slow, df, ds, b"put 0 0 60 1 idp:b\r\n") == b""  # (its body to come)
    assert _both(fast, slow, cf, cs, b"put 0 0 60 1 idp:c\r\nx\r\n") == b"INSERTED 2\r\n"
    assert _both(fast, slow, df, ds, b"x\r\n") == b"INTERNAL_ERROR\r\n"
    assert _both(fast, slow, cf, cs, b"put 0 0 60 1 idp:d\r\nx\r\n") == b"INTERNAL_ERROR\r\n"
    assert _key_ids(fast.e.q.ext)[b"default"] == {b"a": 1, b"c": 2}
    for h in (fast, slow):
        h.e.q.ids.bound(3)
    assert _both(fast, slow, df, ds, b"put 0 0 60 1 idp:b\r\nx\r\n") == b"INSERTED 3\r\n"

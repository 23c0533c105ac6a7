"""The put tags as a policy the queue owns (queue.py's TagPolicy, tagged.py's
Tagged): the steps where a tag changes what the queue does, and their
order between the queue's and the policy's sides."""
from fakeclock import Harness


def test_a_delete_stamped_before_its_reservation_is_still_a_work_sample():
    """A command is given a nanosecond more than the one before it in its
    read, so a reservation made by a put pipelined after another command
    is stamped later than a delete the holder sends next: its work time,
    a few ns below 0, is still a delete by its holder, which the
    weighted-fair reserves' moving average counts (as tuber's does)."""
    h = Harness(extensions=True)
    p, w = h.conn(), h.conn()
    assert h.send(w, b"reserve\r\n") == b""
    h.send(p, b"use default\r\nput 0 0 60 1\r\nx\r\n")  # the put: 1 ns on, its body 2
    assert h.take(w) == b"RESERVED 1 1\r\nx\r\n"
    assert h.send(w, b"delete 1\r\n") == b"DELETED\r\n"
    t = h.e.q.tubes.named[b"default"]
    assert t.ewma_n == 1 and t.ewma == -2


def tubes(h, s):
    return h.send(s, b"list-tubes\r\n").split(b"\r\n", 1)[1]


def test_a_tube_stays_while_the_tags_keep_it_and_goes_when_they_let_go():
    """A tube no one uses stays while a key, a cooldown or a held job of
    its own is left (flush-tube finds it, as in tuber), and goes with the
    last of them: the queue's free comes before the policy lets the
    deleted job's tags go, and the policy asks again once it has."""
    h = Harness(extensions=True)
    p, w = h.conn(), h.conn()
    for tags, left in ((b"idp:k", None), (b"idp:c:5", b"cooldown")):
        h.send(p, b"use t\r\nput 0 0 60 1 %s\r\nx\r\nuse default\r\n" % tags)
        h.send(w, b"watch t\r\n")
        jid = int(h.send(w, b"reserve\r\n").split()[1])
        h.send(w, b"ignore t\r\n")
        assert b"- t\n" in tubes(h, w)  # (its reserved job)
        assert h.send(w, b"delete %d\r\n" % jid) == b"DELETED\r\n"
        if left:
            assert b"- t\n" in tubes(h, w)  # its cooldown
            h.advance(5.1)
        assert b"- t\n" not in tubes(h, w)
    # a held job keeps its tube, as its release to ready does
    h.send(p, b"put 0 0 60 1 grp:g\r\nx\r\nuse t\r\nput 0 0 60 1 aft:g\r\nx\r\nuse default\r\n")
    assert h.e.q.ext.nheld == 1 and b"- t\n" in tubes(h, w)
    member = min(h.e.q.jobs)
    assert h.send(w, b"delete %d\r\n" % member) == b"DELETED\r\n"
    assert h.e.q.ext.nheld == 0 and b"- t\n" in tubes(h, w)
    held = max(h.e.q.jobs)
    assert h.send(w, b"delete %d\r\n" % held) == b"DELETED\r\n"
    assert b"- t\n" not in tubes(h, w)


def test_a_job_brought_back_for_its_keys_room_passes_the_room_on_if_deleted():
    """A job brought back from hiding when its concurrency key got room,
    then deleted while still ready, leaves that room to the next hidden
    job of the key (the policy's `removing`), which a reserve then gets."""
    h = Harness(extensions=True)
    p, w = h.conn(), h.conn()
    h.send(p, b"put 0 0 60 1 con:k\r\na\r\n" * 3)
    assert h.send(w, b"reserve-with-timeout 0\r\n") == b"RESERVED 1 1\r\na\r\n"
    assert h.send(w, b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"  # 2 and 3 hidden
    assert h.send(w, b"delete 1\r\n") == b"DELETED\r\n"  # room: 2 comes back
    assert h.send(p, b"delete 2\r\n") == b"DELETED\r\n"  # and passes it to 3
    assert h.send(w, b"reserve-with-timeout 0\r\n") == b"RESERVED 3 1\r\na\r\n"


def test_a_group_made_again_goes_with_the_aft_jobs_of_the_one_before():
    """A completed group's entry goes while the aft: jobs it released live
    on (their count kept without it); an aft: put makes the entry again,
    and it stays until the last aft: job naming it goes, the earlier ones
    included."""
    h = Harness(extensions=True)
    s = h.conn()
    assert h.send(s, b"put 0 0 60 1 grp:g\r\nm\r\n") == b"INSERTED 1\r\n"
    assert h.send(s, b"put 0 0 60 1 aft:g\r\nr\r\n") == b"INSERTED 2\r\n"  # held
    h.send(s, b"delete 1\r\n")  # g completes: 2 released, g's entry gone
    assert h.send(s, b"stats-group g\r\n") == b"NOT_FOUND\r\n"
    assert h.e.q.ext.aft_left == {b"g": 1}
    assert h.send(s, b"put 0 0 60 1 aft:g\r\na\r\n") == b"INSERTED 3\r\n"  # the entry again
    assert h.send(s, b"stats-group g\r\n").startswith(b"OK ") and not h.e.q.ext.aft_left
    h.send(s, b"delete 3\r\n")
    assert h.send(s, b"stats-group g\r\n").startswith(b"OK ")  # (2 names it still)
    h.send(s, b"delete 2\r\n")
    assert h.send(s, b"stats-group g\r\n") == b"NOT_FOUND\r\n"
    assert not h.e.q.ext.groups and not h.e.q.ext.aft_left

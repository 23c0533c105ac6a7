"""The put tags as a policy the queue owns (queue.py's TagPolicy, tagged.py's
Tagged): each step a tag changes does what the queue with tags did before
the policy (ExtQueue, a subclass of the queue), in the same order."""
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
    t = h.e.q.tubes[b"default"]
    assert t.ewma_n == 1 and t.ewma == -2

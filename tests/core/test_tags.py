"""Put tags (--extensions): idp:, con:, grp:/aft:, try:, stats-group and
peek-reserved, answered byte for byte as tuber 0.6.4 answers them (the
transcripts of its tests/integration.rs and the parse cases of its
src/protocol.rs tests), and nothing of it without the flag."""
import pytest

from fakeclock import Harness
from pybeanstalkd.core.slices import SLICE


@pytest.fixture
def h():
    return Harness(extensions=True)


def put(h, s, tags=b"", body=b"a", pri=0, delay=0, ttr=60):
    line = b"put %d %d %d %d" % (pri, delay, ttr, len(body))
    if tags:
        line += b" " + tags
    return h.send(s, line + b"\r\n" + body + b"\r\n")


def reserve(h, s, timeout=0):
    return h.send(s, b"reserve-with-timeout %d\r\n" % timeout)


def field(yaml: bytes, key: bytes) -> bytes:
    for line in yaml.split(b"\n"):
        if line.startswith(key + b": "):
            return line[len(key) + 2:]
    raise KeyError(key)


# -- without the flag -------------------------------------------------------

def test_without_the_flag_tags_and_new_commands_are_answered_as_the_reference_does():
    h = Harness()
    s = h.conn()
    # junk after the size: BAD_FORMAT, and the body is then read as a command
    assert put(h, s, b"idp:x") == b"BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n"
    assert h.send(s, b"stats-group g\r\n") == b"BAD_FORMAT\r\n"  # (the prefix "stats")
    assert h.send(s, b"peek-reserved\r\n") == b"UNKNOWN_COMMAND\r\n"
    assert b"current-concurrency-keys" not in h.send(s, b"stats\r\n")


# -- parsing ----------------------------------------------------------------

@pytest.mark.parametrize("tags", [
    b"idp:abc123", b"idp:k1 grp:g1 aft:g0 con:c1", b"con:c1 idp:k1", b"con:api:5",
    b"con:api:1", b"idp:key:60", b"idp:key:0", b"idp:k:+5", b"try:3", b"idp:a idp:a:30",
    b"grp:" + b"g" * 200, b"idp:x\tgrp:y", b"idp:x  grp:y ",
])
def test_tags_tuber_accepts(h, tags):
    assert put(h, h.conn(), tags) == b"INSERTED 1\r\n"


@pytest.mark.parametrize("tags", [
    b"foo:bar", b"idp:-bad", b"idp:", b"idp::5", b"idp:k:", b"idp:k:abc", b"idp:k:-1",
    b"idp:a:b:5", b"IDP:x", b"con:api:0", b"con:api:abc", b"con:", b"con:k:99999999999999",
    b"grp:import:300", b"aft:", b"grp:" + b"g" * 201, b"5", b"try:0", b"try:x",
    b"idp:has space",
])
def test_bad_tags_are_bad_format_and_the_body_is_read_as_a_command(h, tags):
    s = h.conn()
    assert put(h, s, tags) == b"BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n"
    assert h.send(s, b"stats\r\n").find(b"total-jobs: 0\n") > 0


def test_the_last_of_a_repeated_tag_wins(h):
    s = h.conn()
    put(h, s, b"grp:a grp:b idp:a idp:b:30")
    stats = h.send(s, b"stats-job 1\r\n")
    assert field(stats, b"group") == b"b" and field(stats, b"idempotency-key") == b"b"
    assert field(stats, b"idempotency-ttl") == b"30"


def test_stats_job_shows_the_tags_and_empty_ones_keep_their_space(h):
    s = h.conn()
    put(h, s, b"idp:k1 grp:g1 aft:g0 con:c1")
    put(h, s)
    tagged, plain = h.send(s, b"stats-job 1\r\n"), h.send(s, b"stats-job 2\r\n")
    assert (field(tagged, b"idempotency-key"), field(tagged, b"group"),
            field(tagged, b"after-group"), field(tagged, b"concurrency-key"),
            field(tagged, b"concurrency-limit")) == (b"k1", b"g1", b"g0", b"c1", b"1")
    assert b"\nidempotency-key: \n" in plain and b"\ngroup: \n" in plain
    assert b"\nkicks: 0\nidempotency-key" in plain  # (after the reference's fields)


def test_a_put_with_a_number_past_u32_or_junk_is_bad_format(h):
    s = h.conn()
    assert h.send(s, b"put 0 0 1 4294967296 idp:x\r\n") == b"BAD_FORMAT\r\n"
    assert h.send(s, b"put +1 0 +1 +1 idp:x\r\na\r\n") == b"INSERTED 1\r\n"


# -- idp: ------------------------------------------------------------------

def test_a_duplicate_answers_the_job_and_uses_no_id(h):
    s = h.conn()
    assert put(h, s, b"idp:key1", b"hello") == b"INSERTED 1\r\n"
    assert put(h, s, b"idp:key1", b"world") == b"INSERTED 1 READY\r\n"
    assert put(h, s, b"idp:key2") == b"INSERTED 2\r\n"
    h.send(s, b"use other\r\n")
    assert put(h, s, b"idp:key1") == b"INSERTED 3\r\n"  # (keys are per tube)
    stats = h.send(s, b"stats\r\n")
    assert field(stats, b"cmd-put") == b"4" and field(stats, b"total-jobs") == b"3"
    assert h.send(s, b"peek 1\r\n") == b"FOUND 1 5\r\nhello\r\n"


def test_a_duplicate_names_the_jobs_state(h):
    s, w = h.conn(), h.conn()
    put(h, s, b"idp:key1")
    reserve(h, w)
    assert put(h, s, b"idp:key1") == b"INSERTED 1 RESERVED\r\n"
    assert h.send(w, b"bury 1 0\r\n") == b"BURIED\r\n"
    assert put(h, s, b"idp:key1") == b"INSERTED 1 BURIED\r\n"
    put(h, s, b"idp:key2", delay=3600)
    assert put(h, s, b"idp:key2") == b"INSERTED 2 DELAYED\r\n"


def test_a_lower_priority_ratchets_down_never_up(h):
    s, w = h.conn(), h.conn()
    put(h, s, b"idp:k", pri=100)
    put(h, s, pri=50)
    assert put(h, s, b"idp:k", pri=200) == b"INSERTED 1 READY\r\n"
    assert put(h, s, b"idp:k", pri=100) == b"INSERTED 1 READY\r\n"
    assert put(h, s, b"idp:k", pri=10) == b"INSERTED 1 READY 10\r\n"
    assert field(h.send(s, b"stats-job 1\r\n"), b"pri") == b"10"
    assert reserve(h, w) == b"RESERVED 1 1\r\na\r\n"  # (now ahead of job 2)


def test_a_ratchet_past_urgent_counts_the_job_urgent(h):
    s = h.conn()
    put(h, s, b"idp:k", pri=2000)
    put(h, s, b"idp:k", pri=5)
    assert field(h.send(s, b"stats\r\n"), b"current-jobs-urgent") == b"1"


def test_a_delete_frees_the_key_or_keeps_it_ttl_seconds(h):
    s, w = h.conn(), h.conn()
    put(h, s, b"idp:key1")
    h.send(s, b"delete 1\r\n")
    assert put(h, s, b"idp:key1") == b"INSERTED 2\r\n"
    put(h, s, b"idp:key2:5")
    reserve(h, w)
    reserve(h, w)
    h.send(w, b"delete 3\r\n")
    assert put(h, s, b"idp:key2") == b"INSERTED 3 DELETED\r\n"
    h.advance(4.9)
    assert put(h, s, b"idp:key2:9") == b"INSERTED 3 DELETED\r\n"
    h.advance(0.2)
    assert put(h, s, b"idp:key2") == b"INSERTED 4\r\n"
    assert not h.e.q.ext.cools  # (swept when it ended)


def test_flush_tube_clears_keys_and_cooldowns(h):
    s = h.conn()
    put(h, s, b"idp:key1:60")
    h.send(s, b"delete 1\r\n")
    assert put(h, s, b"idp:key1") == b"INSERTED 1 DELETED\r\n"
    assert h.send(s, b"flush-tube default\r\n") == b"FLUSHED 0\r\n"
    assert put(h, s, b"idp:key1:60") == b"INSERTED 2\r\n"
    assert h.send(s, b"flush-tube default\r\n") == b"FLUSHED 1\r\n"
    assert put(h, s, b"idp:key1") == b"INSERTED 3\r\n"  # (no cooldown from a flush)


def test_a_duplicate_while_draining_is_draining(h):
    s = h.conn()
    put(h, s, b"idp:k")
    h.send(s, b"drain\r\n")
    assert put(h, s, b"idp:k") == b"DRAINING\r\n"


def test_a_duplicate_of_a_group_member_adds_no_member(h):
    s = h.conn()
    assert put(h, s, b"grp:batch idp:key1", b"first") == b"INSERTED 1\r\n"
    assert put(h, s, b"grp:batch idp:key1", b"second") == b"INSERTED 1 READY\r\n"
    body = (b'---\nname: "batch"\nready: 1\nreserved: 0\ndelayed: 0\nburied: 0\n'
            b"waiting-jobs: 0\n")
    assert h.send(s, b"stats-group batch\r\n") == b"OK %d\r\n%s\r\n" % (len(body), body)


# -- con: ------------------------------------------------------------------

def test_concurrency_basic(h):
    s, w = h.conn(), h.conn()
    put(h, s, b"con:mykey")
    put(h, s, b"con:mykey")
    assert reserve(h, w) == b"RESERVED 1 1\r\na\r\n"
    assert reserve(h, w) == b"TIMED_OUT\r\n"
    stats = h.send(s, b"stats\r\n")
    assert field(stats, b"current-jobs-ready") == b"1"  # (hidden, still ready)
    assert field(stats, b"current-concurrency-keys") == b"1"
    assert h.send(s, b"peek-ready\r\n") == b"FOUND 2 1\r\na\r\n"
    assert h.send(w, b"reserve-job 2\r\n") == b"NOT_FOUND\r\n"
    assert h.send(w, b"delete 1\r\n") == b"DELETED\r\n"
    assert reserve(h, w) == b"RESERVED 2 1\r\na\r\n"
    h.send(w, b"delete 2\r\n")
    assert field(h.send(s, b"stats\r\n"), b"current-concurrency-keys") == b"0"


def test_the_smallest_unblocked_job_is_served(h):
    s, w = h.conn(), h.conn()
    put(h, s, b"con:k", pri=1)
    put(h, s, pri=2)
    put(h, s, b"con:k", pri=0)
    assert reserve(h, w).startswith(b"RESERVED 3 ")
    assert reserve(h, w).startswith(b"RESERVED 2 ")
    assert reserve(h, w) == b"TIMED_OUT\r\n"


def test_a_limit_above_one(h):
    s, w = h.conn(), h.conn()
    for _ in range(3):
        put(h, s, b"con:api:2")
    assert reserve(h, w).startswith(b"RESERVED 1 ")
    assert reserve(h, w).startswith(b"RESERVED 2 ")
    assert reserve(h, w) == b"TIMED_OUT\r\n"
    h.send(w, b"delete 1\r\n")
    assert reserve(h, w).startswith(b"RESERVED 3 ")


def test_reserve_batch_stops_at_the_limit(h):
    s, w = h.conn(), h.conn()
    for _ in range(5):
        put(h, s, b"con:key:2", b"abc")
    assert h.send(w, b"reserve-batch 10\r\n").startswith(b"RESERVED_BATCH 2\r\n")


@pytest.mark.parametrize("end, frees", [
    (b"release 1 0 0", b"RELEASED\r\n"), (b"bury 1 0", b"BURIED\r\n"),
    (b"release 1 0 1", b"RELEASED\r\n")])
def test_release_and_bury_free_the_slot(h, end, frees):
    s, w = h.conn(), h.conn()
    put(h, s, b"con:k")
    put(h, s, b"con:k")
    reserve(h, w)
    assert h.send(w, end + b"\r\n") == frees
    got = reserve(h, w)
    assert got.startswith(b"RESERVED 1 " if end == b"release 1 0 0" else b"RESERVED 2 ")


def test_a_ttr_expiry_and_a_disconnect_free_the_slot_and_wake_a_waiter(h):
    s, w, w2 = h.conn(), h.conn(), h.conn()
    put(h, s, b"con:k", ttr=1)
    put(h, s, b"con:k")
    reserve(h, w)
    assert h.send(w2, b"reserve\r\n") == b""  # waits: job 2 is hidden
    h.advance(2)  # job 1's TTR expires: back to ready, and to the waiter
    assert h.take(w2) == b"RESERVED 1 1\r\na\r\n"
    assert reserve(h, w) == b"TIMED_OUT\r\n"
    assert h.send(w, b"reserve\r\n") == b""
    h.close(w2)  # job 1 back; its slot frees: the waiter gets job 1
    assert h.take(w) == b"RESERVED 1 1\r\na\r\n"
    assert {key: k.held for key, k in h.e.q.ext.cons.items()} == {b"k": 1}


def test_kick_brings_a_buried_con_job_back(h):
    s, w = h.conn(), h.conn()
    put(h, s, b"con:k")
    put(h, s, b"con:k")
    reserve(h, w)
    h.send(w, b"bury 1 0\r\n")
    assert reserve(h, w) == b"RESERVED 2 1\r\na\r\n"
    h.send(w, b"delete 2\r\n")
    assert h.send(s, b"kick 1\r\n") == b"KICKED 1\r\n"
    assert reserve(h, w) == b"RESERVED 1 1\r\na\r\n"


def test_keys_are_server_wide(h):
    s, w = h.conn(), h.conn()
    h.send(s, b"use tubeA\r\n")
    put(h, s, b"con:shared")
    h.send(s, b"use tubeB\r\n")
    put(h, s, b"con:shared")
    h.send(w, b"watch tubeA\r\n")
    h.send(w, b"watch tubeB\r\n")
    assert reserve(h, w).startswith(b"RESERVED 1 ")
    assert reserve(h, w) == b"TIMED_OUT\r\n"
    h.send(w, b"delete 1\r\n")
    assert reserve(h, w).startswith(b"RESERVED 2 ")


def test_a_waiter_in_another_tube_gets_a_job_when_its_slot_frees(h):
    s, w, w2 = h.conn(), h.conn(), h.conn()
    put(h, s, b"con:k")
    h.send(s, b"use b\r\n")
    put(h, s, b"con:k")
    h.send(w2, b"watch b\r\n")
    h.send(w2, b"ignore default\r\n")
    assert reserve(h, w).startswith(b"RESERVED 1 ")
    assert h.send(w2, b"reserve\r\n") == b""
    h.send(w, b"delete 1\r\n")
    assert h.take(w2) == b"RESERVED 2 1\r\na\r\n"


def test_many_hidden_jobs_cost_no_walk(h):
    s, w = h.conn(), h.conn()
    for _ in range(1000):
        put(h, s, b"con:k")
    put(h, s, pri=5)
    assert reserve(h, w).startswith(b"RESERVED 1 ")
    assert reserve(h, w).startswith(b"RESERVED 1001 ")  # (tuber gives up after 256)
    assert h.e.q.ext.blocked == {b"default": 999}
    assert h.send(s, b"flush-tube default\r\n") == b"FLUSHED 1001\r\n"
    assert h.e.q.ext.blocked == {} and not h.e.q.ext.parked_ids


def test_weighted_reserve_skips_a_tube_whose_jobs_are_hidden(h):
    s, w = h.conn(), h.conn()
    put(h, s, b"con:k")
    put(h, s, b"con:k")
    h.send(s, b"use b\r\n")
    put(h, s)
    h.send(w, b"reserve-mode weighted\r\n")
    h.send(w, b"watch b\r\n")
    got = sorted(reserve(h, w).split(b"\r\n")[0] for _ in range(3))
    assert got == [b"RESERVED 1 1", b"RESERVED 3 1", b"TIMED_OUT"]


# -- grp: / aft: --------------------------------------------------------------

def test_an_aft_job_of_an_empty_group_is_ready_at_once(h):
    s = h.conn()
    assert put(h, s, b"aft:batch-1", b"x") == b"INSERTED 1\r\n"
    assert reserve(h, s) == b"RESERVED 1 1\r\nx\r\n"


def test_an_aft_job_waits_for_every_member(h):
    s = h.conn()
    put(h, s, b"grp:g", b"x")
    put(h, s, b"grp:g", b"y")
    assert put(h, s, b"aft:g", b"z") == b"INSERTED 3\r\n"
    stats = h.send(s, b"stats-job 3\r\n")
    assert field(stats, b"state") == b"delayed" and field(stats, b"time-left") == b"0"
    assert field(h.send(s, b"stats\r\n"), b"current-jobs-delayed") == b"0"
    body = (b'---\nname: "g"\nready: 2\nreserved: 0\ndelayed: 0\nburied: 0\n'
            b"waiting-jobs: 1\n")
    assert h.send(s, b"stats-group g\r\n") == b"OK %d\r\n%s\r\n" % (len(body), body)
    assert h.send(s, b"reserve-job 3\r\n") == b"NOT_FOUND\r\n"
    assert reserve(h, s).startswith(b"RESERVED 1 ")
    h.send(s, b"delete 1\r\n")
    assert reserve(h, s).startswith(b"RESERVED 2 ")
    h.send(s, b"delete 2\r\n")
    assert reserve(h, s) == b"RESERVED 3 1\r\nz\r\n"
    assert h.send(s, b"stats-group g\r\n") == b"NOT_FOUND\r\n"  # (done: forgotten)


def test_buried_members_block(h):
    s = h.conn()
    put(h, s, b"grp:g")
    put(h, s, b"aft:g")
    reserve(h, s)
    assert h.send(s, b"bury 1 0\r\n") == b"BURIED\r\n"
    assert field(h.send(s, b"stats-group g\r\n"), b"buried") == b"1"
    assert reserve(h, s) == b"TIMED_OUT\r\n"
    assert h.send(s, b"kick 1\r\n") == b"KICKED 1\r\n"
    assert reserve(h, s).startswith(b"RESERVED 1 ")
    h.send(s, b"delete 1\r\n")
    assert reserve(h, s).startswith(b"RESERVED 2 ")


def test_chains_cycles_and_members_added_later(h):
    s = h.conn()
    put(h, s, b"grp:grpA")
    put(h, s, b"aft:grpA grp:grpB")
    put(h, s, b"aft:grpB")
    put(h, s, b"grp:grpA")  # (a member put after the aft: job extends the hold)
    for id_ in (1, 4):
        assert reserve(h, s).startswith(b"RESERVED %d " % id_)
        h.send(s, b"delete %d\r\n" % id_)
    assert reserve(h, s).startswith(b"RESERVED 2 ")
    assert reserve(h, s) == b"TIMED_OUT\r\n"
    h.send(s, b"delete 2\r\n")
    assert reserve(h, s).startswith(b"RESERVED 3 ")
    h.send(s, b"delete 3\r\n")
    put(h, s, b"grp:cycleA")
    put(h, s, b"grp:cycleB")
    put(h, s, b"grp:cycleA aft:cycleB")
    put(h, s, b"grp:cycleB aft:cycleA")
    for id_ in (5, 6):
        reserve(h, s)
        h.send(s, b"delete %d\r\n" % id_)
    assert reserve(h, s) == b"TIMED_OUT\r\n"
    assert h.send(s, b"peek 7\r\n") == b"FOUND 7 1\r\na\r\n"


def test_groups_span_tubes_and_flush_releases_other_tubes(h):
    s = h.conn()
    put(h, s, b"grp:flushgrp")
    put(h, s, b"grp:flushgrp")
    h.send(s, b"use other\r\n")
    assert put(h, s, b"aft:flushgrp", b"z") == b"INSERTED 3\r\n"
    assert h.send(s, b"flush-tube default\r\n") == b"FLUSHED 2\r\n"
    h.send(s, b"watch other\r\n")
    assert reserve(h, s) == b"RESERVED 3 1\r\nz\r\n"


def test_flush_tube_leaves_held_jobs(h):
    s = h.conn()
    put(h, s, b"grp:g")
    h.send(s, b"use other\r\n")
    put(h, s, b"aft:g idp:k")
    assert h.send(s, b"flush-tube other\r\n") == b"FLUSHED 0\r\n"
    assert put(h, s, b"idp:k") == b"INSERTED 3\r\n"  # (its key went with the flush)
    assert h.send(s, b"peek 2\r\n") == b"FOUND 2 1\r\na\r\n"


def test_deleting_a_held_job_and_kick_job_bypassing_the_hold(h):
    s = h.conn()
    put(h, s, b"grp:g1")
    put(h, s, b"aft:g1")
    put(h, s, b"aft:g1")
    assert h.send(s, b"delete 2\r\n") == b"DELETED\r\n"
    assert field(h.send(s, b"stats-group g1\r\n"), b"waiting-jobs") == b"1"
    assert h.send(s, b"kick-job 3\r\n") == b"KICKED\r\n"
    assert h.send(s, b"reserve-job 3\r\n") == b"NOT_FOUND\r\n"  # (tuber's quirk)
    reserve(h, s)
    assert reserve(h, s) == b"RESERVED 3 1\r\na\r\n"


def test_a_delayed_aft_job_is_held_when_its_delay_ends(h):
    s = h.conn()
    put(h, s, b"grp:g")
    put(h, s, b"aft:g", delay=5)
    assert field(h.send(s, b"stats\r\n"), b"current-jobs-delayed") == b"1"
    h.advance(6)
    stats = h.send(s, b"stats\r\n")
    assert field(stats, b"current-jobs-delayed") == b"0"
    assert field(stats, b"current-jobs-ready") == b"1"
    assert h.e.q.ext.held == {b"default": 1}


def test_a_group_member_with_a_concurrency_key(h):
    s = h.conn()
    put(h, s, b"grp:batch con:api")
    put(h, s, b"grp:batch con:api")
    put(h, s, b"aft:batch")
    assert reserve(h, s).startswith(b"RESERVED 1 ")
    assert reserve(h, s) == b"TIMED_OUT\r\n"
    h.send(s, b"delete 1\r\n")
    assert reserve(h, s).startswith(b"RESERVED 2 ")
    h.send(s, b"delete 2\r\n")
    assert reserve(h, s).startswith(b"RESERVED 3 ")


def test_a_million_style_release_runs_in_slices():
    h = Harness(extensions=True, auto=False)
    s = h.conn()
    put(h, s, b"grp:g")
    n = 3 * SLICE + 5
    for _ in range(n):
        put(h, s, b"aft:g")
    reserve(h, s)
    h.send(s, b"delete 1\r\n")
    assert h.e.q.ready_ct == 0
    steps = 0
    while h.step():
        steps += 1
        assert h.e.q.ready_ct <= SLICE * (steps + 1)
    assert h.e.q.ready_ct == n and h.e.q.ext.nheld == 0


def test_stats_group_errors(h):
    s = h.conn()
    assert h.send(s, b"stats-group nope\r\n") == b"NOT_FOUND\r\n"
    for line in (b"stats-group ", b"stats-group -bad", b"stats-group a:b"):
        assert h.send(s, line + b"\r\n") == b"BAD_FORMAT\r\n"
    assert h.send(s, b"stats-group\r\n") == b"UNKNOWN_COMMAND\r\n"
    put(h, s, b"aft:empty")
    assert field(h.send(s, b"stats-group empty\r\n"), b"waiting-jobs") == b"0"


# -- try: --------------------------------------------------------------------

def test_try_buries_a_job_after_its_tries(h):
    s = h.conn()
    put(h, s, b"try:2")
    reserve(h, s)
    assert h.send(s, b"release 1 0 0\r\n") == b"RELEASED\r\n"
    reserve(h, s)
    assert h.send(s, b"release 1 0 0\r\n") == b"BURIED\r\n"
    stats = h.send(s, b"stats-job 1\r\n")
    assert (field(stats, b"tries"), field(stats, b"max-tries")) == (b"2", b"2")
    put(h, s)
    assert b"max-tries" not in h.send(s, b"stats-job 2\r\n")


def test_try_counts_ttr_expiries():
    h = Harness(extensions=True, max_tries=5)
    s = h.conn()
    put(h, s, b"try:1", ttr=1)
    put(h, s, ttr=1)
    reserve(h, s)
    h.advance(2)
    assert field(h.send(s, b"stats-job 1\r\n"), b"state") == b"buried"
    assert field(h.send(s, b"stats-job 2\r\n"), b"max-tries") == b"5"


# -- peek-reserved -------------------------------------------------------------

def test_peek_reserved(h):
    s, w = h.conn(), h.conn()
    assert h.send(s, b"peek-reserved\r\n") == b"NOT_FOUND\r\n"
    put(h, s, b"", b"one")
    put(h, s, b"", b"two")
    reserve(h, w)
    reserve(h, w)
    assert h.send(s, b"peek-reserved\r\n") == b"FOUND 1 3\r\none\r\n"
    h.send(s, b"use other\r\n")
    assert h.send(s, b"peek-reserved\r\n") == b"NOT_FOUND\r\n"


# -- the put's fast path parses as parse_tags does ------------------------------

from hypothesis import given, strategies as st  # noqa: E402

from pybeanstalkd.core.protocol import Bad  # noqa: E402
from pybeanstalkd.core.putlines import PutLines  # noqa: E402
from pybeanstalkd.core.puttags import parse_tags  # noqa: E402

LINES = PutLines()  # (kept across the examples: tails parsed before are looked up)

_word = st.sampled_from([b"idp:a", b"idp:b:5", b"idp:", b"idp:c:x", b"idp:-d", b"con:k",
                         b"con:k:3", b"con:k:0", b"grp:g", b"aft:h", b"try:2", b"try:0",
                         b"xidp:a", b"foo:bar", b"idp:a:99999999999", b"idp:e\tgrp:f"])
_sep = st.sampled_from([b" ", b"  ", b"\t"])


@given(st.lists(st.tuples(_word, _sep), min_size=1, max_size=5))
def test_tail_tags_is_parse_tags(words):
    tail = b"".join(w + s for w, s in words).rstrip(b" \t")

    def outcome(f):
        try:
            return f()
        except Bad:
            return "Bad"

    assert outcome(lambda: LINES.tail_tags(tail)) == outcome(lambda: parse_tags(tail.split()))


_tag_word = st.sampled_from([b"idp:k1", b"idp:k2:5", b"idp:k3", b"con:c", b"con:c:2",
                             b"grp:g", b"aft:h", b"try:2", b"idp:", b"con:c:0", b"junk",
                             # keys name_ok refuses, and the longest it takes
                             b"idp:-k", b"idp:k*", b"idp:k\0", b"idp:\xe9", b"idp::",
                             b"idp:k" * 40, b"idp:" + b"k" * 200, b"idp:" + b"k" * 201])
_num = st.sampled_from([b"0", b"1", b"60", b"+1", b"007", b"4294967296"])


@given(st.lists(st.tuples(st.lists(_tag_word, min_size=1, max_size=4), _num,
                          st.sampled_from([b" ", b"  ", b"\t"])), min_size=1, max_size=12))
def test_tagged_puts_answer_alike_by_the_fast_path_and_by_parse(puts):
    """Engine.command's fast path for tagged puts (whole lines cached, an
    idp: word cut out of a known line) answers as parse() does."""
    fast, slow = Harness(extensions=True), Harness(extensions=True)
    slow.e.fast = False
    cf, cs = fast.conn(), slow.conn()
    for tags, num, sep in puts:
        line = b"put 0 0 %s 1 %s\r\nx\r\n" % (num, sep.join(tags))
        assert fast.send(cf, line) == slow.send(cs, line), line
        assert fast.send(cf, b"stats-job 1\r\n") == slow.send(cs, b"stats-job 1\r\n")


@pytest.mark.parametrize("key", [b"k1", b"-k", b"k*", b"k:5", b"k" * 200, b"k" * 201])
def test_a_known_put_then_its_key_skips_the_tag_parsers(key):
    """The commonest tagged put (a plain put's line, then idp:KEY, a TTL
    allowed) is taken by Engine.command's fast paths, the key checked
    there; any other key goes on to the general parser (the command
    table's lookup), which answers as for any tagged put."""
    h = Harness(extensions=True)
    s = h.conn()
    h.send(s, b"put 0 0 60 1\r\nx\r\n")  # (the line is known now)
    parsed = h.e.commands.lookups
    reply = h.send(s, b"put 0 0 60 1 idp:%s\r\nx\r\n" % key)
    good = len(key) <= 200 and key[0] != 45 and b"*" not in key
    assert reply == (b"INSERTED 2\r\n" if good else b"BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n")
    # (a bad one's line, then its body's as a command: both looked up)
    assert h.e.commands.lookups == parsed + (0 if good else 2)
    assert h.send(s, b"put 0 0 60 1 idp:%s\r\nx\r\n" % key) == (
        b"INSERTED 2 READY\r\n" if good else b"BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n")


def test_the_memory_cap_counts_the_tags_and_cooldowns():
    def fits(tags):
        h = Harness(extensions=True, max_memory=200_000)
        s = h.conn()
        n = 0
        while put(h, s, tags % n if b"%" in tags else tags).startswith(b"INSERTED"):
            n += 1
        return h, s, n
    _, _, plain = fits(b"")
    h, s, tagged = fits(b"idp:key-%d:3600")
    assert tagged < plain * 0.7, (tagged, plain)
    used = h.e.q.memory_used()
    h.send(s, b"delete 1\r\n")  # (its cooldown stays, and counts)
    assert used - h.e.q.memory_used() < 256 + 400


def test_a_hidden_job_whose_priority_a_duplicate_lowers_comes_first():
    # (found by the model test: the job stayed hidden behind worse ones
    # brought back while its key had room)
    h = Harness(extensions=True)
    s, w = h.conn(), h.conn()
    put(h, s, b"con:y")  # 1, reserved below: y at its limit
    put(h, s, b"con:y idp:k", pri=2000)  # 2
    put(h, s, b"con:y", pri=5)  # 3
    put(h, s, b"con:y", pri=6)  # 4
    assert reserve(h, w).startswith(b"RESERVED 1 ")
    assert reserve(h, w) == b"TIMED_OUT\r\n"  # (2, 3 and 4 hidden)
    put(h, s, b"con:y:3", pri=9000)  # 5: room for two more: 3 and 4 come back
    assert put(h, s, b"idp:k", pri=0) == b"INSERTED 2 READY 0\r\n"
    assert reserve(h, w).startswith(b"RESERVED 2 ")


def test_peek_ready_looks_at_one_heap_however_many_keys_hide_jobs():
    h = Harness(extensions=True)
    s, w = h.conn(), h.conn()
    for i in range(300):  # 300 keys, each at its limit with a job hidden
        put(h, s, b"con:k%d" % i, pri=1000 + i)
        put(h, s, b"con:k%d" % i, pri=10 + i)
    for _ in range(300):  # (each key's better job: pri 10 + i)
        assert reserve(h, w).startswith(b"RESERVED")
    assert reserve(h, w) == b"TIMED_OUT\r\n"  # (the others hidden on the way)
    assert sum(1 for k in h.e.q.ext.cons.values() if k.parked) == 300
    # the best hidden job, by pri then id: k0's first (pri 1000)
    assert h.send(s, b"peek-ready\r\n") == b"FOUND 1 1\r\na\r\n"
    hidden = h.e.q.ext.hidden[h.e.q.tubes.named[b"default"]]
    assert len(hidden.entries) <= 2 * 300 + 64
    assert h.send(s, b"flush-tube default\r\n") == b"FLUSHED 600\r\n"
    assert not h.e.q.ext.hidden and not h.e.q.ext.parked_ids


def test_a_full_keys_hidden_jobs_deleted_leave_no_growing_heap(h):
    """A con: key that stays full (its one job reserved, and kept) while
    more of its jobs are put, hidden by a reserve and deleted: each
    deleted hidden job left a stale entry in the key's heap of parked
    jobs, which only a key with room (or with no job) pops, so the heap
    grew by one a delete, without bound."""
    from pybeanstalkd.core.heaps import TUBE_SLACK
    p, w, x = h.conn(), h.conn(), h.conn()
    put(h, p, b"con:k")
    assert reserve(h, w).startswith(b"RESERVED 1 ")
    for _ in range(2000):
        jid = int(put(h, p, b"con:k").split()[1])
        assert reserve(h, x) == b"TIMED_OUT\r\n"  # (hides it)
        assert h.send(p, b"delete %d\r\n" % jid) == b"DELETED\r\n"
    k = h.e.q.ext.cons[b"k"]
    assert sum(len(heap.entries) for heap in k.parked.values()) <= 2 + TUBE_SLACK
    # and hiding still works: one more is hidden, then served once the key has room
    jid = int(put(h, p, b"con:k").split()[1])
    assert reserve(h, x) == b"TIMED_OUT\r\n"
    assert h.send(w, b"delete 1\r\n") == b"DELETED\r\n"
    assert reserve(h, x) == b"RESERVED %d 1\r\na\r\n" % jid


def test_a_job_hidden_when_its_tubes_hidden_heap_is_swept_is_still_found(h):
    """A job parked when its tube's heap of hidden jobs was due a sweep was
    counted hidden only after the sweep, which so took its fresh entry for
    stale and dropped it: still ready (stats-job), the job was then missed
    by peek-ready, and by reserves once its key had room."""
    p, w, x = h.conn(), h.conn(), h.conn()
    put(h, p, b"con:k")
    assert reserve(h, w).startswith(b"RESERVED 1 ")
    put(h, p, b"con:k")
    assert reserve(h, x) == b"TIMED_OUT\r\n"  # job 2 stays hidden throughout
    for _ in range(300):  # hidden, then deleted: stale entries in the tube's heap
        jid = int(put(h, p, b"con:k").split()[1])
        assert reserve(h, x) == b"TIMED_OUT\r\n"
        t = h.e.q.tubes.named[b"default"]
        assert jid in {e & ((1 << 64) - 1) for e in h.e.q.ext.hidden[t].entries}
        assert h.send(p, b"delete %d\r\n" % jid) == b"DELETED\r\n"
    jid = int(put(h, p, b"con:k").split()[1])
    assert reserve(h, x) == b"TIMED_OUT\r\n"
    assert h.send(p, b"delete 2\r\n") == b"DELETED\r\n"
    assert h.send(p, b"peek-ready\r\n") == b"FOUND %d 1\r\na\r\n" % jid
    assert h.send(w, b"delete 1\r\n") == b"DELETED\r\n"
    assert reserve(h, x) == b"RESERVED %d 1\r\na\r\n" % jid

"""--max-memory on the real server: a flood of puts stops at the cap with the
process's RSS growth within 1.25x of it, the stream stays in sync, deletes make
room again, and -V reports the cap."""
import pytest

from support import Client, Server, drain_pipes, ours_argv

CAP = 48 << 20


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def flood(c: Client, body: bytes, batch: int) -> tuple[int, int]:
    """Pipelined puts until one is refused; returns (inserted, refused) of the last batch run."""
    cmd = b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body)
    inserted = 0
    while True:
        c.send(cmd * batch)
        refused = 0
        for _ in range(batch):
            line = c.line()
            if line.startswith(b"INSERTED "):
                inserted += 1
            else:
                assert line == b"OUT_OF_MEMORY\r\n"
                refused += 1
        if refused:
            return inserted, refused


@pytest.mark.parametrize("size", [100, 1024, 65536])
def test_a_flood_of_puts_stops_at_the_cap(size):
    srv = Server(ours_argv(), ["-z", "70000", "--max-memory", str(CAP)])
    drain_pipes(srv.proc)
    try:
        c = Client(srv.connect(timeout=30))
        assert c.cmd(b"stats\r\n").startswith(b"OK ")
        before = rss(srv.proc.pid)
        body = b"x" * size
        inserted, refused = flood(c, body, max(1, 100_000 // size))
        grown = rss(srv.proc.pid) - before
        assert inserted * size < CAP
        assert grown <= 1.25 * CAP, f"RSS grew {grown} for a cap of {CAP}"
        # Far below the cap would mean the accounting overcharges badly.
        assert inserted * (size + 2) >= 0.5 * CAP or inserted * (size + 400) >= 0.8 * CAP
        # In sync: the next command's reply is its own.
        assert c.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
        assert c.cmd(b"put 0 0 60 %d\r\n%s\r\n" % (size, body)) == b"OUT_OF_MEMORY\r\n"
        # Work goes on at the cap; a delete makes room for a put.
        r = c.cmd(b"reserve\r\n")
        assert r.startswith(b"RESERVED 1 %d\r\n" % size)
        assert c.cmd(b"release 1 0 0\r\n") == b"RELEASED\r\n"
        assert c.cmd(b"delete 1\r\n") == b"DELETED\r\n"
        assert c.cmd(b"delete 2\r\n") == b"DELETED\r\n"
        assert c.cmd(b"put 0 0 60 %d\r\n%s\r\n" % (size, body)).startswith(b"INSERTED ")
    finally:
        srv.stop()


def test_v_reports_the_cap_at_startup():
    srv = Server(ours_argv(), ["-V", "--max-memory", "1M"])
    c = Client(srv.connect())
    assert c.cmd(b"list-tube-used\r\n") == b"USING default\r\n"  # start-up is over
    srv.proc.terminate()
    out = srv.proc.communicate(timeout=10)[0]
    assert b"max-memory: 0 of 1048576 bytes used by 0 jobs\n" in out

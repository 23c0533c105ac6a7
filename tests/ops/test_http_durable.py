"""With -f0 an HTTP action is answered only once the binlog records it wrote
are fsynced, as a protocol command's reply is (the real engine, binlog,
syncer and HTTP app, in-process; the fsync is held back to see the wait)."""
from __future__ import annotations

import asyncio

from aiohttp.test_utils import TestClient, TestServer

from fakeclock import with_binlog
from pybeanstalkd.core.engine import HOLD_NONE, HOLD_WRITES
from pybeanstalkd.ops.http import Http
from pybeanstalkd.server.gate import Synced, Written
from pybeanstalkd.server.transport import Server

ACT = {"X-Pybeanstalkd": "1"}


def run(tmp_path, f0: bool):
    h, wal = with_binlog(tmp_path, hold=HOLD_WRITES if f0 else HOLD_NONE)
    loop = asyncio.new_event_loop()
    out = {}

    async def main():
        gate = Synced if f0 else Written  # (as gate_for makes them for -f0 and -f MS)
        srv = Server(loop, h.e, gate=lambda srv: gate(srv, wal, wantsync=False, rate_ns=0))
        syncer = srv.syncer  # (held back: wantsync False)
        assert syncer is not None
        client = TestClient(TestServer(Http(srv).app))
        await client.start_server()
        try:
            put = asyncio.ensure_future(client.post("/api/v1/tubes/t/put", json={"body": "x"},
                                                    headers=ACT))
            await asyncio.sleep(0.3)
            out["answered_before_sync"] = put.done()
            out["unsynced"] = wal.lsn > wal.synced
            syncer.wantsync = True
            syncer.kick()
            r = await asyncio.wait_for(put, 10)
            out["status"], out["body"] = r.status, await r.json()
            out["synced"] = wal.synced >= wal.lsn
        finally:
            await client.close()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return out


def test_f0_action_waits_for_the_fsync(tmp_path):
    out = run(tmp_path, f0=True)
    assert out["unsynced"]  # the put produced a record not yet on disk...
    assert not out["answered_before_sync"]  # ...but no answer while it is not synced
    assert out["status"] == 200 and out["body"] == {"id": 1} and out["synced"]


def test_without_f0_an_action_is_answered_at_once(tmp_path):
    out = run(tmp_path, f0=False)
    assert out["answered_before_sync"] and out["status"] == 200


def test_shutdown_closes_an_action_still_waiting_for_its_records(tmp_path):
    # A deposed leader's HTTP action waits for acks that never come; the
    # shutdown used to wait for it aiohttp's 60 s, twice. It now closes the
    # connection after Timeouts.shutdown, twice, unanswered.
    from pybeanstalkd.ops import httpguard
    from pybeanstalkd.ops.http import listen, start

    h, wal = with_binlog(tmp_path, hold=HOLD_WRITES)
    out = {}

    async def main():
        loop = asyncio.get_running_loop()
        srv = Server(loop, h.e, gate=lambda srv: Synced(srv, wal, wantsync=False, rate_ns=0))
        sock = listen("127.0.0.1", 0)
        http = await start(srv, sock, timeouts=httpguard.Timeouts(shutdown=0.3))
        reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        body = b'{"body": "x"}'
        writer.write(b"POST /api/v1/tubes/t/put HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"X-Pybeanstalkd: 1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        await asyncio.sleep(0.3)
        out["waiting"] = wal.lsn > wal.synced
        t0 = loop.time()
        async with asyncio.timeout(20):  # (aiohttp's own default: 120 s)
            await http.cleanup()
            out["took"] = loop.time() - t0
            out["answer"] = await reader.read()
        writer.close()
    asyncio.run(main())
    assert out["waiting"]
    assert out["took"] < 5, out["took"]
    assert out["answer"] == b""  # closed, unanswered: the put may not be safe
    assert httpguard.Timeouts().shutdown <= 2.0

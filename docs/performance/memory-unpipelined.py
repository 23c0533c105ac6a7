"""RSS per stored job when producers send one put a read (each job then
has a created time of its own), ours against the reference.

    PYTHONPATH=src .venv/bin/python docs/performance/memory-unpipelined.py [JOBS]

JOBS (default 400,000) puts of 100 bytes from 4 producer processes, each
waiting for its INSERTED before the next put; RSS from /proc before and
after, settled for half a second.
"""
import socket
import sys
import time
from multiprocessing import Pool

from pybeanstalkd.bench.spawn import Spawned, default_ours

PROCS = 4
PUT = b"put 0 0 60 100\r\n" + b"x" * 100 + b"\r\n"


def produce(args):
    addr, n = args
    with socket.create_connection(addr) as s:
        for _ in range(n):
            s.sendall(PUT)
            got = s.recv(64)
            while not got.endswith(b"\r\n"):
                got += s.recv(64)
            assert got.startswith(b"INSERTED "), got
    return n


def rss(pid) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))


def main():
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 400_000
    for name, argv in (("reference", ["/usr/bin/beanstalkd"]), ("ours", default_ours())):
        with Spawned(name, argv, "") as s:
            time.sleep(0.5)
            before = rss(s.pid)
            with Pool(PROCS) as p:
                done = sum(p.map(produce, [(s.addr, jobs // PROCS)] * PROCS))
            time.sleep(0.5)
            after = rss(s.pid)
            print(f"{name:9s} {done:,} jobs  RSS {before:,} -> {after:,}  "
                  f"{(after - before) / done:.0f} B a job", flush=True)


if __name__ == "__main__":
    main()

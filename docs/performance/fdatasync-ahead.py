"""fdatasync on posix_fallocate'd space, with and without zeros written
ahead (binlog/files.py ZERO_AHEAD): write CHUNK bytes then fdatasync, N
times, in a 10 MiB preallocated file; alternating ROUNDS times.
Usage: python3 fdatasync-ahead.py DIR [N] [CHUNK] [ROUNDS]"""
import os
import resource
import statistics
import sys
import time

AHEAD = 256 * 1024
d = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
CHUNK = int(sys.argv[3]) if len(sys.argv) > 3 else 6000  # about a group of 30 puts
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 3


def run(ahead: bool):
    p = os.path.join(d, "fdatasync-ahead.bin")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.posix_fallocate(fd, 0, 10 << 20)
    os.fsync(fd)
    data, zeros = b"x" * CHUNK, bytes(AHEAD)
    end = zeroed = 0
    took = []
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(N):
        os.write(fd, data)
        end += CHUNK
        if ahead and end + AHEAD // 2 > zeroed:
            start = max(end, zeroed)
            os.pwrite(fd, zeros, start)
            zeroed = start + AHEAD
        t = time.perf_counter()
        os.fdatasync(fd)
        took.append(time.perf_counter() - t)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    os.close(fd)
    os.unlink(p)
    cpu = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / N
    took.sort()
    return statistics.median(took) * 1e6, took[int(N * 0.9)] * 1e6, cpu * 1e6


print(f"{N} x (write {CHUNK} B, fdatasync), 10 MiB posix_fallocate'd file")
for r in range(ROUNDS):
    for ahead in (False, True):
        med, p90, cpu = run(ahead)
        print(f"round {r + 1}, {'zeros ahead ' if ahead else 'fallocate only'}: "
              f"fdatasync median {med:.0f} us, p90 {p90:.0f} us; process CPU {cpu:.0f} us a cycle")

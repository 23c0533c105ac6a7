"""Histograms for the metrics: cheap enough to count on every reserve and
delete.

Slot k (0..64) counts the values v (ns) with v.bit_length() == k, i.e.
2**(k-1) <= v < 2**k (slot 0: v == 0), and `total` is their sum. The
bounds are fixed powers of two (as Prometheus' native histograms, schema 0),
so finding the bucket is one bit_length(), not a search: measured with
callgrind on put/reserve/delete through the engine, bisect over decimal
bounds cost about 1,000 CPU instructions more per value, which put the
histograms at 4.5% of a job's cost instead of under 3%.
"""
from __future__ import annotations

from typing import Final

from .protocol import NS

SLOTS: Final = 65  # bit lengths 0..64
JOB_LE = tuple(range(20, 43, 2))  # reported bounds, 2**k ns: 1.05 ms to 73 min, x4 apart
FSYNC_LE = tuple(range(14, 33))  # 16 us to 4.3 s, x2 apart


class Hist:
    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * SLOTS  # by bit length
        self.total = 0  # the values' sum, ns

    # (counts[k] = counts[k] + 1: compiled, the item is read as an int and
    # added to as one, where `counts[k] += 1` is the interpreter's generic
    # in-place add on the object, about 60 instructions more a value.)
    def observe(self, ns: int) -> None:
        """Count one value."""
        counts = self.counts
        k = ns.bit_length()
        counts[k] = counts[k] + 1
        self.total += ns

    def take_back(self, ns: int) -> None:
        """Uncount a value counted."""
        counts = self.counts
        k = ns.bit_length()
        counts[k] = counts[k] - 1
        self.total -= ns

    def count(self) -> int:
        return sum(self.counts)

    def buckets(self, exps: tuple[int, ...]) -> tuple[list[tuple[float, int]], int, int]:
        """([(upper bound in seconds, count of values below it), ...], count,
        sum in ns), for the bounds 2**k ns (k in exps) and +inf."""
        h = self.counts
        out, n, k0 = [], 0, 0
        for k in exps:
            n += sum(h[k0:k + 1])
            k0 = k + 1
            out.append(((1 << k) / NS, n))
        n += sum(h[k0:])
        out.append((float("inf"), n))
        return out, n, self.total

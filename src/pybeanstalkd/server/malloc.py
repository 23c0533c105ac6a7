"""Pin glibc's mmap threshold, so that growing a big list never stalls.

A queue of millions of jobs keeps a few lists of millions of entries (a
tube's ready heap, the delay and TTR heaps). CPython grows a list by
realloc. glibc serves a block above its mmap threshold with mmap, and
realloc moves it with mremap: no copy. But the threshold is dynamic: each
time a big mmapped block is freed it rises, up to 32 MiB, and blocks below
it live in the heap, where realloc must allocate, copy and fault in the new
pages. A 3.4M-entry list then took 23 ms for one append (docs/PERFORMANCE.md,
"Stalls"): the server stalled up to 80-100 ms at 6M jobs. Setting the
threshold fixes it and turns the dynamic raise off. 1 MiB keeps the 256 KB
socket reads on the heap (no mmap/munmap per read).
"""
from __future__ import annotations

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
THRESHOLD = 1 << 20


def pin_mmap_threshold() -> bool:
    """True if glibc took the setting (False elsewhere: musl, macOS)."""
    try:
        import ctypes

        return bool(ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, THRESHOLD))
    except (OSError, AttributeError):
        return False

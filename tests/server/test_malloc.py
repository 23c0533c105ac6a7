"""server/malloc.py: with the mmap threshold pinned, a list that grows to
millions of entries is moved by mremap, never copied: no append stalls.
Checked by what glibc does, not by timing: a block above the threshold is
mmapped (its address far from the heap's), and stays so as it grows."""
import subprocess
import sys
import textwrap

import pytest


def test_glibc_takes_the_setting():
    from pybeanstalkd.server.malloc import pin_mmap_threshold

    if "glibc" not in " ".join(__import__("platform").libc_ver()):
        pytest.fail("these tests expect glibc (the Linux builds we ship for)")
    assert pin_mmap_threshold() is True


# A 4 MiB block after a 20 MiB one was freed: glibc's dynamic threshold has
# risen above 4 MiB, so without the pin the block comes from the heap (brk);
# with it, from mmap. /proc/self/maps tells which: the heap is "[heap]".
PROBE = """
    import ctypes, sys
    if sys.argv[1] == "pin":
        from pybeanstalkd.server.malloc import pin_mmap_threshold
        assert pin_mmap_threshold()
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(20 << 20))
    p = libc.malloc(4 << 20)
    for line in open("/proc/self/maps"):
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if lo <= p < hi:
            print("heap" if line.rstrip().endswith("[heap]") else "mmap")
            break
"""


@pytest.mark.parametrize("mode, where", [("nopin", "heap"), ("pin", "mmap")])
def test_a_big_block_is_mmapped_only_with_the_pin(mode, where):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE), mode], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    assert out.strip() == where

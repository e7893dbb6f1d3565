"""``harness.allocator``: glibc keeps large freed blocks in this process's heap, so the next block of that
size is not faulted in again page by page; the CLI, every worker and every Ray actor set it."""

import platform
import subprocess
import sys

import pytest

GLIBC = platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="the C library here is not glibc: nothing to set")
def test_a_freed_large_block_is_reused_from_the_heap():
    """Freed, a 64 MiB block stays mapped (the heap keeps it), where by default it is a mapping of its own,
    unmapped at once.  Counted in bytes, not lines of /proc/self/maps: the kernel may merge a new mapping
    with its neighbour."""
    probe = ("import ctypes, sys\n"
             "from harness.allocator import keep_freed_blocks\n"
             "libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p; libc.free.argtypes = [ctypes.c_void_p]\n"
             "if sys.argv[1] == 'kept': assert keep_freed_blocks()\n"
             "def spans():\n"
             "    for line in open('/proc/self/maps'):\n"
             "        lo, hi = (int(x, 16) for x in line.split()[0].split('-'))\n"
             "        yield lo, hi, line.rstrip().endswith('[heap]')\n"
             "def mapped():\n"
             "    return sum(hi - lo for lo, hi, _ in spans())\n"
             "before = mapped(); p = libc.malloc(64 << 20); during = mapped()\n"
             "in_heap = any(lo <= p < hi and heap for lo, hi, heap in spans())\n"
             "libc.free(p)\n"
             "print((during - before) >> 20, (mapped() - before) >> 20, int(in_heap))\n")
    default = subprocess.run([sys.executable, "-c", probe, "default"], capture_output=True, text=True, check=True)
    kept = subprocess.run([sys.executable, "-c", probe, "kept"], capture_output=True, text=True, check=True)
    grown, after_free, in_heap = map(int, default.stdout.split())
    assert grown >= 64 and after_free < 32 and not in_heap       # its own mapping, gone when freed
    grown, after_free, in_heap = map(int, kept.stdout.split())
    assert grown >= 64 and after_free >= 64 and in_heap          # from the heap, and kept there

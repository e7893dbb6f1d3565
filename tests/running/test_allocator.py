"""``harness.allocator``: glibc keeps large freed blocks in this process's heap, so the next block of that
size is not faulted in again page by page; the CLI, every worker and every Ray actor set it."""

import platform
import subprocess
import sys

import pytest

GLIBC = platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="the C library here is not glibc: nothing to set")
def test_a_freed_large_block_is_reused_from_the_heap():
    """Freed, a 64 MiB block stays mapped (the heap keeps it), where by default it is unmapped at once."""
    probe = ("import ctypes, sys\n"
             "from harness.allocator import keep_freed_blocks\n"
             "libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p; libc.free.argtypes = [ctypes.c_void_p]\n"
             "if sys.argv[1] == 'kept': assert keep_freed_blocks()\n"
             "def mapped():\n"
             "    return sum(1 for line in open('/proc/self/maps'))\n"
             "before = mapped(); p = libc.malloc(64 << 20); during = mapped(); libc.free(p)\n"
             "print(during - before, mapped() - before)\n")
    default = subprocess.run([sys.executable, "-c", probe, "default"], capture_output=True, text=True, check=True)
    kept = subprocess.run([sys.executable, "-c", probe, "kept"], capture_output=True, text=True, check=True)
    grown, after_free = map(int, default.stdout.split())
    assert grown >= 1 and after_free == 0            # its own mapping, gone when freed
    grown, after_free = map(int, kept.stdout.split())
    assert grown == 0 and after_free == 0            # from the heap: no mapping made or removed


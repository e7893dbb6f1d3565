"""glibc's malloc told to keep large freed blocks for the next allocation instead of giving them back.

By default glibc hands an allocation above its mmap threshold (128 KiB, rising to at most 32 MiB as blocks
are freed) a fresh mapping and unmaps it when it is freed, so each of the oracle's large float64 blocks (a
163,840-token context is 754 MB of keys) is faulted in again, page by page, every time.  From the heap, a
freed block is reused as it is.  On the 2-core CPU machine ``scale,sparse`` on the torch backend took 34.0 s
by default and 26.9 and 27.1 s with the thresholds below (docs/speed.md).  Blocks past ``MMAP_THRESHOLD``
are still mapped apart, and past ``TRIM_THRESHOLD`` of free heap is given back, so a process keeps at most that much
unused.  Where the C library is not glibc (macOS, musl) nothing changes.  Nothing here imports torch.
"""

import ctypes

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3       # mallopt's parameters (glibc's malloc.h)
MMAP_THRESHOLD = 1 << 30                          # 1 GiB: a block this large or larger is mapped apart
TRIM_THRESHOLD = (1 << 31) - 1                    # 2 GiB (mallopt takes an int): free heap kept for reuse


def keep_freed_blocks() -> bool:
    """Set both thresholds in this process (its children set their own); True where glibc took them."""
    try:
        mallopt = getattr(ctypes.CDLL(None), "mallopt", None)      # the C library the process already has
    except (OSError, TypeError):        # no process-wide symbols to open on this platform
        return False
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))

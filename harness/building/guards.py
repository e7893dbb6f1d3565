"""Guarded allocations: the KV pools and the output buffer a kernel is handed are views inside a larger
allocation (``guarded``), with ``GUARD_BYTES`` of poison on each side, so a write just before or past the
end of either lands in memory the witness (``judging.integrity``) watches.

The witness fingerprints a large storage in blocks of ``HASH_ROW_BYTES``.  Both sizes live here, below the
inputs that allocate the storages and the witness that reads them, so the footprints that count the
fingerprints' bytes (``sparse_inputs.chunk_parts``) need nothing from ``judging``.
"""

import math

import torch

from reference import as_bits

GUARD_BYTES = 4096                  # each side; a multiple of every element size and of 512 (alignment)
HASH_ROW_BYTES = 256                # the witness's block: one weighted sum per this many bytes of a large storage


def guarded(shape, dtype, device, fill_bits: int) -> torch.Tensor:
    """A contiguous ``shape`` view inside an allocation with ``GUARD_BYTES`` on each side, every byte of
    it (guards included) set to the integer bit pattern ``fill_bits`` of ``dtype``."""
    n = math.prod(shape)
    guard = GUARD_BYTES // torch.empty(0, dtype=dtype).element_size()
    base = torch.empty(n + 2 * guard, dtype=dtype, device=device)
    as_bits(base).fill_(fill_bits)
    return base[guard:guard + n].view(shape)

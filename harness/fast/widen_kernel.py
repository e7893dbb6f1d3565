"""The oracle's keys gathered from the pool and widened in one pass on CUDA: a Triton kernel for
``block_attention.run_block``.

PyTorch's form copies a block's pages out of the pool (``index_select``), zeroes the keys past each
request's length through their bits, and widens them into head-major float64 (a strided copy): three
passes, the last at 1.1-1.3 TB/s on the H200, where this kernel moves 3.1-3.4 (docs/archive/gpu-runs-history.md).
Here each program reads ``BLOCK_KEYS`` keys' ``BLOCK_D`` values at a time straight from their pool rows and
writes them widened, +0.0 past the request's length.  A bf16, fp16 or float32 value is exact in float64 and
both forms write +0.0 for padding, so the keys are the same bits either way (``tests/fast/test_widen_kernel.py``);
fp8 pools, whose keys are also scaled, keep PyTorch's form.  Where Triton does not import or cannot build
the kernel, ``fill`` says no and PyTorch's form runs.
"""

import functools

import torch

from .triton_probe import defined_with_triton, usable

BLOCK_KEYS = 32                   # keys a program writes, ...
BLOCK_D = 64                      # ... so many values of each at a time (MLA's widths are multiples of 64)
WIDENED = (torch.bfloat16, torch.float16, torch.float32)


def fill(keys: torch.Tensor, pool_rows: torch.Tensor, rows: torch.Tensor, lengths: torch.Tensor, unit: int) -> bool:
    """Write ``keys`` ``(requests, h_kv, n_keys, d)`` float64: key ``t`` of request ``i`` and head ``h`` is
    the ``d`` values from ``((t % unit) * h_kv + h) * d`` of ``pool_rows[rows[i, t // unit]]`` (``pool_rows``:
    the pool viewed as ``(pages or slots, unit * h_kv * d)``; ``rows``: int64 ``(requests, n_keys // unit)``,
    contiguous), and +0.0 where ``t >= lengths[i]``; ``d`` a multiple of ``BLOCK_D``.  True when done here;
    False where the kernel does not apply (off CUDA, another dtype, device or width) or cannot run: the
    caller's form then."""
    same_device = pool_rows.device == rows.device == lengths.device == keys.device
    if not (keys.is_cuda and same_device and keys.dtype == torch.float64 and keys.shape[-1] % BLOCK_D == 0
            and pool_rows.dtype in WIDENED):
        return False
    kernel = usable_kernel(str(keys.device))
    if kernel is None:
        return False
    run(kernel, keys, pool_rows, rows, lengths, unit)
    return True


def run(kernel, keys, pool_rows, rows, lengths, unit: int):
    """``fill`` with this kernel (the tests run it under Triton's interpreter too)."""
    requests, h_kv, n_keys, d = keys.shape
    total = requests * h_kv * n_keys
    kernel[(-(-total // BLOCK_KEYS),)](pool_rows, rows, lengths, keys, total, n_keys, unit, h_kv,
                                       pool_rows.stride(0), D=d, BLOCK_KEYS=BLOCK_KEYS, BLOCK_D=BLOCK_D)


def warm_up(device):
    """Ready the variant of bf16 pages of MLA's 576-wide keys in a worker's warm-up, not its first chunk."""
    usable_kernel(str(torch.empty(0, device=device).device))


@functools.cache
def usable_kernel(device: str):
    """The kernel, once it has built and run on ``device``; None where Triton does not import or cannot
    build it (then one warning line: a Triton the kernel was not tried with costs speed, never bits)."""
    def first_launch(kernel):
        pool = torch.zeros(1, 64 * 576, dtype=torch.bfloat16, device=device)      # a page of MLA's keys
        index = torch.zeros(1, 1, dtype=torch.int64, device=device)
        run(kernel, torch.empty(1, 1, 64, 576, dtype=torch.float64, device=device), pool, index, index[0], 64)
    return usable("the oracle's key-widening Triton kernel", device, "widening with PyTorch's form",
                  _triton_kernel, first_launch)


@defined_with_triton
def _triton_kernel(triton, tl):
    """The kernel (``triton_probe.defined_with_triton``: made on first use, None without Triton)."""

    # the index arrays are views at any 8-byte offset of one buffer: not specialised on alignment (each
    # alignment would be another variant to build).  The sizes are: a block's key count is a multiple of a
    # page, so they fall in few variants, and knowing them aligned lets the copies move 16 bytes at a time
    # (with none of them specialised, on the H200 the kernel ran at a quarter of PyTorch's copy's rate)
    @triton.jit(do_not_specialize_on_alignment=["rows_ptr", "lengths_ptr"])
    def gather_widen(pool_ptr, rows_ptr, lengths_ptr, keys_ptr, total, n_keys, unit, h_kv, row_stride,
                     D: tl.constexpr, BLOCK_KEYS: tl.constexpr, BLOCK_D: tl.constexpr):
        key = tl.program_id(0).to(tl.int64) * BLOCK_KEYS + tl.arange(0, BLOCK_KEYS)   # (request, head, t)
        inside = key < total
        t = key % n_keys
        request = key // n_keys // h_kv
        head = key // n_keys % h_kv
        length = tl.load(lengths_ptr + request, mask=inside, other=0)
        pool_row = tl.load(rows_ptr + request * (n_keys // unit) + t // unit, mask=inside, other=0)
        first = pool_row * row_stride + ((t % unit) * h_kv + head) * D                # int64: large pools
        live = (inside & (t < length))[:, None]
        for start in tl.static_range(0, D, BLOCK_D):
            value = start + tl.arange(0, BLOCK_D)
            x = tl.load(pool_ptr + first[:, None] + value[None, :], mask=live, other=0.0)   # padding: +0.0
            tl.store(keys_ptr + key[:, None] * D + value[None, :], x.to(tl.float64), mask=inside[:, None])

    return gather_widen

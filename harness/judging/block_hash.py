"""Block sums for the input witness: one 64-bit weighted sum per row of int64 words.

``block_sums(rows, weights, out)`` sets ``out[i] = sum_j rows[i, j] * weights[j]`` in wrapping int64
arithmetic.  On CUDA it is one Triton kernel that reads each byte once and writes only the sums; in
PyTorch the product is a temporary the size of the storage, written and read again (three passes, two
launches), and the witness runs it twice per call on every pool.  Wrapping arithmetic makes the order
of the additions irrelevant, so both give the same bits (``tests/judging/test_integrity.py`` checks it); where
Triton does not import, there is no CUDA device or the storage is small (``TRITON_MIN_BYTES``), the
PyTorch form runs.
"""

import torch

from ..fast.triton_probe import defined_with_triton

ROWS_PER_PROGRAM = 64             # rows (blocks) one Triton program sums
SLICE_ROWS = 1 << 18              # the PyTorch form's rows per launch: bounds its temporary to 64 MiB
# Below this a storage is summed in PyTorch on CUDA too: a Triton launch costs the host about 70 us (its
# argument handling; the H200's profile, docs/archive/gpu-runs-history.md), two PyTorch launches about 20, and the
# temporary's extra pass over 8 MiB about 5 us of the device's time.
TRITON_MIN_BYTES = 8 << 20


def block_sums(rows: torch.Tensor, weights: torch.Tensor, out: torch.Tensor):
    """``out[i] = sum_j rows[i, j] * weights[j]`` (int64, wrapping); ``rows`` contiguous ``(n, words)``."""
    kernel = _triton_kernel() if rows.is_cuda and rows.numel() * 8 > TRITON_MIN_BYTES else None
    if kernel is None:
        return block_sums_torch(rows, weights, out)
    n, words = rows.shape
    if n:
        kernel[(triton_cdiv(n, ROWS_PER_PROGRAM),)](rows, weights, out, n, WORDS=words, ROWS=ROWS_PER_PROGRAM)


def warm_up(weights: torch.Tensor):
    """Launch the Triton kernel once, on rows of zeros (nothing is kept): its first launch in a process
    hashes Triton's own sources and loads (or builds) the binary (0.57 s under cProfile on the
    H200, docs/archive/gpu-runs-history.md), paid otherwise in a worker's first chunk.  No-op without Triton."""
    kernel = _triton_kernel() if weights.is_cuda else None
    if kernel is not None:
        rows = torch.zeros(ROWS_PER_PROGRAM, weights.numel(), dtype=torch.int64, device=weights.device)
        out = torch.empty(ROWS_PER_PROGRAM, dtype=torch.int64, device=weights.device)
        kernel[(1,)](rows, weights, out, ROWS_PER_PROGRAM, WORDS=weights.numel(), ROWS=ROWS_PER_PROGRAM)


def block_sums_torch(rows: torch.Tensor, weights: torch.Tensor, out: torch.Tensor):
    for k in range(0, rows.shape[0], SLICE_ROWS):
        torch.sum(rows[k:k + SLICE_ROWS] * weights, dim=1, out=out[k:k + SLICE_ROWS])


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


@defined_with_triton
def _triton_kernel(triton, tl):
    """The Triton kernel (``triton_probe.defined_with_triton``: made on first use, None without Triton,
    and then the PyTorch form is used)."""

    @triton.jit
    def sums(rows_ptr, weights_ptr, out_ptr, n, WORDS: tl.constexpr, ROWS: tl.constexpr):
        row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)    # int64: pools pass 2^31 words
        inside = row < n
        word = tl.arange(0, WORDS)
        values = tl.load(rows_ptr + row[:, None] * WORDS + word[None, :], mask=inside[:, None], other=0)
        weight = tl.load(weights_ptr + word)
        tl.store(out_ptr + row, tl.sum(values * weight[None, :], axis=1), mask=inside)

    return sums

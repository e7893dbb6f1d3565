"""The sparse oracle's softmax over each row's listed keys in one Triton pass on CUDA, in place of
PyTorch's five (``reference.sparse.attend_listed``).

PyTorch's form builds a -inf bias for the invalid entries, broadcasts it into the scores for ``baddbmm``,
then takes the row maxima, subtracts them, exponentiates and sums: each a pass over the scores, the
largest float64 tensor of the oracle but the keys (on the H200 these passes took as long as the product
making the scores: docs/archive/gpu-runs-history.md).  Here the product is a plain ``bmm``, and each program takes a
few rows of scores: it scales them (one rounding, as ``baddbmm``'s ``alpha`` after the product), masks the
invalid entries, keeps the row maximum, then writes the weights ``exp(s - m)`` over the scores and sums
them.  The sum is added in another order (and cuBLAS may pick another kernel for a product without a
bias), so out and LSE may differ from PyTorch's form in their last bits
(``tests/fast/test_sparse_softmax_kernel.py`` holds LSE within 1e-13 and out within 1e-13 of its largest value:
an element near 0 is a sum that cancels).  A row's numbers depend on that row alone, so a case gets the
same bits in any chunk.  Where Triton does not import or cannot build the kernel, ``attend_listed`` says
no and PyTorch's form runs.
"""

import functools
import math

import torch

from .triton_probe import defined_with_triton, float64_bits, usable

BLOCK_ELEMENTS = 2048        # scores a program holds at a time: its rows times its block of entries
WIDEST = 512                 # entries of a row read at a time, at most


def attend_listed(q: torch.Tensor, listed: torch.Tensor, valid: torch.Tensor, scale: float, d_v: int,
                  absolute_values: bool = False, out: torch.Tensor | None = None,
                  lse: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``reference.sparse.attend_listed``'s out ``(n, h, d_v)`` and LSE ``(n, h)`` with the softmax in one
    pass, in the keys' dtype (float64: the oracle; float32: the noise floor's emulation), written into ``out``
    and ``lse`` where given (contiguous, that dtype), or None where the kernel does not apply (off CUDA) or
    cannot run."""
    if not listed.is_cuda:
        return None
    kernel = usable_kernel(str(listed.device))
    return None if kernel is None else run(kernel, q, listed, valid, scale, d_v, absolute_values, out, lse)


def run(kernel, q, listed, valid, scale: float, d_v: int, absolute_values: bool = False, out=None, lse=None):
    """``attend_listed`` with this kernel (the tests run it under Triton's interpreter too)."""
    n, heads, _ = q.shape
    entries = listed.shape[1]
    scores = torch.bmm(q.to(listed.device, listed.dtype), listed.transpose(1, 2))     # (n, h, entries), unscaled
    top = torch.empty(n, heads, dtype=listed.dtype, device=listed.device)
    total = torch.empty_like(top)
    if scores.numel():
        block = min(WIDEST, max(16, 1 << (entries - 1).bit_length()))
        rows = max(1, BLOCK_ELEMENTS // block)
        kernel[(-(-(n * heads) // rows),)](scores, valid.contiguous().view(torch.uint8), top, total, n * heads,
                                            heads, entries, float64_bits(scale), ROWS=rows, BLOCK=block,
                                            WIDE=listed.dtype == torch.float64)
    values = listed[..., :d_v].abs() if absolute_values else listed[..., :d_v]
    out = torch.bmm(scores, values, out=out).div_(total.clamp_min(torch.finfo(listed.dtype).tiny)[..., None])
    lse = torch.add(top, total.log(), out=lse).masked_fill_(total == 0, math.inf)
    return out, lse


def warm_up(device):
    """Ready the kernel in a worker's warm-up rather than its first sparse chunk (``usable_kernel``)."""
    usable_kernel(str(torch.empty(0, device=device).device))


@functools.cache
def usable_kernel(device: str):
    """The kernel, once it has built and run on ``device`` (a row of each block width a sparse topk uses:
    64, 128 and the widest, in float64 and float32); None where Triton does not import or cannot build it
    (then one warning line: a Triton it was not tried with costs speed)."""
    def first_launch(kernel):
        for entries in (64, 128, WIDEST):
            for dtype in (torch.float64, torch.float32):
                listed = torch.zeros(1, entries, 64, dtype=dtype, device=device)
                run(kernel, torch.zeros(1, 1, 64, dtype=dtype, device=device), listed,
                    torch.ones(1, entries, dtype=torch.bool, device=device), 1.0, 64)
    return usable("the sparse oracle's softmax kernel", device, "the softmax in PyTorch's passes",
                  _triton_kernel, first_launch)


@defined_with_triton
def _triton_kernel(triton, tl):
    """The kernel (``triton_probe.defined_with_triton``: made on first use, None without Triton)."""

    @triton.jit(do_not_specialize=["scale_bits"])
    def listed_softmax(scores_ptr, valid_ptr, top_ptr, total_ptr, rows, heads, entries, scale_bits,
                       ROWS: tl.constexpr, BLOCK: tl.constexpr, WIDE: tl.constexpr):
        # WIDE: float64 arithmetic, else float32, with the scale rounded to it as PyTorch's alpha is
        acc = tl.float64 if WIDE else tl.float32
        scale = scale_bits.to(tl.int64).to(tl.float64, bitcast=True).to(acc)
        row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)       # a query row and head each
        live = row < rows
        owner = row // heads                                                   # its row of valid flags
        top = tl.full([ROWS], float("-inf"), acc)
        for start in range(0, entries, BLOCK):
            entry = start + tl.arange(0, BLOCK)
            inside = live[:, None] & (entry[None, :] < entries)
            ok = tl.load(valid_ptr + owner[:, None] * entries + entry[None, :], mask=inside, other=0) != 0
            s = tl.load(scores_ptr + row[:, None] * entries + entry[None, :], mask=inside, other=0.0) * scale
            top = tl.maximum(top, tl.max(tl.where(ok, s, float("-inf")), axis=1))
        total = tl.zeros([ROWS], acc)
        for start in range(0, entries, BLOCK):
            entry = start + tl.arange(0, BLOCK)
            inside = live[:, None] & (entry[None, :] < entries)
            ok = tl.load(valid_ptr + owner[:, None] * entries + entry[None, :], mask=inside, other=0) != 0
            s = tl.load(scores_ptr + row[:, None] * entries + entry[None, :], mask=inside, other=0.0) * scale
            weight = tl.where(ok, tl.exp(s - top[:, None]), 0.0)         # an empty row's: all 0, its LSE inf
            tl.store(scores_ptr + row[:, None] * entries + entry[None, :], weight, mask=inside)
            total += tl.sum(weight, axis=1)
        tl.store(top_ptr + row, top, mask=live)
        tl.store(total_ptr + row, total, mask=live)

    return listed_softmax

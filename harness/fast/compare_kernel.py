"""The comparison's statistics in one pass on CUDA: a Triton kernel for ``compare._statistics``.

``compare._statistics`` in PyTorch makes about thirty passes over a group's float64 elements (every
element-wise step and reduction is a launch of its own, with a temporary the group's size); on the H200
that was a quarter of the upstream matrices' device time (docs/gpu-runs.md).  Here each program reads a
fixed ``SEGMENT`` of one row once, each side in its own dtype, and writes its partial sums, maxima and the
first place of each maximum; a few PyTorch reductions over the segments finish them.  The maxima are kept
per lane and reduced once, after the segment's blocks.

A row's numbers depend only on the row: its segments are fixed by its width, each program adds its
blocks in one order, and the segments are reduced along a dimension fixed by the width too.  So, as in
PyTorch, a pair checked in a chunk gets the bits it gets alone.  The two forms may differ in a sum's last
bits (another order of addition, and the compiler may fuse a multiply-add); counts and the places of the
maxima are the same, the maxima the same to float64 rounding (``tests/test_compare_kernel.py``).  Where
Triton does not import, or off CUDA, ``statistics`` returns None and PyTorch's form runs.
"""

import functools

import torch

from .triton_probe import defined_with_triton, float64_bits, usable

SEGMENT = 1 << 14                 # elements of one row a program reads
BLOCK = 1024                      # elements a program handles at a time
SUMS, MAXIMA = 6, 4               # the columns of compare._Statistics: summed, then maximised
# the dtypes the kernel reads as they are (a variant each, readied in the warm-up); others go as float64
READ_AS_IS = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


def statistics(a: torch.Tensor, e: torch.Tensor, atol: float, rtol: float):
    """``(sums (rows, 6), maxima (rows, 4), first places (rows, 4) int64)`` of the finite-part products,
    the mismatch and violation counts, and the ratio / error / relative error / mismatch maxima of each row
    of ``a`` and ``e`` ``(rows, width)`` (any floating dtype, read as float64), as ``compare._statistics``
    defines them; or None where the kernel cannot run (PyTorch's form then)."""
    kernel = usable_kernel(str(a.device)) if a.is_cuda else None
    if kernel is None:
        return None
    a, e = (x if x.dtype in READ_AS_IS else x.double() for x in (a, e))
    return run(kernel, a, e, atol, rtol)


def warm_up(device):
    """Ready the kernel in a worker's warm-up rather than its first chunk (its first launch in a process
    loads or builds the binary): ``usable_kernel``'s launches, one for each dtype it reads as it is.  Every
    width the comparison uses is a multiple of 64 (``compare.ROW_ALIGN``), so those launches ready the
    variants every later one uses."""
    usable_kernel(str(torch.empty(0, device=device).device))      # "cuda" named as a tensor's device: cuda:0


@functools.cache
def usable_kernel(device: str):
    """The kernel, once it has built and run on ``device`` (a row of zeros); None where Triton does not
    import, or where this Triton cannot build it: then one warning line, and PyTorch's form runs (the same
    checks, slower), so a Triton the kernel was not tried with costs speed, never a verdict."""
    expected = torch.zeros(1, 64, dtype=torch.float64, device=device)

    def probe(kernel):
        for dtype in READ_AS_IS:
            run(kernel, expected.to(dtype), expected, 1.0, 1.0)
    return usable("the comparison's Triton kernel", device, "comparing with PyTorch's form", _triton_kernel, probe)


def run(kernel, a: torch.Tensor, e: torch.Tensor, atol: float, rtol: float) -> tuple:
    """``statistics`` with this kernel (the tests run it under Triton's interpreter too)."""
    rows, width = a.shape
    segments = -(-width // SEGMENT)
    sums = torch.empty(rows, segments, SUMS, dtype=torch.float64, device=a.device)
    maxima = torch.empty(rows, segments, MAXIMA, dtype=torch.float64, device=a.device)
    places = torch.empty(rows, segments, MAXIMA, dtype=torch.int64, device=a.device)
    kernel[(rows, segments)](a, e, sums, maxima, places, width, float64_bits(atol), float64_bits(rtol),
                             SEGMENT=SEGMENT, BLOCK=BLOCK)
    top = maxima.amax(dim=1)                                               # (rows, 4)
    # the first place of each maximum: the smallest place among the segments that reach it
    first = torch.where(maxima == top[:, None, :], places, torch.iinfo(torch.int64).max).amin(dim=1)
    return sums.sum(dim=1), top, first


@defined_with_triton
def _triton_kernel(triton, tl):
    """The kernel (``triton_probe.defined_with_triton``: made on first use, None without Triton)."""

    # the bounds' bits are not specialised (their divisibility would make a variant per bound)
    @triton.jit(do_not_specialize=["atol_bits", "rtol_bits"])
    def segment_statistics(a_ptr, e_ptr, sums_ptr, maxima_ptr, places_ptr, width, atol_bits, rtol_bits,
                           SEGMENT: tl.constexpr, BLOCK: tl.constexpr):
        atol = atol_bits.to(tl.int64).to(tl.float64, bitcast=True)
        rtol = rtol_bits.to(tl.int64).to(tl.float64, bitcast=True)
        row, segment = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
        segments = tl.num_programs(1).to(tl.int64)
        zero = tl.zeros((), dtype=tl.float64)
        aa, ee, ae, dd, mismatches, violations = zero, zero, zero, zero, zero, zero
        # maxima per lane, reduced once after the loop: a lane's places only grow, so a strict ">" keeps its
        # first place of its maximum, and the smallest place among the lanes at the maximum is the first
        lane_ratio = tl.full([BLOCK], -1.0, tl.float64)
        lane_err, lane_rel, lane_mismatch = lane_ratio, lane_ratio, lane_ratio
        at_ratio = tl.zeros([BLOCK], tl.int64)
        at_err, at_rel, at_mismatch = at_ratio, at_ratio, at_ratio
        for start in range(0, tl.minimum(SEGMENT, width - segment * SEGMENT), BLOCK):
            place = segment * SEGMENT + start + tl.arange(0, BLOCK)
            inside = place < width
            # either side in its own dtype (a bf16 out needs no float64 copy); every value widens exactly
            a = tl.load(a_ptr + row * width + place, mask=inside, other=0.0).to(tl.float64)
            e = tl.load(e_ptr + row * width + place, mask=inside, other=0.0).to(tl.float64)
            finite = (tl.abs(a) < float("inf")) & (tl.abs(e) < float("inf"))      # false for NaN and +-inf
            same = finite | (a == e) | ((a != a) & (e != e))  # NaN/inf positions match
            af, ef = tl.where(finite, a, 0.0), tl.where(finite, e, 0.0)
            err = tl.abs(af - ef)
            ratio = err / (tl.abs(ef) * rtol + atol)
            rel = err / tl.maximum(tl.abs(ef), tl.full([BLOCK], 1e-30, tl.float64))  # a bare 1e-30: float32
            mismatch = tl.where(same, 0.0, 1.0).to(tl.float64)
            aa += tl.sum(af * af)
            ee += tl.sum(ef * ef)
            ae += tl.sum(af * ef)
            dd += tl.sum(err * err)
            mismatches += tl.sum(mismatch)
            violations += tl.sum(tl.where(ratio > 1, 1.0, 0.0).to(tl.float64))
            at_ratio = tl.where(ratio > lane_ratio, place, at_ratio)
            lane_ratio = tl.maximum(ratio, lane_ratio)
            at_err = tl.where(err > lane_err, place, at_err)
            lane_err = tl.maximum(err, lane_err)
            at_rel = tl.where(rel > lane_rel, place, at_rel)
            lane_rel = tl.maximum(rel, lane_rel)
            at_mismatch = tl.where(mismatch > lane_mismatch, place, at_mismatch)
            lane_mismatch = tl.maximum(mismatch, lane_mismatch)
        best_ratio, best_err = tl.max(lane_ratio, 0), tl.max(lane_err, 0)
        best_rel, best_mismatch = tl.max(lane_rel, 0), tl.max(lane_mismatch, 0)
        last = width + BLOCK                              # past every place: never the smallest
        at_ratio = tl.min(tl.where(lane_ratio == best_ratio, at_ratio, last), 0)
        at_err = tl.min(tl.where(lane_err == best_err, at_err, last), 0)
        at_rel = tl.min(tl.where(lane_rel == best_rel, at_rel, last), 0)
        at_mismatch = tl.min(tl.where(lane_mismatch == best_mismatch, at_mismatch, last), 0)
        out = row * segments + segment
        sums = sums_ptr + out * 6
        tl.store(sums + 0, aa)
        tl.store(sums + 1, ee)
        tl.store(sums + 2, ae)
        tl.store(sums + 3, dd)
        tl.store(sums + 4, mismatches)
        tl.store(sums + 5, violations)
        tl.store(maxima_ptr + out * 4 + 0, best_ratio)
        tl.store(maxima_ptr + out * 4 + 1, best_err)
        tl.store(maxima_ptr + out * 4 + 2, best_rel)
        tl.store(maxima_ptr + out * 4 + 3, best_mismatch)
        tl.store(places_ptr + out * 4 + 0, at_ratio)
        tl.store(places_ptr + out * 4 + 1, at_err)
        tl.store(places_ptr + out * 4 + 2, at_rel)
        tl.store(places_ptr + out * 4 + 3, at_mismatch)

    return segment_statistics

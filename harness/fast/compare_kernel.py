"""The comparison's statistics in one pass on CUDA: a Triton kernel for ``compare_statistics.statistics``.

``compare_statistics.statistics_torch`` makes about thirty passes over a group's float64 elements (every
element-wise step and reduction is a launch of its own, with a temporary the group's size); on the H200
that was a quarter of the upstream matrices' device time (docs/archive/gpu-runs-history.md). Here each program reads a
fixed ``SEGMENT`` of one row once, each side in its own dtype, and writes its partial sums, maxima and the
first place of each maximum; a few PyTorch reductions over the segments finish them.  The maxima are kept
per lane and reduced once, after the segment's blocks.  The columns of the sums and of the maxima are
named once, here (``Summed``, ``Maximised``): the kernel, PyTorch's form and the checks read them by name.

A row's numbers depend only on the row: its segments are fixed by its width, each program adds its
blocks in one order, and the segments are reduced along a dimension fixed by the width too.  So, as in
PyTorch, a pair checked in a chunk gets the bits it gets alone.  The two forms may differ in a sum's last
bits (another order of addition, and the compiler may fuse a multiply-add); counts and the places of the
maxima are the same, the maxima the same to float64 rounding (``tests/fast/test_compare_kernel.py``).  Where
Triton does not import, or off CUDA, ``statistics`` returns None and PyTorch's form runs.
"""

import functools
from enum import IntEnum

import torch

from .triton_probe import defined_with_triton, float64_bits, usable

SEGMENT = 1 << 14                 # elements of one row a program reads
BLOCK = 1024                      # elements a program handles at a time
# the dtypes the kernel reads as they are (a variant each, readied in the warm-up); others go as float64
READ_AS_IS = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


class Summed(IntEnum):
    """The columns of a row's sums, over its finite positions: a.a, e.e, a.e and (a-e).(a-e); then the
    counts of the NaN/inf positions that differ and of the elements over the bound."""

    AA = 0
    EE = 1
    AE = 2
    DD = 3
    MISMATCHES = 4
    VIOLATIONS = 5


class Maximised(IntEnum):
    """The columns of a row's maxima and of the first place of each: |err| / bound, |err|, |err| / |e|, and
    the NaN/inf mismatch flag (1 where the positions differ)."""

    RATIO = 0
    ABS_ERR = 1
    REL_ERR = 2
    MISMATCH = 3


# the kernel's constants: each column's index by its name (S_AA, ..., M_RATIO, ...) and the widths
COLUMNS = {**{f"S_{c.name}": int(c) for c in Summed}, **{f"M_{c.name}": int(c) for c in Maximised},
           "SUMS": len(Summed), "MAXIMA": len(Maximised)}


def statistics(a: torch.Tensor, e: torch.Tensor, atol: float, rtol: float):
    """``(sums (rows, len(Summed)), maxima (rows, len(Maximised)), first places (rows, len(Maximised))
    int64)`` of each row of ``a`` and ``e`` ``(rows, width)`` (any floating dtype, read as float64), as
    ``compare_statistics.statistics_torch`` defines them; or None where the kernel cannot run (PyTorch's
    form then)."""
    kernel = usable_kernel(str(a.device)) if a.is_cuda else None
    if kernel is None:
        return None
    a, e = (x if x.dtype in READ_AS_IS else x.double() for x in (a, e))
    return run(kernel, a, e, atol, rtol)


def warm_up(device):
    """Ready the kernel in a worker's warm-up rather than its first chunk (its first launch in a process
    loads or builds the binary): ``usable_kernel``'s launches, one for each dtype it reads as it is.  Every
    width the comparison uses is a multiple of 64 (``compare_statistics.ROW_ALIGN``), so those launches ready the
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
    sums = torch.empty(rows, segments, len(Summed), dtype=torch.float64, device=a.device)
    maxima = torch.empty(rows, segments, len(Maximised), dtype=torch.float64, device=a.device)
    places = torch.empty(rows, segments, len(Maximised), dtype=torch.int64, device=a.device)
    kernel[(rows, segments)](a, e, sums, maxima, places, width, float64_bits(atol), float64_bits(rtol),
                             SEGMENT=SEGMENT, BLOCK=BLOCK, **COLUMNS, **_first_maxima())
    top = maxima.amax(dim=1)                                               # (rows, len(Maximised))
    # the first place of each maximum: the smallest place among the segments that reach it
    first = torch.where(maxima == top[:, None, :], places, torch.iinfo(torch.int64).max).amin(dim=1)
    return sums.sum(dim=1), top, first


@defined_with_triton
def _first_maxima(triton, tl):
    """The kernel's two steps for each of its maxima, kept per lane over the blocks and then reduced once:
    handed to it at launch (Triton's interpreter sees a kernel's module, not the function it was made in)."""

    @triton.jit
    def keep_first(value, lane, at, place):
        # a lane's places only grow, so a strict ">" keeps its first place of its maximum
        return tl.maximum(value, lane), tl.where(value > lane, place, at)

    @triton.jit
    def store_first(lane, at, last, maximum_ptr, place_ptr):
        # the maximum over the lanes, and the smallest place among the lanes at it: its first place
        best = tl.max(lane, 0)
        tl.store(maximum_ptr, best)
        tl.store(place_ptr, tl.min(tl.where(lane == best, at, last), 0))

    return {"KEEP_FIRST": keep_first, "STORE_FIRST": store_first}


@defined_with_triton
def _triton_kernel(triton, tl):
    """The kernel (``triton_probe.defined_with_triton``), writing each column where ``COLUMNS`` says."""

    # the bounds' bits are not specialised (their divisibility would make a variant per bound)
    @triton.jit(do_not_specialize=["atol_bits", "rtol_bits"])
    def segment_statistics(a_ptr, e_ptr, sums_ptr, maxima_ptr, places_ptr, width, atol_bits, rtol_bits,
                           SEGMENT: tl.constexpr, BLOCK: tl.constexpr, S_AA: tl.constexpr, S_EE: tl.constexpr,
                           S_AE: tl.constexpr, S_DD: tl.constexpr, S_MISMATCHES: tl.constexpr,
                           S_VIOLATIONS: tl.constexpr, M_RATIO: tl.constexpr, M_ABS_ERR: tl.constexpr,
                           M_REL_ERR: tl.constexpr, M_MISMATCH: tl.constexpr, SUMS: tl.constexpr,
                           MAXIMA: tl.constexpr, KEEP_FIRST: tl.constexpr, STORE_FIRST: tl.constexpr):
        atol = atol_bits.to(tl.int64).to(tl.float64, bitcast=True)
        rtol = rtol_bits.to(tl.int64).to(tl.float64, bitcast=True)
        row, segment = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
        segments = tl.num_programs(1).to(tl.int64)
        zero = tl.zeros((), dtype=tl.float64)
        aa, ee, ae, dd, mismatches, violations = zero, zero, zero, zero, zero, zero
        lane_ratio = tl.full([BLOCK], -1.0, tl.float64)           # maxima per lane (``_first_maxima``)
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
            lane_ratio, at_ratio = KEEP_FIRST(ratio, lane_ratio, at_ratio, place)
            lane_err, at_err = KEEP_FIRST(err, lane_err, at_err, place)
            lane_rel, at_rel = KEEP_FIRST(rel, lane_rel, at_rel, place)
            lane_mismatch, at_mismatch = KEEP_FIRST(mismatch, lane_mismatch, at_mismatch, place)
        out = row * segments + segment
        sums, maxima, places = sums_ptr + out * SUMS, maxima_ptr + out * MAXIMA, places_ptr + out * MAXIMA
        tl.store(sums + S_AA, aa)
        tl.store(sums + S_EE, ee)
        tl.store(sums + S_AE, ae)
        tl.store(sums + S_DD, dd)
        tl.store(sums + S_MISMATCHES, mismatches)
        tl.store(sums + S_VIOLATIONS, violations)
        last = width + BLOCK                              # past every place: never the smallest
        STORE_FIRST(lane_ratio, at_ratio, last, maxima + M_RATIO, places + M_RATIO)
        STORE_FIRST(lane_err, at_err, last, maxima + M_ABS_ERR, places + M_ABS_ERR)
        STORE_FIRST(lane_rel, at_rel, last, maxima + M_REL_ERR, places + M_REL_ERR)
        STORE_FIRST(lane_mismatch, at_mismatch, last, maxima + M_MISMATCH, places + M_MISMATCH)

    return segment_statistics

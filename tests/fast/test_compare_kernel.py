"""The comparison's one-pass statistics (``harness/fast/compare_kernel.py``) against PyTorch's form
(``compare_statistics.statistics_torch``): the same counts, maxima and places of each maximum, and sums
equal to float64 rounding, with a float64 side and with a bf16 one read as it is; and each column written
where its name says (``compare_kernel.COLUMNS``).  On CUDA the compiled kernel; on the CPU the same kernel
under Triton's interpreter (a subprocess: the flag is read when Triton loads)."""

import textwrap

import pytest
import torch
from helpers import disagreements_on_cuda, disagreements_under_interpreter

CHECK = textwrap.dedent("""
    import torch
    from harness.fast import compare_kernel
    from harness.fast.compare_kernel import Maximised, Summed
    from harness.judging import compare_statistics
    from harness.judging.tolerances import Bound

    COUNTS = [Summed.MISMATCHES, Summed.VIOLATIONS]
    SUMS = [Summed.AA, Summed.EE, Summed.AE, Summed.DD]
    RATIO, MISMATCH = Maximised.RATIO, Maximised.MISMATCH
    VALUES = [RATIO, Maximised.ABS_ERR, Maximised.REL_ERR]

    def rows_to_check(device):
        gen = torch.Generator().manual_seed(5)
        for width in (64, 1000, 16384, 16448, 40000):
            e = torch.randn(3, width, generator=gen, dtype=torch.float64)
            a = e + torch.randn(3, width, generator=gen, dtype=torch.float64) * 1e-3
            a[0, 5] = e[0, 5] = float("nan")             # NaN on both sides: no mismatch
            a[1, 7] = e[1, 7] = float("inf")             # inf on both: none either
            a[2, width // 2] = float("nan")              # a mismatch, and a second one after it
            e[2, width - 1] = float("-inf")
            a[1, width - 10:] = 0                        # a tail of zeros (exact, below every maximum)
            e[1, width - 10:] = 0
            a[0, width // 3] = e[0, width // 3] + 5      # a clear worst element, far from a tie
            e[0, 7], a[0, 7] = 0.0, 0.25                 # relative error against zero: over the 1e-30 floor
            yield width, a.to(device), e.to(device)
        # ties: the same worst ratio, error and mismatch in several places, across blocks and segments
        e = torch.zeros(2, 40000, dtype=torch.float64)
        a = torch.zeros(2, 40000, dtype=torch.float64)
        for place in (17000, 300, 5000, 39999, 1300):
            a[0, place] = 0.5
            a[1, place] = float("nan")
        yield 40000, a.to(device), e.to(device)

    def disagreements(device, kernel):
        bound = Bound(atol=1e-3, rtol=1e-2, cos_diff=1e-5)
        found = []
        for width, a, e in rows_to_check(device):
            # a float64 side, and a bf16 one as a kernel's out is read: as it is (the kernel widens it)
            for side in (a, a.to(torch.bfloat16)):
                found += differences(f"width {width}, {side.dtype}", kernel, side, e, bound)
            sums, top, first = compare_kernel.run(kernel, a, e, bound.atol, bound.rtol)
            planted = len(a) == 3 and top[2, MISMATCH] == 1 and first[2, MISMATCH] == width // 2
            if len(a) == 3 and not (planted and first[0, RATIO] == width // 3):
                found.append(f"width {width}: the planted mismatch or worst element was not found")
            if len(a) == 2 and not (first[0, VALUES].tolist() == [300] * 3 and first[1, MISMATCH] == 300):
                found.append(f"width {width}: ties did not keep the first place: {first.tolist()}")
        found += reordered("width 64", kernel, *next(rows_to_check(device))[1:], bound)
        return found

    def reordered(what, kernel, a, e, bound):
        # the kernel with its columns' places reversed: each value must land where its name now says
        named = compare_kernel.COLUMNS
        backwards = {**named, **{f"S_{c.name}": len(Summed) - 1 - c for c in Summed},
                     **{f"M_{c.name}": len(Maximised) - 1 - c for c in Maximised}}
        try:
            compare_kernel.COLUMNS = backwards
            moved = compare_kernel.run(kernel, a, e, bound.atol, bound.rtol)
        finally:
            compare_kernel.COLUMNS = named
        kept = compare_kernel.run(kernel, a, e, bound.atol, bound.rtol)
        if not all(torch.equal(m.flip(1).cpu(), k.cpu()) for m, k in zip(moved, kept)):
            return [f"{what}: a column was not written where its name says"]
        return []

    def differences(what, kernel, a, e, bound):
        sums, top, first = compare_kernel.run(kernel, a, e, bound.atol, bound.rtol)
        sums_t, top_t, first_t = compare_statistics.statistics_torch(a.double(), e, bound)
        found = []
        if not torch.equal(first.cpu(), first_t.cpu()):
            found.append(f"{what}: places {first.tolist()} != {first_t.tolist()}")
        if not torch.equal(sums[:, COUNTS].cpu(), sums_t[:, COUNTS].cpu()):
            found.append(f"{what}: counts {sums[:, COUNTS].tolist()} != {sums_t[:, COUNTS].tolist()}")
        if not torch.allclose(top.cpu(), top_t.cpu(), rtol=1e-14, atol=0):
            found.append(f"{what}: maxima {top.tolist()} != {top_t.tolist()}")
        if not torch.allclose(sums[:, SUMS].cpu(), sums_t[:, SUMS].cpu(), rtol=1e-12, atol=0):
            found.append(f"{what}: sums {sums[:, SUMS].tolist()} != {sums_t[:, SUMS].tolist()}")
        return found
""")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled kernel runs on CUDA; none here")
def test_the_one_pass_statistics_equal_pytorchs_on_cuda():
    from harness.fast import compare_kernel
    kernel = compare_kernel._triton_kernel()
    assert kernel is not None, "Triton does not load on this CUDA box"
    assert disagreements_on_cuda(CHECK, kernel) == []


def test_the_one_pass_statistics_equal_pytorchs_under_the_interpreter():
    out, err = disagreements_under_interpreter(CHECK, "compare_kernel._triton_kernel()")
    assert out == "equal", (out + err)[-3000:]


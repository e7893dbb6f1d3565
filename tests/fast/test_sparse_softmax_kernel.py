"""The sparse oracle's one-pass softmax (``harness/fast/sparse_softmax_kernel.py``) against PyTorch's
passes (``reference.sparse.attend_listed``): LSE within 1e-13 of each other and out within 1e-13 of its
largest value in float64 (the oracle), 1e-5 in float32 (the noise floor's emulation: float32 sums in
another order), empty rows exactly PyTorch's (out 0, LSE +inf), for entries from 64 to past one block,
invalid entries as holes, tails and whole rows, and ``sum p |V|`` as well as out.  On CUDA the compiled
kernel; on the CPU the kernel under Triton's interpreter (a subprocess: the flag is read when Triton loads)."""

import textwrap

import pytest
import torch
from helpers import disagreements_on_cuda, disagreements_under_interpreter

CHECK = textwrap.dedent("""
    import itertools
    import torch
    from harness.fast import sparse_softmax_kernel
    from reference.sparse import attend_listed

    TOLERANCES = [(torch.float64, 1e-13), (torch.float32, 1e-5)]

    def blocks(device):
        gen = torch.Generator().manual_seed(31)
        for n, heads, entries, d in [(3, 4, 64, 72), (2, 3, 576, 64), (5, 2, 1100, 40), (1, 1, 16, 8)]:
            q = torch.randn(n, heads, d, generator=gen, dtype=torch.float64) * 2
            listed = torch.randn(n, entries, d, generator=gen, dtype=torch.float64)
            valid = torch.rand(n, entries, generator=gen) < 0.8        # holes
            valid[0, entries // 2:] = False                            # a -1 tail
            if n > 2:
                valid[2] = False                                       # a row of -1 only
            listed[~valid] = 0.0                                       # as the oracle reads them: zero keys
            yield q.to(device), listed.to(device), valid.to(device)

    def disagreements(device, kernel):
        found = []
        for (q, listed, valid), (dtype, close) in itertools.product(blocks(device), TOLERANCES):
            q, listed = q.to(dtype), listed.to(dtype)
            for magnitudes in (False, True):
                what = f"{tuple(listed.shape)} {dtype}, magnitudes {magnitudes}"
                # written in place, as the oracle writes a block's rows: views of larger tensors, filled first
                out = torch.full((2, *q.shape[:2], 32), 7.0, dtype=dtype, device=device)[1]
                lse = torch.full((2, *q.shape[:2]), 7.0, dtype=dtype, device=device)[1]
                sparse_softmax_kernel.run(kernel, q, listed, valid, 0.17, 32, magnitudes, out=out, lse=lse)
                want_out, want_lse = attend_listed(q, listed, valid, 0.17, 32, absolute_values=magnitudes)
                if not torch.equal(torch.isinf(lse), torch.isinf(want_lse)):
                    found.append(f"{what}: empty rows differ")
                finite = torch.isfinite(want_lse)
                if not torch.allclose(lse[finite], want_lse[finite], rtol=close, atol=0):
                    found.append(f"{what}: lse {(lse - want_lse)[finite].abs().max().item():.3g} apart")
                # an element near 0 is a sum that cancels: its error is the terms', so the bound is the largest's
                if not torch.allclose(out, want_out, rtol=0, atol=close * want_out.abs().max().item()):
                    found.append(f"{what}: out {(out - want_out).abs().max().item():.3g} apart")
                if not bool((out[~finite] == 0).all()):
                    found.append(f"{what}: an empty row's out is not 0")
        return found
""")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled kernel runs on CUDA; none here")
def test_the_one_pass_softmax_equals_pytorchs_on_cuda():
    from harness.fast import sparse_softmax_kernel
    kernel = sparse_softmax_kernel._triton_kernel()
    assert kernel is not None, "Triton does not load on this CUDA box"
    assert disagreements_on_cuda(CHECK, kernel) == []


def test_the_one_pass_softmax_equals_pytorchs_under_the_interpreter():
    out, err = disagreements_under_interpreter(CHECK, "sparse_softmax_kernel._triton_kernel()")
    assert out == "equal", (out + err)[-3000:]

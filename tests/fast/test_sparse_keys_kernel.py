"""The sparse oracle's one-pass record reading (``harness/fast/sparse_keys_kernel.py``) against
PyTorch's form (``sparse_cache.dequantize(read_records(...))``): the same float64 keys bit for bit (NaN
where PyTorch's are NaN), for both formats, both views, both scale policies, zeroed entries and slots
repeated, page sizes 64 and 53; and the flag that says a scale read lets the two views differ, the same
as ``sparse_cache.views_agree``.  On CUDA the compiled kernel; on the CPU the kernel under Triton's
interpreter (a subprocess: the flag is read when Triton loads)."""

import textwrap

import pytest
import torch
from helpers import disagreements_on_cuda, disagreements_under_interpreter

CHECK = textwrap.dedent("""
    import torch
    from harness.building import sparse_cache
    from harness.fast import sparse_keys_kernel

    def pools(device):
        gen = torch.Generator().manual_seed(23)
        for name, policy, page_size in [("v32", "amax", 64), ("v32", "ue8m0", 53), ("v4", "ue8m0", 64),
                                        ("v4", "ue8m0", 53)]:
            fmt = sparse_cache.FORMATS[name]
            pages = 6
            pool = torch.full((pages, fmt.page_bytes(page_size)), sparse_cache.POISON_BYTE, dtype=torch.uint8)
            written = torch.randperm(pages * page_size, generator=gen)[:200]
            tokens = (torch.randn(len(written), fmt.d_qk, generator=gen) * 3).to(torch.bfloat16)
            tokens[0, :fmt.tile] = 0                       # an all-zero tile: scale 0 under amax (NaN values)
            tokens[1, :fmt.tile] *= 1e-6                   # a tiny tile: a scale far below the others
            sparse_cache.write_records(pool, written, sparse_cache.quantize(tokens, fmt, policy), fmt, page_size)
            scale_bytes = sparse_cache._page_parts(pool, fmt, page_size)[1]
            for token, byte in [(2, 0), (3, 0xFF)]:        # a scale of all zero bytes, and one of poison
                page, offset = divmod(int(written[token]), page_size)
                scale_bytes[page, offset, :fmt.scale_bytes] = byte
            slots = written[torch.randint(0, len(written), (300,), generator=gen)]     # repeats
            zeroed = torch.rand(300, generator=gen) < 0.2
            slots[zeroed] = 0                              # a -1 entry reads slot 0 (maybe poison), zeroed
            yield fmt, page_size, pool.to(device), slots.to(device), zeroed.to(device)
            # the same pool read without the planted tokens: under ue8m0 every scale lets the views agree
            clean = written[4 + torch.randint(0, len(written) - 4, (300,), generator=gen)]
            clean[zeroed] = int(written[3])                # a zeroed entry's own scale (poison) is never read
            yield fmt, page_size, pool.to(device), clean.to(device), zeroed.to(device)

    def disagreements(device, kernel):
        found, agreed = [], set()
        for fmt, page_size, pool, slots, zeroed in pools(device):
            agree = bool(sparse_cache.views_agree(sparse_cache.read_scales(pool, slots, fmt, page_size), zeroed))
            agreed.add(agree)
            for view in sparse_cache.DEQUANT_MODES:
                records = sparse_cache.read_records(pool, slots, fmt, page_size, zeroed=zeroed)
                torch_form = sparse_cache.dequantize(records, fmt, view)
                disagree = torch.zeros((), dtype=torch.int32, device=device)
                one_pass = sparse_keys_kernel.run(kernel, pool, slots, zeroed, fmt, page_size, view, disagree)
                if bool(disagree == 0) != agree:
                    found.append(f"{fmt.name} p{page_size} {view}: views agree {agree}, flag {int(disagree)}")
                nan = torch_form.isnan()
                if not torch.equal(one_pass.isnan(), nan):
                    found.append(f"{fmt.name} p{page_size} {view}: NaN in other places")
                bits = lambda t: t.masked_fill(nan, 0).view(torch.int64).cpu()
                if not torch.equal(bits(one_pass), bits(torch_form)):
                    differ = (bits(one_pass) != bits(torch_form)).nonzero()[:3].tolist()
                    found.append(f"{fmt.name} p{page_size} {view}: differ at {differ}")
                if torch_form[zeroed].ne(0).any() or not torch_form[~zeroed].ne(0).any():
                    found.append(f"{fmt.name} p{page_size} {view}: the check's own records are not as planted")
        if agreed != {True, False}:
            found.append(f"the views agree {agreed} in every pool: the flag is not tested both ways")
        return found
""")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled kernel runs on CUDA; none here")
def test_the_one_pass_sparse_keys_equal_pytorchs_on_cuda():
    from harness.fast import sparse_keys_kernel
    kernel = sparse_keys_kernel.usable_kernel("cuda:0")
    assert kernel is not None, "Triton does not build the kernel on this CUDA box"
    assert disagreements_on_cuda(CHECK, kernel) == []


def test_the_one_pass_sparse_keys_equal_pytorchs_under_the_interpreter():
    out, err = disagreements_under_interpreter(CHECK, "sparse_keys_kernel._triton_kernel()")
    assert out == "equal", (out + err)[-3000:]

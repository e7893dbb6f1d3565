"""The sparse records written in one pass (``harness/fast/sparse_write_kernel.py``) against PyTorch's
form (``sparse_cache.write_records(quantize(...))``): the same pool, byte for byte (the poison left
unwritten included), for both formats, both scale policies, page sizes 64, 53 and 2, tiles of zeros and of
negative zeros, tiny tiles (the ue8m0 floor), large values and e4m3 subnormals.  On CUDA the compiled kernel;
on the CPU the kernel under Triton's interpreter (a subprocess: the flag is read when Triton loads)."""

import textwrap

import pytest
import torch
from helpers import disagreements_on_cuda, disagreements_under_interpreter

CHECK = textwrap.dedent("""
    import torch
    from harness.building import sparse_cache
    from harness.fast import sparse_write_kernel

    def writes(device):
        gen = torch.Generator().manual_seed(31)
        for name, policy, page_size in [("v32", "amax", 64), ("v32", "ue8m0", 53), ("v32", "amax", 2),
                                        ("v4", "ue8m0", 64), ("v4", "ue8m0", 53)]:
            fmt = sparse_cache.FORMATS[name]
            pages = 7
            slots = torch.randperm(pages * page_size, generator=gen)[:90]
            tokens = torch.randn(len(slots), fmt.d_qk, generator=gen) * 3
            tokens[0, :fmt.tile] = 0                       # an all-zero tile: scale 0 under amax (NaN values)
            tokens[1, :fmt.tile] *= 1e-7                   # a tiny tile: ue8m0's floor of 1e-4
            tokens[2, fmt.tile:2 * fmt.tile] *= 3e4        # large values: scales far above 1
            tokens[3, :fmt.tile] = -0.0                    # negative zeros
            # scale 1 in both policies, and values on e4m3's subnormals (2^-9 apart), ties to even included
            tokens[4, :8] = torch.tensor([448, 2 ** -7, 2 ** -8, 3 * 2 ** -10, 2 ** -10, 5 * 2 ** -11, 2 ** -12,
                                          -3 * 2 ** -10])
            tokens = tokens.to(torch.bfloat16)
            yield fmt, policy, page_size, pages, slots.to(device), tokens.to(device)

    def disagreements(device, kernel):
        found = []
        for fmt, policy, page_size, pages, slots, tokens in writes(device):
            poisoned = torch.full((pages, fmt.page_bytes(page_size)), sparse_cache.POISON_BYTE, dtype=torch.uint8,
                                  device=device)
            torch_form, one_pass = poisoned.clone(), poisoned.clone()
            sparse_cache.write_records(torch_form, slots, sparse_cache.quantize(tokens, fmt, policy), fmt,
                                       page_size)
            sparse_write_kernel.run(kernel, one_pass, slots, tokens, fmt, page_size, policy)
            where = f"{fmt.name} {policy} p{page_size}"
            if not torch.equal(one_pass, torch_form):
                differ = (one_pass != torch_form).nonzero()[:4].tolist()
                found.append(f"{where}: bytes differ at (page, byte) {differ}")
            written = (torch_form != poisoned).sum().item()
            if written < len(slots) * (fmt.d_nope // 2):
                found.append(f"{where}: the check's own writes are not as planted ({written} bytes changed)")
        return found
""")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled kernel runs on CUDA; none here")
def test_the_one_pass_records_equal_pytorchs_on_cuda():
    from harness.fast import sparse_write_kernel
    kernel = sparse_write_kernel.usable_kernel("cuda:0")
    assert kernel is not None, "Triton does not build the kernel on this CUDA box"
    assert disagreements_on_cuda(CHECK, kernel) == []


def test_the_one_pass_records_equal_pytorchs_under_the_interpreter():
    out, err = disagreements_under_interpreter(CHECK, "sparse_write_kernel._triton_kernel()")
    assert out == "equal", (out + err)[-3000:]


def test_the_writer_refuses_what_it_cannot_write():
    from harness.building import sparse_cache
    from harness.fast import sparse_write_kernel
    fmt = sparse_cache.FORMATS["v4"]
    pool = torch.zeros(1, fmt.page_bytes(64), dtype=torch.uint8)
    slots = torch.zeros(1, dtype=torch.int64)
    with pytest.raises(ValueError, match="scale policies"):
        sparse_write_kernel.run(None, pool, slots, torch.zeros(1, fmt.d_qk, dtype=torch.bfloat16), fmt, 64, "amax")
    with pytest.raises(ValueError, match="must be bf16"):
        sparse_write_kernel.run(None, pool, slots, torch.zeros(1, fmt.d_qk), fmt, 64, "ue8m0")
    assert not sparse_write_kernel.write_tokens(pool, slots, torch.zeros(1, fmt.d_qk, dtype=torch.bfloat16),
                                                fmt, 64, "ue8m0")      # off CUDA: PyTorch's form writes


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled kernel runs on CUDA; none here")
@pytest.mark.parametrize("kv_format,kv_scales", [("v32", "amax"), ("v32", "ue8m0"), ("v4", "ue8m0")])
def test_a_case_built_with_the_writer_is_the_case_built_without(monkeypatch, kv_format, kv_scales):
    from harness.building import sparse_inputs
    from harness.fast import sparse_write_kernel
    from harness.planning.cases import Case, validate_case
    case = validate_case(Case(id="sparse/w/0", seed=5, scenario="sparse", topk=128, heads=16, batch_size=4,
                              seqlen="uniform:1:600", kv_format=kv_format, kv_scales=kv_scales,
                              d_qk=sparse_inputs.FORMATS[kv_format].d_qk), "test")
    assert sparse_write_kernel.usable_kernel("cuda:0") is not None
    with_writer = sparse_inputs.build(case, "cuda")
    monkeypatch.setattr(sparse_write_kernel, "write_tokens", lambda *args: False)
    without = sparse_inputs.build(case, "cuda")
    assert torch.equal(with_writer.inputs.kv_pool, without.inputs.kv_pool)
    assert with_writer.index_stats.valid_entries > 0

"""The oracle's one-pass key gathering (``harness/fast/widen_kernel.py``) against PyTorch's form
(``block_attention._gather_and_widen``): the same float64 keys, bit for bit, padding +0.0 over poison.
On CUDA the compiled kernel, and the whole oracle with and without it; on the CPU the kernel under
Triton's interpreter (a subprocess: the flag is read when Triton loads), and the harness's oracle
handing it to ``reference``, which never imports it."""

import textwrap

import pytest
import torch
from helpers import disagreements_on_cuda, disagreements_under_interpreter

CHECK = textwrap.dedent("""
    import types
    import torch
    from harness.fast import widen_kernel
    from reference import block_attention

    def blocks(device):
        gen = torch.Generator().manual_seed(11)
        for dtype, unit, page, h_kv, d, lengths in [
                (torch.bfloat16, 64, 64, 1, 576, [300, 64, 1, 255]),      # pages, a short request, one key
                (torch.bfloat16, 1, 64, 1, 576, [7, 130]),                 # slots (key sets)
                (torch.float16, 64, 64, 2, 512, [128, 70]),                # two KV heads
                (torch.float32, 16, 16, 1, 64, [33, 16, 48])]:
            pages = 40
            pool = torch.randn(pages, page, h_kv, d, generator=gen).to(dtype)
            pool.view(-1)[::97] = float("nan")                             # poison: must never be read
            n_keys = -(-max(lengths) // unit) * unit
            n_rows = n_keys // unit
            rows = torch.randint(0, pages * page // unit, (len(lengths), n_rows), generator=gen)
            for i, n in enumerate(lengths):                               # a request's own rows hold no NaN
                own = rows[i, :-(-n // unit)]
                pool.view(pages * page // unit, -1)[own] = torch.randn(len(own), unit * h_kv * d,
                                                                       generator=gen).to(dtype)
            key = types.SimpleNamespace(unit=unit, page_size=page, h_kv=h_kv, d_qk=d, n_keys=n_keys, kv_dtype=dtype)
            block = types.SimpleNamespace(key=key, rows=len(lengths), members=[(0, i) for i in range(len(lengths))])
            problem = types.SimpleNamespace(kv_pool=pool.to(device))
            runs = [(0, 0, len(lengths), None, rows.reshape(-1).to(device))]
            yield block, problem, runs, torch.tensor(lengths, dtype=torch.int64, device=device)

    def disagreements(device, kernel):
        found = []
        for block, problem, runs, lengths in blocks(device):
            k = block.key
            shape = (block.rows, k.h_kv, k.n_keys, k.d_qk)
            torch_form = torch.full(shape, 7.0, dtype=torch.float64, device=device)
            block_attention._gather_and_widen(torch_form, block, [problem], runs, lengths, int(lengths.min()))
            one_pass = torch.full(shape, 7.0, dtype=torch.float64, device=device)
            widen_kernel.run(kernel, one_pass, block_attention._pool_rows(problem, k), runs[0][4], lengths, k.unit)
            bits = lambda t: t.view(torch.int64).cpu()
            if not torch.equal(bits(one_pass), bits(torch_form)):
                differ = (bits(one_pass) != bits(torch_form)).nonzero()[:3].tolist()
                found.append(f"{k.kv_dtype} unit {k.unit} h_kv {k.h_kv} d {k.d_qk}: differ at {differ}")
            if torch_form.isnan().any() or (torch_form == 7.0).any():
                found.append(f"{k.kv_dtype} unit {k.unit}: PyTorch's form read poison or left a key unwritten")
        return found
""")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled kernel runs on CUDA; none here")
def test_the_one_pass_keys_equal_pytorchs_on_cuda():
    from harness.fast import widen_kernel
    kernel = widen_kernel.usable_kernel("cuda:0")
    assert kernel is not None, "Triton does not build the kernel on this CUDA box"
    assert disagreements_on_cuda(CHECK, kernel) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the oracle's GPU blocks run on CUDA; none here")
def test_the_oracle_gives_the_same_bits_with_and_without_the_kernel():
    import dataclasses

    from oracle_problems import problems as cpu_problems

    from harness.fast import widen_kernel
    from reference import mla_attention_many
    # widths the kernel takes (a multiple of its BLOCK_D): at the default 40 it would write no block
    problems = [dataclasses.replace(p, q=p.q.cuda(), kv_pool=p.kv_pool.cuda())
                for p in cpu_problems(d_qk=2 * widen_kernel.BLOCK_D, d_v=widen_kernel.BLOCK_D)]
    filled = []

    def fill(*block):
        filled.append(widen_kernel.fill(*block))
        return filled[-1]
    with_kernel = mla_attention_many(problems, fill_keys=fill)
    assert any(filled), "the kernel wrote no block"
    without = mla_attention_many(problems)
    for (out_a, lse_a), (out_b, lse_b) in zip(with_kernel, without):
        assert torch.equal(out_a.view(torch.int64), out_b.view(torch.int64))
        assert torch.equal(lse_a.view(torch.int64), lse_b.view(torch.int64))


def test_the_one_pass_keys_equal_pytorchs_under_the_interpreter():
    out, err = disagreements_under_interpreter(CHECK, "widen_kernel._triton_kernel()")
    assert out == "equal", (out + err)[-3000:]


def test_the_harness_oracle_hands_the_kernel_to_the_reference_blocks(monkeypatch):
    """``reference`` imports nothing from ``harness``: the one-pass gathering reaches the oracle's blocks only
    as its argument, which the harness's oracle hands over (off CUDA the kernel then declines each block)."""
    from harness.building.inputs import generate
    from harness.fast import widen_kernel
    from harness.judging import oracle
    from harness.planning.cases import Case

    offered, real_fill = [], widen_kernel.fill

    def fill(keys, *rest):
        offered.append(tuple(keys.shape))
        return real_fill(keys, *rest)
    monkeypatch.setattr(widen_kernel, "fill", fill)
    oracle.expected(generate(Case(id="t/widen", seed=4, batch_size=3, heads=16, seqlen="list:70,3,130")))
    assert len(offered) == 3                       # on the CPU each request is a block of its own

"""The oracle itself: against a dense masked softmax written here, and its properties.

Shapes are small (d_qk 40, d_v 32, page sizes 4..16) so the loops stay fast; the
paging, masking, grouping and empty-row logic is the same at any size.
"""

import math

import pytest
import torch
from helpers import FP8, dense_attention, paged, read64
from hypothesis import given
from hypothesis import strategies as st

from reference import (
    FP8_MAX,
    absorb_query,
    attention_non_absorbed,
    dequantize_fp8,
    merge_attention,
    mla_attention_batched,
    mla_attention_loop,
    quantize_fp8,
    unabsorb_output,
    visible_key_count,
)

TIGHT = {"rtol": 1e-10, "atol": 1e-12}    # float64 vs float64: only summation order differs
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp8_e4m3": torch.float8_e4m3fn}
BOTH = [mla_attention_loop, mla_attention_batched]


def make_problem(seqlens, s_q, h_q, h_kv, d_qk, page_size, dtype, seed, extra_pages=2, pad_value=-1):
    """Fresh random q and paged KV: returns (q, Paged, descale_q, descale_k)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(len(seqlens), s_q, h_q, d_qk, generator=gen)
    tokens = [torch.randn(n, h_kv, d_qk, generator=gen) for n in seqlens]
    descale_q = descale_k = None
    if dtype in FP8:
        descale_k = descale_q = 0.0125   # |x| up to 448 * 0.0125 = 5.6 before saturation
        q = quantize_fp8(q, descale_q, dtype)
        tokens = [quantize_fp8(t, descale_k, dtype) for t in tokens]
    else:
        q = q.to(dtype)
    return q, paged(tokens, page_size, gen, dtype=dtype, extra_pages=extra_pages, pad_value=pad_value), \
        descale_q, descale_k


def call(fn, q, p, scale, d_v, causal=True, descale_q=None, descale_k=None, **kw):
    return fn(q, p.pool, p.block_table, p.seqlens, scale, d_v, causal=causal,
              descale_q=descale_q, descale_k=descale_k, **kw)


# ---- against the dense masked softmax --------------------------------------------------

@pytest.mark.parametrize("fn", BOTH, ids=["loop", "batched"])
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
@pytest.mark.parametrize("h_q,h_kv", [(4, 1), (6, 2), (4, 4)])
@pytest.mark.parametrize("s_q", [1, 2, 5, 8])
def test_matches_dense_masked_softmax(fn, dtype, causal, h_q, h_kv, s_q):
    seed = s_q * 1000 + h_q * 10 + h_kv + 7 * list(DTYPES).index(dtype)
    # lengths: empty, shorter than s_q (causal rows with no key), page boundaries 15/16/17, several pages
    seqlens = [0, 2, 15, 16, 17, 45]
    q, p, dq, dk = make_problem(seqlens, s_q, h_q, h_kv, 40, 16, DTYPES[dtype], seed + causal)
    scale = 40 ** -0.5
    out, lse = call(fn, q, p, scale, 32, causal, dq, dk)
    exp_out, exp_lse = dense_attention(q, p.pool, p.block_table, p.seqlens, scale, 32, causal, dq, dk)
    assert out.dtype == lse.dtype == torch.float64
    assert out.shape == (6, s_q, h_q, 32) and lse.shape == (6, h_q, s_q)
    torch.testing.assert_close(out, exp_out, **TIGHT)
    torch.testing.assert_close(lse, exp_lse, **TIGHT)
    assert torch.isfinite(out).all()
    # real rows really were computed (never compared on zeros)
    assert bool((out[5].abs().amax(-1) > 0).all()) and bool(torch.isfinite(lse[5]).all())


@pytest.mark.parametrize("fn", BOTH, ids=["loop", "batched"])
def test_empty_rows_give_zero_and_plus_inf(fn):
    # request 0 has no keys; request 1 has 2 keys and 5 draft rows: causal rows 0..2 see nothing
    q, p, _, _ = make_problem([0, 2, 9], 5, 4, 2, 40, 4, torch.bfloat16, seed=7)
    out, lse = call(fn, q, p, 0.2, 32, causal=True)
    assert bool((out[0] == 0).all()) and bool(torch.isposinf(lse[0]).all())
    for i in range(5):
        n = visible_key_count(2, 5, i, True)
        assert n == max(0, i - 2)
        if n == 0:
            assert bool((out[1, i] == 0).all()) and bool(torch.isposinf(lse[1, :, i]).all())
        else:
            assert bool(torch.isfinite(lse[1, :, i]).all()) and bool((out[1, i] != 0).any())
    assert bool(torch.isfinite(lse[2]).all())
    out_nc, lse_nc = call(fn, q, p, 0.2, 32, causal=False)
    assert bool(torch.isposinf(lse_nc[0]).all()) and bool(torch.isfinite(lse_nc[1:]).all())


def test_gqa_grouping_uses_kv_head_h_over_group():
    # Each kv head's keys are identical across tokens except for a per-head offset on V: the
    # output of query head h is then exactly kv head h // (h_q / h_kv)'s V.
    h_q, h_kv, d = 6, 3, 12
    tokens = torch.zeros(5, h_kv, d)
    for g in range(h_kv):
        tokens[:, g, :] = 10.0 * (g + 1)
    gen = torch.Generator().manual_seed(3)
    p = paged([tokens], 4, gen)
    q = torch.randn(1, 1, h_q, d, generator=gen)
    for fn in BOTH:
        out, _ = call(fn, q, p, 0.1, 8, causal=False)
        for h in range(h_q):
            assert torch.allclose(out[0, 0, h], torch.full((8,), 10.0 * (h // 2 + 1), dtype=torch.float64))


def test_descale_for_non_fp8_is_refused():
    q, p, _, _ = make_problem([3], 1, 2, 1, 8, 4, torch.bfloat16, seed=1)
    with pytest.raises(ValueError, match="descale"):
        mla_attention_loop(q, p.pool, p.block_table, p.seqlens, 0.3, 4, descale_k=0.5)


def test_visible_key_count_is_bottom_right_aligned():
    # L = 10 keys, 3 draft rows: rows see 8, 9, 10 keys; without causal all 10
    assert [visible_key_count(10, 3, i, True) for i in range(3)] == [8, 9, 10]
    assert [visible_key_count(10, 3, i, False) for i in range(3)] == [10, 10, 10]
    assert visible_key_count(0, 1, 0, True) == 0 and visible_key_count(1, 3, 0, True) == 0


# ---- hypothesis strategies ---------------------------------------------------------------

@st.composite
def problems(draw, max_s_q=8, dtypes=("fp32", "bf16", "fp16", "fp8_e4m3")):
    b = draw(st.integers(1, 3))
    s_q = draw(st.integers(1, max_s_q))
    h_kv = draw(st.sampled_from([1, 2]))
    h_q = h_kv * draw(st.sampled_from([1, 2, 3]))
    page_size = draw(st.sampled_from([1, 4, 8, 16]))
    seqlens = draw(st.lists(st.integers(0, 40), min_size=b, max_size=b))
    d_qk = draw(st.sampled_from([8, 24, 40]))
    d_v = draw(st.integers(1, d_qk))
    dtype = DTYPES[draw(st.sampled_from(dtypes))]
    causal = draw(st.booleans())
    seed = draw(st.integers(0, 2**31 - 1))
    return dict(seqlens=seqlens, s_q=s_q, h_q=h_q, h_kv=h_kv, d_qk=d_qk, page_size=page_size,
                dtype=dtype, seed=seed, d_v=d_v, causal=causal)


def build(pr, **over):
    args = {k: pr[k] for k in ("seqlens", "s_q", "h_q", "h_kv", "d_qk", "page_size", "dtype", "seed")}
    args.update(over)
    return make_problem(**args)


def assert_identical(a, b):
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y), (x - y).abs().max()


# ---- properties ----------------------------------------------------------------------------

@given(problems(), st.data())
def test_invariant_under_permuted_pages(pr, data):
    q, p, dq, dk = build(pr)
    num_pages = p.pool.shape[0]
    perm = torch.tensor(data.draw(st.permutations(range(num_pages)), label="perm"))   # old page -> new page
    pool2 = torch.empty_like(p.pool)
    pool2[perm] = p.pool
    table2 = p.block_table.clone()
    for r, pages in enumerate(p.pages):
        table2[r, :len(pages)] = perm[torch.tensor(pages, dtype=torch.long)].to(torch.int32)
    p2 = type(p)(pool2, table2, p.seqlens, None)
    for fn in BOTH:
        base = call(fn, q, p, 0.25, pr["d_v"], pr["causal"], dq, dk)
        assert_identical(base, call(fn, q, p2, 0.25, pr["d_v"], pr["causal"], dq, dk))


@given(problems(), st.sampled_from([-1, 1, 0, 2**31 - 1, 7]), st.sampled_from([math.nan, math.inf, -math.inf]),
       st.integers(0, 3))
def test_insensitive_to_padding_and_unused_memory(pr, pad_value, poison, extra_columns):
    # baseline: finite garbage outside the tokens, table padded with 0
    q, clean, dq, dk = build(pr)
    gen = torch.Generator().manual_seed(pr["seed"] + 1)
    real = clean.pool.to(torch.float32)      # exact for every dtype used here
    outside = torch.isnan(real)
    garbage = torch.rand(real.shape, generator=gen) * 8 - 4
    pool_garbage = torch.where(outside, garbage, real).to(clean.pool.dtype)
    assert not torch.isnan(pool_garbage.to(torch.float32)).any()
    table0 = torch.where(clean.block_table == -1, torch.zeros_like(clean.block_table), clean.block_table)
    base = type(clean)(pool_garbage, table0, clean.seqlens, None)
    # padded: poisoned memory outside the tokens, a wider table padded with pad_value
    pool_poison = torch.where(outside, torch.full_like(real, poison), real).to(clean.pool.dtype)
    table = torch.full((len(clean.pages), clean.block_table.shape[1] + extra_columns), pad_value, dtype=torch.int32)
    table[:, :clean.block_table.shape[1]] = torch.where(clean.block_table == -1,
                                                       torch.full_like(clean.block_table, pad_value),
                                                       clean.block_table)
    padded = type(clean)(pool_poison, table, clean.seqlens, None)
    for fn in BOTH:
        expect = call(fn, q, base, 0.25, pr["d_v"], pr["causal"], dq, dk)
        got = call(fn, q, padded, 0.25, pr["d_v"], pr["causal"], dq, dk)
        assert_identical(expect, got)
        assert not torch.isnan(got[0]).any() and not torch.isnan(got[1]).any()


@given(problems(max_s_q=8))
def test_causal_prefix_consistency(pr):
    """Verify row j over cache length L + s_q equals decode of that query at cache length L + j + 1."""
    s_q = max(pr["s_q"], 2)
    prefix = pr["seqlens"]
    q, p, dq, dk = build(pr, s_q=s_q, seqlens=[n + s_q for n in prefix])   # drafts written into the cache
    for fn in BOTH:
        out, lse = call(fn, q, p, 0.25, pr["d_v"], True, dq, dk)
        for j in range(s_q):
            dec = type(p)(p.pool, p.block_table, torch.tensor([n + j + 1 for n in prefix], dtype=torch.int32), None)
            d_out, d_lse = call(fn, q[:, j:j + 1].contiguous(), dec, 0.25, pr["d_v"], True, dq, dk)
            torch.testing.assert_close(out[:, j:j + 1], d_out, **TIGHT)
            torch.testing.assert_close(lse[:, :, j:j + 1], d_lse, **TIGHT)
            assert bool(torch.isfinite(d_lse).all())


@given(st.integers(0, 30), st.floats(0.0, 1.0), st.integers(1, 3), st.sampled_from([1, 2]),
       st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_lse_merge_of_a_split_equals_the_union(n, frac, s_q, h_kv, group, seed):
    gen = torch.Generator().manual_seed(seed)
    h_q, d = h_kv * group, 24
    keys = torch.randn(n, h_kv, d, generator=gen)
    in_a = torch.rand(n, generator=gen) < frac            # frac 0 / 1: one part is empty
    q = torch.randn(1, s_q, h_q, d, generator=gen).expand(3, -1, -1, -1).contiguous()
    p = paged([keys[in_a], keys[~in_a], keys], 4, gen)    # three requests: A, B and A ∪ B
    for fn in BOTH:
        out, lse = call(fn, q, p, 0.3, 16, causal=False)
        o = out.transpose(1, 2)                           # (b, h, s_q, d_v) to match lse (b, h, s_q)
        m_out, m_lse = merge_attention(o[0], lse[0], o[1], lse[1])
        torch.testing.assert_close(m_out, o[2], **TIGHT)
        torch.testing.assert_close(m_lse, lse[2], **TIGHT)
        assert bool(torch.isposinf(m_lse).all()) == (n == 0)


def test_merge_with_an_empty_part_is_exact_and_two_empties_stay_empty():
    gen = torch.Generator().manual_seed(11)
    out = torch.randn(3, 5, 7, generator=gen, dtype=torch.float64)
    lse = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    empty_out, empty_lse = torch.zeros_like(out), torch.full_like(lse, math.inf)
    for args in [(out, lse, empty_out, empty_lse), (empty_out, empty_lse, out, lse)]:
        m_out, m_lse = merge_attention(*args)
        assert torch.equal(m_out, out) and torch.equal(m_lse, lse)
    m_out, m_lse = merge_attention(empty_out, empty_lse, empty_out, empty_lse)
    assert bool((m_out == 0).all()) and bool(torch.isposinf(m_lse).all())


@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 25), st.integers(4, 20), st.integers(1, 8),
       st.integers(2, 12), st.integers(2, 12), st.sampled_from([1, 4, 8]), st.integers(0, 2**31 - 1))
def test_absorbed_equals_non_absorbed(heads, s_q, n, lora, rope, nope, v, page_size, seed):
    gen = torch.Generator().manual_seed(seed)
    f = torch.float64
    q_nope = torch.randn(s_q, heads, nope, generator=gen, dtype=f)
    q_pe = torch.randn(s_q, heads, rope, generator=gen, dtype=f)
    latent = torch.randn(n, lora, generator=gen, dtype=f)
    k_pe = torch.randn(n, rope, generator=gen, dtype=f)
    w_uk = torch.randn(heads, lora, nope, generator=gen, dtype=f) / math.sqrt(lora)
    w_uv = torch.randn(heads, lora, v, generator=gen, dtype=f) / math.sqrt(lora)
    scale = (nope + rope) ** -0.5
    exp_out, exp_lse = attention_non_absorbed(q_nope, q_pe, latent, k_pe, w_uk, w_uv, scale)
    # absorbed: MQA over the cached [latent, k_pe] (one kv head), V = the latent
    p = paged([torch.cat([latent, k_pe], -1)[:, None, :]], page_size, gen, dtype=f)
    q_abs = absorb_query(q_nope, q_pe, w_uk)[None]       # (1, s_q, heads, lora + rope)
    for fn in BOTH:
        out_latent, lse = call(fn, q_abs, p, scale, lora, causal=True)
        out = unabsorb_output(out_latent[0], w_uv)
        torch.testing.assert_close(out, exp_out, **TIGHT)
        torch.testing.assert_close(lse[0], exp_lse, **TIGHT)
        assert bool(torch.isposinf(lse).any()) == (n < s_q)


@given(problems(), st.sampled_from([1, 50, 2000, 2**28]))
def test_batched_equals_loop(pr, max_elements):
    q, p, dq, dk = build(pr)
    loop = call(mla_attention_loop, q, p, 0.25, pr["d_v"], pr["causal"], dq, dk)
    batched = call(mla_attention_batched, q, p, 0.25, pr["d_v"], pr["causal"], dq, dk, max_elements=max_elements)
    for a, e in zip(batched, loop, strict=True):
        torch.testing.assert_close(a, e, **TIGHT)
    assert torch.equal(torch.isposinf(batched[1]), torch.isposinf(loop[1]))


# ---- fp8 e4m3 quantisation ------------------------------------------------------------------

def e4m3_values() -> torch.Tensor:
    """Every non-negative finite e4m3fn value, indexed by its bit code 0x00..0x7e, from the bit layout.

    1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal
    (m/8 * 2^-6); 0x7f (exponent 15, mantissa 7) is NaN and there is no inf.
    """
    vals = []
    for code in range(0x7F):
        e, m = code >> 3, code & 7
        vals.append(m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return torch.tensor(vals, dtype=torch.float64)


def round_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Saturate to ±448 and round to the nearest e4m3 value, ties to the even code, by enumeration."""
    V = e4m3_values()
    a = x.to(torch.float64).abs().clamp(max=448.0)
    hi = torch.searchsorted(V, a).clamp(max=len(V) - 1)
    lo = (hi - 1).clamp(min=0)
    d_lo, d_hi = a - V[lo], V[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    return torch.where(pick_hi, V[hi], V[lo]) * torch.sign(x.to(torch.float64))


def test_e4m3_bit_layout_matches_torch():
    V = e4m3_values()
    assert V[-1] == 448.0 == FP8_MAX[torch.float8_e4m3fn] and V[1] == 2.0 ** -9
    decoded = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float64)
    torch.testing.assert_close(decoded[:0x7F], V, rtol=0, atol=0)
    torch.testing.assert_close(decoded[0x80:0xFF], -V, rtol=0, atol=0)
    assert bool(decoded[0x7F].isnan()) and bool(decoded[0xFF].isnan())


def test_quantize_rounds_to_nearest_even_on_every_tie_and_neighbour():
    V = e4m3_values()
    mids = ((V[:-1] + V[1:]) / 2).to(torch.float32)     # exact ties (5 significant bits fit float32)
    assert torch.equal(mids.to(torch.float64), (V[:-1] + V[1:]) / 2)
    near = torch.cat([mids, torch.nextafter(mids, torch.tensor(math.inf)),
                      torch.nextafter(mids, torch.tensor(-math.inf)), V.to(torch.float32)])
    x = torch.cat([near, -near])
    got = quantize_fp8(x, 1.0).to(torch.float64)
    torch.testing.assert_close(got, round_e4m3(x), rtol=0, atol=0)
    # the ties themselves go to the even code: e.g. 1.0625 (between 1 and 1.125) -> 1.0, 1.1875 -> 1.25
    q = quantize_fp8(torch.tensor([1.0625, 1.1875, 2.0 ** -10, 3 * 2.0 ** -10]), 1.0).to(torch.float64)
    assert q.tolist() == [1.0, 1.25, 0.0, 2.0 ** -8]


def test_quantize_random_values_match_enumeration():
    gen = torch.Generator().manual_seed(5)
    x = torch.cat([torch.randn(4000, generator=gen) * 50, torch.randn(1000, generator=gen) * 0.01,
                   (torch.rand(1000, generator=gen) - 0.5) * 1200])
    torch.testing.assert_close(quantize_fp8(x, 1.0).to(torch.float64), round_e4m3(x), rtol=0, atol=0)


def test_quantize_saturates_at_448_and_keeps_nan():
    x = torch.tensor([448.0, 449.0, 464.0, 480.0, 1e4, 3e38, -449.0, -1e30, math.nan, -math.nan])
    q = quantize_fp8(x, 1.0).to(torch.float64)
    assert q[:8].tolist() == [448.0, 448.0, 448.0, 448.0, 448.0, 448.0, -448.0, -448.0]
    assert bool(q[8:].isnan().all())
    # with a scale: 1000 * s saturates too, and NaN poison survives any scale
    q = quantize_fp8(torch.tensor([1000 * 0.01, math.nan]), 0.01).to(torch.float64)
    assert q[0] == 448.0 and bool(q[1].isnan())
    # e5m2 saturates at its own maximum
    q = quantize_fp8(torch.tensor([6e4, -1e9, math.nan]), 1.0, torch.float8_e5m2).to(torch.float64)
    assert q[:2].tolist() == [57344.0, -57344.0] and bool(q[2].isnan())


@pytest.mark.parametrize("scale", [0.25, 2.0 ** -7, 0.0125, 3.0])
def test_quantize_applies_the_scale(scale):
    gen = torch.Generator().manual_seed(int(scale * 1e4))
    x = torch.randn(3000, generator=gen) * 100 * scale
    q = quantize_fp8(x, scale)
    assert q.dtype == torch.float8_e4m3fn
    torch.testing.assert_close(q.to(torch.float64), round_e4m3(x.to(torch.float64) / scale), rtol=0, atol=0)
    # dequantize reads value * descale
    deq = dequantize_fp8(q, scale)
    assert deq.dtype == torch.float64
    assert torch.equal(deq, q.to(torch.float64) * scale)
    assert torch.equal(read64(q, scale), deq)
    # the round trip is within half an e4m3 step (2^-4 relative) where not saturated
    ok = x.abs() < 400 * scale
    err = (deq - x.to(torch.float64)).abs()[ok]
    assert bool((err <= x.to(torch.float64).abs()[ok] * 2.0 ** -4 + 2.0 ** -10 * scale).all())


def test_quantize_refuses_bad_scale_and_dtype():
    with pytest.raises(ValueError, match="positive"):
        quantize_fp8(torch.ones(2), 0.0)
    with pytest.raises(ValueError, match="positive"):
        quantize_fp8(torch.ones(2), math.nan)
    with pytest.raises(ValueError, match="fp8"):
        quantize_fp8(torch.ones(2), 1.0, torch.bfloat16)

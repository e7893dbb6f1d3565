"""``conventions.kernel_view``: the oracle reads exactly what each kernel computes with.

The fp8 views are checked against attention written out by hand here, from the
kernel's own arithmetic (SGLang Triton: q cast to fp8 without a scale, k_scale
folded into the logits, drafts met at model precision), not through the view.
"""

import dataclasses
import math

import pytest
import torch

from harness.backends.base import Capabilities
from harness.building.inputs import generate
from harness.judging.conventions import draft_slot_mask, kernel_view
from harness.judging.oracle import expected
from harness.planning.cases import Case, case_seed

CAST = Capabilities(fp8_q="cast_in_kernel")
MODEL = Capabilities(fp8_q="model_dtype")
QUANT = Capabilities(fp8_q="quantized_k_scale")


def make(mode="decode", dtype="fp8_e4m3", s_q=1, seqlen="list:5,70,130"):
    case_id = f"conv/{mode}-{dtype}-{s_q}/{seqlen}"
    return generate(Case(id=case_id, seed=case_seed(case_id, 3), mode=mode, batch_size=len(seqlen.split(",")),
                         heads=3, draft_tokens=s_q, dtype=dtype, seqlen=seqlen))


def tokens(inputs, r, pool):
    """Request r's tokens ``(n, h_kv, d)`` from ``pool`` via req_to_token (float64)."""
    n = int(inputs.cache_seqlens[r])
    slots = inputs.req_to_token[inputs.req_pool_indices[r], :n].long()
    return pool.reshape(-1, *pool.shape[2:])[slots].double()


def attend(logits, values):
    """Softmax over keys of ``logits (n,)`` and the weighted ``values (n, d_v)``; float64."""
    p = torch.softmax(logits, dim=0)
    return p @ values, torch.logsumexp(logits, dim=0)


@pytest.mark.parametrize("caps", [CAST, MODEL, QUANT])
def test_non_fp8_inputs_are_the_same_for_every_kernel(caps):
    inputs = make(dtype="bf16")
    assert kernel_view(inputs, caps) is inputs


def test_quantized_k_scale_is_the_generated_inputs():
    inputs = make()
    assert kernel_view(inputs, QUANT) is inputs


def test_model_dtype_gives_the_bf16_q_and_keeps_the_fp8_kv():
    inputs = make("verify", s_q=2)
    view = kernel_view(inputs, MODEL)
    assert view.q is inputs.q_model and view.q.dtype == torch.bfloat16 and view.descale_q is None
    assert view.kv_pool is inputs.kv_pool and torch.equal(view.descale_k, inputs.descale_k)
    # the kernel's oracle differs from the FlashMLA-convention one: the view is not a no-op
    assert not torch.allclose(expected(view)[0], expected(inputs)[0], atol=1e-3)


def test_cast_in_kernel_decode_matches_the_kernels_arithmetic():
    inputs = make("decode")
    view = kernel_view(inputs, CAST)
    out, lse = expected(view)
    k_scale = float(inputs.descale_k[0])
    d_v, scale = inputs.d_v, inputs.softmax_scale
    for r in range(inputs.q.shape[0]):
        keys = tokens(inputs, r, inputs.kv_pool)[:, 0]                       # fp8 values, unscaled
        for h in range(inputs.q.shape[2]):
            q = inputs.q_model[r, 0, h]
            q_nope = q[:d_v].to(inputs.kv_pool.dtype).double()               # q.to(K_Buffer dtype)
            q_pe = q[d_v:].double()                                          # rope dims stay bf16
            logits = (keys[:, :d_v] @ q_nope + keys[:, d_v:] @ q_pe) * scale * k_scale
            o, l = attend(logits, keys[:, :d_v] * k_scale)                    # v_scale = k_scale
            assert torch.allclose(out[r, 0, h], o, rtol=1e-12, atol=1e-12)
            assert math.isclose(float(lse[r, h, 0]), float(l), rel_tol=1e-12)


def test_cast_in_kernel_verify_matches_the_kernels_arithmetic():
    inputs = make("verify", s_q=3, seqlen="list:5,62,0")
    view = kernel_view(inputs, CAST)
    out, lse = expected(view)
    k_scale = float(inputs.descale_k[0])
    d_v, scale, s_q = inputs.d_v, inputs.softmax_scale, inputs.s_q
    for r in range(inputs.q.shape[0]):
        L = int(inputs.seq_lens[r])
        prefix = tokens(inputs, r, inputs.kv_pool)[:L, 0]                    # fp8 cache, unscaled
        drafts = tokens(inputs, r, inputs.kv_pool_model)[L:, 0]              # k_extend: model precision
        for i in range(s_q):
            for h in range(inputs.q.shape[2]):
                q = inputs.q_model[r, i, h]
                logits = torch.cat([prefix @ q.to(inputs.kv_pool.dtype).double() * scale * k_scale,
                                    drafts[:i + 1] @ q.double() * scale])
                values = torch.cat([prefix[:, :d_v] * k_scale, drafts[:i + 1, :d_v]])
                o, l = attend(logits, values)
                assert torch.allclose(out[r, i, h], o, rtol=1e-12, atol=1e-12)
                assert math.isclose(float(lse[r, h, i]), float(l), rel_tol=1e-12)


def test_the_verify_view_holds_only_the_pages_in_use():
    # a serving-scale pool must never be widened to float64 whole: the view keeps the live pages
    inputs = make("verify", s_q=3, seqlen="list:5,62,0")
    view = kernel_view(inputs, CAST)
    cache = inputs.cache_seqlens.tolist()
    live = {int(inputs.block_table[r, p]) for r, n in enumerate(cache) for p in range(-(-n // inputs.page_size))}
    assert view.kv_pool.shape[0] == len(live) < inputs.kv_pool.shape[0]
    assert torch.equal(view.cache_seqlens, inputs.cache_seqlens)


def test_draft_slot_mask_marks_exactly_the_drafts():
    inputs = make("verify", s_q=2, seqlen="list:3,64,0")
    mask = draft_slot_mask(inputs)
    assert int(mask.sum()) == 2 * 3
    for r in range(3):
        L = int(inputs.seq_lens[r])
        slots = inputs.req_to_token[inputs.req_pool_indices[r], : L + 2].long()
        assert not mask[slots[:L]].any() and mask[slots[L:]].all()


def test_end_to_end_error_is_unaffected_by_the_view():
    from harness.judging.oracle import expected, model_precision
    inputs = make("verify", s_q=2)
    view = kernel_view(inputs, CAST)
    assert view.q_model is inputs.q_model
    a, b = expected(model_precision(view)), expected(model_precision(inputs))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_unknown_convention_is_refused():
    with pytest.raises(ValueError, match="unknown fp8_q convention"):
        kernel_view(make(), dataclasses.replace(CAST, fp8_q="bogus"))


@pytest.mark.parametrize("mode, s_q", [("decode", 1), ("verify", 2)])
def test_cast_in_kernel_saturates_q_beyond_the_fp8_range_as_triton_does(mode, s_q):
    """Triton's conversion to e4m3 saturates at ±448 (``cvt.rn.satfinite``), whatever torch's own cast does."""
    inputs = make(mode, s_q=s_q)
    big = inputs.q_model.clone()
    big[..., :8] = torch.tensor([1e3, -1e3, 448.0, 500.0, -7e4, 2.0, 3e4, -3e4], dtype=big.dtype)
    view = kernel_view(dataclasses.replace(inputs, q_model=big), CAST)
    cast = view.q[..., :8] if mode == "decode" else view.q[..., inputs.d_v:inputs.d_v + 8]
    assert cast[0, 0, 0].tolist() == [448.0, -448.0, 448.0, 448.0, -448.0, 2.0, 448.0, -448.0]
    out, lse = expected(view)
    assert bool(torch.isfinite(out).all()) and bool(torch.isfinite(lse).all())

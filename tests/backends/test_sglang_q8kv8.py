"""SGLang's FP8 sparse prefill (harness/backends/sglang_q8kv8.py) on the CPU: the adapter builds the workspace
and index rows as SGLang does, and a stand-in that computes as the kernel's source reads (q and K in e4m3,
P cast to e4m3 before P.V, the denominator in float32) passes the V4 cases under the backend's declared
view and error model, while stand-ins with the wrong convention fail."""

import dataclasses
import math

import pytest
import torch

from harness.backends import builtin_class
from harness.backends.sglang_q8kv8 import MODULE, WIDTH, SGLangQ8KV8Backend, combined_indices, workspace
from harness.building.sparse_cache import as_e4m3
from harness.building.sparse_inputs import build
from harness.judging.sparse_oracle import expected
from harness.planning.cases import Case, validate_case
from harness.recording.status import Status
from harness.scenarios import sparse as scenario
from reference.sparse import sparse_attention

V4 = dict(id="sparse-v4/t/0", seed=5, scenario="sparse", topk=64, heads=16, batch_size=3, seqlen="list:40,200,90",
          d_qk=512, kv_format="v4", kv_scales="ue8m0", topk_length="random", extra_topk=64, extra_page_size=2,
          extra_seqlen="list:30,0,100", extra_topk_length="random", sink="random")


def v4_case(**kw) -> Case:
    """V4 with ``kw`` changed; a field given as None is left at its default."""
    return validate_case(Case(**{k: v for k, v in {**V4, **kw}.items() if v is not None}), "test")


def kernel(q, kv, indices, sm_scale, q_scale, kv_scale, d_v=512, attn_sink=None, topk_length=None, *,
           sink_in_lse=False, lengths_ignored=False):
    """``sparse_mla_q8kv8_prefill_fwd`` as its source reads, with its Python checks on the call's form."""
    s_q, h_q, _ = q.shape
    assert q.dtype == kv.dtype == torch.float8_e4m3fn and q.is_contiguous() and kv.is_contiguous()
    assert h_q % 64 == 0 and kv.shape[1] == 1 and indices.shape[:2] == (s_q, 1) and indices.shape[2] % 128 == 0
    assert indices.dtype == topk_length.dtype == torch.int32 and topk_length.shape == (s_q,)
    assert attn_sink is None or (attn_sink.shape == (h_q,) and attn_sink.dtype == torch.float32)
    assert float(q_scale) == float(kv_scale) == 1.0 and d_v == 512
    idx, s_kv = indices[:, 0].long(), kv.shape[0]
    at = torch.arange(idx.shape[1])
    valid = (idx >= 0) & (idx < s_kv) & (lengths_ignored or (at[None] < topk_length[:, None].long()))
    keys = kv[idx.clamp(0, s_kv - 1), 0].float()                                  # (s_q, topk, d)
    scores = torch.einsum("shd,std->sht", q.float(), keys) * sm_scale
    scores = scores.masked_fill(~valid[:, None], -math.inf)
    has = valid.any(1)[:, None]
    top = torch.where(has, scores.amax(-1), 0.0)
    p = torch.exp(scores - top[..., None])                                         # float32
    total = p.sum(-1)
    lse = torch.where(has, top + torch.log(total), math.inf)
    if attn_sink is not None:
        total = total + torch.exp(attn_sink[None] - top)
        if sink_in_lse:
            lse = torch.logaddexp(lse, attn_sink[None])
    out = torch.einsum("sht,std->shd", p.to(torch.float8_e4m3fn).float(), keys[..., :d_v]) / total[..., None]
    out = torch.where(has[..., None], out, 0.0)
    return out.to(torch.bfloat16), top, lse


class StandIn(SGLangQ8KV8Backend):
    """The adapter around ``kernel``, let run on the CPU (its declared limits still apply)."""

    name = "sglang-q8kv8-stand-in"
    flags = {}
    capabilities = dataclasses.replace(SGLangQ8KV8Backend.capabilities, devices=("cpu",), sparse=dataclasses.replace(
        SGLangQ8KV8Backend.capabilities.sparse, devices=("cpu",)))

    def unsupported_reason(self, case, device):
        return self.capabilities.sparse.reason_unsupported(case, device)

    def _load(self):
        fwd = lambda *args, **kw: kernel(*args, **kw, **self.flags)     # noqa: E731
        return {MODULE: type("Module", (), {"sparse_mla_q8kv8_prefill_fwd": staticmethod(fwd)})}


@pytest.mark.parametrize("fields", [
    {}, dict(mode="verify", draft_tokens=2, sink="inf", index_pattern="random", verify_rows="per_request"),
    dict(extra_topk=None, extra_page_size=None, extra_seqlen=None, extra_topk_length=None, heads=128, topk=192),
    # the last third of the requests with every entry -1 in both caches: LSE +inf, out zeros
    dict(batch_size=6, seqlen="list:40,200,90,7,300,64", extra_seqlen="list:30,0,100,5,60,9", sink="inf",
         index_pattern="padded", extra_index_pattern="padded"),
], ids=["decode-random-sink", "verify-inf-sinks", "main-cache-only-128-heads", "empty-rows"])
def test_a_kernel_computing_as_its_source_reads_passes_under_the_declared_model(fields):
    outcome = scenario.run(v4_case(**fields), StandIn(), "cpu")
    assert outcome.status is Status.PASS, (outcome.reason, outcome.messages[:2])
    assert outcome.metrics["sparse"]["valid_entries"] > 0


@pytest.mark.parametrize("flag, failing", [("sink_in_lse", "lse"), ("lengths_ignored", "out")])
def test_a_kernel_with_another_convention_fails(flag, failing):
    backend = StandIn()
    backend.flags = {flag: True}
    outcome = scenario.run(v4_case(), backend, "cpu")
    assert outcome.status is Status.FAIL and not outcome.metrics[failing]["passed"], outcome.metrics


@pytest.mark.parametrize("declared, failing", [(dict(tolerance="bf16"), "out"), (dict(kv_dequant="exact"), "lse")])
def test_the_declared_view_and_error_model_are_both_needed(declared, failing):
    class Declared(StandIn):
        capabilities = dataclasses.replace(StandIn.capabilities, sparse=dataclasses.replace(
            StandIn.capabilities.sparse, **declared))
    outcome = scenario.run(v4_case(heads=128, topk=512, seqlen="list:600,1000,900"), Declared(), "cpu")
    assert outcome.status is Status.FAIL and not outcome.metrics[failing]["passed"], outcome.metrics


def test_the_index_rows_are_sglangs_valid_entries_first_then_the_zero_row():
    inputs = build(v4_case(index_pattern="random"), "cpu").inputs
    kv, extra_rows = workspace(inputs)
    assert extra_rows == inputs.extra_kv_pool.shape[0] * inputs.extra_kv_pool.shape[1]
    assert kv.shape == (extra_rows + inputs.num_slots + 1, 1, 512) and kv.dtype == torch.float8_e4m3fn
    assert not kv[-1].float().any()                                           # the zero row, last
    rows, lengths = combined_indices(inputs, extra_rows, sentinel=kv.shape[0] - 1)
    assert rows.dtype == lengths.dtype == torch.int32 and rows.shape[1] % WIDTH == 0
    n, s_q = inputs.q.shape[:2]
    for r in range(n * s_q):
        b = r // s_q
        main = inputs.indices[b, r % s_q, :int(inputs.topk_length[b])]
        extra = inputs.extra_indices[b, r % s_q, :int(inputs.extra_topk_length[b])]
        want = [int(i) for i in extra if i >= 0] + [int(i) + extra_rows for i in main if i >= 0]
        assert int(lengths[r]) == len(want) and rows[r, :len(want)].tolist() == want
        assert (rows[r, len(want):] == kv.shape[0] - 1).all()


def test_the_e4m3_view_is_the_attention_over_the_workspace_sglang_builds():
    """The oracle's view (its listed records read, then cast) against float64 attention over the adapter's
    workspace (the whole pools dequantized, then cast) and index rows: two paths to the same keys."""
    inputs = build(v4_case(heads=8), "cpu").inputs
    scase = build(v4_case(heads=8), "cpu")
    kv, extra_rows = workspace(scase.inputs)
    rows, lengths = combined_indices(scase.inputs, extra_rows, sentinel=kv.shape[0] - 1)
    listed = torch.where(torch.arange(rows.shape[1])[None] < lengths[:, None], rows.long(), -1)
    n, s_q, heads, d = inputs.q.shape
    q = as_e4m3(inputs.q.reshape(n * s_q, heads, d)).double()
    out, lse = sparse_attention(q, kv[:, 0].double(), listed, inputs.softmax_scale, inputs.d_v, inputs.attn_sink)
    want_out, want_lse = expected(scase, "e4m3")
    assert torch.allclose(out.view(n, s_q, heads, -1), want_out, rtol=1e-12, atol=1e-12)
    assert torch.allclose(lse.view(n, s_q, heads).transpose(1, 2), want_lse, rtol=1e-12, atol=1e-12)
    exact_out, _ = expected(scase, "exact")
    assert (exact_out - want_out).abs().max() > 1e-3                    # the cast is not a no-op


def test_it_declares_the_fp8_model_and_the_v4_layout_sglang_asserts():
    sparse = builtin_class("sglang-q8kv8").capabilities.sparse
    assert (sparse.kv_dequant, sparse.tolerance, sparse.empty_row_lse) == ("e4m3", "fp8_e4m3", math.inf)
    assert sparse.conventions()["tolerance"] == "fp8_e4m3"
    reason = SGLangQ8KV8Backend().unsupported_reason(validate_case(Case(id="s/t/0", seed=1, scenario="sparse",
                                                                        topk=128, heads=16), "test"), "cuda")
    assert "KVLayout.V4" in reason
    assert "sparse scenario only" in SGLangQ8KV8Backend().unsupported_reason(Case(id="d/t/0", seed=1), "cuda")
    assert "at most 128 local query heads" in sparse.reason_unsupported(v4_case(heads=129), "cuda")
    assert sparse.reason_unsupported(v4_case(heads=128), "cuda") is None


def _real_kernel_reason() -> str | None:
    return SGLangQ8KV8Backend().unsupported_reason(v4_case(), "cuda")


@pytest.mark.skipif(_real_kernel_reason() is not None, reason=f"the real kernel: {_real_kernel_reason()}")
def test_the_real_kernel_passes_a_v4_case_with_both_caches():
    outcome = scenario.run(v4_case(heads=64, topk=128), SGLangQ8KV8Backend(), "cuda")
    assert outcome.status is Status.PASS, (outcome.reason, outcome.messages[:2])

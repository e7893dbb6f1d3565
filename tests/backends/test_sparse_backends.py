"""The sparse kernel adapters' plumbing on the CPU: each is given a stand-in for its package that checks
the call's form (SGLang's head padding, shapes, flags) and answers with float64 attention, so the
adapter's padding, sink padding and slicing are checked against the oracle without a GPU."""

import math
from types import SimpleNamespace

import torch

from harness.backends import BUILTIN, Feature, builtin_class
from harness.backends.flashmla_sparse import FlashMLASparseBackend
from harness.backends.sparse_prefill import FlagGemsSparseBackend, FlashMLASparsePrefillBackend, bf16_kv
from harness.building.sparse_cache import dequantize, read_records
from harness.building.sparse_inputs import build
from harness.judging.compare import check_tensor
from harness.judging.sparse_oracle import expected
from harness.judging.tolerances import TOLERANCES
from harness.planning.cases import Case, validate_case
from reference.sparse import sparse_attention


def built(**kw):
    fields = dict(id="sparse/t/0", seed=4, scenario="sparse", topk=128, heads=16, batch_size=3,
                  seqlen="uniform:0:300", sink="inf")
    return build(validate_case(Case(**{**fields, **kw}), "test"), "cpu")


def attend(q, keys, indices, scale, d_v, sink):
    out, lse = sparse_attention(q.double(), keys.double(), indices, scale, d_v, sink)
    return out.to(torch.bfloat16), lse.float()


def assert_matches_oracle(scase, out, lse):
    exp_out, exp_lse = expected(scase, "bf16_product")
    tol = TOLERANCES["bf16"]
    assert check_tensor("out", out, exp_out, tol.out, expected_dtype=torch.bfloat16).passed
    assert check_tensor("lse", lse, exp_lse, tol.lse, expected_dtype=torch.float32).passed


class FakeFlashMLA:
    """``flash_mla``'s sparse decode, as the adapter must call it."""

    def __init__(self):
        self.calls = []

    def get_mla_decoding_metadata(self, seqlens, q_tokens, h_k, h_q, is_fp8_kvcache, topk, use_legacy):
        self.calls.append(("meta", q_tokens, h_k, h_q, is_fp8_kvcache, topk, use_legacy))
        return torch.zeros(1, 8, dtype=torch.int32), torch.zeros(seqlens.shape[0] + 1, dtype=torch.int32)

    def get_mla_metadata(self):
        return SimpleNamespace(tile_scheduler_metadata=None, num_splits=None), None

    def flash_mla_with_kvcache(self, q, k_cache, block_table, cache_seqlens, d_v, sched, num_splits, *,
                               softmax_scale, causal, is_fp8_kvcache, indices, attn_sink, use_legacy):
        n, s_q, h, _ = q.shape
        assert h in (64, 128) and block_table.shape == (n, 0) and num_splits is None
        assert sched.tile_scheduler_metadata is not None and not causal and is_fp8_kvcache and use_legacy
        assert attn_sink is None or attn_sink.shape == (h,)
        from harness.building.sparse_cache import FORMATS
        pool = k_cache.view(k_cache.shape[0], -1)
        slots = torch.arange(pool.shape[0] * k_cache.shape[1])
        keys = dequantize(read_records(pool, slots, FORMATS["v32"], k_cache.shape[1]), FORMATS["v32"], "bf16_product")
        out, lse = attend(q.reshape(n * s_q, h, -1), keys, indices.reshape(n * s_q, -1), softmax_scale, d_v,
                          attn_sink)
        return out.view(n, s_q, h, d_v), lse.view(n, s_q, h).transpose(1, 2)


def test_flashmla_sparse_pads_heads_as_sglang_and_slices_them_back():
    scase = built()
    backend = FlashMLASparseBackend()
    backend.m = fake = FakeFlashMLA()
    out, lse = backend.run_sparse(scase.inputs)
    assert fake.calls == [("meta", 64, 1, 64, True, 128, True)]
    assert out.shape == (3, 1, 16, 512) and lse.shape == (3, 16, 1)
    assert_matches_oracle(scase, out, lse)


def test_flashmla_sparse_leaves_128_heads_unpadded():
    scase = built(heads=128, sink="none")
    backend = FlashMLASparseBackend()
    backend.m = fake = FakeFlashMLA()
    out, lse = backend.run_sparse(scase.inputs)
    assert fake.calls[0][3] == 128
    assert_matches_oracle(scase, out, lse)


def fake_prefill(q, kv, indices, sm_scale, d_v, sink, **flags):
    assert q.shape[1] in (64, 128) and kv.dtype == torch.bfloat16 and indices.shape[1] == 1
    out, lse = attend(q, kv[:, 0], indices[:, 0], sm_scale, d_v, sink)
    return out, None, lse


def test_prefill_forms_take_the_pool_as_a_flat_bf16_kv():
    scase = built(mode="verify", draft_tokens=2, sink="random")
    kv = bf16_kv(scase.inputs)
    assert kv.shape == (scase.inputs.num_slots, 1, 576)
    assert torch.isnan(kv[0].float()).all()                  # slot 0: reserved, poisoned
    for cls in (FlashMLASparsePrefillBackend, FlagGemsSparseBackend):
        backend = cls()
        backend.kernel = lambda: fake_prefill
        out, lse = backend.run_sparse(scase.inputs)
        assert out.shape == (6, 1, 16, 512) and lse.shape == (6, 16, 1)
        assert_matches_oracle(scase, out, lse)


def test_the_sink_for_a_padded_head_is_no_sink():
    scase = built(sink="random")
    seen = {}
    backend = FlashMLASparsePrefillBackend()

    def spy(q, kv, indices, sm_scale, d_v, sink):
        seen["sink"] = sink
        return fake_prefill(q, kv, indices, sm_scale, d_v, sink)
    backend.kernel = lambda: spy
    backend.run_sparse(scase.inputs)
    assert seen["sink"].shape == (64,)
    assert torch.equal(seen["sink"][:16], scase.inputs.attn_sink)
    assert all(v == -math.inf for v in seen["sink"][16:].tolist())


def test_list_shows_each_sparse_backend_with_its_sparse_capabilities(capsys):
    from harness.cli import main
    assert main(["list", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in BUILTIN:
        at = next(i for i, line in enumerate(lines) if line.strip().startswith(name + " "))
        below = []                            # its own lines, indented below its name
        for line in lines[at + 1:]:
            if not line.startswith(" " * 20):
                break
            below.append(line)
        sparse = [line for line in below if line.strip().startswith("sparse {")]
        if Feature.SPARSE not in builtin_class(name).features:
            assert not sparse, (name, below)
            continue
        assert '"kv_formats"' in sparse[0] and '"index_format": "token_slots"' in sparse[0], (name, sparse)

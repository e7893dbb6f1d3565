"""cases/flashmla-sparse-upstream.toml is FlashMLA's sparse-decoding matrix, as its generator writes it."""

import importlib.util
from collections import Counter
from pathlib import Path

from harness.planning.cases import load_suite

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_sparse", ROOT / "scripts" / "gen_sparse_upstream_suite.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_suite_is_what_the_generator_writes(tmp_path, monkeypatch):
    gen = _generator()
    monkeypatch.setattr(gen, "__file__", str(tmp_path / "scripts" / "gen.py"))
    (tmp_path / "cases").mkdir()
    gen.main()
    written = (tmp_path / "cases" / "flashmla-sparse-upstream.toml").read_text()
    assert written == (ROOT / "cases" / "flashmla-sparse-upstream.toml").read_text()


def test_the_matrix_has_upstreams_counts():
    cases = load_suite("flashmla-sparse-upstream").cases
    by_dim = Counter(c.d_qk for c in cases)
    assert len(cases) == 4748 and by_dim == {576: 246, 512: 4502}       # the count, from upstream
    assert {c.kv_format for c in cases if c.d_qk == 512} == {"v4"}
    assert {c.page_size for c in cases} == {2, 53, 61, 64, 69, 256, 576}
    assert {c.topk for c in cases} == {64, 128, 576, 2048, 16384}
    assert {c.heads for c in cases} == {64, 128} and {c.batch_size for c in cases} >= {4, 74, 321}
    assert {c.s_q for c in cases} == {1, 2, 3}
    assert {c.sink for c in cases} == {"inf", "none"}
    assert sum(c.index_pattern == "invalid" for c in cases) > 0
    assert len({c.id for c in cases}) == len(cases) and len({c.seed for c in cases}) == len(cases)


def _case(**kw):
    from harness.planning.cases import Case, validate_case
    fields = dict(id="sparse/t/0", seed=5, scenario="sparse", topk=64, heads=16, batch_size=4,
                  seqlen="list:0,30,64,500", index_pattern="batched")
    return validate_case(Case(**{**fields, **kw}), "test")


def test_batched_indices_are_distinct_positions_each_row_sees_and_reproducible():
    import torch

    from harness.building.sparse_inputs import build
    case = _case(mode="verify", draft_tokens=2, verify_rows="per_request")
    first, again = build(case, "cpu"), build(case, "cpu")
    assert torch.equal(first.inputs.indices, again.inputs.indices)
    r2t = first.inputs.req_to_token
    for row, seen in enumerate(first.seen):
        req, token = divmod(row, 2)
        listed = first.inputs.indices[req, token]
        valid = listed[listed >= 0]
        assert len(valid) == min(seen, case.topk) and len(set(valid.tolist())) == len(valid)
        assert bool((listed[len(valid):] == -1).all())                   # -1 only as a tail
        pool_row = int((r2t == valid[0]).nonzero()[0, 0]) if len(valid) else 0
        assert set(valid.tolist()) <= set(r2t[pool_row, :seen].tolist())


def test_the_views_share_one_oracle_answer_only_where_their_keys_are_equal():
    from harness.building.sparse_inputs import build
    from harness.judging.sparse_oracle import expected_views
    ue8m0 = expected_views(build(_case(kv_scales="ue8m0"), "cpu"), ("bf16_product", "exact"))
    assert ue8m0["exact"] is ue8m0["bf16_product"]
    # V4's ue8m0 scale bytes, with -1 tails (requests of 0 and 30 tokens, topk 64): the -1 entries' zeroed
    # records do not count (a zero byte is 2^-127 as e8m0)
    v4 = expected_views(build(_case(kv_scales="ue8m0", kv_format="v4", d_qk=512), "cpu"), ("bf16_product", "exact"))
    assert v4["exact"] is v4["bf16_product"]
    amax = expected_views(build(_case(kv_scales="amax"), "cpu"), ("bf16_product", "exact"))
    assert amax["exact"] is not amax["bf16_product"]
    assert not (amax["exact"][1].nan_to_num() == amax["bf16_product"][1].nan_to_num()).all()

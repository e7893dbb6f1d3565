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


def test_the_extra_cache_and_lengths_are_upstreams_not_dropped():
    cases = load_suite("flashmla-sparse-upstream").cases
    extra = [c for c in cases if c.extra_topk]
    # upstream's loops: 8 x 8 (correctness) and 2 x 2 (corner) triples per length flag, and CONFIG1-4
    assert len(extra) == 4080 and {c.d_qk for c in extra} == {512}
    assert sum(c.topk_length == "random" for c in cases) == 2052
    assert sum(c.extra_topk_length == "random" for c in cases) == 1884
    assert {c.topk_length for c in cases} | {c.extra_topk_length for c in cases} == {"none", "random"}
    assert {c.extra_page_size for c in extra} == {2, 53, 61, 64, 69, 576}
    assert {c.extra_topk for c in extra} == {64, 512, 576, 1024, 2048}
    assert {c.extra_kv_format for c in extra} == {""}                 # the main cache's v4
    assert all(c.extra_index_pattern == ("invalid" if c.index_pattern == "invalid" else "batched")
               for c in extra)                                         # all-invalid covers both scopes
    assert not any("dropped" in c.id for c in cases)
    assert "not expressible" not in load_suite("flashmla-sparse-upstream").description


def test_a_zero_length_corner_empties_different_requests_in_each_scope():
    from harness.planning.case_lengths import draw_seq_lens, extra_entries
    cases = load_suite("flashmla-sparse-upstream").cases
    corner = next(c for c in cases if "-zero" in c.id and c.extra_topk and c.batch_size == 4)
    main_empty = [n == 0 for n in draw_seq_lens(corner)]
    extra_empty = [n == 0 for n in extra_entries(corner, draw_seq_lens(corner))]
    assert any(main_empty) and any(extra_empty) and main_empty != extra_empty


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


def test_a_v4_upstream_case_with_both_lengths_passes_the_torch_backend():
    from harness.building.sparse_inputs import build
    from harness.recording.status import Status
    from harness.running.backend_loader import load_backend
    from harness.scenarios import sparse
    case = _case(d_qk=512, kv_format="v4", kv_scales="ue8m0", heads=64, seqlen="normal:512:256",
                 seqlen_is_cache=True, mode="verify", draft_tokens=3, verify_rows="per_request", sink="inf",
                 softmax_scale=512 ** -0.55, topk_length="random", extra_topk=64, extra_page_size=69,
                 extra_seqlen="normal:512:256", extra_index_pattern="batched", extra_topk_length="random")
    inputs = build(case, "cpu").inputs
    for lengths in (inputs.topk_length, inputs.extra_topk_length):      # every row cut short: NaN slots past it
        assert lengths.shape == (4,) and 0 <= int(lengths.min()) and int(lengths.max()) < 64
    assert inputs.extra_indices.shape == (4, 3, 64) and int(inputs.extra_indices.max()) >= 0
    outcome = sparse.run(case, load_backend("torch"), "cpu")
    assert outcome.status is Status.PASS, outcome.messages
    assert outcome.metrics["sparse"]["extra"]["valid_entries"] > 0

"""DeepSeek V4 in ``mla-verify fuzz``: per-row lengths on V4 cases, an extra cache on some, and shrinking
that simplifies them.

- the draw: one seed, one sequence of V4 fields; V3.2 cases carry none (FlashMLA refuses them there); a
  share of the sparse cases has an extra cache, whose values reach the space sparse-v4 and upstream use,
  within the campaign's bounds, and every drawn case is valid;
- shrinking, against a stand-in rerun: an extra cache the failure does not need is dropped (every extra
  field back to its default), a width it needs stays a multiple of 64, and every candidate is valid.
"""

import dataclasses

import pytest

from harness.building.sparse_inputs import estimated_bytes
from harness.fuzz import candidates, corpus
from harness.fuzz.draw import draw_case
from harness.fuzz.shrink import shrink
from harness.fuzz.space import Bounds
from harness.planning.case import CASE_DEFAULTS, EXTRA_FIELDS, INDEX_PATTERNS, LENGTHS
from harness.planning.case_lengths import cache_seqlens_for, draw_seq_lens, extra_entries
from harness.planning.cases import validate_case

FAIL = {"status": "fail", "failed_checks": ["out.element"]}


def sparse_draws(seed: int, count: int = 300, bounds: Bounds | None = None) -> list:
    return [draw_case(seed, i, bounds or Bounds(), dense=False) for i in range(count)]


def v4_fields(case) -> tuple:
    return tuple(getattr(case, f) for f in ("topk_length", *EXTRA_FIELDS))


def entries_of(case) -> list[int]:
    return extra_entries(case, cache_seqlens_for(case, draw_seq_lens(case)))


@pytest.fixture(scope="module")
def draws():
    return sparse_draws(21)


def test_one_seed_draws_one_sequence_of_v4_fields_and_another_seed_another(draws):
    again, other = sparse_draws(21, 120), sparse_draws(22, 120)
    assert again == draws[:120] and draw_case(21, 77, dense=False) == draws[77]
    with_extra = [a for a in again if a.extra_topk]
    assert len(with_extra) >= 10
    assert [v4_fields(a) for a in again] != [v4_fields(o) for o in other]


def test_a_share_of_sparse_draws_carries_an_extra_cache_and_only_v4_ones(draws):
    v4 = [c for c in draws if c.kv_format == "v4"]
    extra = [c for c in v4 if c.extra_topk]
    assert 0.1 <= len(extra) / len(draws) <= 0.35, (len(extra), len(draws))
    assert 0.3 <= len(extra) / len(v4) <= 0.7
    for c in draws:
        if c.kv_format != "v4":            # V3.2 on FlashMLA: "does not support extra KV cache"
            assert v4_fields(c) == tuple(CASE_DEFAULTS[f] for f in ("topk_length", *EXTRA_FIELDS)), c
    assert {c.topk_length for c in v4} == set(LENGTHS)
    assert any(c.topk_length != "none" for c in v4 if not c.extra_topk)


def test_the_extra_cache_reaches_the_values_the_suites_and_upstream_use(draws):
    extra = [c for c in draws if c.extra_topk]
    assert all(c.extra_topk % 64 == 0 for c in extra)
    assert {64, 128, 512, 1024} < {c.extra_topk for c in extra}
    assert {c.extra_page_size for c in extra} == {2, 53, 61, 64, 69, 256, 576}
    pages = [c.extra_page_size for c in extra]
    assert pages.count(64) > pages.count(53) and pages.count(2) > pages.count(69)
    specs = {c.extra_seqlen.split(":")[0] if not c.extra_seqlen.startswith("ratio") else c.extra_seqlen
             for c in extra}
    assert {"ratio:4", "ratio:128", "uniform", "equal", "list"} <= specs
    assert {c.extra_index_pattern for c in extra} == set(INDEX_PATTERNS)
    assert {c.extra_topk_length for c in extra} == set(LENGTHS)
    assert all(c.extra_kv_format == "" for c in extra)


def test_every_drawn_v4_case_is_valid_within_its_bounds_and_sized_with_its_extra_cache():
    bounds = Bounds(max_batch=5, max_context=300)
    extra = [c for c in sparse_draws(23, 200, bounds) if c.extra_topk]
    assert len(extra) >= 20
    for c in extra:
        assert validate_case(c, "drawn") == c
        assert c.extra_topk <= 300 and max(entries_of(c)) <= bounds.max_context
        without = dataclasses.replace(c, **{f: CASE_DEFAULTS[f] for f in EXTRA_FIELDS})
        if max(entries_of(c)):
            assert estimated_bytes(c)["records"] > estimated_bytes(without)["records"], c


def test_explicit_lengths_write_the_extra_entries_out_whatever_the_seed(draws):
    own = [c for c in draws if c.extra_topk and not c.extra_seqlen.startswith("ratio")]
    ratio = [c for c in draws if c.extra_seqlen.startswith("ratio")]
    assert own and ratio
    for c in own + ratio:
        written = corpus.suite_case(candidates.explicit(c), ("fail", "out", "bound", ""), 5)
        assert written.seed != c.seed and entries_of(written) == entries_of(c)
        assert written.extra_seqlen == c.extra_seqlen or c in own


def test_every_candidate_of_an_extra_cache_case_is_valid_and_keeps_its_requests_entries(draws):
    for c in (candidates.explicit(c) for c in draws[:150] if c.extra_topk):
        for name, step in candidates.STEPS:
            for small in step(c):
                assert validate_case(small, name) == small
                if small.extra_topk and not small.extra_seqlen.startswith("ratio"):
                    assert len(entries_of(small)) == small.batch_size
                    assert max(entries_of(small)) <= max(entries_of(c))
        dropped = candidates.changed(c, extra_topk=0, **{f: CASE_DEFAULTS[f] for f in EXTRA_FIELDS[1:]})
        assert dropped in candidates.simpler_extra(c)


def stand_in(needs):
    return lambda cases: [FAIL if needs(c) else {"status": "pass"} for c in cases]


def extra_case(draws, ratio: bool):
    return next(c for c in draws if c.extra_topk >= 256 and c.batch_size >= 3 and c.extra_seqlen.startswith("ratio")
                == ratio and c.topk_length != "none" and max(draw_seq_lens(c)) >= 40 and c.extra_topk_length != "none"
                and max(entries_of(c)) >= 4)


@pytest.mark.parametrize("ratio", [True, False])
def test_an_extra_cache_the_failure_does_not_need_is_shrunk_away(draws, ratio):
    case = extra_case(draws, ratio)
    out = shrink(case, FAIL, stand_in(lambda c: c.kv_format == "v4" and c.heads >= 2))
    small = out.case
    assert small.extra_topk == 0 and v4_fields(small) == tuple(CASE_DEFAULTS[f] for f in ("topk_length",
                                                                                          *EXTRA_FIELDS))
    assert (small.batch_size, small.heads, small.kv_format) == (1, 2, "v4")
    assert validate_case(small, "shrunk") == small and {"extra", "defaults"} & set(out.steps)


@pytest.mark.parametrize("ratio", [True, False])
def test_an_extra_cache_the_failure_needs_keeps_what_it_needs_and_no_more(draws, ratio):
    case = extra_case(draws, ratio)
    out = shrink(case, FAIL, stand_in(lambda c: c.extra_topk >= 100 and sum(entries_of(c)) >= 3))
    small = out.case
    assert small.extra_topk == 128 and small.kv_format == "v4"       # a multiple of 64, as the case's width
    assert sum(entries_of(small)) == 3 and small.batch_size == 1
    assert (small.topk_length, small.extra_topk_length) == ("none", "none")
    assert validate_case(small, "shrunk") == small and "extra" in out.steps

"""Serving scale: spread pools, shared prefixes, large batches, and the fit check.

The real scale suite needs a GPU; here its code paths run on small stand-ins:
a pool past 2^16 pages with narrow tokens, shared prefixes and a batch of 256
with short requests, all against the float64 oracle.  Allocation at the full
2^17-page size is checked without building the pool.
"""

import dataclasses
from pathlib import Path

import pytest
import torch

from harness.building import inputs as inputs_mod
from harness.building.inputs import generate, pinned_pages_for, shared_pages_for
from harness.building.pool import PageLayout, allocate, boundary_pages, validate_block_table, validate_req_to_token
from harness.errors import InputError
from harness.planning.cases import Case, load_suite, parse_suite
from harness.running import resources, runner
from harness.running.backend_loader import load_backend
from reference import mla_attention_batched, mla_attention_loop

DEEPSEEK_PAGE = 64 * 576          # elements in one page of DeepSeek's cache (h_kv 1)
WRAP_PAGES = (1 << 16, 58_255, 116_509, 1 << 17)   # ids at and past which 16-bit / int32 / uint32 wrap

STANDINS = parse_suite({
    "suite": {"seed": 5},
    "defaults": {"heads": 16, "draft_tokens": 3},
    "group": [
        # 2^16 + 64 pages; 16-wide tokens keep the pool at 134 MB instead of 4.8 GB
        {"name": "spread-pool", "mode": ["decode", "verify"], "batch_size": 8, "d_qk": 16, "d_v": 8,
         "seqlen": "uniform:1:400", "pool_pages": 65600},
        {"name": "prefix", "mode": ["decode", "verify"], "dtype": ["bf16", "fp8_e4m3"], "batch_size": 12,
         "seqlen": "uniform:150:700", "shared_prefix": 256},
        {"name": "large-batch", "mode": ["decode", "verify"], "dtype": ["bf16", "fp8_e4m3"], "batch_size": 256,
         "heads": 8, "seqlen": "longtail:1:150"},
    ],
}, Path("scale-standins.toml"))


def standin(case_id: str) -> Case:
    return next(c for c in STANDINS.cases if c.id == case_id)


# ---- allocation at full scale, without a pool ---------------------------------------------------

def test_boundary_pages_of_deepseek_pages_are_the_wrap_points():
    pages = boundary_pages(135_168, DEEPSEEK_PAGE)
    assert {58_254, 58_255, 116_508, 116_509, 65_535, 65_536, 131_071, 131_072, 135_167} <= set(pages)
    assert all(1 <= p < 135_168 for p in pages) and pages == sorted(pages, reverse=True)
    assert boundary_pages(1000, DEEPSEEK_PAGE) == [999]     # a small pool has only its last page


def test_spread_allocation_puts_live_pages_past_every_wrap_point():
    gen = torch.Generator().manual_seed(3)
    pool_pages = (1 << 17) + 4096
    layout = allocate([100] * 40, 64, 0, gen, pool_pages=pool_pages,
                      pinned_pages=boundary_pages(pool_pages, DEEPSEEK_PAGE))
    used = layout.used_pages.long()
    assert layout.num_pages == pool_pages
    assert len(used) == 80 and len(set(used.tolist())) == 80 and int(used.min()) >= 1   # page 0 reserved
    for wrap in WRAP_PAGES:
        assert int((used >= wrap).sum()) >= 1, wrap
    assert int(used.max()) == pool_pages - 1
    quarters = torch.bincount(used * 4 // pool_pages, minlength=4)
    assert bool((quarters >= 5).all()), quarters       # spread over the whole range, not bunched
    validate_req_to_token(layout)
    validate_block_table(layout.block_table, layout.cache_seqlens, layout.num_pages, 64)
    table_pages = layout.block_table[layout.block_table >= 0].long()
    assert set(table_pages.tolist()) == set(used.tolist())


def test_scale_suite_pool_cases_reach_page_ids_past_131072():
    pool_cases = [c for c in load_suite("scale").cases if c.pool_pages]
    assert {c.dtype for c in pool_cases} == {"bf16", "fp8_e4m3"}
    for case in pool_cases:
        cache = inputs_mod.cache_seqlens_for(case, inputs_mod.draw_seq_lens(case))
        layout = allocate(cache, case.page_size, case.extra_pages, torch.Generator().manual_seed(case.seed + 1),
                          pool_pages=case.pool_pages, pinned_pages=pinned_pages_for(case))
        ids = layout.block_table[layout.block_table >= 0]
        assert int(ids.max()) > 131_072 and case.pool_pages > 1 << 17
        for wrap in WRAP_PAGES:
            assert bool((ids >= wrap).any()), (case.id, wrap)


def test_scale_suite_meets_the_issue():
    cases = load_suite("scale").cases
    for dtype in ("bf16", "fp8_e4m3"):
        mine = [c for c in cases if c.dtype == dtype]
        assert max(c.batch_size for c in mine) >= 256
        assert max(c.max_cache_seqlen() for c in mine) >= 163_840
        assert max(c.pool_pages for c in mine) > 1 << 17
        assert any(c.shared_prefix for c in mine)
        assert {c.mode for c in mine} == {"decode", "verify"}
    assert {c.batch_size for c in cases if c.group == "batch"} == {64, 128, 256, 512}
    assert {c.heads for c in cases if c.group == "batch"} == {16, 8}


def test_too_small_pool_is_refused_by_the_allocator():
    with pytest.raises(InputError, match="cannot hold"):
        allocate([640, 640], 64, 0, torch.Generator().manual_seed(0), pool_pages=20)


# ---- shared prefixes ----------------------------------------------------------------------------

def test_shared_prefix_requests_share_physical_pages_and_pass_the_gate():
    case = standin("scale-standins/prefix/0")
    inp = generate(case)
    cache = inp.cache_seqlens.tolist()
    shared = shared_pages_for(case, cache)
    assert max(shared) == 4 and sum(s > 0 for s in shared) >= 2
    table = inp.block_table
    first = table[shared.index(max(shared)), :4]
    for r, k in enumerate(shared):
        assert torch.equal(table[r, :k], first[:k])               # same physical pages
        own = table[r, k:(cache[r] + 63) // 64]
        assert not bool(torch.isin(own, first).any())             # suffixes on their own pages
    # the gate allows shared pages; the pool holds the prefix once
    validate_block_table(table, inp.cache_seqlens, inp.kv_pool.shape[0], 64)
    validate_req_to_token(PageLayout(64, inp.num_pages, inp.req_to_token, inp.req_pool_indices, table,
                                     inp.cache_seqlens, used_pages=None))
    assert inp.num_pages == 1 + 4 + sum(-(-n // 64) - k for n, k in zip(cache, shared)) + case.extra_pages


@pytest.mark.parametrize("case_id, expected", [("scale-standins/prefix/1", [3, 4, 4, 1]),    # decode
                                               ("scale-standins/prefix/3", [4, 4, 4, 1])])   # verify, 3 drafts
def test_shared_pages_never_hold_the_tokens_this_step_writes(case_id, expected):
    case = dataclasses.replace(standin(case_id), batch_size=4, seqlen="list:256,257,320,100")
    cache = inputs_mod.cache_seqlens_for(case, inputs_mod.draw_seq_lens(case))
    shared = shared_pages_for(case, cache)
    for n, k in zip(cache, shared):
        assert k * 64 <= n - case.s_q          # the decode token / the drafts are on the request's own pages
    assert shared == expected


# ---- stand-ins against the oracle ---------------------------------------------------------------

@pytest.mark.parametrize("case_id", [c.id for c in STANDINS.cases])
def test_standin_passes_on_the_torch_backend(case_id):
    case = standin(case_id)
    row = runner.run_case(case, load_backend("torch"), "torch", "cpu")
    assert row["status"] == "pass", (case_id, row.get("reason"), row.get("messages"))


def test_spread_standin_reads_pages_past_65535():
    inp = generate(standin("scale-standins/spread-pool/0"))
    ids = inp.block_table[inp.block_table >= 0]
    assert int(ids.max()) == 65_599 and bool(((ids >= 65_536)).any())


@pytest.mark.parametrize("case_id, status", [("scale-standins/spread-pool/0", "fail"),
                                             ("scale-standins/prefix/0", "pass")])
def test_page_id_16bit_mutant_dies_only_where_ids_pass_65535(case_id, status):
    row = runner.run_case(standin(case_id), load_backend("mutant:page_id_16bit"), "mutant:page_id_16bit", "cpu")
    assert row["status"] == status, row.get("reason")


def test_batched_oracle_equals_the_loop_on_shared_spread_pages():
    case = dataclasses.replace(standin("scale-standins/spread-pool/1"), shared_prefix=128,
                               seqlen="list:300,5,129,257,64,400,1,200")
    inp = generate(case)
    args = (inp.q, inp.kv_pool, inp.block_table, inp.cache_seqlens, case.softmax_scale, case.d_v)
    loop_out, loop_lse = mla_attention_loop(*args)
    for max_elements in (2**28, 5000):               # one chunk; many, each sorted by length
        out, lse = mla_attention_batched(*args, max_elements=max_elements)
        torch.testing.assert_close(out, loop_out, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(lse, loop_lse, rtol=1e-12, atol=1e-12)


# ---- the fit check ------------------------------------------------------------------------------

def test_oversized_case_is_unsupported_with_numbers_before_anything_is_built(monkeypatch):
    case = next(c for c in load_suite("scale").cases if c.id == "scale/pool/1")

    def no_build(*a, **k):
        raise AssertionError("inputs were built for a case that does not fit")
    monkeypatch.setattr("harness.scenarios._common.generate", no_build)
    monkeypatch.setattr(resources, "available_bytes", lambda device: (8 << 30, "8.0 GiB given"))
    row = runner.run_case(case, load_backend("torch"), "torch", "cpu")
    assert row["status"] == "unsupported"
    assert "too large for this machine" in row["reason"] and "GiB budget" in row["reason"]
    assert "pools 13.9" in row["reason"]         # 135,168 pages x 64 x 576: 1 byte fp8 + 2 bytes bf16


def test_fit_check_follows_the_budget():
    case = standin("scale-standins/prefix/2")
    need = resources.estimated_bytes(case)["total"]
    assert resources.too_large_reason(case, "cpu", available=4 * need) is None
    assert "too large" in resources.too_large_reason(case, "cpu", available=need)   # 50% of it is short
    assert "CPU run" in resources.too_large_reason(case, "cpu", available=4 * need, cpu_max_kv_elements=1000)
    assert resources.too_large_reason(case, "cuda", available=4 * need, cpu_max_kv_elements=1000) is None


@pytest.mark.parametrize("case_id", ["scale-standins/prefix/1", "scale-standins/spread-pool/0"])
def test_estimated_pool_bytes_are_what_generate_allocates(case_id):
    case = standin(case_id)
    inp = generate(case)
    built = inp.kv_pool.nbytes + (inp.kv_pool_model.nbytes if inp.kv_pool_model is not None else 0)
    assert resources.estimated_bytes(case)["pools"] == built


def test_estimated_view_bytes_are_what_the_widened_verify_view_allocates():
    """SGLang's Triton kernels meet fp8 verify drafts at model precision, so their oracle reads a widened
    float64 view of the pages in use (``conventions``): on the H200 it was most of a batch of 512's memory."""
    from harness.backends.base import Capabilities
    from harness.judging.conventions import kernel_view
    case = dataclasses.replace(standin("scale-standins/prefix/1"), mode="verify", draft_tokens=3, dtype="fp8_e4m3")
    cast = Capabilities(fp8_q="cast_in_kernel")
    view = kernel_view(generate(case), cast)
    assert resources.estimated_bytes(case, cast)["view"] == view.kv_pool.nbytes + view.kv_pool_model.nbytes
    for others in (None, Capabilities(fp8_q="quantized_k_scale"), Capabilities(fp8_q="model_dtype")):
        assert resources.estimated_bytes(case, others)["view"] == 0
    assert resources.estimated_bytes(dataclasses.replace(case, dtype="bf16"), cast)["view"] == 0
    assert resources.chunk_bytes([case], cast) > resources.chunk_bytes([case]) + view.kv_pool.nbytes


def test_poisoned_pool_is_nan_in_every_dtype():
    for dtype in inputs_mod.TORCH_DTYPES.values():
        assert bool(inputs_mod.poisoned((3, 5), dtype, "cpu").float().isnan().all()), dtype

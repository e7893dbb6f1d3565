"""DeepSeek V4's two caches in one softmax: the harness's oracle over two pools of records equals the reference's
attention over the two pools joined into one, and that equals the LSE merge of the two caches attended apart
(reference/merge.py), so one softmax over both is what the oracle computes."""

import math

import torch
from hypothesis import given
from hypothesis import strategies as st

from harness.building.sparse_cache import dequantize, read_records
from harness.building.sparse_inputs import build
from harness.judging.sparse_oracle import expected
from harness.planning.cases import Case, validate_case
from reference.merge import merge_attention
from reference.sparse import counted, joined, sparse_attention


def _pool_keys(pool: torch.Tensor, fmt, page_size: int) -> torch.Tensor:
    """Every slot's key of a pool ``(pages, page_size, 1, bytes)``, float64, in the exact view (the poisoned
    ones NaN: no valid entry may reach them)."""
    flat = pool.reshape(pool.shape[0], -1)
    slots = torch.arange(pool.shape[0] * page_size)
    return dequantize(read_records(flat, slots, fmt, page_size), fmt, "exact")


def _flat(indices: torch.Tensor, lengths) -> torch.Tensor:
    return counted(indices, lengths).reshape(-1, indices.shape[-1])


@given(seed=st.integers(0, 2**16), lengths=st.sampled_from(["none", "random", "listed"]),
       extra_page=st.sampled_from([2, 5, 64]), pattern=st.sampled_from(["random", "window", "holes", "invalid"]),
       sink=st.sampled_from(["none", "inf"]), drafts=st.sampled_from([1, 2]))
def test_the_oracle_over_two_pools_is_attention_over_them_joined(seed, lengths, extra_page, pattern, sink, drafts):
    case = validate_case(Case(
        id="t/two-pools/0", seed=seed, scenario="sparse", topk=64, heads=4, batch_size=3, seqlen="uniform:0:150",
        d_qk=512, kv_format="v4", kv_scales="ue8m0", sink=sink, topk_length=lengths, extra_topk=64,
        extra_page_size=extra_page, extra_seqlen="uniform:0:120", extra_index_pattern=pattern,
        extra_topk_length=lengths, mode="verify" if drafts > 1 else "decode", draft_tokens=drafts,
        verify_rows="per_request"), "test")
    i = build(case, "cpu").inputs
    n, s_q, heads, d = i.q.shape
    keys, listed = joined(_pool_keys(i.kv_pool, i.fmt, i.page_size), _flat(i.indices, i.topk_length),
                          _pool_keys(i.extra_kv_pool, i.extra_fmt, i.extra_page_size),
                          _flat(i.extra_indices, i.extra_topk_length))
    out, lse = sparse_attention(i.q.reshape(n * s_q, heads, d), keys, listed, i.softmax_scale, i.d_v, i.attn_sink)
    want_out, want_lse = expected(build(case, "cpu"), "exact")
    assert torch.allclose(want_out.reshape(n * s_q, heads, -1), out, rtol=1e-12, atol=1e-12)
    assert torch.equal(torch.isposinf(want_lse.transpose(1, 2).reshape(n * s_q, heads)), torch.isposinf(lse))
    finite = torch.isfinite(lse)
    assert torch.allclose(want_lse.transpose(1, 2).reshape(n * s_q, heads)[finite], lse[finite], rtol=1e-12)


@given(seed=st.integers(0, 2**16), main_width=st.integers(1, 9), extra_width=st.integers(1, 9))
def test_one_softmax_over_two_pools_is_the_lse_merge_of_each(seed, main_width, extra_width):
    gen = torch.Generator().manual_seed(seed)
    rows, heads, d, d_v = 5, 3, 8, 6
    q = torch.randn(rows, heads, d, generator=gen, dtype=torch.float64)
    main, extra = (torch.randn(11, d, generator=gen, dtype=torch.float64) for _ in range(2))

    def drawn(width):            # -1 for about a third of the entries, the rest any slot
        idx = torch.randint(0, 11, (rows, width), generator=gen)
        return torch.where(torch.rand(rows, width, generator=gen) < 0.3, -1, idx)
    main_idx, extra_idx = drawn(main_width), drawn(extra_width)
    keys, listed = joined(main, main_idx, extra, extra_idx)
    out, lse = sparse_attention(q, keys, listed, 0.3, d_v)
    out_a, lse_a = sparse_attention(q, main, main_idx, 0.3, d_v)
    out_b, lse_b = sparse_attention(q, extra, extra_idx, 0.3, d_v)
    merged_out, merged_lse = merge_attention(out_a, lse_a, out_b, lse_b)
    assert torch.allclose(out, merged_out, rtol=1e-12, atol=1e-14)
    assert torch.equal(torch.isposinf(lse), torch.isposinf(merged_lse))
    assert torch.allclose(lse[torch.isfinite(lse)], merged_lse[torch.isfinite(lse)], rtol=1e-12)


def test_counted_drops_every_entry_at_or_past_its_rows_length():
    indices = torch.arange(2 * 3 * 5, dtype=torch.int32).view(2, 3, 5)
    kept = counted(indices, torch.tensor([0, 3], dtype=torch.int32))
    assert bool((kept[0] == -1).all())                                   # length 0: nothing counts
    assert torch.equal(kept[1, :, :3], indices[1, :, :3]) and bool((kept[1, :, 3:] == -1).all())
    assert counted(indices, None) is indices


def test_joined_moves_the_extra_entries_past_the_main_pool_and_keeps_minus_one():
    main, extra = torch.zeros(4, 2), torch.ones(3, 2)
    keys, listed = joined(main, torch.tensor([[3, -1]]), extra, torch.tensor([[0, -1, 2]]))
    assert keys.shape == (7, 2) and listed.tolist() == [[3, -1, 4, -1, 6]]
    assert math.isclose(float(keys[4:].sum()), 6.0)

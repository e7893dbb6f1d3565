"""The KV page pool: allocator, block table, poisoning of generated inputs, validation."""

import re

import pytest
import torch

from harness.backends import Backend
from harness.building.inputs import generate
from harness.building.pool import (
    PADDING_VALUES,
    PageLayout,
    allocate,
    build_block_table,
    pages_for,
    validate_block_table,
    validate_req_to_token,
)
from harness.errors import InputError
from harness.planning.cases import Case
from harness.scenarios import _common as steps

P = 64


def layout_for(seqlens, seed=0, padding="minus_one", extra_pages=4, page_size=P, **kw) -> PageLayout:
    return allocate(seqlens, page_size, extra_pages, torch.Generator().manual_seed(seed), padding=padding, **kw)


# ---- allocator -------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_allocator_consistency(seed):
    seqlens = [1, 63, 64, 65, 300, 0, 129]
    lay = layout_for(seqlens, seed)
    need = [pages_for(n, P) for n in seqlens]
    assert lay.num_pages == 1 + sum(need) + 4
    assert lay.block_table.dtype == lay.req_to_token.dtype == lay.cache_seqlens.dtype == torch.int32
    assert lay.cache_seqlens.tolist() == seqlens
    assert lay.block_table.shape == (len(seqlens), max(need))
    rows = lay.req_pool_indices.tolist()
    assert len(set(rows)) == len(rows) and all(0 <= r < lay.req_to_token.shape[0] for r in rows)
    seen_pages = []
    for r, n in enumerate(seqlens):
        row = lay.req_to_token[rows[r]]
        for p in range(need[r]):
            # FlashMLA's block table from SGLang's req_to_token
            assert int(lay.block_table[r, p]) == int(row[p * P]) // P
        for t in range(n):
            slot = int(row[t])
            assert slot // P == int(lay.block_table[r, t // P]) and slot % P == t % P
        seen_pages += lay.block_table[r, :need[r]].tolist()
    assert 0 not in seen_pages, "page 0 is reserved"
    assert len(set(seen_pages)) == len(seen_pages), "a page is shared between requests"
    assert sorted(seen_pages) == sorted(lay.used_pages.tolist())
    assert all(1 <= p < lay.num_pages for p in seen_pages)
    validate_req_to_token(lay)
    validate_block_table(lay.block_table, lay.cache_seqlens, lay.num_pages, P)


def test_allocator_shuffles_pages():
    lay = layout_for([640, 640, 640], seed=3)
    used = lay.used_pages.tolist()
    assert used != sorted(used)
    gaps = [[b - a for a, b in zip(row, row[1:])] for row in lay.block_table.tolist()]
    assert any(g != 1 for row in gaps for g in row), "every request got contiguous pages"
    other = layout_for([640, 640, 640], seed=4)
    assert not torch.equal(other.block_table, lay.block_table)
    assert torch.equal(layout_for([640, 640, 640], seed=3).block_table, lay.block_table)   # seeded


@pytest.mark.parametrize("padding", list(PADDING_VALUES))
def test_padding_policies(padding):
    seqlens = [10, 200, 0, 64]
    lay = layout_for(seqlens, padding=padding, table_width=6)
    assert lay.block_table.shape == (4, 6)
    for r, n in enumerate(seqlens):
        assert lay.block_table[r, pages_for(n, P):].tolist() == [PADDING_VALUES[padding]] * (6 - pages_for(n, P))
    assert PADDING_VALUES == {"minus_one": -1, "one": 1, "zero": 0, "huge": 2**31 - 1}
    validate_block_table(lay.block_table, lay.cache_seqlens, lay.num_pages, P)   # padding may hold anything


def test_table_too_narrow_and_negative_lengths_are_refused():
    with pytest.raises(InputError, match=r"request 1: 200 tokens need 4 pages but the table has 2 columns"):
        layout_for([10, 200], table_width=2)
    with pytest.raises(InputError, match="negative seq len"):
        layout_for([10, -1])
    lay = layout_for([10, 200])
    with pytest.raises(InputError, match="request 1"):
        build_block_table(lay.req_to_token, lay.req_pool_indices, [10, 200], P, 3, -1)


# ---- poisoning of generated inputs ------------------------------------------------------------

def small_case(**kw) -> Case:
    base = dict(id="t/pool/0", seed=1234, batch_size=4, heads=4, kv_heads=2, d_qk=40, d_v=32,
                seqlen="list:1,63,64,65", extra_pages=3)
    return Case(**{**base, **kw})


def nan_map(pool: torch.Tensor) -> torch.Tensor:
    """Per slot: True where every value is NaN; asserts no slot is partly NaN."""
    nan = torch.isnan(pool.to(torch.float32))
    all_nan, any_nan = nan.flatten(2).all(-1), nan.flatten(2).any(-1)
    assert torch.equal(all_nan, any_nan), "a slot is partly poisoned"
    return all_nan                                            # (num_pages, page_size)


@pytest.mark.parametrize("mode,draft,dtype", [("decode", 1, "bf16"), ("verify", 3, "bf16"),
                                              ("verify", 8, "fp16"), ("verify", 2, "fp8_e4m3"),
                                              ("decode", 1, "fp8_e4m3")])
def test_generate_poisons_everything_but_the_tokens(mode, draft, dtype):
    case = small_case(mode=mode, draft_tokens=draft, dtype=dtype)
    inp = generate(case)
    cache = inp.cache_seqlens.tolist()
    assert inp.seq_lens.tolist() == [1, 63, 64, 65]
    assert cache == [n + case.s_q if mode == "verify" else n for n in [1, 63, 64, 65]]
    pools = [inp.kv_pool] + ([inp.kv_pool_model] if dtype.startswith("fp8") else [])
    for pool in pools:
        nan = nan_map(pool)
        real = torch.zeros_like(nan)
        for r, n in enumerate(cache):
            slots = inp.req_to_token[inp.req_pool_indices[r], :n].long()
            real.view(-1)[slots] = True
            # the tail of the last page is poisoned
            last = int(inp.block_table[r, pages_for(n, P) - 1])
            assert bool(nan[last, (n - 1) % P + 1:].all())
        assert bool((~nan[real]).all()), "a real token is NaN"
        assert bool(nan[~real].all()), "a slot no request owns is not poisoned"
        assert bool(nan[0].all()), "page 0 is not poisoned"
        used = {int(inp.block_table[r, p]) for r, n in enumerate(cache) for p in range(pages_for(n, P))}
        unused = sorted(set(range(inp.num_pages)) - used)
        assert len(unused) == 1 + case.extra_pages and bool(nan[unused].all())
        assert int(real.sum()) == sum(cache)
        assert bool(torch.isfinite(pool.to(torch.float32)[real]).all())
    if mode == "verify":
        # the drafts (positions seq_len .. seq_len + s_q - 1) were written before the call
        for r, n in enumerate(inp.seq_lens.tolist()):
            for t in range(n, n + case.s_q):
                slot = int(inp.req_to_token[inp.req_pool_indices[r], t])
                assert bool(torch.isfinite(inp.kv_pool.to(torch.float32).flatten(0, 1)[slot]).all())
    assert bool(torch.isfinite(inp.q.to(torch.float32)).all())
    if dtype.startswith("fp8"):
        assert inp.kv_pool.dtype == inp.q.dtype == torch.float8_e4m3fn
        k = float(inp.descale_k)
        fin = ~nan_map(inp.kv_pool)
        deq = inp.kv_pool.to(torch.float64)[fin] * k
        model = inp.kv_pool_model.to(torch.float64)[fin]
        assert bool(((deq - model).abs() <= model.abs() * 2.0 ** -4 + k * 2.0 ** -9).all())
        assert float(deq.abs().max()) == pytest.approx(float(model.abs().max()), rel=2.0 ** -4)


@pytest.mark.parametrize("padding", list(PADDING_VALUES))
def test_generate_pads_the_table_by_policy(padding):
    inp = generate(small_case(padding=padding, seqlen="list:1,200,65,0"))
    for r, n in enumerate(inp.cache_seqlens.tolist()):
        assert set(inp.block_table[r, pages_for(n, P):].tolist()) <= {PADDING_VALUES[padding]}
    assert inp.block_table.shape[1] == pages_for(200, P)


def test_generate_page_boundaries_63_64_65():
    inp = generate(small_case(seqlen="list:63,64,65,128"))
    assert [pages_for(n, P) for n in inp.cache_seqlens.tolist()] == [1, 1, 2, 2]
    assert inp.block_table[0, 1].item() == inp.block_table[1, 1].item() == -1
    nan = nan_map(inp.kv_pool)
    assert bool(nan[int(inp.block_table[0, 0]), 63]) and not bool(nan[int(inp.block_table[1, 0]), 63])
    assert not bool(nan[int(inp.block_table[2, 1]), 0]) and bool(nan[int(inp.block_table[2, 1]), 1:].all())


def test_generate_is_reproducible_and_seeded():
    a, b = generate(small_case()), generate(small_case())
    c = generate(small_case(seed=99))
    for x, y in [(a.q, b.q), (a.kv_pool, b.kv_pool), (a.block_table, b.block_table)]:
        torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)
    assert not torch.equal(a.q, c.q)


# ---- validation ---------------------------------------------------------------------------

def fresh(seqlens=(5, 130, 64)):
    return layout_for(list(seqlens), seed=8)


def test_valid_pool_passes():
    lay = fresh()
    validate_req_to_token(lay)
    validate_block_table(lay.block_table, lay.cache_seqlens, lay.num_pages, P)


def test_misaligned_req_to_token_is_refused():
    lay = fresh()
    row = lay.req_pool_indices[1]
    lay.req_to_token[row, 70] += 1                            # token 70 shifted one slot
    with pytest.raises(InputError, match=r"request 1: token 70 .*page alignment"):
        validate_req_to_token(lay)


def test_token_on_another_page_is_refused():
    lay = fresh()
    row = lay.req_pool_indices[1]
    other = int(lay.block_table[0, 0])
    lay.req_to_token[row, 3] = other * P + 3                  # same offset, different page than tokens 0..2
    with pytest.raises(InputError, match=r"request 1: token 3 sits in slot"):
        validate_req_to_token(lay)


def test_req_to_token_slot_past_the_pool_is_refused():
    lay = fresh()
    row = lay.req_pool_indices[2]
    lay.req_to_token[row, :64] = torch.arange(64, dtype=torch.int32) + lay.num_pages * P
    with pytest.raises(InputError, match=rf"request 2: token 0 sits in slot {lay.num_pages * P}, outside the pool"):
        validate_req_to_token(lay)


def test_req_to_token_negative_slot_is_refused():
    # A whole page at slots -64..-1 is page-aligned and consecutive but lies outside the pool.
    # BUG (fixed in harness/building/pool_gates.py, validate_req_to_token): the range check only looked at
    # slot // P >= num_pages, so negative slots passed.
    lay = fresh()
    row = lay.req_pool_indices[2]
    lay.req_to_token[row, :64] = torch.arange(64, dtype=torch.int32) - 64
    with pytest.raises(InputError, match=r"request 2: token 0 sits in slot -64, outside the pool"):
        validate_req_to_token(lay)


def test_req_pool_index_outside_req_to_token_and_negative_len_are_refused():
    # BUG (fixed in harness/building/pool_gates.py, validate_req_to_token): these raised IndexError/RuntimeError.
    lay = fresh()
    lay.req_pool_indices = lay.req_pool_indices.clone()
    lay.req_pool_indices[0] = lay.req_to_token.shape[0]
    with pytest.raises(InputError, match=r"request 0: req_pool_indices entry"):
        validate_req_to_token(lay)
    lay = fresh()
    lay.cache_seqlens = torch.tensor([5, -2, 64], dtype=torch.int32)
    with pytest.raises(InputError, match=r"request 1: negative seq len -2"):
        validate_req_to_token(lay)


def test_req_to_token_too_few_columns_is_refused():
    # BUG (fixed in harness/building/pool_gates.py, validate_req_to_token): a req_to_token narrower than a
    # request's seq len raised IndexError (a traceback) instead of an InputError.
    lay = fresh()
    lay.req_to_token = lay.req_to_token[:, :100].clone()
    with pytest.raises(InputError, match=r"request 1: .*130.*100 columns"):
        validate_req_to_token(lay)


@pytest.mark.parametrize("bad", [-1, "num_pages", "huge"])
def test_out_of_range_table_entry_is_refused(bad):
    lay = fresh()
    value = {"num_pages": lay.num_pages, "huge": 2**31 - 1}.get(bad, bad)
    table = lay.block_table.clone()
    table[1, 2] = value
    with pytest.raises(InputError, match=rf"request 1: block table entry 2 is page {value}, outside the pool's "
                                         rf"{lay.num_pages} pages"):
        validate_block_table(table, lay.cache_seqlens, lay.num_pages, P)


def test_padding_entries_may_hold_anything():
    lay = fresh()
    table = lay.block_table.clone()
    table[0, 1:] = 2**31 - 1                                  # request 0 has one page: the rest is padding
    table[2, 1:] = -7
    validate_block_table(table, lay.cache_seqlens, lay.num_pages, P)


def test_too_few_columns_is_refused():
    lay = fresh()
    with pytest.raises(InputError, match=r"request 1: seq len 130 needs 3 pages, the block table has 2 columns"):
        validate_block_table(lay.block_table[:, :2].contiguous(), lay.cache_seqlens, lay.num_pages, P)


def test_negative_seq_len_is_refused():
    lay = fresh()
    seq = lay.cache_seqlens.clone()
    seq[2] = -3
    with pytest.raises(InputError, match=r"request 2: negative seq len -3"):
        validate_block_table(lay.block_table, seq, lay.num_pages, P)


def test_wrong_dtype_and_shape_are_refused():
    lay = fresh()
    with pytest.raises(InputError, match="int32"):
        validate_block_table(lay.block_table.long(), lay.cache_seqlens, lay.num_pages, P)
    with pytest.raises(InputError, match="does not match 2 requests"):
        validate_block_table(lay.block_table, lay.cache_seqlens[:2], lay.num_pages, P)
    with pytest.raises(InputError, match="page_size"):
        validate_block_table(lay.block_table, lay.cache_seqlens, lay.num_pages, 0)


class _Recorder(Backend):
    name = "recorder"

    def __init__(self):
        self.calls = 0

    def run(self, inputs):
        self.calls += 1
        b, s_q, h, _ = inputs.q.shape
        return torch.zeros(b, s_q, h, inputs.d_v), torch.zeros(b, h, s_q)


def test_no_kernel_launch_on_an_invalid_block_table():
    inp = generate(small_case(seqlen="list:5,130,64,1"))
    inp.block_table[1, 1] = inp.kv_pool.shape[0] + 5
    backend = _Recorder()
    with pytest.raises(InputError, match=re.escape("request 1: block table entry 1")):
        steps.launch(backend, inp)
    assert backend.calls == 0
    inp2 = generate(small_case(seqlen="list:5,130,64,1"))
    steps.launch(backend, inp2)
    assert backend.calls == 1


@pytest.mark.parametrize("seed", range(6))
def test_the_device_built_tables_are_the_host_built_ones(seed):
    """``req_to_token_of`` (torch, on any device) is ``allocate``'s req_to_token, and ``written_slots`` is
    ``write_slots``' slots, for layouts with radix-shared prefixes, fixed pools and pages of 1 to 64 slots."""
    from harness.building.kv_store import first_writes, write_slots
    from harness.building.pool import assign_pages, req_to_token_of
    from harness.building.sparse_inputs import written_slots
    gen = torch.Generator().manual_seed(seed)
    page_size = [1, 2, 53, 64, 64, 7][seed]
    lengths = torch.randint(0, 300, (int(torch.randint(1, 9, (1,), generator=gen)),), generator=gen).tolist()
    shared = [min(2, -(-n // page_size)) for n in lengths] if seed % 2 else None
    pool_pages = 4000 if seed == 4 else 0
    args = (lengths, page_size, 5, pool_pages, shared)

    def drawn(draw):
        return draw(lengths, page_size, 5, torch.Generator().manual_seed(seed + 100), pool_pages=pool_pages,
                    shared_pages=shared)
    layout, pages = drawn(allocate), drawn(assign_pages)
    table = req_to_token_of(*(torch.from_numpy(a) for a in (pages.pages, pages.lengths, pages.rows)),
                            pages.max_reqs, page_size)
    assert torch.equal(table, layout.req_to_token), args
    first = first_writes(shared or [0] * len(lengths), page_size)
    count = [max(n - f, 0) for f, n in zip(first, lengths)]
    slots = written_slots(table, torch.from_numpy(pages.rows), torch.tensor(first), torch.tensor(count), sum(count))
    assert torch.equal(slots.to(torch.int32), write_slots(layout, first, lengths)[0]), args
    assert slots.numel() == sum(count) > 0 or sum(lengths) == 0

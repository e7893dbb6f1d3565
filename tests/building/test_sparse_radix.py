"""A radix-shared prefix in a sparse case's pool: its slots are written once, so the pool is a function of
the seed (a slot written by every sharing request, each with its own draw, held whichever write landed last:
two builds of ``sparse/radix-prefix/0`` in one process gave two pools)."""

import torch

from harness.building.sparse_inputs import build
from harness.planning.case_lengths import cache_seqlens_for, draw_seq_lens, shared_pages_for
from harness.planning.cases import load_suite


def _radix_cases():
    cases = [c for c in load_suite("sparse").cases if any(shared_pages_for(c, cache_seqlens_for(c, draw_seq_lens(c))))]
    assert cases, "the sparse suite has a case with a shared prefix"
    return cases


def test_build_writes_every_slot_of_a_shared_prefix_once(monkeypatch):
    from harness.building import sparse_scope
    written = []
    real = sparse_scope.write_records
    monkeypatch.setattr(sparse_scope, "write_records",
                        lambda pool, slots, *rest: (written.append(slots.clone()), real(pool, slots, *rest)))
    for case in _radix_cases():
        written.clear()
        num_slots = build(case, "cpu").inputs.num_slots
        (slots,) = written
        slots = slots[slots < num_slots]          # the padding writes go to the spare page past the pool
        assert slots.unique().numel() == slots.numel(), case.id
        total = cache_seqlens_for(case, draw_seq_lens(case))
        assert slots.numel() < sum(total), f"{case.id} shares no slot: the test would not bite"


def test_a_sparse_pool_with_a_shared_prefix_is_the_same_in_every_build():
    case = _radix_cases()[0]
    pools = [build(case, "cpu").inputs.kv_pool.clone() for _ in range(4)]
    assert all(torch.equal(pools[0], p) for p in pools[1:])

"""Every record no index selects is poisoned, its scale and rope bytes included, so a kernel
that reads outside every key set, its own request's unselected tokens included, reads NaN; every selected
record holds its token."""

import pytest
import torch

from harness.building.sparse_cache import read_records
from harness.building.sparse_inputs import build
from harness.planning.cases import load_suite


def _all_nan(t: torch.Tensor) -> torch.Tensor:
    return torch.isnan(t.float()).flatten(1).all(dim=1)


@pytest.mark.parametrize("case_id", ["sparse/corners/0", "sparse/radix-prefix/0", "sparse/v4-record/0"])
def test_only_the_selected_records_are_written(case_id):
    case = next(c for c in load_suite("sparse").cases if c.id == case_id)
    built = build(case, "cpu")
    inputs = built.inputs
    pool = inputs.kv_pool
    pages = pool.as_strided((pool.shape[0], pool.stride(0)), (pool.stride(0), 1))   # whole pages: V4's scales too
    slots = torch.arange(inputs.num_slots)
    records = read_records(pages, slots, inputs.fmt, inputs.page_size)
    poisoned = _all_nan(records.nope) & _all_nan(records.scales) & _all_nan(records.rope)
    written = ~(torch.isnan(records.nope.float()).any(dim=1) | torch.isnan(records.scales).any(dim=1)
                | torch.isnan(records.rope.float()).any(dim=1))
    selected = torch.zeros(inputs.num_slots, dtype=torch.bool)
    flat = inputs.indices.reshape(-1).long()
    selected[flat[flat >= 0]] = True
    assert bool(poisoned[~selected].all()), f"{int((~poisoned[~selected]).sum())} unselected records written"
    assert bool(written[selected].all()), "a selected record kept poison"
    assert int(selected.sum()) < sum(built.seq_lens), "every token is selected: the test would not bite"


@pytest.mark.parametrize("case_id", ["sparse/corners/0", "sparse/v4-record/0"])
def test_the_spare_page_that_takes_the_padding_writes_is_poison_again(case_id):
    """``build`` pads its writes to a fixed length with writes to a spare page past the pool (no wait for
    the device), then poisons that page again: every byte past the pool's last page is poison."""
    from harness.building.sparse_cache import POISON_BYTE
    case = next(c for c in load_suite("sparse").cases if c.id == case_id)
    built = build(case, "cpu")
    pool = built.inputs.kv_pool
    storage = torch.empty(0, dtype=torch.uint8).set_(pool.untyped_storage())
    past = storage[pool.storage_offset() + pool.shape[0] * pool.stride(0):]
    flat = built.inputs.indices.reshape(-1)
    assert len(flat[flat >= 0].unique()) < min(sum(built.seq_lens) + len(flat), flat.numel()), "no padding write"
    assert past.numel() > 4096 and bool((past == POISON_BYTE).all())

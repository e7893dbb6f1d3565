"""Padding policy "stale": a reused block-table buffer whose entries past a row's pages hold other
requests' live pages (finite data).  A kernel that reads one page too far is caught by the values,
not by NaN poison."""

import dataclasses

import torch

from harness.backends.torch_backend import TorchBackend
from harness.building.pool import STALE, allocate, build_block_table, validate_block_table
from harness.planning.cases import Case, case_seed, load_suite
from harness.running.runner import run_case


def layout(lengths, padding, seed=0):
    return allocate(lengths, 64, 3, torch.Generator().manual_seed(seed), padding=padding)


def test_stale_entries_are_live_pages_of_other_requests():
    lay = layout([10, 200, 64, 129], "stale")
    ref = layout([10, 200, 64, 129], "minus_one")
    need = [1, 4, 1, 3]
    used = set(lay.used_pages.tolist())
    for r, n in enumerate(need):
        assert torch.equal(lay.block_table[r, :n], ref.block_table[r, :n])      # the real entries
        own = set(lay.block_table[r, :n].tolist())
        pad = lay.block_table[r, n:].tolist()
        assert len(pad) == 4 - n
        assert all(p in used and p not in own for p in pad)                       # live, not its own
    validate_block_table(lay.block_table, lay.cache_seqlens, lay.num_pages, 64)


def test_stale_with_one_request_reuses_its_own_pages():
    lay = layout([10], "stale")
    table = build_block_table(lay.req_to_token, lay.req_pool_indices, [10], 64, 3, STALE)
    assert set(table[0].tolist()) == {int(lay.block_table[0, 0])}


def test_edge_suite_has_stale_cases():
    cases = [c for c in load_suite("edge").cases if c.padding == "stale"]
    assert {c.mode for c in cases} == {"decode", "verify"}


class ReadsOnePageTooFar(TorchBackend):
    """Trusts one page more than each request has: it reads the table entry after its last page."""

    name = "reads-one-page-too-far"

    def kernel_seqlens(self, inputs):
        seq = inputs.cache_seqlens.long()
        return seq + inputs.kv_pool.shape[1] * (seq > 0)


def case(padding, mode="decode"):
    case_id = f"stale/{mode}/{padding}"
    # whole pages, so the only extra read is the next table entry (no NaN tail of a last page)
    return Case(id=case_id, seed=case_seed(case_id, 0), mode=mode, batch_size=3, heads=4, draft_tokens=1,
                seqlen="list:64,128,256", padding=padding)


def test_torch_backend_passes_stale_cases():
    for c in [c for c in load_suite("edge").cases if c.padding == "stale"] + [case("stale")]:
        assert run_case(c, TorchBackend(), "torch", "cpu")["status"] == "pass", c.id


def test_reading_one_page_too_far_fails_on_finite_data():
    row = run_case(case("stale"), ReadsOnePageTooFar(), "mutant", "cpu")
    assert row["status"] == "fail"
    assert "out.nonfinite" not in row["failed_checks"]              # stale pages are finite: values catch it
    assert {"out.element", "out.cosine"} & set(row["failed_checks"])


def test_the_same_mutant_on_minus_one_padding_reads_poison():
    """With -1 padding the extra read lands on the pool's last page; the stale case is the harder one."""
    row = run_case(dataclasses.replace(case("minus_one")), ReadsOnePageTooFar(), "mutant", "cpu")
    assert row["status"] == "fail"

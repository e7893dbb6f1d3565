"""The FlashMLA backend's engine profiles: SGLang 0.5.23 calls the same kernel with a
grown eager block-table scratch (stale tails) and CUDA-graph metadata as ``(num_sms, 8)`` views.

The kernel needs an H200 (its run there: docs/gpu-runs.md); here, on the CPU, what the profile hands the
kernel: the scratch table against the case's, the graph session's metadata buffers with a stand-in API,
the spec, and the rows.
"""

import dataclasses

import pytest
import torch

from harness.backends.flashmla import FlashMLABackend
from harness.backends.flashmla_graph import FlashMLAGraphSession
from harness.backends.flashmla_profiles import PROFILES, GrownScratch, draft_extend_k_lens
from harness.building.inputs import generate
from harness.building.pool import pages_for
from harness.cli import main
from harness.errors import InputError
from harness.judging.oracle import expected
from harness.planning.cases import Case
from harness.recording.results import read_rows
from harness.running.backend_loader import load_backend

P = 64


def inputs_for(seed: int, batch_size: int, seqlen: str):
    return generate(Case(id=f"t/profile/{seed}", seed=seed, batch_size=batch_size, heads=4, seqlen=seqlen), "cpu")


def test_the_scratch_rewrites_each_row_up_to_its_length_and_keeps_the_stale_tail():
    scratch = GrownScratch()
    first = torch.tensor([[5, 6, 7], [8, -1, -1], [9, 10, -1]], dtype=torch.int32)
    view = scratch.table(first, torch.tensor([130, 10, 100], dtype=torch.int32), P, 130)
    assert view.tolist() == first.tolist()
    second = torch.tensor([[11, -1], [12, 13]], dtype=torch.int32)
    view = scratch.table(second, torch.tensor([10, 70], dtype=torch.int32), P, 70)
    assert view.tolist() == [[11, 6], [12, 13]]            # row 0's entry 1: the first call's page 6, unread
    assert scratch.buf[:3, :3].tolist() == [[11, 6, 7], [12, 13, -1], [9, 10, -1]]
    grown = torch.tensor([[1, 2, 3, 4]], dtype=torch.int32)
    view = scratch.table(grown, torch.tensor([200], dtype=torch.int32), P, 200)
    assert scratch.buf.shape == (3, 4) and view.tolist() == [[1, 2, 3, 4]]
    assert scratch.buf[1:].tolist() == [[-1] * 4, [-1] * 4]   # grown: a fresh -1 buffer, as SGLang's full(-1)


def test_the_scratch_table_gives_the_oracle_the_same_answer_over_many_calls():
    scratch = GrownScratch()
    for seed, (b, dist) in enumerate([(6, "uniform:1:400"), (3, "uniform:1:90"), (8, "uniform:0:300"),
                                      (2, "uniform:200:260")]):
        inputs = inputs_for(seed, b, dist)
        lens = inputs.cache_seqlens
        view = scratch.table(inputs.block_table, lens, P, int(lens.max()))
        need = pages_for(lens.long(), P)
        assert view.shape == (b, max(1, int(pages_for(int(lens.max()), P))))
        for r in range(b):
            assert torch.equal(view[r, :need[r]], inputs.block_table[r, :need[r]])
        ours, theirs = expected(dataclasses.replace(inputs, block_table=view)), expected(inputs)
        assert all(torch.equal(a, e) for a, e in zip(ours, theirs, strict=True))
    assert (scratch.buf >= 0).any() and scratch.buf.shape[0] == 8


class StandInAPI:
    """The metadata calls only: a tile of ``parts`` rows whose values name the call, splits of bs + 1."""

    def __init__(self, parts):
        self.parts, self.calls = parts, 0

    def metadata(self, cache_seqlens, q_tokens, h_kv, fp8):
        self.calls += 1
        return [torch.full((self.parts, 8), self.calls, dtype=torch.int32),
                torch.arange(len(cache_seqlens) + 1, dtype=torch.int32) * self.calls]

    def buffers(self, meta):
        return meta


def session_for(profile: str, monkeypatch, parts=6, sms=16, max_bs=4):
    backend = FlashMLABackend(profile)
    backend.api = StandInAPI(parts)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: type("Props", (), {"multi_processor_count": sms})())
    return FlashMLAGraphSession(backend, max_bs, 300, inputs_for(1, max_bs, "uniform:1:100"))


def test_sglang_0_5_23_graph_metadata_is_num_sms_rows_bound_as_views(monkeypatch):
    session = session_for("sglang-0.5.23", monkeypatch)
    assert session.tile.shape == (16, 8) and session.splits.shape == (5,)
    session.refresh_metadata(3)                # capture
    view = session.tile_view
    assert view.shape == (6, 8) and view.data_ptr() == session.tile.data_ptr()
    assert (view == 1).all() and session.splits[:4].tolist() == [0, 1, 2, 3]
    session.refresh_metadata(2)                # replay: fresh values into the same view
    assert session.tile_view is view and (view == 2).all() and session.splits[:3].tolist() == [0, 2, 4]
    assert session.full_width


def test_the_seed_copies_metadata_shaped_as_ones_max_bs(monkeypatch):
    session = session_for("seed", monkeypatch)
    assert session.tile.shape == (6, 8) and session.tile_view is session.tile and not session.full_width
    session.refresh_metadata(3)
    assert (session.tile == 2).all()           # call 1 built the buffers, call 2 refreshed them


def test_more_sm_parts_than_sms_is_refused_as_sglang_asserts(monkeypatch):
    session = session_for("sglang-0.5.23", monkeypatch, parts=20, sms=16)
    with pytest.raises(RuntimeError, match="num_sm_parts 20 exceeds preallocated max 16"):
        session.refresh_metadata(2)


def test_draft_extend_k_lens_end_at_the_window():
    seq = torch.tensor([100, 7, 64])
    accepted = torch.tensor([1, 3, 2])
    assert draft_extend_k_lens(seq, accepted, 3).tolist() == [102, 7, 65]


def test_the_spec_picks_a_profile_and_the_rows_name_it(tmp_path, capsys):
    backend = load_backend("flashmla@sglang-0.5.23")
    assert backend.name == "flashmla@sglang-0.5.23" and backend.profile is PROFILES["sglang-0.5.23"]
    assert load_backend("flashmla").name == "flashmla" and load_backend("flashmla").scratch is None
    for bad, why in (("flashmla@sglang-9", "unknown FlashMLA engine profile 'sglang-9'"),
                     ("torch@seed", "torch has no engine profiles")):
        with pytest.raises(InputError, match=why):
            load_backend(bad)
    path = tmp_path / "r.jsonl"
    main(["run", "--suite", "smoke", "--backend", "flashmla,flashmla@sglang-0.5.23", "--out", str(path),
          "--device", "cpu", "--workers", "0", "--no-progress"])
    capsys.readouterr()
    rows = read_rows(path)
    engines = {r["backend"]: r["conventions"]["engine"] for r in rows}
    assert engines == {"flashmla": PROFILES["seed"].engine, "flashmla@sglang-0.5.23": PROFILES["sglang-0.5.23"].engine}
    assert {r["backend_info"]["profile"] for r in rows} == {"seed", "sglang-0.5.23"}


def _flashmla_here() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA device here"
    backend = FlashMLABackend()
    return None if backend.api is not None else "no FlashMLA package imports: " + "; ".join(backend.import_errors)


@pytest.mark.skipif(_flashmla_here() is not None, reason=f"needs a CUDA device and FlashMLA: {_flashmla_here()}")
def test_on_the_gpu_stale_tails_from_a_larger_case_change_nothing():
    from harness.running.runner import run_case
    backend = load_backend("flashmla@sglang-0.5.23")
    big = Case(id="t/big/0", seed=2, batch_size=16, heads=16, seqlen="uniform:1:2000", pool_pages=4000)
    small = Case(id="t/small/0", seed=3, batch_size=4, heads=16, seqlen="uniform:1:300")
    rows = [run_case(c, backend, "flashmla@sglang-0.5.23", "cuda") for c in (big, small, big)]
    assert [r["status"] for r in rows] == ["pass"] * 3, [r.get("reason") for r in rows]
    assert (backend.scratch.buf >= 0).any()
    graph = Case(id="t/graph/0", seed=4, batch_size=8, heads=16, seqlen="uniform:1:300", scenario="graph")
    row = run_case(graph, backend, "flashmla@sglang-0.5.23", "cuda")
    assert row["status"] == "pass", row.get("messages") or row.get("reason")

"""The sparse scenario end to end on the CPU: SGLang's inputs, the index gate, the witness, the
comparison with the oracle, and broken sparse backends that must fail it."""

import dataclasses

import pytest
import torch

from harness.backends import KERNELS, Feature, TorchBackend, builtin_class
from harness.backends.flashmla_sparse import FlashMLASparseBackend
from harness.backends.reference_backend import ReferenceBackend
from harness.building.inputs import draw_seq_lens
from harness.building.sparse_inputs import build, index_stats, validate_indices
from harness.errors import InputError
from harness.planning.cases import Case, load_suite, validate_case
from harness.recording.results import case_hash
from harness.recording.status import Status
from harness.running.runner import run_case
from harness.scenarios import run
from harness.scenarios import sparse as scenario


def sparse_case(**kw) -> Case:
    fields = dict(id="sparse/t/0", seed=11, scenario="sparse", topk=64, heads=16, batch_size=3,
                  seqlen="uniform:1:200")
    return validate_case(Case(**{**fields, **kw}), "test")


def test_the_shipped_suite_passes_on_the_torch_backend():
    outcomes = {c.id: run(c, TorchBackend(), "cpu") for c in load_suite("sparse").cases}
    assert {o.status for o in outcomes.values()} == {Status.PASS}, \
        {k: o.messages or o.reason for k, o in outcomes.items() if o.status is not Status.PASS}
    compared = [o.metrics["sparse"]["valid_entries"] for o in outcomes.values()]
    assert sum(compared) > 10_000                   # the suite compares real key sets, not only empty rows


def test_verify_rows_are_flattened_as_sglang_does_it():
    case = sparse_case(mode="verify", draft_tokens=3, topk=128, index_pattern="window")
    built = build(case, "cpu")
    seq = draw_seq_lens(case)
    assert built.seen == [n + i + 1 for n in seq for i in range(3)]
    assert tuple(built.inputs.indices.shape) == (9, 1, 128) and built.inputs.q.shape[1] == 1
    assert built.inputs.cache_seqlens.tolist() == [min(n, 128) for n in built.seen]
    valid = (built.inputs.indices >= 0).sum(-1).flatten().tolist()
    assert valid == [min(n, 128) for n in built.seen]
    for row in range(9):                             # a -1 tail after the valid entries, never a hole
        entries = built.inputs.indices[row, 0]
        assert (entries[:valid[row]] >= 0).all() and (entries[valid[row]:] == -1).all()


def test_a_window_lists_the_request_slots_of_its_last_positions():
    case = sparse_case(index_pattern="window", seqlen="list:100,40,250")
    built = build(case, "cpu")
    r2t = built.inputs.req_to_token
    from harness.building.pool import allocate  # the layout again, from the same seed: slots as req_to_token lists them
    layout = allocate([100, 40, 250], 64, case.extra_pages, torch.Generator().manual_seed(case.seed + 1))
    assert torch.equal(layout.req_to_token, r2t)
    for r, n in enumerate([100, 40, 250]):
        want = r2t[layout.req_pool_indices[r], max(0, n - 64):n]
        assert torch.equal(built.inputs.indices[r, 0, :len(want)], want)


def test_unreferenced_records_are_poison():
    built = build(sparse_case(seqlen="list:5,1,9"), "cpu")
    pool = built.inputs.kv_pool.view(-1, 656)
    listed = set(built.inputs.indices[built.inputs.indices >= 0].tolist())
    written = {s for s in range(pool.shape[0]) if not bool((pool[s] == 0xFF).all())}
    assert listed <= written
    assert 0 not in written                        # page 0 stays reserved, and poisoned


def test_a_backend_without_a_sparse_entry_point_is_unsupported_with_the_reason():
    out = run(sparse_case(), ReferenceBackend(), "cpu")
    assert out.status is Status.UNSUPPORTED and "no sparse entry point (run_sparse)" in out.reason


def test_flashmla_sparse_refuses_what_its_kernel_refuses():
    caps = FlashMLASparseBackend.capabilities.sparse
    assert "multiple of 64" in caps.reason_unsupported(sparse_case(topk=100), "cuda")
    assert "none holds them" in caps.reason_unsupported(sparse_case(heads=256), "cuda")
    assert caps.reason_unsupported(sparse_case(heads=16, topk=128), "cuda") is None
    assert caps.padded_heads(16) == 64 and caps.padded_heads(100) == 128
    dense = Case(id="d/g/0", seed=1)
    assert "sparse scenario only" in FlashMLASparseBackend().unsupported_reason(dense, "cuda")


# ---- the gate ----------------------------------------------------------------------------------

class Recorder(TorchBackend):
    called = False

    def run_sparse(self, inputs):
        Recorder.called = True
        return super().run_sparse(inputs)


@pytest.mark.parametrize("bad,words", [(10**6, "outside the main cache's"), (-2, "outside the main cache's")])
def test_an_index_outside_the_pool_is_refused_before_any_launch(bad, words):
    built = build(sparse_case(), "cpu")
    indices = built.inputs.indices.clone()
    indices[1, 0, 3] = bad
    doctored = dataclasses.replace(built, index_stats=index_stats(indices),
                                   inputs=dataclasses.replace(built.inputs, indices=indices))
    Recorder.called = False
    with pytest.raises(InputError) as e:
        scenario.launch(Recorder(), doctored)
    assert not Recorder.called
    line = str(e.value)
    assert "\n" not in line and words in line and "query row 1, token 0, entry 3" in line


def test_the_gate_error_leaves_the_runner_as_bad_input(monkeypatch):
    def doctored_build(case, device):
        built = build(case, device)
        indices = built.inputs.indices.clone()
        indices[0, 0, 0] = built.inputs.num_slots          # one past the pool's last slot
        return dataclasses.replace(built, index_stats=index_stats(indices),
                                   inputs=dataclasses.replace(built.inputs, indices=indices))
    monkeypatch.setattr(scenario, "build", doctored_build)
    Recorder.called = False
    with pytest.raises(InputError, match="outside the main cache's"):
        run_case(sparse_case(), Recorder(), "recorder", "cpu")
    assert not Recorder.called


def test_the_gate_needs_int32_three_dimensional_indices():
    with pytest.raises(InputError, match="int32"):
        validate_indices(torch.zeros(2, 3, dtype=torch.int64), 10)


# ---- case fields ---------------------------------------------------------------------------------

def test_dense_cases_keep_their_definition_and_hash():
    dense = Case(id="smoke/g/0", seed=5)
    assert not {"topk", "kv_format", "kv_scales", "sink", "index_pattern", "verify_rows"} & set(dense.to_dict())
    assert case_hash(dense.to_dict()) == case_hash({**dense.to_dict()})
    assert "topk" in sparse_case().to_dict()


@pytest.mark.parametrize("fields,words", [
    (dict(scenario="call", topk=64), "applies to the sparse scenario only"),
    (dict(topk=0), "needs 1 to"),
    (dict(kv_format="v9"), "unknown record format"),
    (dict(kv_format="v4", d_qk=512, kv_scales="amax"), "takes ue8m0"),
    (dict(sink="sometimes"), "unknown sink"),
    (dict(index_pattern="zigzag"), "unknown index pattern"),
    (dict(verify_rows="sideways"), "unknown verify rows"),
    (dict(d_qk=512), "holds d_qk 576"),
    (dict(dtype="fp16"), "bf16 q"),
])
def test_bad_sparse_fields_are_one_line(fields, words):
    base = dict(id="sparse/t/0", seed=1, scenario="sparse", topk=64)
    with pytest.raises(InputError, match=words):
        validate_case(Case(**{**base, **fields}), "here")


# ---- on the H200 (skipped here) -------------------------------------------------------------------

SPARSE_KERNELS = [name for name in KERNELS if Feature.SPARSE in builtin_class(name).features]


def _kernel_or_skip(name):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (none here)")
    backend = KERNELS[name]()
    if not backend.available():
        pytest.skip(f"{name}: {backend.availability()}")
    return backend


@pytest.mark.parametrize("name", SPARSE_KERNELS)
@pytest.mark.parametrize("group", ["corners", "sinks", "decode-heads", "verify-flattened", "decode-topk2048"])
def test_sparse_kernels_match_the_oracle_on_the_h200(name, group):
    backend = _kernel_or_skip(name)
    for case in (c for c in load_suite("sparse").cases if c.group == group):
        outcome = run(case, backend, "cuda")
        assert outcome.status in (Status.PASS, Status.UNSUPPORTED), (case.id, outcome.reason, outcome.messages[:2])


def test_torch_sparse_matches_the_oracle_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (none here)")
    for case in load_suite("sparse").cases[:12]:
        outcome = run(case, TorchBackend(), "cuda")
        assert outcome.status is Status.PASS, (case.id, outcome.messages[:2])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sglang_and_vllm_verify_shapes_give_the_oracle_the_same_rows(seed):
    from harness.judging.sparse_oracle import expected
    flat = sparse_case(seed=seed, mode="verify", draft_tokens=3, sink="random", index_pattern="holes")
    grouped = dataclasses.replace(flat, verify_rows="per_request")
    a, b = build(flat, "cpu"), build(grouped, "cpu")
    assert tuple(a.inputs.indices.shape) == (9, 1, 64) and tuple(b.inputs.indices.shape) == (3, 3, 64)
    assert torch.equal(a.inputs.indices.reshape(3, 3, 64), b.inputs.indices)
    assert b.inputs.cache_seqlens.tolist() == [min(n + 3, 64) for n in draw_seq_lens(flat)]
    (out_a, lse_a), (out_b, lse_b) = expected(a, "exact"), expected(b, "exact")
    assert torch.equal(out_a.reshape(3, 3, 16, 512), out_b)
    assert torch.equal(lse_a[:, :, 0].reshape(3, 3, 16).transpose(1, 2), lse_b)


def test_padding_rows_are_the_last_third_all_minus_one():
    built = build(sparse_case(batch_size=6, index_pattern="padded", mode="verify", draft_tokens=2), "cpu")
    valid = (built.inputs.indices >= 0).sum(-1).flatten().tolist()
    assert valid[8:] == [0, 0, 0, 0] and all(v > 0 for v in valid[:8])


class WritesIntoThePool(TorchBackend):
    def run_sparse(self, inputs):
        result = super().run_sparse(inputs)
        inputs.kv_pool.view(-1)[5 * 656 + 520] ^= 1          # one scale byte of slot 5
        return result


class WritesPastTheOutput(TorchBackend):
    def run_sparse(self, inputs):
        out, lse = super().run_sparse(inputs)
        flat = inputs.out.view(-1)
        torch.as_strided(flat, (1,), (1,), flat.storage_offset() + flat.numel()).fill_(0)
        return out, lse


@pytest.mark.parametrize("backend,where", [(WritesIntoThePool(), "kv_pool"),
                                           (WritesPastTheOutput(), "out: 0 byte(s) past")])
def test_a_kernel_that_changes_its_inputs_fails_without_a_comparison(backend, where):
    outcome = run(sparse_case(), backend, "cpu")
    assert outcome.status is Status.FAIL and outcome.failed_checks == ["inputs.unchanged"]
    assert where in outcome.messages[0] and "out" not in outcome.metrics


@pytest.mark.parametrize("pattern", ["random", "holes", "padded", "invalid"])
def test_index_stats_are_the_indices_own(pattern):
    built = build(sparse_case(index_pattern=pattern, seed=23), "cpu")
    indices = built.inputs.indices
    per_row = (indices >= 0).sum(-1).flatten()
    stats = built.index_stats
    assert (stats.rows, stats.valid_entries, stats.empty_rows) == \
        (per_row.numel(), int(per_row.sum()), int((per_row == 0).sum()))
    assert (stats.lowest, stats.highest) == (int(indices.min()), int(indices.max()))
    assert (pattern == "invalid") == (stats.valid_entries == 0)


@pytest.mark.parametrize("sink", ["none", "random", "inf"])
def test_a_case_with_no_listed_entry_gets_the_computed_empty_answer(sink):
    """The oracle skips the arithmetic of a case whose every entry is -1: its answer is the one the
    arithmetic gives, bit for bit (out +0.0, LSE +inf, the sink's factor applied)."""
    from harness.judging import sparse_oracle
    built = build(sparse_case(index_pattern="invalid", sink=sink), "cpu")
    assert built.index_stats.valid_entries == 0
    skipped = sparse_oracle.expected(built, "bf16_product")
    forced = dataclasses.replace(built, index_stats=dataclasses.replace(built.index_stats, valid_entries=1))
    computed = sparse_oracle.expected(forced, "bf16_product")
    for a, b in zip(skipped, computed):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.view(torch.int64), b.view(torch.int64))       # the same bits, +0.0 not -0.0
    assert torch.isposinf(skipped[1]).all() and not skipped[0].any()

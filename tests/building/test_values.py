"""Value distributions (``Case.q_values``, ``Case.kv_values``; harness/building/values.py): each does what its
name says, a case left at ``normal`` draws what it always drew and keeps its hash, SGLang's amax writer's NaN
records are noted as the writer's, and the mutants these values exist for die on them and nowhere else."""

import dataclasses

import pytest
import torch

from harness.backends.torch_backend import TorchBackend
from harness.building import key_rows, values
from harness.building.inputs import cache_seqlens_for, draw_normal, draw_seq_lens, generate
from harness.building.sparse_inputs import build
from harness.errors import InputError
from harness.mutants import load_mutant
from harness.planning.case import INPUT_FIELDS, VALUES
from harness.planning.cases import Case, load_suite, validate_case
from harness.recording.results import case_hash
from harness.recording.status import Status
from harness.scenarios import run

FLOAT32_EXP_LIMIT = 88.72


def dense_case(**kw) -> Case:
    fields = dict(id="values/t/0", seed=5, batch_size=3, heads=16, seqlen="uniform:40:300")
    return validate_case(Case(**{**fields, **kw}), "test")


def read_back(case: Case):
    """q ``(rows, heads, d)`` and the KV tokens ``(tokens, kv_heads, d)`` as the kernel's pool holds them (fp8:
    dequantised), with each query row's keys, from the inputs ``generate`` built."""
    inputs = generate(case)
    cache = cache_seqlens_for(case, draw_seq_lens(case))
    pool = inputs.kv_pool.float() * (1.0 if inputs.descale_k is None else float(inputs.descale_k))
    slots = torch.cat([inputs.req_to_token[inputs.req_pool_indices[r], :n].long() for r, n in enumerate(cache)])
    q = inputs.q.float() * (1.0 if inputs.descale_q is None else float(inputs.descale_q))
    return q.flatten(0, 1), pool.flatten(0, 1)[slots], key_rows.dense_rows(case, cache, "cpu")


def row_scores(case: Case) -> torch.Tensor:
    q, kv, rows = read_back(case)
    return values.scores(q, kv, rows, case.softmax_scale)


def test_every_name_the_cases_take_is_drawn():
    assert set(values.OWN) == set(VALUES)


def test_at_their_defaults_the_new_fields_are_no_part_of_a_case_or_its_hash():
    case = dense_case()
    assert not set(INPUT_FIELDS) & set(case.to_dict())
    for key, value in (("q_values", "large"), ("kv_values", "tiny"), ("layout", "strided")):
        other = dataclasses.replace(case, **{key: value})
        assert other.to_dict()[key] == value and case_hash(other.to_dict()) != case_hash(case.to_dict())


def test_normal_values_draw_nothing_and_return_the_draws_themselves():
    gen = torch.Generator().manual_seed(3)
    q, kv = torch.randn(2, 1, 4, 8), torch.randn(5, 1, 8)
    state = gen.get_state()
    shaped_q, shaped_kv = values.shaped(dense_case(), q, kv, lambda: pytest.fail("rows asked for"), gen)
    assert shaped_q is q and shaped_kv is kv and torch.equal(gen.get_state(), state)


@pytest.mark.parametrize("mode", ["decode", "verify"])
def test_large_q_puts_every_rows_largest_score_near_the_exp_limit(mode):
    top = row_scores(dense_case(mode=mode, draft_tokens=3 if mode == "verify" else 1, q_values="large")).amax(-1)
    assert bool(((top > 87.0) & (top < FLOAT32_EXP_LIMIT)).all()), (top.min(), top.max())


def test_large_kv_puts_the_largest_score_of_the_case_near_the_exp_limit():
    top = row_scores(dense_case(mode="verify", draft_tokens=2, kv_values="large")).max()
    assert 87.0 < float(top) < FLOAT32_EXP_LIMIT


@pytest.mark.parametrize("seed", [2, 5])
def test_a_score_fp16_cannot_carry_stays_finite_as_near_as_fp16_goes(seed):
    """``large`` q against ``tiny`` fp16 keys, a request of one key, asks q past fp16's 65504 (a fuzz campaign
    on the clean torch backend drew one: inf in q, NaN in the oracle); each vector stops at 65504 instead."""
    case = dense_case(dtype="fp16", batch_size=1, heads=8, seqlen="equal:1", seed=seed, q_values="large",
                      kv_values="tiny")
    q, kv, _ = read_back(case)               # the KV tokens the requests read, not the pool's poisoned slots
    assert torch.isfinite(q).all() and torch.isfinite(kv).all()
    assert q.abs().max() == torch.finfo(torch.float16).max
    assert run(case, TorchBackend(), "cpu").status is Status.PASS


@pytest.mark.parametrize("field", ["q_values", "kv_values"])
def test_peaked_gives_each_row_one_dominant_key(field):
    weights = torch.softmax(row_scores(dense_case(**{field: "peaked"})), dim=-1)
    assert float(weights.amax(-1).min()) > 0.999


def test_flat_kv_makes_every_key_of_a_row_the_same():
    q, kv, rows = read_back(dense_case(kv_values="flat"))
    for row in range(rows.tokens.shape[0]):
        keys = kv[rows.tokens[row][rows.valid[row]]]
        assert torch.equal(keys, keys[:1].expand_as(keys))
    assert not torch.equal(kv[0], kv[-1])                  # the requests' keys differ


def test_latent_gains_have_outlier_channels_fifty_times_the_median():
    _, kv, _ = read_back(dense_case(kv_values="latent", seqlen="equal:300"))
    channel_rms = kv[:, 0].square().mean(dim=0).sqrt()
    assert float(channel_rms.max() / channel_rms.median()) >= 45
    assert int((channel_rms > 40 * channel_rms.median()).sum()) == 576 // 64


def test_zero_tiles_zero_whole_128_value_tiles_exactly():
    _, kv, _ = read_back(dense_case(kv_values="zero_tiles"))
    tiles = torch.nn.functional.pad(kv[:, 0], (0, 640 - 576)).view(-1, 5, 128)
    zero = (tiles == 0).all(dim=-1)
    assert 0.1 < float(zero.float().mean()) < 0.4
    assert not bool(((tiles == 0).any(dim=-1) & ~zero)[:, :4].any())    # the zeros come in whole tiles


def test_tiny_values_lie_in_bf16s_and_e4m3s_subnormal_ranges():
    q, _, _ = read_back(dense_case(q_values="tiny"))
    size = q.abs()
    assert bool((size < 2 ** -6).all() & (size > 0).all())
    assert bool((size < 2 ** -126).any()) and bool((size >= 2 ** -9).any())


def test_tiny_fp8_kv_at_k_scale_one_is_stored_as_e4m3_subnormals():
    inputs = generate(dense_case(dtype="fp8_e4m3", k_scale=1.0, kv_values="tiny"))
    stored = inputs.kv_pool.float()
    stored = stored[torch.isfinite(stored) & (stored != 0)]           # the poison aside; bf16 subnormals round to 0
    assert stored.numel() and bool((stored.abs() < torch.finfo(torch.float8_e4m3fn).tiny).all())


def test_signed_zero_mixes_both_zeros_in():
    bits = generate(dense_case(kv_values="signed_zero")).kv_pool.view(torch.int16)
    assert bool((bits == 0).any()) and bool((bits == -32768).any())           # +0.0 and -0.0 in bf16


def test_sglangs_amax_writer_on_zero_tiles_is_noted_as_the_writers_nan():
    case = validate_case(Case(id="values/t/1", seed=3, scenario="sparse", topk=64, batch_size=3, heads=16,
                              seqlen="uniform:10:200", kv_values="zero_tiles"), "test")
    amax, ue8m0 = build(case, "cpu"), build(dataclasses.replace(case, kv_scales="ue8m0"), "cpu")
    assert len(amax.notes) == 1 and not ue8m0.notes
    assert "v32 record writer" in amax.notes[0] and "'amax'" in amax.notes[0] and "not the kernel's" in amax.notes[0]
    outcome = run(case, TorchBackend(), "cpu")          # NaN where the oracle reads NaN too: not a failure
    assert outcome.status is Status.PASS and outcome.metrics["out"]["nonfinite_mismatches"] == 0


def test_a_saturating_fp8_writer_is_noted_only_for_shaped_values():
    saturating = dense_case(dtype="fp8_e4m3", k_scale=0.004)
    assert generate(saturating).notes == ()
    notes = generate(dataclasses.replace(saturating, q_values="latent")).notes
    assert notes and all("saturated" in n and "fp8 writer" in n for n in notes)


@pytest.mark.parametrize("name, killed_by, spared", [
    ("no_max_subtraction", dict(q_values="large"), dict(q_values="latent")),
    ("flush_subnormals", dict(dtype="fp8_e4m3", k_scale=1.0, kv_values="tiny"), dict(kv_values="tiny")),
])
def test_the_value_mutants_die_on_their_values_only(name, killed_by, spared):
    mutant = load_mutant(name)
    assert run(dense_case(**killed_by), mutant, "cpu").status is Status.FAIL
    for kw in ({}, spared, dict(dtype="fp8_e4m3", k_scale=1.0)):
        outcome = run(dense_case(**kw), mutant, "cpu")
        assert outcome.status is Status.PASS, (kw, outcome.messages)


@pytest.mark.parametrize("key, value, scenario, message", [
    ("q_values", "huge", "call", "unknown q values 'huge'"),
    ("kv_values", "tiny", "graph", "applies to the scenarios call"),
    ("layout", "strided", "padding", "applies to the scenarios call, determinism"),
])
def test_bad_value_and_layout_fields_are_one_line(key, value, scenario, message):
    with pytest.raises(InputError, match=f"here: {key}: .*{message}"):
        validate_case(Case(id="x/y/0", seed=1, scenario=scenario, **{key: value}), "here")


def test_the_values_suite_passes_on_the_torch_backend():
    outcomes = {c.id: run(c, TorchBackend(), "cpu") for c in load_suite("values").cases}
    assert {o.status for o in outcomes.values()} == {Status.PASS}, \
        {k: o.messages or o.reason for k, o in outcomes.items() if o.status is not Status.PASS}
    suite = load_suite("values").cases
    for field in ("q_values", "kv_values"):
        assert {getattr(c, field) for c in suite} == set(VALUES)
        assert {getattr(c, field) for c in suite if c.scenario == "sparse"} == set(VALUES)


@pytest.mark.parametrize("mode", ["decode", "verify"])
def test_key_rows_name_the_drawn_tokens_the_pool_holds_for_every_key_a_row_sees(mode):
    """With a radix prefix, the requests that share it read the tokens of the one that wrote it: so do the rows."""
    case = dense_case(mode=mode, draft_tokens=2 if mode == "verify" else 1, batch_size=4, shared_prefix=128,
                      seqlen="uniform:130:300")
    inputs = generate(case)
    cache = cache_seqlens_for(case, draw_seq_lens(case))
    gen = torch.Generator().manual_seed(case.seed)          # the draws, as ``generate`` makes them
    draw_normal((case.batch_size, case.s_q, case.heads, case.d_qk), gen, torch.bfloat16)
    tokens = draw_normal((sum(cache), 1, case.d_qk), gen, torch.bfloat16)
    rows, pool = key_rows.dense_rows(case, cache, "cpu"), inputs.kv_pool.flatten(0, 1)
    for row in range(rows.tokens.shape[0]):
        r, i = divmod(row, case.s_q)
        seen = cache[r] - case.s_q + 1 + i
        assert int(rows.valid[row].sum()) == seen
        slots = inputs.req_to_token[inputs.req_pool_indices[r], :seen].long()
        assert torch.equal(tokens[rows.tokens[row, :seen]], pool[slots])
    starts = [sum(cache[:r]) for r in range(len(cache))]
    assert any(int(rows.tokens[row, 0]) != starts[row // case.s_q] for row in range(rows.tokens.shape[0]))


@pytest.mark.parametrize("case_id, writer", [("values/sparse-kv/8", "the v32 record writer with the 'amax' scale"),
                                             ("values/fp8-q/0", "the fp8 writer")])
def test_a_writers_doing_is_in_the_row_naming_the_writer(tmp_path, case_id, writer):
    """A zero tile stored as NaN by SGLang's writer (or fp8 saturation) is in the row's ``input_notes``: the
    engine's writer, named, not a kernel failure."""
    import json

    from helpers import run_cli
    out = tmp_path / "r.jsonl"
    code, _, err = run_cli(["run", "--suite", "values", "--case", case_id, "--backend", "torch", "--workers", "0",
                            "--out", str(out), "--no-progress"])
    row = json.loads(out.read_text())
    assert code == 0 and row["status"] == "pass", err
    assert row["input_notes"] and row["input_notes"][0].startswith(f"input: {writer}")
    clean = tmp_path / "clean.jsonl"
    run_cli(["run", "--suite", "smoke", "--case", "smoke/fp8/0", "--backend", "torch", "--workers", "0",
             "--out", str(clean), "--no-progress"])
    assert "input_notes" not in json.loads(clean.read_text()), "a default case's row is as it was"

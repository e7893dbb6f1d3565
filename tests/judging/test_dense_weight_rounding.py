"""The error model's second look on dense answers (harness/judging/weight_rounding.py): a kernel that
rounds each softmax weight to bf16 (fp16) before P.V, as FlashMLA's and SGLang's do, lands exactly where the
model says on KV values large enough that the output cancels; the second look passes it and says why, and it
passes nothing a flat bound over ``2^-8 sum p|v|`` (``2^-11``) would not."""

import dataclasses
import math
import random

import pytest
import torch
from fakes import RoundsWeights

from harness.backends import TorchBackend
from harness.building.inputs import generate
from harness.judging import oracle
from harness.mutants import MUTANTS
from harness.planning.cases import load_suite
from harness.recording.status import Status
from harness.scenarios import run

WEIGHT_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def large_values(dtype):
    """The verify suite's ``large`` KV cases and the values suite's ``latent`` and ``large`` KV ones, as ``dtype``."""
    cases = [c for c in load_suite("verify").cases if c.kv_values == "large" and c.dtype == "bf16"]
    cases += [c for c in load_suite("values").cases if c.kv_values in ("latent", "large") and c.dtype == "bf16"
              and c.group == "kv"]
    return [dataclasses.replace(c, dtype=dtype) for c in cases]


@pytest.mark.parametrize("dtype", WEIGHT_DTYPES)
def test_rounded_weights_on_cancelling_values_pass_on_the_second_look(dtype):
    looked = []
    for case in large_values(dtype):
        outcome = run(case, RoundsWeights(WEIGHT_DTYPES[dtype]), "cpu")
        assert outcome.status is Status.PASS, (case.id, outcome.messages)
        model = outcome.metrics["out"].get("weight_rounding")
        if model:
            looked.append(model)
            assert model["within_model"] == model["over_flat_bound"] > 0 and model["worst_ratio"] <= 1
            assert any(f"{dtype} weight-rounding bound" in w for w in outcome.warnings)
    assert looked, "no case put the rounded weights over the flat bound: the test tests nothing"


def test_fp16_weights_rounded_as_bf16_are_not_within_the_fp16_model():
    """The fp16 look is 8x tighter: a kernel rounding its fp16 rows' weights to bf16 stays a failure."""
    statuses = {run(c, RoundsWeights(torch.bfloat16), "cpu").status for c in large_values("fp16")}
    assert Status.FAIL in statuses


@pytest.mark.parametrize("dtype", WEIGHT_DTYPES)
def test_a_wrong_kernel_still_fails_on_the_same_cases(dtype):
    for case in large_values(dtype):
        assert run(case, MUTANTS["wrong_softmax_scale"](), "cpu").status is Status.FAIL


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_the_magnitudes_are_the_weights_times_the_absolute_values(kv_heads):
    case = next(c for c in load_suite("verify").cases if c.dtype == "bf16" and c.s_q > 1)
    inputs = generate(dataclasses.replace(case, kv_heads=kv_heads), "cpu")
    b, s_q, heads, d = inputs.q.shape
    rows = torch.arange(b * s_q)
    values, scores = oracle.value_magnitudes(inputs, rows), oracle.score_magnitudes(inputs, rows)
    sets = oracle.key_sets(inputs)
    for t in rows.tolist():
        r, i = divmod(t, s_q)
        slots = torch.from_numpy(sets.slot_list(r)[:sets.visible[r, i]])
        for h in range(heads):
            keys = inputs.kv_pool[:, :, h // (heads // kv_heads)].reshape(-1, d).double()[slots]
            q = inputs.q[r, i, h].double()
            p = torch.softmax(keys @ q * inputs.softmax_scale, dim=-1)
            assert torch.allclose(values[t, h], p @ keys[:, :inputs.d_v].abs(), rtol=1e-12, atol=1e-12)
            want = inputs.softmax_scale * (p @ (keys.abs() * q.abs()).sum(-1))
            assert math.isclose(scores[t, h].item(), want.item(), rel_tol=1e-12)


def test_float32_scores_of_large_q_pass_on_the_lse_look_and_a_wrong_lse_does_not():
    """``q_values = "large"``: a row's scores reach 88 after heavy cancellation, and a float32 kernel's LSE
    moves by its scores' rounding, which the flat LSE bound does not follow; the LSE's look does."""
    base = [c for c in load_suite("values").cases if c.q_values == "large" and c.dtype == "bf16"
            and c.scenario == "call"]
    rng = random.Random(0)
    looked, worst = 0, 0.0
    for i in range(40):
        case = dataclasses.replace(rng.choice(base), seed=rng.randrange(1 << 30), id=f"values/large/{i}",
                                   seqlen=rng.choice(["uniform:1:8", "uniform:1:64", "list:1,2,3"]))
        outcome = run(case, TorchBackend(), "cpu")
        assert outcome.status is Status.PASS, outcome.messages
        model = outcome.metrics["lse"].get("score_rounding")
        if model:
            looked += 1
            worst = max(worst, model["worst_ratio"])
            assert any("score-rounding bound" in w for w in outcome.warnings)
        assert run(case, MUTANTS["lse_base2"](), "cpu").status is Status.FAIL
    assert looked and worst <= 0.5, (looked, worst)


def test_the_look_reads_only_the_slots_its_rows_read_in_blocks_of_rows(monkeypatch):
    """A serving-scale pool whole in float64 is tens of GiB (on an 80 GB H100 the look asked for 37 GiB): a
    block's keys are the slots its rows read, and a block holds no more listed keys than the bound says."""
    case = next(c for c in load_suite("verify").cases if c.dtype == "bf16" and c.s_q > 1)
    inputs = generate(dataclasses.replace(case, kv_heads=2, extra_pages=64), "cpu")
    b, s_q, heads, d = inputs.q.shape
    rows = torch.arange(0, b * s_q, 2)
    whole = oracle.value_magnitudes(inputs, rows), oracle.score_magnitudes(inputs, rows)
    sets = oracle.key_sets(inputs)
    read = {int(s) for t in rows.tolist() for s in sets.slot_list(t // s_q)[:sets.visible[t // s_q, t % s_q]]}
    blocks = list(oracle._listed_rows(inputs, rows))
    assert len(blocks) == 1 and all(keys.shape[0] == len(read) for _, keys, _ in blocks[0])
    assert len(read) < inputs.kv_pool.shape[0] * inputs.kv_pool.shape[1]      # the pool holds more than that
    monkeypatch.setattr(oracle, "LOOK_BLOCK_ELEMENTS", 1)                      # a block a row
    assert len(list(oracle._listed_rows(inputs, rows))) == len(rows)
    # the same sums, each row padded to its block's longest rather than all rows' (another summation order)
    assert torch.allclose(oracle.value_magnitudes(inputs, rows), whole[0], rtol=1e-12, atol=0)
    assert torch.allclose(oracle.score_magnitudes(inputs, rows), whole[1], rtol=1e-12, atol=0)

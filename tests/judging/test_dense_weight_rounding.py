"""The bf16 error model's second look on dense answers (harness/judging/weight_rounding.py): a kernel that
rounds each softmax weight to bf16 before P.V, as FlashMLA's and SGLang's do, lands exactly where the model
says on KV values large enough that the output cancels; the second look passes it and says why, and it
passes nothing a flat bound over ``2^-8 sum p|v|`` would not."""

import pytest
import torch

from harness.backends import TorchBackend
from harness.building.inputs import generate
from harness.judging import oracle
from harness.mutants import MUTANTS
from harness.planning.cases import load_suite
from harness.recording.status import Status
from harness.scenarios import run


class RoundsWeights(TorchBackend):
    """The torch backend with its softmax weights rounded to bf16 before the P.V product."""

    name = "rounds-weights"

    def weights(self, p):
        return p.to(torch.bfloat16).float()


@pytest.fixture(scope="module")
def large_values():
    return [c for c in load_suite("verify").cases if c.kv_values == "large" and c.dtype == "bf16"]


def test_rounded_weights_on_cancelling_values_pass_on_the_second_look(large_values):
    looked = []
    for case in large_values:
        outcome = run(case, RoundsWeights(), "cpu")
        assert outcome.status is Status.PASS, outcome.messages
        model = outcome.metrics["out"].get("weight_rounding")
        if model:
            looked.append(model)
            assert model["within_model"] == model["over_flat_bound"] > 0 and model["worst_ratio"] <= 1
            assert any("weight-rounding bound" in w for w in outcome.warnings)
    assert looked, "no case put the rounded weights over the flat bound: the test tests nothing"


def test_a_wrong_kernel_still_fails_on_the_same_cases(large_values):
    for case in large_values:
        assert run(case, MUTANTS["wrong_softmax_scale"](), "cpu").status is Status.FAIL


def test_the_magnitudes_are_the_weights_times_the_absolute_values():
    case = next(c for c in load_suite("verify").cases if c.dtype == "bf16" and c.s_q > 1)
    inputs = generate(case, "cpu")
    b, s_q, heads, d = inputs.q.shape
    rows = torch.arange(b * s_q)
    got = oracle.value_magnitudes(inputs, rows)
    sets = oracle.key_sets(inputs)
    pool = inputs.kv_pool.reshape(-1, d).double()
    for t in rows.tolist():
        r, i = divmod(t, s_q)
        keys = pool[torch.from_numpy(sets.slot_list(r)[:sets.visible[r, i]])]
        p = torch.softmax(inputs.q[r, i].double() @ keys.T * inputs.softmax_scale, dim=-1)
        want = p @ keys[:, :inputs.d_v].abs() if len(keys) else torch.zeros(heads, inputs.d_v, dtype=torch.float64)
        assert torch.allclose(got[t], want, rtol=1e-12, atol=1e-12)

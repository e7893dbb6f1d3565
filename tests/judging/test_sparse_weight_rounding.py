"""The error model's second look on sparse answers (harness/judging/weight_rounding.py): a sparse kernel that
rounds each softmax weight to bf16 before P.V lands over the flat bf16 bound on latent and large KV values, and
within the weight-rounding model, which passes it and says why; a wrong kernel still fails there.  Among the
cases: the one a fuzz campaign shrank from FlashMLA's sparse decode failing on large KV values
(docs/kernel-findings.md, "Found by fuzzing"), which rounded weights alone do not put past the model."""

from pathlib import Path

import pytest
from fakes import RoundsWeights

from harness.planning.cases import load_suite, parse_suite
from harness.recording.status import Status
from harness.scenarios import run


class WrongScale(RoundsWeights):
    """Rounds its weights too, and scales its scores 2% off: a wrong kernel, whatever its rounding."""

    name = "wrong-scale"

    def sparse_attend(self, q, keys, valid, scale, d_v):
        return super().sparse_attend(q, keys, valid, scale * 1.02, d_v)


FUZZ_SHRUNK = {"group": [{"name": "large-kv", "mode": "verify", "scenario": "sparse", "seqlen": "equal:3",
                          "batch_size": 6, "heads": 112, "draft_tokens": 5, "page_size": 69, "topk": 128,
                          "verify_rows": "per_request", "kv_values": "large", "extra_pages": 1,
                          "softmax_scale": 0.030322683585054203}]}


def large_values():
    """The shipped sparse cases with latent or large KV values, and the fuzz campaign's shrunk one."""
    shipped = [c for s in ("values", "sparse", "sparse-v4") for c in load_suite(s).cases
               if c.scenario == "sparse" and c.kv_values in ("latent", "large")]
    return shipped + parse_suite(FUZZ_SHRUNK, Path("fuzz-shrunk.toml")).cases


def test_the_cases_are_there():
    assert len(large_values()) >= 5


@pytest.mark.parametrize("case", large_values(), ids=lambda c: c.id)
def test_rounded_weights_pass_on_the_second_look(case):
    outcome = run(case, RoundsWeights(), "cpu")
    assert outcome.status is Status.PASS, (case.id, outcome.messages)
    model = outcome.metrics["out"].get("weight_rounding")
    assert model, f"{case.id}: the rounded weights stayed within the flat bound: the case tests no look"
    assert model["within_model"] == model["over_flat_bound"] > 0 and model["worst_ratio"] <= 1
    assert any("bf16 weight-rounding bound" in w for w in outcome.warnings)


@pytest.mark.parametrize("case", large_values(), ids=lambda c: c.id)
def test_a_wrong_kernel_still_fails_on_them(case):
    outcome = run(case, WrongScale(), "cpu")
    assert outcome.status is Status.FAIL and "out.element" in outcome.failed_checks, outcome.messages

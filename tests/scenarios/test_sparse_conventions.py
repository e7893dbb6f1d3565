"""Sparse conventions a backend declares rather than fails on: no LSE at all (out alone is checked, and the
row says so), and a missing LSE where one is declared (a failed check, never a pass).  And every judged
sparse row's noise floor."""

import dataclasses

from harness.backends import TorchBackend
from harness.judging import weight_rounding
from harness.judging.tolerances import TOLERANCES
from harness.planning.cases import Case, validate_case
from harness.recording.status import Status
from harness.scenarios import sparse as scenario

CASE = dict(id="sparse/t/0", seed=8, scenario="sparse", topk=64, heads=16, batch_size=3, seqlen="list:0,90,300")


class NoLse(TorchBackend):
    name = "no-lse"
    declared = False

    def __init__(self):
        super().__init__()
        sparse = dataclasses.replace(self.capabilities.sparse, has_lse=self.declared)
        self.capabilities = dataclasses.replace(self.capabilities, sparse=sparse)

    def run_sparse(self, inputs):
        return super().run_sparse(inputs)[0], None


class DeclaresLseReturnsNone(NoLse):
    name = "lse-missing"
    declared = True


def test_a_backend_declaring_no_lse_is_judged_on_out_and_says_so():
    outcome = scenario.run(validate_case(Case(**CASE), "t"), NoLse(), "cpu")
    assert outcome.status is Status.PASS, outcome.messages
    assert "lse" not in outcome.metrics and outcome.metrics["out"]["passed"]
    assert outcome.details["sparse_conventions"]["has_lse"] is False


def test_an_lse_declared_but_not_returned_fails():
    outcome = scenario.run(validate_case(Case(**CASE), "t"), DeclaresLseReturnsNone(), "cpu")
    assert outcome.status is Status.FAIL and any(c.startswith("lse.") for c in outcome.failed_checks)
    assert "has_lse" not in outcome.details["sparse_conventions"]       # the default: the row keeps its keys


def test_a_sparse_row_has_its_noise_floor_passing_or_failing(monkeypatch):
    v4 = dict(CASE, d_qk=512, kv_format="v4", kv_scales="ue8m0", extra_topk=64, extra_page_size=2,
              extra_seqlen="list:20,0,70", topk_length="random", extra_topk_length="random", sink="inf")
    cases = [validate_case(Case(**fields), "t") for fields in (CASE, v4)]
    for case in cases:
        outcome = scenario.run(case, TorchBackend(), "cpu")
        assert outcome.status is Status.PASS and 0 < outcome.metrics["noise_floor"]["out"]["over_floor"] < 10
    # bounds 1000x tighter fail the same right kernel: its error over its floor does not depend on the bound
    tol = TOLERANCES["bf16"]
    tight = {name: dataclasses.replace(b, atol=b.atol * 1e-3, rtol=b.rtol * 1e-3)
             for name, b in (("out", tol.out), ("lse", tol.lse))}
    monkeypatch.setitem(TOLERANCES, "bf16", dataclasses.replace(tol, **tight))
    monkeypatch.setattr(weight_rounding, "RECHECK_MAX_ELEMENTS", 0)     # and no second look: its models keep scale
    for case in cases:
        outcome = scenario.run(case, TorchBackend(), "cpu")
        floor = outcome.metrics["noise_floor"]
        assert outcome.status is Status.FAIL and floor["emulation"] == "float32"
        assert floor["out"]["floor"] > 0 and 0 < floor["out"]["over_floor"] < 10, floor

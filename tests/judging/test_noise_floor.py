"""The noise floor (harness/judging/noise_floor.py): a float32 emulation's error against the float64 oracle,
measured as the kernel's is, and the kernel's error over it, in every compared row, the findings and the
report's scoreboard."""

import dataclasses
import math

import pytest
import torch

from harness.backends import TorchBackend
from harness.judging import weight_rounding
from harness.judging.checks import over_floor
from harness.judging.compare import TensorCheck
from harness.judging.noise_floor import summary, worst_ratios
from harness.judging.tolerances import TOLERANCES
from harness.mutants import MUTANTS
from harness.planning.cases import load_suite
from harness.recording.findings import cluster, finding_record
from harness.recording.status import Status
from harness.scenarios import run


def _check(name, worst, nonfinite=0):
    return TensorCheck(name=name, passed=True, shape=(1,), worst_ratio=worst, nonfinite_mismatches=nonfinite)


def test_summary_is_the_kernels_worst_error_over_the_floors():
    got = summary({"out": _check("out", 6.0), "lse": _check("lse", 0.5)}, [0.25, 0.0])
    assert got["out"] == {"floor": 0.25, "over_floor": 24.0}
    assert got["lse"] == {"floor": 0.0, "over_floor": None}       # an exact emulation: no multiple of it
    nan_out = summary({"out": _check("out", 1.0, nonfinite=3)}, [0.5, 0.1])
    assert math.isinf(nan_out["out"]["over_floor"])
    assert summary({"out": _check("out", 1.0)}, None) is None


def test_the_floors_out_is_rounded_to_the_engines_dtype_as_a_kernel_stores_it():
    exact = torch.full((1, 1, 1, 4), 1.0 + 2**-10, dtype=torch.float64)
    lse = torch.tensor([[[2.0, math.inf]]], dtype=torch.float64)          # an empty row shared: left out
    tol = TOLERANCES["bf16"]
    got = worst_ratios((exact.float(), lse.float()), (exact, lse), torch.bfloat16, tol).tolist()
    # bf16 rounds 1 + 2^-10 to 1: the error 2^-10 over the bound; the LSE is exact in float32
    assert got == [2**-10 / (tol.out.atol + tol.out.rtol * (1 + 2**-10)), 0.0]
    assert worst_ratios((exact.float(), lse.float()), (exact, lse), torch.float32, tol).tolist() == [0.0, 0.0]


def _scaled(tol, by):
    def bound(b):
        return dataclasses.replace(b, atol=b.atol * by, rtol=b.rtol * by)
    return dataclasses.replace(tol, out=bound(tol.out), lse=bound(tol.lse))


@pytest.fixture(scope="module")
def smoke_rows():
    cases = [c for c in load_suite("smoke").cases if c.mode == "decode"]
    clean = [run(c, TorchBackend(), "cpu") for c in cases]
    broken = [run(c, MUTANTS["wrong_softmax_scale"](), "cpu") for c in cases]
    # the clean kernel again under bounds 1000x tighter, so that it fails and its floor is measured: the
    # kernel's error over its floor is a ratio of two errors, the bound's scale cancels out of it
    with pytest.MonkeyPatch.context() as mp:
        for dtype in {c.dtype for c in cases}:
            mp.setitem(TOLERANCES, dtype, _scaled(TOLERANCES[dtype], 1e-3))
        mp.setattr(weight_rounding, "RECHECK_MAX_ELEMENTS", 0)     # and no second look: its models keep scale
        tight = [run(c, TorchBackend(), "cpu") for c in cases]
    return cases, clean, broken, tight


def test_a_row_that_passes_carries_its_floor_too(smoke_rows):
    _, clean, _, _ = smoke_rows
    assert clean and all(o.status is Status.PASS for o in clean)
    for outcome in clean:
        floor = outcome.metrics["noise_floor"]
        # under its bound, the right kernel's error over the floor is the same ratio as under tight bounds
        assert floor["out"]["floor"] > 0 and 0 < floor["out"]["over_floor"] <= 2


def test_a_right_kernel_that_fails_tight_bounds_sits_near_its_floor(smoke_rows):
    _, _, _, tight = smoke_rows
    assert tight and all(o.status is Status.FAIL for o in tight)
    for outcome in tight:
        floor = outcome.metrics["noise_floor"]
        assert floor["emulation"] == "float32" and floor["out"]["floor"] > 0
        # the torch backend computes in float32 and rounds out to bf16, as the emulation does
        assert 0 < floor["out"]["over_floor"] <= 2 and 0 <= floor["lse"]["over_floor"] < 10


def test_a_wrong_kernel_lands_hundreds_of_floors_away_and_the_finding_says_so(smoke_rows):
    cases, _, broken, _ = smoke_rows
    failing = [o for o in broken if o.status is Status.FAIL]
    assert failing and all(o.metrics["noise_floor"]["out"]["over_floor"] > 100 for o in failing)
    rows = [{"case_id": c.id, "backend": "mutant:wrong_softmax_scale", "status": o.status.value, "mode": c.mode,
             "dtype": c.dtype, "metrics": o.metrics, "failed_checks": o.failed_checks}
            for c, o in zip(cases, broken) if o.status is Status.FAIL]
    assert all(over_floor(r["metrics"], "out") > 100 for r in rows)
    (finding,) = cluster([finding_record(r) for r in rows])
    assert "its noise floor)" in finding.evidence, finding.evidence

"""A NaN/inf mismatch is named by its direction: a kernel that makes a NaN is one finding, a kernel that
writes a finite value where the reference has NaN (it hid a NaN of its inputs) another.  The rows are as
the results file stores them (non-finite floats as strings)."""

from harness.fuzz.signature import describe
from harness.fuzz.signature import signature as fuzz_signature
from harness.recording.findings import cluster, finding_record, signature


def row(case_id, got, expected):
    out = {"name": "out", "failures": ["nonfinite"], "nonfinite_mismatches": 8, "passed": False,
           "first_nonfinite_actual": got, "first_nonfinite_expected": expected, "worst_ratio": 0.0}
    return {"case_id": case_id, "backend": "k", "status": "fail", "mode": "decode", "dtype": "bf16",
            "failed_checks": ["out.nonfinite"], "metrics": {"out": out}}


def test_a_finite_value_where_the_reference_is_nan_is_a_hidden_nan():
    assert signature(row("a/b/0", 0.0, "nan"))[2] == "hidden"
    assert signature(row("a/b/0", "nan", 0.5))[2] == "nonfinite"
    assert signature(row("a/b/0", "inf", "nan"))[2] == "nonfinite"     # both non-finite: not a hidden one


def test_the_two_directions_are_two_findings_with_their_own_words():
    found = cluster([finding_record(row("a/b/0", 0.0, "nan")), finding_record(row("a/b/1", "nan", 1.0))])
    words = sorted(f.evidence for f in found)
    assert len(found) == 2
    assert words[0].startswith("NaN/inf in out where the reference is finite")
    assert words[1].startswith("finite out where the reference is NaN/inf")
    assert describe(fuzz_signature(row("a/b/0", 0.0, "nan"))) == "fail: out finite where the reference is NaN/inf"

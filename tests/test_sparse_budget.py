"""A sparse case is budgeted once, by the runner's precheck, with its own estimate (``sparse_inputs``) against
memory measured before any worker ran: inside a worker, three others' cases made two cases of the
upstream matrix "too large" on an H200 they fit (docs/gpu-runs.md, 2026-12-04)."""

from harness import resources
from harness.cases import load_suite
from harness.sparse_inputs import estimated_bytes


def test_a_sparse_case_is_budgeted_with_its_own_estimate():
    case = next(c for c in load_suite("sparse").cases)
    need = estimated_bytes(case)["total"]
    assert resources.too_large_reason(case, "cuda", available=int(need / resources.CUDA_FRACTION) + 1) is None
    reason = resources.too_large_reason(case, "cuda", available=need)
    assert reason.startswith("too large for this machine") and "records" in reason, reason


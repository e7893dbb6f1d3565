"""sparse-scale: serving-size sparse cases; one too large for the machine is unsupported with the numbers."""

from harness.backends.torch_backend import TorchBackend
from harness.building.sparse_inputs import estimated_bytes
from harness.planning.cases import load_suite
from harness.recording.status import Status
from harness.running.runner import run_case


def test_the_suite_covers_the_issues_scale():
    cases = load_suite("sparse-scale").cases
    assert {c.topk for c in cases if not c.extra_topk} == {2048} and {c.heads for c in cases} == {64, 128}
    # DeepSeek V4's layers: the 128-token window with C4's top-512 or C128's every entry (8,192 at 1M tokens)
    assert {(c.topk, c.extra_topk) for c in cases if c.extra_topk} == {(128, 512), (128, 8192)}
    assert any(c.seqlen == "equal:1048576" and c.extra_seqlen == "ratio:128" for c in cases)
    assert max(c.batch_size for c in cases) >= 512 and min(c.batch_size for c in cases) >= 8
    assert any(c.seqlen == "equal:163840" for c in cases) and {c.dtype for c in cases} == {"bf16"}
    assert {c.kv_format for c in cases} == {"v32", "v4"} and any(c.mode == "verify" for c in cases)


def test_a_case_over_the_budget_is_unsupported_with_its_estimate_before_anything_is_built(monkeypatch):
    """The runner's precheck budgets a sparse case with its own estimate (``resources.too_large_reason``),
    against memory measured before any worker ran: measured inside a worker, three others' cases made two
    upstream cases "too large" on an H200 they fit (docs/archive/gpu-runs-history.md, 2026-12-04)."""
    case = next(c for c in load_suite("sparse").cases if c.id == "sparse/corners/0")
    need = estimated_bytes(case)
    assert need["total"] == sum(v for k, v in need.items() if k != "total") > 0
    monkeypatch.setattr("harness.running.resources.available_bytes", lambda device: (need["total"], "a test's"))
    row = run_case(case, TorchBackend(), "torch", "cpu")      # half of it is the CPU budget: too large
    assert row["status"] == Status.UNSUPPORTED.value
    assert "too large for this machine" in row["reason"] and "draws" in row["reason"]
    monkeypatch.setattr("harness.running.resources.available_bytes", lambda device: (4 * need["total"], "a test's"))
    assert run_case(case, TorchBackend(), "torch", "cpu")["status"] == Status.PASS.value


def test_the_estimate_grows_with_the_tokens_written():
    small, large = (next(c for c in load_suite("sparse-scale").cases if c.id == f"sparse-scale/decode-batch/{i}")
                    for i in (0, 2))                  # batches of 128 and 512, same length distribution
    assert large.batch_size == 4 * small.batch_size
    assert estimated_bytes(large)["draws"] > 3 * estimated_bytes(small)["draws"]

"""The FlashMLA backend: what it says without a GPU, and the real kernel where there is one."""

import pytest
import torch

from harness.backends.flashmla import FlashMLABackend, find_api
from harness.planning.cases import load_suite
from harness.running.runner import run_case

api, import_errors = find_api()
needs_kernel = pytest.mark.skipif(
    not torch.cuda.is_available() or api is None,
    reason="needs a CUDA device and a FlashMLA package (sgl_kernel.flash_mla or flash_mla); "
           + ("no CUDA device here" if not torch.cuda.is_available() else "; ".join(import_errors)))


def test_without_a_kernel_every_case_is_unsupported_with_a_reason():
    if torch.cuda.is_available() and api is not None:
        pytest.skip("a CUDA device and a FlashMLA package are present: this checks the fallback without them")
    backend = FlashMLABackend()
    assert not backend.available()
    for case in load_suite("smoke").cases:
        row = run_case(case, backend, "flashmla", "cpu")
        assert row["status"] == "unsupported"
        assert "CUDA" in row["reason"] or "FlashMLA" in row["reason"]


def test_auto_falls_back_to_torch_without_a_kernel_and_says_why():
    from harness.backends import resolve_auto
    chosen, notes = resolve_auto("cuda" if torch.cuda.is_available() else "cpu")
    if torch.cuda.is_available() and api is not None:
        assert "flashmla" in chosen and "flashmla: runs here" in notes
    else:
        assert chosen == ["torch"]
        assert any(n.startswith("flashmla: ") and "runs here" not in n for n in notes), notes
        assert "not a kernel" in notes[-1]


@needs_kernel
@pytest.mark.parametrize("suite", ["smoke", "graph"])
def test_real_kernel_passes(suite):
    backend = FlashMLABackend()
    rows = [run_case(c, backend, "flashmla", "cuda") for c in load_suite(suite).cases]
    bad = [(r["case_id"], r["status"], r.get("reason")) for r in rows if r["status"] not in ("pass", "unsupported")]
    assert not bad
    assert rows[0]["backend_info"]["package"] in ("sgl_kernel.flash_mla", "flash_mla")


@needs_kernel
def test_e5m2_is_reported_unsupported_not_passed():
    case = next(c for c in load_suite("fp8").cases if c.dtype == "fp8_e5m2")
    row = run_case(case, FlashMLABackend(), "flashmla", "cuda")
    assert row["status"] == "unsupported" and "e4m3" in row["reason"]

"""mla-verify bench on sparse cases: verified first, then timed and counted as FlashMLA's sparse test counts."""

import pytest
import torch
from helpers import run_cli

from harness.bench import ceilings, counting
from harness.bench.runner import BenchOptions, run_bench
from harness.bench.sparse import SCOPE
from harness.building.sparse_inputs import build
from harness.mutants.sparse import SinkIgnored
from harness.planning.cases import load_suite
from harness.recording.results import read_rows

FAKE = ceilings.Ceilings("cpu", 1e11, 1e12, "test", "now", torch.__version__)


def _case(case_id):
    return next(c for c in load_suite("sparse").cases if c.id == case_id)


def test_count_sparse_follows_flashmlas_formula():
    scase = build(_case("sparse/corners/3"), "cpu")          # repeated slots and -1 tails
    inputs = scase.inputs
    n, s_q, h, d_qk = inputs.q.shape
    work = counting.count_sparse(inputs, scase.inputs.indices)
    assert work.flops == 2 * n * s_q * h * inputs.topk * (d_qk + inputs.d_v)
    distinct = len(set(scase.inputs.indices[scase.inputs.indices >= 0].tolist()))
    listed = int((scase.inputs.indices >= 0).sum())
    assert 0 < distinct < listed                                # a repeat is read once
    assert work.bytes == distinct * 656 + n * s_q * h * (d_qk + inputs.d_v) * 2


def test_v4_records_count_upstreams_576_bytes():
    scase = build(next(c for c in load_suite("sparse").cases if c.kv_format == "v4"), "cpu")
    n, s_q, h, d_qk = scase.inputs.q.shape
    distinct = int(scase.inputs.indices[scase.inputs.indices >= 0].unique().numel())
    assert counting.count_sparse(scase.inputs, scase.inputs.indices).bytes == \
        distinct * 576 + n * s_q * h * (d_qk + scase.inputs.d_v) * 2


@pytest.mark.parametrize("backend, timed", [("torch", True), ("sink_ignored", False)])
def test_a_sparse_case_is_verified_then_timed(backend, timed):
    from harness.running.backend_loader import load_backend
    impl = SinkIgnored() if backend == "sink_ignored" else load_backend("torch")
    case = _case("sparse/sinks/0")
    rows = run_bench([case], [(backend, impl)], "cpu", FAKE, BenchOptions(iters=2, warmup=0), lambda r: None)
    (row,) = rows
    assert row["bench"]["timed"] is timed
    if timed:
        assert row["status"] == "pass" and row["bench"]["kernel_scope"] == SCOPE
        scase = build(case, "cpu")
        assert row["bench"]["flops"] == counting.count_sparse(scase.inputs, scase.inputs.indices).flops
    else:
        assert row["status"] == "fail" and "a wrong kernel has no speed" in row["bench"]["why"]


def test_the_bench_command_takes_a_sparse_case(tmp_path, monkeypatch):
    monkeypatch.setenv("MLA_VERIFY_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ceilings, "measure", lambda device: FAKE)
    code, out, err = run_cli(["bench", "--suite", "sparse", "--case", "sparse/corners/1", "--device", "cpu",
                              "--backend", "torch", "--iters", 1, "--warmup", 0, "--out", tmp_path / "b.jsonl"])
    assert code == 0, err
    (row,) = read_rows(tmp_path / "b.jsonl")
    assert row["status"] == "pass" and row["bench"]["timed"] and row["bench"]["bytes"] > 0

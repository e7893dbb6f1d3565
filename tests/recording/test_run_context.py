"""Whether a case waits for the device is an argument, and every row is built in ``outcome.py``."""

import textwrap

from harness import environment
from harness.backends.torch_backend import TorchBackend
from harness.planning.cases import load_suite
from harness.recording.outcome import Outcome, context_lost_row, result_row
from harness.recording.status import Status
from harness.running.chunk import run_chunk
from harness.scenarios import _common

SUITE = textwrap.dedent('''
    [suite]
    seed = 7
    [defaults]
    batch_size = 2
    heads = 4
    d_qk = 40
    d_v = 32
    page_size = 8
    seqlen = "uniform:1:20"
    [[group]]
    name = "whole"
    scenario = ["determinism", "padding", "batch_invariance"]
    [[group]]
    name = "one"
    scenario = "call"
''')


def _cases(tmp_path):
    suite = tmp_path / "ctx.toml"
    suite.write_text(SUITE)
    return load_suite(str(suite)).cases


def test_every_launch_of_a_chunk_gets_the_chunks_waits(tmp_path, monkeypatch):
    """Whole scenarios (several launches each) and one-call ones: a chunk of several in a worker does not
    wait around any kernel, a case alone and a chunk run in this process wait around every one."""
    waited = []
    monkeypatch.setattr(_common, "settle", lambda device, waits: waited.append(waits))
    cases = _cases(tmp_path)
    assert {c.scenario for c in cases} == {"determinism", "padding", "batch_invariance", "call"}
    rows = run_chunk(cases, TorchBackend(), "torch", "cpu", context_lost=lambda row: False)
    assert {r["status"] for r in rows} == {"pass"} and waited and not any(waited)
    waited.clear()
    run_chunk(cases, TorchBackend(), "torch", "cpu")                  # nobody could run them again
    assert waited and all(waited)
    waited.clear()
    run_chunk(cases[:1], TorchBackend(), "torch", "cpu", context_lost=lambda row: False)      # alone
    assert waited and all(waited)


def test_reference_ms_is_the_compare_steps_phase_time_and_only_its():
    case = load_suite("smoke").cases[0]
    phases = {"inputs": 1.0, "kernel": 2.0, "oracle": 3.0, "compare": 0.5}
    compared = result_row(case, TorchBackend(), "torch", "cpu", Outcome.compared_with_oracle([]),
                          phase_ms=phases).to_json()
    assert compared["reference_ms"] == 3.5 and compared["phase_ms"] == phases and compared["status"] == "pass"
    judged = result_row(case, TorchBackend(), "torch", "cpu", Outcome.judged([], kernel_ms=1.0),
                        phase_ms=phases).to_json()
    assert judged["reference_ms"] is None and judged["kernel_ms"] == 1.0
    unsupported = result_row(case, TorchBackend(), "torch", "cpu", Outcome.unsupported("no")).to_json()
    assert "reference_ms" not in unsupported and "phase_ms" not in unsupported


def test_a_row_built_in_the_parent_names_the_gpu_its_case_ran_on(monkeypatch):
    case = load_suite("smoke").cases[0]
    lost = Outcome.lost(Status.CRASH, "died")
    no_gpu = {**environment.describe(), "gpu": None}                # a machine with no GPU, on a GPU box too
    monkeypatch.setattr(environment, "describe", lambda: dict(no_gpu))
    on_cpu = result_row(case, TorchBackend(), "torch", "cpu", lost, gpu="GPU 3").to_json()
    assert on_cpu["env"]["gpu"] is None                               # no GPU here: nothing to name
    env = {**environment.describe(), "gpu": "the parent's GPU 0"}
    monkeypatch.setattr(environment, "describe", lambda: dict(env))
    assert result_row(case, TorchBackend(), "torch", "cuda", lost, gpu="GPU 3").to_json()["env"]["gpu"] == "GPU 3"
    assert result_row(case, TorchBackend(), "torch", "cuda", lost).to_json()["env"]["gpu"] == "the parent's GPU 0"


def test_a_case_that_lost_the_context_is_recorded_as_a_crash():
    case = load_suite("smoke").cases[0]
    error = result_row(case, TorchBackend(), "torch", "cuda",
                       Outcome.raised("kernel", RuntimeError("CUDA error: an illegal memory access"))).to_json()
    row = context_lost_row(error)
    assert row["status"] == "crash" and row["failed_checks"] == ["crash"]
    assert row["reason"] == "CUDA context lost: RuntimeError: CUDA error: an illegal memory access"
    assert {k: v for k, v in row.items() if k not in ("status", "reason", "failed_checks")} == \
        {k: v for k, v in error.items() if k not in ("status", "reason", "failed_checks")}
    assert error["status"] == "error"                                 # the case's own row is left alone

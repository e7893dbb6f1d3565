"""Crash isolation: a kernel that kills its process or hangs costs one case, not the suite."""

import json
import textwrap

from helpers import heads_keyed_suite, serve_here

from harness import phases
from harness.backends.torch_backend import TorchBackend
from harness.cli import main

SUITE = heads_keyed_suite(seed=5, drafts=3, heads=[4, 5, 6, 7, 8, 9])   # case g/i: 4 + i heads, the plug-in keys on it

PLUGIN = textwrap.dedent('''
    import os, signal, time
    from harness.backends.torch_backend import TorchBackend

    class Fragile(TorchBackend):
        """Dies with SIGKILL on case .../1, aborts on .../3 and hangs on .../4 (5, 7 and 8 heads)."""
        name = "fragile"

        def run(self, inputs):
            heads = inputs.q.shape[2]
            if heads == 5:
                os.kill(os.getpid(), signal.SIGKILL)
            if heads == 7:
                os.abort()
            if heads == 8:
                time.sleep(600)
            return super().run(inputs)
''')


def rows_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_crashing_and_hanging_kernels_do_not_end_the_suite(tmp_path, capsys):
    suite = tmp_path / "iso.toml"
    suite.write_text(SUITE)
    plugin = tmp_path / "fragile.py"
    plugin.write_text(PLUGIN)
    out = tmp_path / "r.jsonl"
    code = main(["run", "--suite", str(suite), "--backend", f"{plugin}:Fragile", "--out", str(out),
                 "--workers", "1", "--timeout", "6", "--no-progress"])   # the hang costs the timeout
    assert code == 1
    status = {r["case_id"]: r["status"] for r in rows_of(out)}
    assert len(status) == 6                                  # every case has its row
    assert status["iso/g/1"] == "crash" and status["iso/g/3"] == "crash"
    assert status["iso/g/4"] == "timeout"
    assert [status[f"iso/g/{i}"] for i in (0, 2, 5)] == ["pass"] * 3   # fresh workers carried on
    reasons = {r["case_id"]: r["reason"] for r in rows_of(out)}
    assert "SIGKILL" in reasons["iso/g/1"] and "SIGABRT" in reasons["iso/g/3"]


def test_resume_skips_recorded_cases_and_fills_in_the_rest(tmp_path, capsys):
    suite = tmp_path / "iso.toml"
    suite.write_text(SUITE)
    out = tmp_path / "r.jsonl"
    assert main(["run", "--suite", str(suite), "--backend", "torch", "--case", "iso/g/2", "--out", str(out),
                 "--workers", "0", "--no-progress"]) == 0
    assert main(["run", "--suite", str(suite), "--backend", "torch", "--resume", str(out),
                 "--workers", "1", "--no-progress"]) == 0
    ids = [r["case_id"] for r in rows_of(out)]
    assert sorted(ids) == sorted(f"iso/g/{i}" for i in range(6))   # 2 once, the others added


def test_a_finished_worker_is_reaped_after_the_run_not_waited_for_in_it(tmp_path):
    """A worker's exit is not waited for inside ``run_isolated`` (``Worker.retire``); ``reap`` waits for it."""
    from harness.planning.cases import load_suite
    from harness.running import isolation
    from harness.running.chunk import run_chunk
    from harness.running.worker_pool import WorkerPool
    cases = load_suite("smoke").cases[:2]
    rows = []
    with WorkerPool() as pool:
        isolation.run_isolated([cases], "torch", "cpu", rows.append, None, run_chunk, workers=1, pool=pool)
        assert [r["case_id"] for r in rows] == [c.id for c in cases]
        retired = list(pool.retiring)
        assert len(retired) == 1
        pool.reap()
        assert not pool.retiring and retired[0].exitcode == 0     # it stopped on its own, not killed


def test_a_gpu_worker_gets_one_thread_and_a_cpu_worker_the_parents_count():
    import torch

    from harness.running.worker_process import worker_job
    assert worker_job("torch", "cuda", None)[2] == 1
    assert worker_job("torch", "cpu", None)[2] == torch.get_num_threads()


def test_only_as_many_spares_as_the_run_uses_are_told_to_load(monkeypatch):
    """A spare told its job loads the backend and makes a CUDA context: one the run will not use must not."""
    from types import SimpleNamespace

    from harness.running.worker_pool import Spare, WorkerPool
    sent = []
    spares = [Spare(SimpleNamespace(is_alive=lambda: True), SimpleNamespace(send=sent.append), None)
              for _ in range(4)]
    pool = WorkerPool()
    pool.spares = spares
    pool.load_in_spare(("job",), 2)
    assert sent == [("job",)] * 2 and [s.job for s in spares] == [("job",), ("job",), None, None]


LOST = "CUDA error: an illegal memory access was encountered"


class _LosesDevice(TorchBackend):
    """A CPU backend whose call on 5 heads raises what a lost CUDA context raises; it notes, per call,
    whether its case waited for the device before the kernel (the last ``waits`` that ``launch`` handed
    ``settle``, seen through ``waited``)."""

    name = "loses-device"

    def __init__(self, waited: list):
        super().__init__()
        self.waited, self.settles = waited, []

    def run(self, inputs):
        self.settles.append(self.waited[-1])
        if inputs.q.shape[2] == 5:
            raise RuntimeError(LOST)
        return super().run(inputs)


def _iso_cases(tmp_path):
    from harness.planning.cases import load_suite
    suite = tmp_path / "iso.toml"
    suite.write_text(SUITE)
    return load_suite(str(suite)).cases          # iso/g/1 has 5 heads


def test_a_lost_device_in_a_chunk_of_several_is_not_placed_alone_it_is(tmp_path, monkeypatch):
    """Cases of a chunk in a worker do not wait for their kernels, so a lost context there may have been
    any case's: the chunk names none.  Alone (or with nobody to run them again) a case waits, and is named."""
    import pytest

    from harness.running.chunk import ContextLost, run_chunk
    from harness.scenarios import _common
    waited = []
    monkeypatch.setattr(_common, "settle", lambda device, waits: waited.append(waits))
    cases = _iso_cases(tmp_path)
    lost = lambda row: LOST in (row.get("reason") or "")     # noqa: E731
    backend = _LosesDevice(waited)
    with pytest.raises(ContextLost) as chunk_of_three:
        run_chunk(cases[:3], backend, "loses-device", "cpu", context_lost=lost)
    assert chunk_of_three.value.index is None and backend.settles == [False, False]
    backend.settles.clear()
    with pytest.raises(ContextLost) as alone:
        run_chunk(cases[1:2], backend, "loses-device", "cpu", context_lost=lost)
    assert alone.value.index == 0 and backend.settles == [True]
    backend.settles.clear()
    rows = run_chunk(cases[:3], backend, "loses-device", "cpu")     # in this process: every case waits
    assert [r["status"] for r in rows] == ["pass", "error", "pass"] and backend.settles == [True] * 3


def _loses_device_in_case_1(cases, backend, backend_spec, device, on_start=None, context_lost=None):
    """``run_chunk`` as a worker runs it, but case iso/g/1 loses the device, as ``run_chunk`` reports it."""
    from harness.running.chunk import ContextLost, run_chunk
    for case in cases:
        if case.id == "iso/g/1":
            row = run_chunk([case], backend, backend_spec, device)[0]
            raise ContextLost(0 if len(cases) == 1 else None, {**row, "status": "error", "reason": LOST})
    return run_chunk(cases, backend, backend_spec, device, on_start=on_start)


def test_a_chunk_that_lost_its_device_runs_again_case_by_case(tmp_path):
    """No case of the chunk is charged; each runs again alone, and only the one that loses the device
    alone is recorded as a crash.  Every case gets exactly one row."""
    from harness.recording.outcome import Outcome, result_row
    from harness.recording.status import Status
    from harness.running import isolation
    cases = _iso_cases(tmp_path)
    rows = []

    def crash_row(case, status, reason, gpu=None):
        return result_row(case, None, "torch", "cpu", Outcome.lost(Status(status), reason), gpu=gpu).to_json()

    isolation.run_isolated([cases], "torch", "cpu", rows.append, crash_row, _loses_device_in_case_1, workers=1)
    status = {r["case_id"]: r["status"] for r in rows}
    assert len(rows) == len(cases) == len(status)
    assert status.pop("iso/g/1") == "crash" and set(status.values()) == {"pass"}
    assert [r["reason"] for r in rows if r["case_id"] == "iso/g/1"] == [f"CUDA context lost: {LOST}"]


def test_settle_waits_only_where_the_case_waits(monkeypatch):
    """Whether ``settle`` waits is its argument alone: no phase clock changes it."""
    import torch

    waits = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: waits.append(1))
    phases.settle("cuda", waits=True)
    phases.settle("cuda", waits=False)
    with phases.PhaseClock():
        phases.settle("cuda", waits=True)
        phases.settle("cuda", waits=False)
    phases.settle("cpu", waits=True)
    assert len(waits) == 2
    kernel_time = phases.KernelTime("cpu").stop()
    assert 0.0 <= float(kernel_time) < 1e3


def test_a_worker_reports_its_cache_with_its_rows_and_empties_it_when_told():
    """The worker's side of the memory gate, run in this process: rows come with the bytes the
    allocator kept, and a request to empty the cache gets what is left (nothing on a CPU)."""
    from harness.planning.cases import load_suite
    from harness.running import worker_process
    from harness.running.chunk import run_chunk
    cases = load_suite("smoke").cases[:1]
    answers = serve_here([worker_process.worker_job("torch", "cpu", run_chunk), cases, worker_process.EMPTY_CACHE,
                          None])
    assert answers[0] == ("ready", None)
    kind, (rows, cache) = answers[1]
    assert kind == "rows" and [r["case_id"] for r in rows] == [cases[0].id] and cache == 0
    assert answers[2:] == [("cache", 0)]

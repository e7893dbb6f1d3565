"""Workers carried over from one backend to the next (``WorkerPool.carry_over``): a finished backend's
worker settles, says so, and loads the next backend's job in the same process, so a kernel package is
imported and its kernels compiled once per process, not once per backend."""

from helpers import serve_here

from harness.planning.cases import load_suite
from harness.running import isolation, worker_process
from harness.running.chunk import run_chunk
from harness.running.worker_pool import WorkerPool


def test_a_worker_told_next_backend_settles_then_loads_and_runs_the_next_job():
    case = load_suite("smoke").cases[:1]
    answers = serve_here([worker_process.worker_job("torch", "cpu", run_chunk), case, worker_process.NEXT_BACKEND,
                           worker_process.worker_job("reference", "cpu", run_chunk), case, None])
    kinds = [kind for kind, _ in answers]
    assert kinds == ["ready", "rows", "kept", "ready", "rows"]
    assert answers[2] == ("kept", True)
    first, second = answers[1][1][0], answers[4][1][0]
    assert [first[0]["backend"], second[0]["backend"]] == ["torch", "reference"]
    assert first[0]["status"] == second[0]["status"] == "pass"


def test_a_worker_that_ends_its_backend_with_none_is_not_kept():
    case = load_suite("smoke").cases[:1]
    answers = serve_here([worker_process.worker_job("torch", "cpu", run_chunk), case, None,
                           worker_process.worker_job("reference", "cpu", run_chunk)])
    assert [kind for kind, _ in answers] == ["ready", "rows"]      # it stopped: the next job was never read


def _two_backends(carry_over: bool):
    cases = load_suite("smoke").cases[:2]
    rows = []
    with WorkerPool(carry_over=carry_over) as pool:
        for spec in ("torch", "reference"):
            isolation.run_isolated([cases], spec, "cpu", rows.append, None, run_chunk, workers=1, pool=pool)
        started, spares = len(pool.started), len(pool.spares)
    return rows, started, spares


def test_the_next_backend_runs_in_the_last_ones_worker_and_the_rows_are_the_same():
    kept_rows, kept_started, kept_spares = _two_backends(carry_over=True)
    fresh_rows, fresh_started, fresh_spares = _two_backends(carry_over=False)
    assert (kept_started, kept_spares) == (1, 1)        # one process for both backends, kept again after
    assert (fresh_started, fresh_spares) == (2, 0)      # a process each, retired

    def key(row):
        return row["backend"], row["case_id"], row["status"], row["metrics"]
    assert [key(r) for r in kept_rows] == [key(r) for r in fresh_rows]
    assert {r["backend"] for r in kept_rows} == {"torch", "reference"} and len(kept_rows) == 4

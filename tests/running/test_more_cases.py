"""``run_cases``'s ``more``: cases asked for once every chunk is handed out run in the same workers, planned and
refused as the first ones are, until ``more`` gives None (a fuzz campaign's rounds, ``fuzz/stream.py``)."""

import pytest

from harness.backends.torch_backend import TorchBackend
from harness.fuzz.campaign import Collect
from harness.planning.cases import load_suite
from harness.running import resources
from harness.running.runner import run_cases
from harness.running.worker_pool import WorkerPool


class Refuses(TorchBackend):
    """The torch backend, refusing the case ``refused`` names."""
    refused = None

    def unsupported_reason(self, case, device):
        return "refused here" if case.id == self.refused else super().unsupported_reason(case, device)


def batches(cases, size):
    """``more`` over ``cases`` after the first ``size``: ``size`` at a time, then None; the calls counted."""
    rest = [cases[i:i + size] for i in range(size, len(cases), size)]
    asked = []

    def more():
        asked.append(len(rest))
        return rest.pop(0) if rest else None
    return cases[:size], more, asked


@pytest.mark.parametrize("workers", [0, 1])
def test_more_cases_run_in_the_same_workers_until_none(workers):
    cases = load_suite("smoke").cases[:6]
    backend = Refuses()
    backend.refused = cases[3].id
    first, more, asked = batches(cases, 2)
    rows = Collect()
    with WorkerPool() as pool:
        run_cases(first, backend, "torch", "cpu", rows, progress=False, workers=workers, pool=pool,
                  memory=resources.available_bytes("cpu"), more=more)
        started = len(pool.started)
    assert sorted(r["case_id"] for r in rows.rows) == sorted(c.id for c in cases)
    by_id = {r["case_id"]: r for r in rows.rows}
    assert by_id[cases[3].id]["status"] == "unsupported" and "refused here" in by_id[cases[3].id]["reason"]
    assert all(by_id[c.id]["status"] == "pass" for c in cases if c is not cases[3])
    assert asked == [2, 1, 0]                   # asked again after each batch, and once more for None
    assert started == workers                   # one worker for every batch (none in this process's case)

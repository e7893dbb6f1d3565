"""Sparse cases on the chunk path: a chunk's answers judged together give the rows each gets alone,
beside dense cases too; an answer forgets its oracle with ``reset``."""

import dataclasses

import pytest
import torch

from harness import scenarios
from harness.backends import TorchBackend
from harness.planning.cases import load_suite
from harness.running.chunk import run_chunk
from harness.scenarios import sparse as scenario

TIMINGS = ("wall_s", "kernel_ms", "reference_ms", "phase_ms", "finished_at", "env")


class DeclaredBf16Product(TorchBackend):
    """The torch path declared as FlashMLA's view: two views compared per case (equal for ue8m0 scales,
    apart for amax ones, where the gating comparison fails)."""

    capabilities = dataclasses.replace(TorchBackend.capabilities, sparse=dataclasses.replace(
        TorchBackend.capabilities.sparse, kv_dequant="bf16_product"))


def sparse_cases(n: int = 8):
    # radix-prefix cases are left out: their shared pages are written by several requests at once
    cases = [c for c in load_suite("sparse").cases if c.group != "radix-prefix" and c.batch_size <= 16]
    picked = {}
    for c in cases:                      # one case of each group first, for variety
        picked.setdefault(c.group, c)
    return list(picked.values())[:n]


def _rows(rows: list[dict]) -> dict:
    return {r["case_id"]: {k: v for k, v in r.items() if k not in TIMINGS} for r in rows}


def _alone(cases, backend) -> dict:
    return _rows([row for c in cases for row in run_chunk([c], backend, "torch", "cpu")])


@pytest.mark.parametrize("backend", [TorchBackend(), DeclaredBf16Product()], ids=["exact", "bf16_product"])
def test_a_chunk_of_sparse_cases_gives_the_rows_each_gets_alone(backend):
    torch.manual_seed(0)
    cases = sparse_cases()
    together = _rows(run_chunk(cases, backend, "torch", "cpu"))
    assert together == _alone(cases, backend)
    assert {r["status"] for r in together.values()} >= {"pass"}
    if isinstance(backend, DeclaredBf16Product):     # the other view is recorded beside the gating one
        assert all("out_exact" in r["metrics"] for r in together.values())


def test_a_chunk_mixing_dense_and_sparse_cases_keeps_each_row_and_its_order():
    torch.manual_seed(0)
    dense = [c for c in load_suite("smoke").cases if c.scenario == "call"][:3]
    sparse = sparse_cases(3)
    mixed = [dense[0], sparse[0], dense[1], sparse[1], sparse[2], dense[2]]
    rows = run_chunk(mixed, TorchBackend(), "torch", "cpu")
    assert [r["case_id"] for r in rows] == [c.id for c in mixed]
    assert _rows(rows) == _alone(mixed, TorchBackend())
    assert all(r["status"] == "pass" for r in rows)
    assert all(set(r["phase_ms"]) >= {"oracle", "compare"} for r in rows)


def test_verdicts_of_a_mixed_chunk_sum_each_scenarios_timing():
    torch.manual_seed(0)
    backend = TorchBackend()
    dense = [c for c in load_suite("smoke").cases if c.scenario == "call"][:1]
    answers = [scenarios.start(c, backend, "cpu") for c in dense + sparse_cases(2)]
    timing = {}
    outcomes = scenarios.verdicts(answers, timing)
    assert [o.status.value for o in outcomes] == ["pass"] * 3
    assert set(timing) == {"oracle", "compare"} and all(ms > 0 for ms in timing.values())


@pytest.mark.parametrize("dense", [True, False], ids=["dense", "sparse"])
def test_an_answer_resets_its_oracle_and_is_judged_the_same_again(dense):
    torch.manual_seed(0)
    backend = TorchBackend()
    case = ([c for c in load_suite("smoke").cases if c.scenario == "call"] if dense else sparse_cases())[0]
    answer = scenarios.start(case, backend, "cpu")
    first = scenarios.verdicts([answer])[0]
    assert answer.expected is not None
    answer.reset()
    assert answer.expected is None and getattr(answer, "end_to_end", None) is None
    again = scenarios.verdicts([answer])[0]
    assert answer.expected is not None
    assert (again.status, again.metrics) == (first.status, first.metrics)


def test_a_chunk_whose_judging_together_raises_judges_each_alone(monkeypatch, capsys):
    torch.manual_seed(0)
    cases = sparse_cases(3)
    expected = _alone(cases, TorchBackend())
    judge = scenario.verdicts

    def fails_together(answers, timing=None):
        if len(answers) > 1:
            raise MemoryError("a test's")
        return judge(answers, timing)
    monkeypatch.setattr(scenario, "verdicts", fails_together)
    assert _rows(run_chunk(cases, TorchBackend(), "torch", "cpu")) == expected
    assert "comparing 3 cases together raised" in capsys.readouterr().err


def test_run_is_start_and_the_verdict_of_one():
    torch.manual_seed(0)
    case = sparse_cases(1)[0]
    backend = TorchBackend()
    alone = scenario.run(case, backend, "cpu")
    answer = scenario.start(case, backend, "cpu")
    assert isinstance(answer, scenario.SparseAnswer)
    judged = scenario.verdicts([answer])[0]
    assert (alone.status, alone.metrics, alone.details) == (judged.status, judged.metrics, judged.details)

"""Every sparse mutant (harness/mutants/sparse.py, second_cache.py) fails the shipped sparse suites on the
CPU (``sparse``, then ``sparse-v4``: both in ``make verify``), by a check it declares; the clean torch backend
passes them (tests/scenarios/test_sparse_scenario.py)."""

import pytest

from harness.mutants import MUTANTS, names
from harness.planning.cases import load_suite
from harness.recording.status import Status
from harness.scenarios import run


@pytest.fixture(scope="module")
def cases():
    return load_suite("sparse").cases + load_suite("sparse-v4").cases


@pytest.mark.parametrize("name", sorted(names("sparse")))
def test_sparse_mutant_is_killed_by_a_declared_check(cases, name):
    backend = MUTANTS[name]()
    for case in cases:                    # the first case that kills it ends the test (CPU time)
        outcome = run(case, backend, "cpu")
        assert outcome.status in (Status.PASS, Status.FAIL), (case.id, outcome.reason)
        if outcome.status is Status.FAIL:
            assert set(outcome.failed_checks) & set(backend.caught_by), (name, case.id, outcome.failed_checks)
            return
    pytest.fail(f"{name} survived the sparse suites ({backend.bug})")

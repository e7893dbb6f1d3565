"""Every sparse mutant (harness/mutants/sparse.py) fails the shipped sparse suite on the CPU, by a check
it declares; the clean torch backend passes it (tests/scenarios/test_sparse_scenario.py)."""

import pytest

from harness.mutants import MUTANTS, names
from harness.planning.cases import load_suite
from harness.recording.status import Status
from harness.scenarios import run


@pytest.fixture(scope="module")
def cases():
    return load_suite("sparse").cases


@pytest.mark.parametrize("name", sorted(names("sparse")))
def test_sparse_mutant_is_killed_by_a_declared_check(cases, name):
    backend = MUTANTS[name]()
    for case in cases:                    # the first case that kills it ends the test (CPU time)
        outcome = run(case, backend, "cpu")
        assert outcome.status in (Status.PASS, Status.FAIL), (case.id, outcome.reason)
        if outcome.status is Status.FAIL:
            assert set(outcome.failed_checks) & set(backend.caught_by), (name, case.id, outcome.failed_checks)
            return
    pytest.fail(f"{name} survived the sparse suite ({backend.bug})")

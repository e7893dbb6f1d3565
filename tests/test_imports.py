"""The import contract (scripts/check_imports.py, also run by ``make lint``) holds, and can fail."""

import sys

from helpers import REPO

sys.path.insert(0, str(REPO / "scripts"))
import check_imports  # noqa: E402


def test_the_tree_keeps_the_import_contract():
    edges = check_imports.graph()
    assert "harness.running.runner" in edges and "reference.attention" in edges     # it read the tree
    assert "harness.scenarios" in edges["harness.running.chunk"]                  # ... and its imports
    assert check_imports.violations(edges) == []


def test_the_contract_catches_a_cycle_an_upward_import_and_reference_on_harness():
    edges = {"harness.running.runner": {"harness.running.isolation"},
             "harness.running.isolation": {"harness.running.runner"},
             "harness.planning.cases": {"harness.scenarios"}, "harness.scenarios": set(),
             "reference.attention": {"harness.building.pool"}, "harness.building.pool": set()}
    problems = check_imports.violations(edges)
    assert "import cycle: harness.running.isolation <-> harness.running.runner" in problems
    assert "harness.planning.cases imports harness.scenarios: a lower layer imports a higher one" in problems
    assert any(p.startswith("reference.attention imports harness.building.pool: reference must not") for p in problems)


def test_lazy_imports_count(tmp_path):
    module = tmp_path / "harness" / "x.py"
    module.parent.mkdir()
    module.write_text("def f():\n    from .runner import run_case\n    import reference.fp8\n")
    (tmp_path / "harness" / "__init__.py").write_text("")
    assert check_imports.imports_of(module, "harness.x") >= {"harness.runner", "reference.fp8"}

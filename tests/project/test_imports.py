"""The import contract (scripts/check_imports.py, also run by ``make lint``) holds, and can fail; its layers
are stated by folder, so a new file needs no entry and a new folder is reported until it is placed."""

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


def test_the_layers_are_folders_and_top_level_modules_only():
    for entries in check_imports.LAYERS:
        for entry in entries:
            path = REPO / entry.replace(".", "/")
            assert path.is_dir() or path.with_suffix(".py").is_file(), entry
            assert entry == "reference" or path.is_dir() or path.parent == REPO / "harness", \
                f"{entry}: a module inside a folder takes its folder's layer"
    placed = {entry for entries in check_imports.LAYERS for entry in entries}
    here = {f"harness.{p.stem}" for p in (REPO / "harness").iterdir()
            if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert here <= placed, here - placed


def test_the_stages_run_one_way():
    order = [i for name in ("planning", "building", "judging", "recording", "running")
             for i in [check_imports.layer(f"harness.{name}.x")]]
    assert order == sorted(order) and len(set(order)) == 5
    assert check_imports.layer("harness.fast.x") < check_imports.layer("harness.building.x")


def plant(tmp_path, monkeypatch, files: dict[str, str]):
    """A tree of these files (path -> source) read as the project's, with the real LAYERS."""
    for path, source in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(source)
    (tmp_path / "reference").mkdir(exist_ok=True)
    monkeypatch.setattr(check_imports, "ROOT", tmp_path)
    return check_imports.violations(check_imports.graph())


def test_a_planted_upward_import_in_a_new_file_is_reported(tmp_path, monkeypatch):
    problems = plant(tmp_path, monkeypatch, {
        "harness/planning/__init__.py": "",
        "harness/planning/new_rule.py": "from ..running import runner\n",      # a file no list names
        "harness/running/__init__.py": "",
        "harness/running/runner.py": "def helper():\n    from ..planning import new_rule\n",
    })
    assert "harness.planning.new_rule imports harness.running.runner: a lower layer imports a higher one" \
        in problems
    assert problems[0].startswith("import cycle: harness.planning.new_rule <-> harness.running.runner")


def test_a_downward_import_in_a_new_file_passes_and_a_new_folder_must_be_placed(tmp_path, monkeypatch):
    assert plant(tmp_path, monkeypatch, {
        "harness/running/__init__.py": "",
        "harness/running/new_step.py": "from ..planning import case\nfrom .. import errors\n",
        "harness/planning/__init__.py": "", "harness/planning/case.py": "", "harness/errors.py": "",
    }) == []
    problems = plant(tmp_path, monkeypatch, {"harness/newstage/__init__.py": "", "harness/newstage/step.py": ""})
    assert "harness.newstage.step is in no layer: name its folder in scripts/check_imports.py's LAYERS" in problems


def test_lazy_imports_count(tmp_path):
    module = tmp_path / "harness" / "x.py"
    module.parent.mkdir()
    module.write_text("def f():\n    from .runner import run_case\n    import reference.fp8\n")
    (tmp_path / "harness" / "__init__.py").write_text("")
    assert check_imports.imports_of(module, "harness.x") >= {"harness.runner", "reference.fp8"}

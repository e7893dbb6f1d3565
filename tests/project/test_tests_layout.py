"""The tests mirror the package: a folder of tests per folder of ``harness/`` (and ``reference``), and one for
the repository as a whole (``project``: docs, scripts, the import layers, module sizes)."""

from helpers import REPO

TESTS = REPO / "tests"
WHOLE = {"project", "reference"}


def test_every_test_file_sits_in_a_folder_named_for_what_it_tests():
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == [], "a test file at the top of tests/"
    folders = sorted(p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__")
    packages = {p.name for p in (REPO / "harness").iterdir() if (p / "__init__.py").exists()}
    assert [f for f in folders if f not in packages | WHOLE] == [], "a tests folder no package is named for"
    assert all(any((TESTS / f).glob("test_*.py")) for f in folders), "an empty tests folder"


def test_test_file_names_are_unique_across_folders():
    """pytest imports test modules by their base name (no ``__init__.py``): two of one name would clash."""
    names = [p.name for p in TESTS.glob("*/test_*.py")]
    assert len(names) == len(set(names))

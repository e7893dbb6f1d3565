"""Importing a kernel package: what it imports only for what the harness never calls stays hidden, and a folder
that merely shares its name is not taken for it."""

import sys

from harness.backends import optional


def _package(root, name, body):
    (root / name).mkdir()
    (root / name / "__init__.py").write_text(body)


def _fresh_packages(tmp_path, monkeypatch):
    _package(tmp_path, "kernelpkg", "try:\n    import heavypkg\n    PATCHED = True\nexcept ImportError:\n"
                                    "    PATCHED = False\n")
    _package(tmp_path, "heavypkg", "")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("kernelpkg", "heavypkg"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_a_hidden_package_looks_absent_only_while_the_kernel_package_imports(tmp_path, monkeypatch):
    _fresh_packages(tmp_path, monkeypatch)
    monkeypatch.setitem(optional.HIDDEN_WHILE_IMPORTING, "kernelpkg", ("heavypkg",))
    module, error = optional.try_import("kernelpkg")
    assert error is None and module.PATCHED is False
    assert "heavypkg" not in sys.modules
    import heavypkg  # noqa: F401 - the finder is gone: anyone else still gets it
    assert not any(isinstance(f, optional._Absent) for f in sys.meta_path)


def test_without_an_entry_the_package_imports_everything_it_asks_for(tmp_path, monkeypatch):
    _fresh_packages(tmp_path, monkeypatch)
    module, error = optional.try_import("kernelpkg")
    assert error is None and module.PATCHED is True


def test_a_hidden_package_already_imported_is_left_visible(tmp_path, monkeypatch):
    _fresh_packages(tmp_path, monkeypatch)
    import heavypkg  # noqa: F401
    monkeypatch.setitem(optional.HIDDEN_WHILE_IMPORTING, "kernelpkg", ("heavypkg",))
    module, _ = optional.try_import("kernelpkg")
    assert module.PATCHED is True


def test_a_folder_named_like_the_package_is_not_the_package(tmp_path, monkeypatch):
    (tmp_path / "cachedpkg").mkdir()        # a JIT's cache folder on sys.path: no __init__.py
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cachedpkg", raising=False)
    module, error = optional.try_import("cachedpkg")
    assert module is None and "a folder without __init__.py" in error and str(tmp_path) in error

"""A kernel package that replaces a shared module's function when it imports (SGLang's ``triton.next_power_of_2``)
changes it only for its own backends: every other backend's cases run with the original, in the same process."""

import sys
from types import SimpleNamespace

import pytest

from harness.backends import optional, process_state
from harness.planning.cases import load_suite
from harness.running.backend_loader import load_backend
from harness.running.chunk import run_chunk


def _package(root, name, body):
    (root / name).mkdir()
    (root / name / "__init__.py").write_text(body)


@pytest.fixture
def shared(tmp_path, monkeypatch):
    """A shared module ``sharedmod`` with ``size(0) == 0``, and ``patcher``, whose import replaces it with one
    that gives 1 for 0, as SGLang's import does to Triton's ``next_power_of_2``."""
    _package(tmp_path, "sharedmod", "def size(n):\n    return n\n")
    _package(tmp_path, "patcher", "import sharedmod\nsharedmod.size = lambda n: max(n, 1)\n")
    _package(tmp_path, "bystander", "import sharedmod\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("sharedmod", "patcher", "bystander"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(process_state, "SHARED", ("sharedmod",))
    monkeypatch.setattr(process_state, "_original", {})
    monkeypatch.setattr(process_state, "_replaced", {})
    import sharedmod
    return sharedmod


def _backend(*packages):
    return SimpleNamespace(packages=tuple((p, p) for p in packages))


def test_each_backend_sees_the_shared_module_as_its_own_packages_leave_it(shared):
    assert optional.try_import("bystander")[1] is None and optional.try_import("patcher")[1] is None
    assert shared.size(0) == 1                                   # the import replaced it, process-wide
    process_state.as_imported_by(_backend("bystander"))
    assert shared.size(0) == 0
    process_state.as_imported_by(_backend("patcher.sub"))        # a module of the package names it
    assert shared.size(0) == 1
    process_state.as_imported_by(_backend())                     # the torch backends: nothing replaced
    assert shared.size(0) == 0


def test_without_a_replacing_import_nothing_is_touched(shared):
    assert optional.try_import("bystander")[1] is None
    marker = shared.size
    process_state.as_imported_by(_backend("patcher"))
    assert shared.size is marker and process_state._original == {}


PLUGIN = '''
import sharedmod
from harness.backends.torch_backend import TorchBackend

class Sizing(TorchBackend):
    """The torch backend, but its output is wrong by the shared module's size(0): right only with the original."""
    name = "sizing"
    packages = (("bystander", "bystander"),)

    def run(self, inputs):
        out, lse = super().run(inputs)
        return out + sharedmod.size(0), lse
'''


def test_a_chunk_runs_with_the_original_after_another_backend_imported_the_replacement(shared, tmp_path):
    plugin = tmp_path / "sizing.py"
    plugin.write_text(PLUGIN)
    spec = f"{plugin}:Sizing"
    backend = load_backend(spec)
    case = load_suite("smoke").cases[0]
    assert run_chunk([case], backend, spec, "cpu")[0]["status"] == "pass"
    assert optional.try_import("patcher")[1] is None            # another backend's turn, in this process
    assert run_chunk([case], backend, spec, "cpu")[0]["status"] == "pass"
    process_state.as_imported_by(_backend("patcher"))
    assert shared.size(0) == 1                                   # that backend still gets its package's own


def test_a_submodule_or_setting_the_shared_module_rebinds_is_left_alone(shared):
    before = process_state.snapshot()
    shared.setting, shared.sub = "rebound", sys           # not functions: a module's own loading may do this
    before["sharedmod"].update(setting="first", sub=pytest)
    process_state.record("patcher", before)
    assert process_state._original == {} and process_state._replaced == {}

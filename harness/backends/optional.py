"""Importing a kernel package that may not be installed here, and saying why not.

Kernel packages are imported on first use, never when the harness imports, so
``mla-verify list`` works on a machine with none of them and each backend can
report the exact import error.
"""

import importlib
import importlib.abc
import importlib.metadata
import sys
import warnings
from contextlib import contextmanager
from functools import cache

from . import process_state

# Packages a kernel package imports only for what the harness never calls, hidden while it imports.  SGLang's
# package __init__ imports transformers only to patch it for loading Hugging Face models (sglang 0.5.23,
# srt/utils/hf_transformers_patches.py: apply_all is a "No-op when the ``transformers`` package is not
# installed"); its attention kernels never use it, and that import cost 10.9 s in every process that imported
# SGLang on the H200 (docs/gpu-runs.md).  A kernel module that did need it would fail to import, visibly.
HIDDEN_WHILE_IMPORTING = {"sglang": ("transformers",)}


def try_import(module_name: str):
    """``(module, None)`` or ``(None, "module: ExcType: first line")``.  Warnings a package raises while it
    imports (a dependency's version notice) are its own, not mla-verify's: they stay off the console."""
    package = module_name.partition(".")[0]
    before = process_state.snapshot() if package not in sys.modules else {}
    try:
        with warnings.catch_warnings(), _hidden(package):
            warnings.simplefilter("ignore")
            module = importlib.import_module(module_name)
    except Exception as e:   # a wheel for another torch/CUDA fails with OSError, RuntimeError, ...
        first = (str(e).splitlines() or [""])[0][:200]
        return None, f"{module_name}: {type(e).__name__}: {first}"
    finally:
        process_state.record(package, before)
    if getattr(module, "__file__", None) is None and hasattr(module, "__path__"):
        # a folder of that name on sys.path (a JIT's cache folder, say) imports as an empty namespace package
        return None, (f"{module_name}: a folder without __init__.py on sys.path ({', '.join(module.__path__)}), "
                      "not the installed package")
    return module, None


class _Absent(importlib.abc.MetaPathFinder):
    """Makes ``names`` (and their submodules) look not installed."""

    def __init__(self, names):
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named '{fullname}'", name=fullname)
        return None


@contextmanager
def _hidden(package: str):
    """While ``package`` imports, its ``HIDDEN_WHILE_IMPORTING`` packages look absent, unless already imported."""
    names = tuple(n for n in HIDDEN_WHILE_IMPORTING.get(package, ()) if n not in sys.modules)
    finder = _Absent(names)
    if names:
        sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        if names:
            sys.meta_path.remove(finder)


@cache   # every result row records it; reading package metadata costs 1 ms
def dist_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


class LazyKernel:
    """Mixin: ``self._load()`` imports once; ``available()`` / ``availability()`` report it."""

    modules: tuple = ()        # module names to import, in order
    needs_cuda = True

    def _load(self):
        if not hasattr(self, "_loaded"):
            self._loaded, self._import_error = {}, None
            for name in self.modules:
                module, error = try_import(name)
                if module is None:
                    self._import_error = error
                    break
                self._loaded[name] = module
        return self._loaded if self._import_error is None else None

    def import_error(self) -> str | None:
        self._load()
        return self._import_error

    def device_reason(self) -> str | None:
        import torch
        return "no CUDA device" if self.needs_cuda and not torch.cuda.is_available() else None

    def available(self) -> bool:
        return self.device_reason() is None and self.import_error() is None

    def availability(self) -> str:
        """One line: whether the package imports here, and whether it can run here."""
        imported = self.import_error()
        device = self.device_reason()
        imports = f"does not import ({imported})" if imported else f"imports ({', '.join(self.modules)})"
        if imported or device:
            return f"unavailable: {imports}" + (f"; {device}" if device else "")
        return f"available: {imports}"

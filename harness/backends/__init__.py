"""Backend registry: built-in names, ``auto``, and user plug-ins.

``--backend`` takes a built-in name (``reference``, ``torch``, ``flashmla``,
``flashinfer-fa3``, ``flashinfer-fa2``, ``sglang-triton``, ``sglang-verify-mla``, ``flaggems``,
``auto``), ``mutant:NAME`` (a deliberately broken torch backend, see
``harness/mutants``), ``module:NAME`` or ``path/to/file.py:NAME``.  NAME is a ``Backend``
instance, or a class or zero-argument factory that returns one.
"""

import importlib
import importlib.util
import sys
from pathlib import Path

from ..errors import InputError
from .base import Backend, Capabilities
from .reference_backend import ReferenceBackend
from .torch_backend import TorchBackend


def _flashmla():
    from .flashmla import FlashMLABackend
    return FlashMLABackend()


def _flashinfer(kind):
    def make():
        from .flashinfer_mla import FlashInferMLABackend
        return FlashInferMLABackend(kind)
    return make


def _sglang_triton():
    from .sglang_triton import SGLangTritonBackend
    return SGLangTritonBackend()


def _sglang_verify_mla():
    from .sglang_verify_mla import SGLangVerifyMLABackend
    return SGLangVerifyMLABackend()


def _flaggems():
    from .flaggems_mla import FlagGemsMLABackend
    return FlagGemsMLABackend()


# Kernel packages are imported on first use (harness/backends/optional.py), never here.
BUILTIN = {
    "reference": ReferenceBackend,
    "torch": TorchBackend,
    "flashmla": _flashmla,
    "flashinfer-fa3": _flashinfer("fa3"),
    "flashinfer-fa2": _flashinfer("fa2"),
    "sglang-triton": _sglang_triton,
    "sglang-verify-mla": _sglang_verify_mla,
    "flaggems": _flaggems,
}


def builtin_names() -> list[str]:
    return [*BUILTIN, "auto"]


def auto_backend() -> Backend:
    """The best backend this machine can run: FlashMLA if it loads on a GPU, else torch."""
    try:
        flash = _flashmla()
    except ImportError:
        return TorchBackend()
    return flash if flash.available() else TorchBackend()


def load_backend(spec: str) -> Backend:
    if spec == "auto":
        return auto_backend()
    if spec in BUILTIN:
        return BUILTIN[spec]()
    if spec.startswith("mutant:"):
        from ..mutants import load_mutant  # late: the mutants import the torch backend from here
        return load_mutant(spec.removeprefix("mutant:"))
    if ":" not in spec:
        raise InputError(f"unknown backend '{spec}' (built in: {', '.join(builtin_names())}; "
                         f"or module:NAME, or path/to/file.py:NAME)")
    where, _, attr = spec.rpartition(":")
    module = _import_plugin(spec, where)
    if not hasattr(module, attr):
        raise InputError(f"backend '{spec}': {where} has no attribute '{attr}'")
    obj = getattr(module, attr)
    backend = obj if isinstance(obj, Backend) else None
    if backend is None and callable(obj):
        try:
            backend = obj()
        except Exception as e:  # a plug-in's constructor failing is the user's bad input
            raise InputError(f"backend '{spec}': {attr}() raised {type(e).__name__}: {e}") from None
    if not isinstance(backend, Backend):
        raise InputError(f"backend '{spec}': {attr} is not a harness.backends.Backend (or a factory of one)")
    return backend


def _import_plugin(spec: str, where: str):
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise InputError(f"backend '{spec}': file not found: {where}")
            name = f"mla_verify_plugin_{abs(hash(str(path.resolve())))}"
            module_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            module_spec.loader.exec_module(module)
            return module
        return importlib.import_module(where)
    except InputError:
        raise
    except (Exception, SystemExit) as e:   # any failure importing a plug-in is one line, even sys.exit()
        raise InputError(f"backend '{spec}': cannot import {where}: {type(e).__name__}: {e}") from None


__all__ = ["Backend", "Capabilities", "BUILTIN", "auto_backend", "builtin_names", "load_backend"]

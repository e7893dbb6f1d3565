"""Backend registry: built-in names, ``auto``, and user plug-ins.

``--backend`` takes a built-in name (``reference``, ``torch``, ``flashmla``,
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


# The real kernels, each imported from its own package.  ``auto`` runs every one that imports.
KERNELS = {
    "flashmla": _flashmla,
}

BUILTIN = {
    "reference": ReferenceBackend,
    "torch": TorchBackend,
    **KERNELS,
}


def builtin_names() -> list[str]:
    return [*BUILTIN, "auto"]


def kernel_availability(device: str) -> dict[str, str | None]:
    """For each real kernel: None if it runs on ``device`` here, else why not (its import error)."""
    why = {}
    for name, factory in KERNELS.items():
        try:
            backend = factory()
        except Exception as e:    # a wheel built for another torch fails on import
            why[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            continue
        if device != "cuda":
            why[name] = "needs a CUDA device (none in use here)"
        elif not backend.available():
            why[name] = backend.availability()
        else:
            why[name] = None
    return why


def resolve_auto(device: str) -> tuple[list[str], list[str]]:
    """``auto``: every real kernel that runs here, else the pure-PyTorch backend; and why, line by line."""
    why = kernel_availability(device)
    chosen = [name for name, reason in why.items() if reason is None]
    notes = [f"{name}: {'runs here' if reason is None else reason}" for name, reason in why.items()]
    if not chosen:
        chosen = ["torch"]
        notes.append("no real kernel runs here: auto verifies the pure-PyTorch 'torch' backend, "
                     "which checks the harness, not a kernel")
    return chosen, notes


def expand_specs(spec: str, device: str) -> tuple[list[str], list[str]]:
    """``--backend a,b,auto``: the backend specs to run, in order, and notes on how ``auto`` resolved."""
    specs, notes = [], []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if part == "auto":
            chosen, notes = resolve_auto(device)
            specs.extend(chosen)
        else:
            specs.append(part)
    if not specs:
        raise InputError("--backend: no backend given")
    return list(dict.fromkeys(specs)), notes


def load_backend(spec: str) -> Backend:
    if spec == "auto":
        return BUILTIN[resolve_auto("cuda" if _cuda() else "cpu")[0][0]]()
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


def _cuda() -> bool:
    import torch
    return torch.cuda.is_available()


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


__all__ = ["Backend", "Capabilities", "BUILTIN", "KERNELS", "builtin_names", "expand_specs", "kernel_availability",
           "load_backend", "resolve_auto"]

"""``--backend`` specs to backends: built-in names, ``auto``, mutants and user plug-ins.

A spec is a built-in name (``mla-verify list``), ``NAME@PROFILE`` (a built-in backend calling its kernel as
an engine profile does, e.g. ``flashmla@sglang-0.5.23``), ``auto``, ``mutant:NAME`` (a
deliberately broken torch backend, see ``harness/mutants``), ``module:NAME`` or
``path/to/file.py:NAME``.  NAME is a ``Backend`` instance, or a class or
zero-argument factory that returns one: a plug-in is a ``Backend`` subclass, so it has every member of the
interface (``base.Backend``'s defaults), and what it offers beyond ``run`` is what it defines
(``Backend.__init_subclass__``); anything else is refused here.
"""

import importlib
import importlib.util
import sys
from pathlib import Path

from ..backends import BUILTIN, Backend, Feature, builtin_names, resolve_auto
from ..errors import InputError
from ..mutants import load_mutant


def load_backend(spec: str) -> Backend:
    if spec == "auto":
        return BUILTIN[resolve_auto("cuda" if _cuda() else "cpu")[0][0]]()
    if spec in BUILTIN:
        return BUILTIN[spec]()
    if "@" in spec and spec.partition("@")[0] in BUILTIN:
        return _with_profile(spec)
    if spec.startswith("mutant:"):
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


def _with_profile(spec: str) -> Backend:
    """``NAME@PROFILE``: the built-in backend, told to call its kernel as that engine profile does."""
    name, _, profile = spec.partition("@")
    backend = BUILTIN[name]()
    if not backend.supports(Feature.PROFILES):
        raise InputError(f"backend '{spec}': {name} has no engine profiles")
    backend.use_profile(profile)        # an unknown profile is an InputError naming the known ones
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



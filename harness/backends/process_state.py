"""What a kernel package's import changes in a module other packages share, undone for the other backends.

A worker process serves backend after backend (``worker_pool``'s carry-over), and imports every kernel
package of the run up front (its preload).  A package that replaces a function of a shared module when it
imports changes what the others compute in that process.  SGLang 0.5.23 does: ``sglang/srt/utils/common.py``
ends with ``setattr(triton, "next_power_of_2", next_power_of_2)``, its own version, which returns 1 for 0
where Triton's returns 0.  FlagGems 5.0.2's ``flash_mla_sparse_fwd`` sizes the block of the key columns past
512 with ``triton.next_power_of_2(d_qk - 512)``: 0 for DeepSeek V4's 512-wide records, so it skips that
block; under SGLang's version it is 1, and Triton refuses to compile the block's ``tl.dot`` ("K >= 16").  So
the same case passed alone and failed beside an SGLang backend (docs/kernel-findings.md).

A row must not depend on which other backends shared its process: each backend's cases run with the shared
modules as its own packages' imports leave them (``as_imported_by``), every other package's change undone.
"""

import importlib
import importlib.util
import sys
import types

SHARED = ("triton",)           # modules kernel packages share, whose top-level names a package may replace

_original = {}                 # (module, name) -> the value before any kernel package replaced it
_replaced = {}                 # top-level package -> {(module, name): the value its import left}


def snapshot() -> dict:
    """The top-level names of each shared module imported here, so that a package's import is seen replacing
    them (``record``).  Where a GPU is there to run kernels on, an installed shared module is imported now,
    before the package can replace anything in it; on the CPU it is not: no kernel of theirs runs there, and
    with Triton merely imported, make verify's suites ran slower on a 2-core CPU machine (2026-12-05: 56.4 and
    58.6 s, against 41.9 and 45.8 s without; the oracle's phase most of it)."""
    shot = {}
    for name in SHARED:
        if name not in sys.modules and not (_gpu_here() and importlib.util.find_spec(name) is not None):
            continue
        try:
            shot[name] = dict(vars(importlib.import_module(name)))
        except Exception:      # a broken install: nothing of it to restore
            continue
    return shot


def _gpu_here() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_available()


def record(package: str, before: dict):
    """Note which functions of the shared modules importing ``package`` replaced since ``before`` (``snapshot``):
    a function, not a submodule or a setting the module itself may rebind as it loads more of itself."""
    for module_name, names in before.items():
        now = vars(sys.modules[module_name])
        for name, value in now.items():
            if name in names and names[name] is not value and _a_function(names[name]):
                _original.setdefault((module_name, name), names[name])
                _replaced.setdefault(package, {})[(module_name, name)] = value


def _a_function(value) -> bool:
    return callable(value) and not isinstance(value, (type, types.ModuleType))


def as_imported_by(backend):
    """The shared modules as ``backend``'s own packages leave them: every other package's replacement undone,
    its own put back (it may follow a backend whose turn undid them)."""
    if not _original:
        return
    own = {module.partition(".")[0] for module, _ in backend.packages}
    values = dict(_original)
    for package in own:
        values.update(_replaced.get(package, {}))
    for (module_name, name), value in values.items():
        setattr(sys.modules[module_name], name, value)

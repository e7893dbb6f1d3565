"""The built-in backends, and how ``auto`` chooses among the real kernels.

Loading a backend from a ``--backend`` spec (plug-ins, mutants) is
``harness/running/backend_loader.py``'s job, one layer up: the mutants build on the
backends here.
"""

import importlib
from dataclasses import dataclass

from ..errors import InputError
from .base import Backend, Capabilities, Feature
from .reference_backend import ReferenceBackend
from .torch_backend import TorchBackend


@dataclass(frozen=True)
class Lazy:
    """A built-in backend whose module is imported on first use: ``Lazy(...)()`` is a fresh instance."""

    module: str          # under harness/backends/
    cls: str
    args: tuple = ()     # what the constructor takes, e.g. FlashInfer's backend kind

    def backend_class(self) -> type:
        return getattr(importlib.import_module(f"{__name__}.{self.module}"), self.cls)

    def __call__(self) -> Backend:
        return self.backend_class()(*self.args)


# The real kernels, each imported from its own package on first use (harness/backends/optional.py),
# never here.  ``auto`` runs every one that imports.
KERNELS = {
    "flashmla": Lazy("flashmla", "FlashMLABackend"),
    "flashmla-sparse": Lazy("flashmla_sparse", "FlashMLASparseBackend"),
    "flashmla-sparse-prefill": Lazy("sparse_prefill", "FlashMLASparsePrefillBackend"),
    "flaggems-sparse": Lazy("sparse_prefill", "FlagGemsSparseBackend"),
    "flashinfer-fa3": Lazy("flashinfer_mla", "FlashInferMLABackend", ("fa3",)),
    "flashinfer-fa2": Lazy("flashinfer_mla", "FlashInferMLABackend", ("fa2",)),
    "sglang-triton": Lazy("sglang_triton", "SGLangTritonBackend"),
    "sglang-verify-mla": Lazy("sglang_verify_mla", "SGLangVerifyMLABackend"),
    "sglang-v4-triton": Lazy("sglang_v4_triton", "SGLangV4TritonBackend"),
    "sglang-sparse-triton": Lazy("sglang_sparse_triton", "SGLangSparseTritonBackend"),
    "sglang-q8kv8": Lazy("sglang_q8kv8", "SGLangQ8KV8Backend"),
    "flaggems": Lazy("flaggems_mla", "FlagGemsMLABackend"),
}

BUILTIN = {
    "reference": ReferenceBackend,
    "torch": TorchBackend,
    **KERNELS,
}


def builtin_class(name: str) -> type:
    """Built-in backend ``name``'s class, its declarations readable without constructing it."""
    entry = BUILTIN[name]
    return entry.backend_class() if isinstance(entry, Lazy) else entry


def builtins_supporting(feature: Feature) -> list[str]:
    """The built-in backends whose class declares ``feature``, in registry order."""
    return [name for name in BUILTIN if feature in builtin_class(name).features]


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


def kernel_modules(spec: str) -> list[str]:
    """The kernel packages' modules the built-in kernels of ``--backend spec`` import (``auto``: every kernel's),
    in order, without importing any: what a spare worker may import while the parent resolves the specs."""
    names = []
    for part in (p.strip() for p in spec.split(",")):
        name = part.split("@", 1)[0]
        names += list(KERNELS) if part == "auto" else [name] if name in KERNELS else []
    modules = [m for name in dict.fromkeys(names) for m in getattr(builtin_class(name), "modules", ())]
    return list(dict.fromkeys(modules))


def launch_order(specs: list[str]) -> list[str]:
    """``specs`` with the built-in kernels whose first build is long (``Backend.first_build_s``) first, longest
    first, the rest in their order: run side by side, a backend's build holds only its own cases back, so the
    longest build starts first and the other backends run beside it."""
    def build_s(spec: str) -> float:
        name = spec.split("@", 1)[0]
        return builtin_class(name).first_build_s if name in BUILTIN else 0.0    # a plug-in's: not known
    return sorted(specs, key=lambda spec: -build_s(spec))


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


__all__ = ["Backend", "Capabilities", "Feature", "BUILTIN", "KERNELS", "builtin_class", "builtin_names",
           "builtins_supporting", "expand_specs", "kernel_availability", "kernel_modules", "launch_order",
           "resolve_auto"]

"""The built-in backends, and how ``auto`` chooses among the real kernels.

Loading a backend from a ``--backend`` spec (plug-ins, mutants) is
``harness/running/backend_loader.py``'s job, one layer up: the mutants build on the
backends here.
"""

from ..errors import InputError
from .base import Backend, Capabilities
from .reference_backend import ReferenceBackend
from .torch_backend import TorchBackend


def _flashmla():
    from .flashmla import FlashMLABackend
    return FlashMLABackend()


def _flashmla_sparse():
    from .flashmla_sparse import FlashMLASparseBackend
    return FlashMLASparseBackend()


def _sparse_prefill(kind):
    def make():
        from .sparse_prefill import FlagGemsSparseBackend, FlashMLASparsePrefillBackend
        return {"flashmla": FlashMLASparsePrefillBackend, "flaggems": FlagGemsSparseBackend}[kind]()
    return make


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


# The real kernels, each imported from its own package on first use (harness/backends/optional.py),
# never here.  ``auto`` runs every one that imports.
KERNELS = {
    "flashmla": _flashmla,
    "flashmla-sparse": _flashmla_sparse,
    "flashmla-sparse-prefill": _sparse_prefill("flashmla"),
    "flaggems-sparse": _sparse_prefill("flaggems"),
    "flashinfer-fa3": _flashinfer("fa3"),
    "flashinfer-fa2": _flashinfer("fa2"),
    "sglang-triton": _sglang_triton,
    "sglang-verify-mla": _sglang_verify_mla,
    "flaggems": _flaggems,
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


__all__ = ["Backend", "Capabilities", "BUILTIN", "KERNELS", "builtin_names", "expand_specs", "kernel_availability",
           "resolve_auto"]

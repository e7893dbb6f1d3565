"""The backend interface: a kernel under test, wrapped so the harness can drive it.

A backend has a name, declares what it supports, and maps ``Inputs`` to
``(out, lse)``: out ``(b, s_q, h_q, d_v)`` and LSE ``(b, h_q, s_q)``.  A case
outside its declared support is reported as ``unsupported`` with the reason;
it is never skipped silently and never counted as a pass.
"""

import math
from dataclasses import dataclass

import torch

from ..errors import Unsupported  # noqa: F401  (backends raise it from here)
from ..planning.cases import DTYPES, MODES, Case
from ..planning.fixed_params import fixed_scale


@dataclass(frozen=True)
class Capabilities:
    """What a backend supports.  ``None`` means any value."""

    modes: tuple = MODES
    dtypes: tuple = DTYPES
    devices: tuple = ("cpu", "cuda")
    page_sizes: tuple | None = None
    heads: tuple | None = None
    kv_heads: tuple | None = None
    d_qk: tuple | None = None
    d_v: tuple | None = None
    max_draft_tokens: int = 8
    non_causal: bool = True
    lse_base: str = "e"                 # "e" or "2"; the harness converts base-2 LSE before comparing
    empty_row_lse: float = math.inf     # what the backend's LSE holds for a row with no visible key
    has_lse: bool = True                # False: the kernel returns no LSE (run() returns None for it)
    # Conventions: data the harness reads, never special cases in it.
    out_dtype: str | None = None        # None: the model dtype (bf16 for fp8 cases); else "bf16", "float32", ...
    lse_dtype: str = "float32"          # every engine keeps LSE in float32
    index_format: str = "page_table"    # "page_table", "csr_pages" or "token_slots": what the kernel indexes by
    fp8_q: str = "quantized_k_scale"    # fp8 cases: q given "quantized_k_scale" (SGLang's FlashMLA path),
                                        # "model_dtype" (bf16 q, FlashInfer) or "cast_in_kernel" (SGLang Triton)
    engine: str = "mla-verify"          # whose calling convention this reproduces, e.g. "sglang:flashmla"
    # A parameter the kernel takes no argument for: every case runs at the kernel's value and the oracle
    # computes at it (conventions.py); None: the case's.  A number, or a rule's name ("1/sqrt(d_qk)").
    fixed_softmax_scale: float | str | None = None
    # The kernel's own words for a limit above, quoted in its unsupported reason: ((what, quote), ...) with
    # what one of mode, dtype, device, page_size, heads, kv_heads, d_qk, d_v, s_q, non_causal.
    quoted_limits: tuple = ()

    def __post_init__(self):
        fixed_scale(self.fixed_softmax_scale, 576)       # an unknown rule or a bad number fails at once

    def reason_unsupported(self, case: Case, device: str) -> str | None:
        reason = self._limit_reached(case, device)
        if reason is None:
            return None
        what, text = reason
        quote = dict(self.quoted_limits).get(what)
        return f"{text}: {quote}" if quote else text

    def _limit_reached(self, case: Case, device: str) -> tuple[str, str] | None:
        checks = [
            ("mode", case.mode, self.modes), ("dtype", case.dtype, self.dtypes),
            ("device", device, self.devices), ("page_size", case.page_size, self.page_sizes),
            ("heads", case.heads, self.heads), ("kv_heads", case.kv_heads, self.kv_heads),
            ("d_qk", case.d_qk, self.d_qk), ("d_v", case.d_v, self.d_v),
        ]
        for what, value, allowed in checks:
            if allowed is not None and value not in allowed:
                return what, f"{what} {value} not supported (supports {', '.join(map(str, allowed))})"
        if case.s_q > self.max_draft_tokens:
            return "s_q", f"{case.s_q} query tokens per request; supports at most {self.max_draft_tokens}"
        if not case.causal and not self.non_causal:
            return "non_causal", "non-causal attention not supported"
        return None

    def conventions(self) -> dict:
        """The conventions a row records: how the kernel was called and what its outputs mean (a fixed
        parameter only where the kernel has one, so other backends' rows keep their keys)."""
        fixed = {} if self.fixed_softmax_scale is None else {"fixed_softmax_scale": self.fixed_softmax_scale}
        return {"engine": self.engine, "index_format": self.index_format, "fp8_q": self.fp8_q,
                "lse_base": self.lse_base, "empty_row_lse": self.empty_row_lse, "has_lse": self.has_lse,
                "out_dtype": self.out_dtype, "lse_dtype": self.lse_dtype, **fixed}

    def describe(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


class Backend:
    """Base class; subclasses set ``name`` and ``capabilities`` and implement ``run``."""

    name = "unnamed"
    capabilities = Capabilities()
    sparse_backend: str | None = None    # the backend that runs this kernel's sparse sibling, if it is run apart

    def unsupported_reason(self, case: Case, device: str) -> str | None:
        """Why this backend cannot run ``case`` on ``device``, or None if it can."""
        return self.capabilities.reason_unsupported(case, device)

    def info(self) -> dict:
        """Package, version and API form, recorded in every result row."""
        return {"package": "mla-verify", "version": None, "api": self.name}

    def run(self, inputs) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


def no_sparse_reason(backend) -> str:
    """The sparse scenario's reason for a backend without ``run_sparse``, naming the backend that runs the
    kernel's sparse sibling where it declares one (``sparse_backend``)."""
    reason = f"{backend.name} has no sparse entry point (run_sparse): mla-verify calls it for dense paged MLA only"
    sibling = getattr(backend, "sparse_backend", None)
    return reason + (f"; its sparse kernel runs as the backend {sibling}" if sibling else "")

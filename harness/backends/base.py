"""The backend interface: a kernel under test, wrapped so the harness can drive it.

A backend has a name, declares what it supports, and maps ``Inputs`` to
``(out, lse)``: out ``(b, s_q, h_q, d_v)`` and LSE ``(b, h_q, s_q)``.  A case
outside its declared support is reported as ``unsupported`` with the reason;
it is never skipped silently and never counted as a pass.

``Backend`` names every member the harness may call.  What a backend offers beyond ``run`` is a
``Feature``: the harness asks ``backend.supports(feature)``, never whether an attribute exists, and
every optional member has a documented default here.
"""

import math
from dataclasses import dataclass
from enum import Enum

import torch

from ..errors import InputError, Unsupported
from ..planning.cases import DTYPES, MODES, Case
from ..planning.fixed_params import fixed_scale
from .sparse_base import SparseCapabilities


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


class Feature(Enum):
    """What a backend offers beyond its required members, each a set of members (``FEATURE_MEMBERS``)."""

    DENSE = "dense"                  # run(inputs): the dense paged MLA call (a sparse-only kernel has none)
    PREPARE = "prepare"              # prepare(inputs): one-time setup kept out of kernel time (a JIT build)
    SPARSE = "sparse"                # run_sparse(inputs) and sparse_capabilities: the sparse scenario
    GRAPH = "graph"                  # graph_session(max_bs, max_context_len, inputs): an engine's CUDA graph
    PROFILES = "profiles"            # use_profile(name): the spec NAME@PROFILE
    BENCH_LAUNCH = "bench_launch"    # bench_launch(inputs) -> callable: the launch alone, timed by bench
    SPLIT_CALL = "split_call"        # metadata_for(inputs), call(inputs, meta): FlashMLA's launch apart
    CAPTURED_RUN = "captured_run"    # cuda_graph = True: bench may capture run() whole in a CUDA graph


FEATURE_MEMBERS = {
    Feature.DENSE: ("run",), Feature.PREPARE: ("prepare",), Feature.SPARSE: ("run_sparse", "sparse_capabilities"),
    Feature.GRAPH: ("graph_session",), Feature.PROFILES: ("use_profile",), Feature.BENCH_LAUNCH: ("bench_launch",),
    Feature.SPLIT_CALL: ("metadata_for", "call"), Feature.CAPTURED_RUN: ("cuda_graph",),
}


def features_defined(cls) -> frozenset:
    """The features all of whose members ``cls`` has other than ``Backend``'s defaults."""
    return frozenset(feature for feature, members in FEATURE_MEMBERS.items()
                     if all(getattr(cls, m) is not getattr(Backend, m) for m in members))


class Backend:
    """Base class; subclasses set ``name`` and ``capabilities`` and implement ``run``.

    Built-in backends declare ``features``; a subclass that does not (a plug-in, a mutant, a test's
    stand-in) offers what it defines: ``__init_subclass__`` fills it in, so a plug-in keeps working
    unchanged.  tests/test_backend_protocol.py checks each built-in declaration against its members.
    """

    name = "unnamed"
    capabilities = Capabilities()
    features: frozenset = frozenset()       # Feature: what it offers beyond the required members
    sparse_capabilities: SparseCapabilities | None = None   # with run_sparse (Feature.SPARSE)
    sparse_backend: str | None = None    # the backend that runs this kernel's sparse sibling, if it is run apart
    no_graph_session: str | None = None  # why it has no graph_session, in its own words (the graph scenario)
    cuda_graph = False                   # Feature.CAPTURED_RUN, also read from ``capabilities`` (docs/speed.md)
    # What it imports, ((module, distribution), ...), the first that imports used, and the command that
    # installs it, as scripts/install_kernels.sh and docs/kernel-packages.md do: ``mla-verify list`` shows them.
    packages: tuple = ()
    install: str | None = None
    # A mutant's planted bug, and the checks expected to catch it (harness/mutants/registry.py)
    bug = ""
    caught_by: tuple = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "features" not in vars(cls):      # undeclared: what it defines is what it offers
            cls.features = features_defined(cls)

    def supports(self, feature: Feature) -> bool:
        """Whether the harness may use ``feature``'s members (``FEATURE_MEMBERS``) on this backend."""
        if feature is Feature.CAPTURED_RUN:   # may be set on an instance, or on its capabilities
            return bool(self.cuda_graph or getattr(self.capabilities, "cuda_graph", False))
        return feature in self.features

    def unsupported_reason(self, case: Case, device: str) -> str | None:
        """Why this backend cannot run ``case`` on ``device``, or None if it can."""
        return self.capabilities.reason_unsupported(case, device)

    def info(self) -> dict:
        """Package, version and API form, recorded in every result row."""
        return {"package": "mla-verify", "version": None, "api": self.name}

    def available(self) -> bool:
        """Whether it can run here at all (``auto`` picks the kernels that can)."""
        return True

    def availability(self) -> str | None:
        """One line on whether it imports and can run here; None: nothing to say."""
        return None

    def run(self, inputs) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Feature.DENSE: out and LSE (None where ``capabilities.has_lse`` is False)."""
        what = "has only a sparse entry point (run_sparse)" if self.supports(Feature.SPARSE) else "defines no run()"
        raise NotImplementedError(f"{self.name} {what}")

    def prepare(self, inputs) -> None:
        """Feature.PREPARE: one-time setup before the timed call.  By default there is none."""

    def run_sparse(self, inputs) -> tuple[torch.Tensor, torch.Tensor]:
        """Feature.SPARSE: the sparse call (harness/backends/sparse_base.py)."""
        raise Unsupported(no_sparse_reason(self))

    def graph_session(self, max_bs: int, max_context_len: int, inputs):
        """Feature.GRAPH: a session that captures and replays the engine's CUDA graph (scenarios/graph.py)."""
        raise Unsupported(f"{self.name}: {self.no_graph_session or 'no graph_session'}")

    def use_profile(self, name: str) -> None:
        """Feature.PROFILES: call the kernel as engine profile ``name`` does."""
        raise InputError(f"{self.name} has no engine profiles")

    def bench_launch(self, inputs):
        """Feature.BENCH_LAUNCH: a zero-argument callable that launches with metadata / plan() done."""
        raise NotImplementedError(f"{self.name} has no bench_launch")

    def metadata_for(self, inputs):
        """Feature.SPLIT_CALL: the scheduling metadata ``call`` takes, computed apart from the launch."""
        raise NotImplementedError(f"{self.name} has no metadata_for")

    def call(self, inputs, meta):
        """Feature.SPLIT_CALL: the launch alone, with ``metadata_for``'s metadata."""
        raise NotImplementedError(f"{self.name} has no call")


def no_sparse_reason(backend) -> str:
    """The sparse scenario's reason for a backend without ``run_sparse``, naming the backend that runs the
    kernel's sparse sibling where it declares one (``sparse_backend``)."""
    reason = f"{backend.name} has no sparse entry point (run_sparse): mla-verify calls it for dense paged MLA only"
    sibling = backend.sparse_backend
    return reason + (f"; its sparse kernel runs as the backend {sibling}" if sibling else "")

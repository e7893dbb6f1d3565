"""The backend interface: a kernel under test, wrapped so the harness can drive it.

A backend has a name, declares what it supports (``Capabilities``, with a ``sparse`` section where it has a
sparse entry point), and maps ``Inputs`` to ``(out, lse)``: out ``(b, s_q, h_q, d_v)`` and LSE ``(b, h_q,
s_q)``.  A case outside its declared support is reported as ``unsupported`` with the reason;
it is never skipped silently and never counted as a pass.

``Backend`` names every member the harness may call.  What a backend offers beyond ``run`` is a
``Feature``: the harness asks ``backend.supports(feature)``, never whether an attribute exists, and
every optional member has a documented default here.
"""

from enum import Enum

import torch

from ..errors import InputError, Unsupported
from ..planning.cases import Case
from .capabilities import Capabilities, SparseSupport  # noqa: F401  (re-exported: the interface's declarations)

# What a Triton kernel of these backends is compiled for: its constexprs (heads per program, page size, the
# head dims, the draft tokens a program reads, causality, dtypes) and its strides, which Triton specialises
# on their divisibility by 16 (the layout and the scenario's buffers change them).  A key finer than the
# kernel's costs a case run alone; a coarser one, a compile in the fan-out as before.
TRITON_DENSE_VARIANT = ("mode", "dtype", "heads", "kv_heads", "draft_tokens", "verify_rows", "page_size", "d_qk",
                        "d_v", "causal", "scenario", "layout")
TRITON_SPARSE_VARIANT = TRITON_DENSE_VARIANT + ("topk", "kv_format", "sink", "topk_length", "extra_topk",
                                                "extra_page_size", "extra_kv_format", "extra_topk_length")


class Feature(Enum):
    """What a backend offers beyond its required members, each a set of members (``FEATURE_MEMBERS``)."""

    DENSE = "dense"                  # run(inputs): the dense paged MLA call (a sparse-only kernel has none)
    PREPARE = "prepare"              # prepare(inputs): one-time setup kept out of kernel time (a JIT build)
    SPARSE = "sparse"                # run_sparse(inputs), with capabilities.sparse: the sparse scenario
    GRAPH = "graph"                  # graph_session(max_bs, max_context_len, inputs): an engine's CUDA graph
    PROFILES = "profiles"            # use_profile(name): the spec NAME@PROFILE
    BENCH_LAUNCH = "bench_launch"    # bench_launch(inputs) -> callable: the launch alone, timed by bench
    SPLIT_CALL = "split_call"        # metadata_for(inputs), call(inputs, meta): FlashMLA's launch apart
    CAPTURED_RUN = "captured_run"    # cuda_graph = True: bench may capture run() whole in a CUDA graph


FEATURE_MEMBERS = {
    Feature.DENSE: ("run",), Feature.PREPARE: ("prepare",), Feature.SPARSE: ("run_sparse",),
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
    unchanged.  tests/backends/test_backend_protocol.py checks each built-in declaration against its members.
    """

    name = "unnamed"
    capabilities = Capabilities()
    features: frozenset = frozenset()       # Feature: what it offers beyond the required members
    sparse_backend: str | None = None    # the backend that runs this kernel's sparse sibling, if it is run apart
    no_graph_session: str | None = None  # why it has no graph_session, in its own words (the graph scenario)
    cuda_graph = False                   # Feature.CAPTURED_RUN, also read from ``capabilities`` (docs/speed.md)
    # What it imports, ((module, distribution), ...), the first that imports used, and the command that
    # installs it, as scripts/install_kernels.sh and docs/kernel-packages.md do: ``mla-verify list`` shows them.
    packages: tuple = ()
    install: str | None = None
    # The case fields its JIT builds one binary per (a Triton kernel's constexprs and specialised strides,
    # FlashInfer's module per dtype pair); () for a kernel built ahead of time.  ``run`` runs one case of each
    # such variant first, so each is compiled once, in parallel, before the fan-out (``running/warm_up``).
    compiled_per: tuple = ()
    # How long its slowest first build took, in seconds, where that is tens of seconds (a Triton kernel's 1-10 s
    # is not): side by side, such a backend starts first (``backends.launch_order``), its build beside the rest.
    first_build_s: float = 0.0
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
        if feature is Feature.SPARSE:         # run_sparse is called only as its sparse section declares
            return feature in self.features and self.capabilities.sparse is not None
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
        """Feature.SPARSE: the sparse call, as ``capabilities.sparse`` (``SparseSupport``) declares it."""
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
    """The sparse scenario's reason for a backend without ``run_sparse`` (or without the sparse section of
    its capabilities that says how to call it), naming the backend that runs the kernel's sparse sibling
    where it declares one (``sparse_backend``)."""
    if Feature.SPARSE in backend.features:
        return (f"{backend.name} declares no sparse capabilities (capabilities.sparse, a SparseSupport), so its "
                "run_sparse is not called")
    reason = f"{backend.name} has no sparse entry point (run_sparse): mla-verify calls it for dense paged MLA only"
    sibling = backend.sparse_backend
    return reason + (f"; its sparse kernel runs as the backend {sibling}" if sibling else "")

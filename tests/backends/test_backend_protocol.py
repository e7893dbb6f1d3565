"""The backend protocol: every registered backend's declarations, read from its class without CUDA, and
the harness asking ``supports()`` rather than probing a backend's attributes.

A backend added to ``harness.backends.BUILTIN`` gets every check here without a line of this file.
"""

import ast
import math
import re
from pathlib import Path

import pytest
import torch

from harness.backends import BUILTIN, KERNELS, builtin_class, builtins_supporting
from harness.backends.base import (
    FEATURE_MEMBERS,
    Backend,
    Capabilities,
    Feature,
    SparseSupport,
    Unsupported,
    features_defined,
)
from harness.errors import InputError
from harness.judging.sparse_oracle import CAST_VIEWS
from harness.judging.tolerances import TOLERANCES
from harness.planning.case import LAYOUTS
from harness.planning.cases import Case, case_seed, validate_case
from harness.planning.record_formats import DEQUANT_MODES, FORMATS
from harness.running.backend_loader import load_backend
from harness.scenarios import graph
from harness.scenarios import run as scenarios_run
from harness.scenarios._sparse_verdicts import OTHER_VIEW

REPO = Path(__file__).resolve().parents[2]
NAMES = list(BUILTIN)
CONVENTION_KEYS = {"engine", "index_format", "fp8_q", "lse_base", "empty_row_lse", "has_lse", "out_dtype",
                   "lse_dtype"}
QUOTABLE = {"mode", "dtype", "device", "page_size", "heads", "kv_heads", "d_qk", "d_v", "s_q", "non_causal", "layout"}


def dense_case(mode="decode", dtype="bf16"):
    case_id = f"protocol/{mode}-{dtype}/0"
    return Case(id=case_id, seed=case_seed(case_id, 3), mode=mode, batch_size=2, heads=16, dtype=dtype,
                draft_tokens=2 if mode == "verify" else 1, seqlen="list:64,130")


# ---- the declarations of every registered backend --------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_features_are_declared_and_match_the_members_defined(name):
    cls = builtin_class(name)
    assert issubclass(cls, Backend)
    assert "features" in vars(cls), f"{cls.__name__} declares no features of its own"
    assert cls.features == features_defined(cls), name
    for feature, members in FEATURE_MEMBERS.items():
        if feature not in cls.features:     # not half a feature either: none of its members is overridden
            assert all(getattr(cls, m) is getattr(Backend, m) for m in members), (name, feature)


@pytest.mark.parametrize("name", NAMES)
def test_supports_answers_the_declaration(name):
    backend = BUILTIN[name]()           # constructing imports no kernel and needs no GPU
    assert backend.name == name
    for feature in Feature:
        assert backend.supports(feature) == (feature in type(backend).features), (name, feature)


@pytest.mark.parametrize("name", NAMES)
def test_capabilities_and_conventions_are_complete(name):
    caps = builtin_class(name).capabilities
    assert isinstance(caps, Capabilities)
    conventions = caps.conventions()
    assert CONVENTION_KEYS <= set(conventions), name
    assert caps.lse_base in ("e", "2") and caps.index_format in ("page_table", "csr_pages", "token_slots")
    assert caps.fp8_q in ("quantized_k_scale", "model_dtype", "cast_in_kernel")
    assert caps.empty_row_lse in (math.inf, -math.inf)
    for dtype in (caps.lse_dtype, caps.out_dtype or "float32"):
        assert isinstance(getattr(torch, dtype.replace("bf16", "bfloat16")), torch.dtype), (name, dtype)
    assert {what for what, _ in caps.quoted_limits} <= QUOTABLE, name
    if name in KERNELS and Feature.DENSE in builtin_class(name).features:
        assert caps.engine != Capabilities.engine, name     # a real kernel says whose convention it reproduces


@pytest.mark.parametrize("name", NAMES)
def test_a_sparse_entry_point_declares_the_sparse_section_of_its_capabilities(name):
    cls = builtin_class(name)
    sparse = cls.capabilities.sparse
    if Feature.SPARSE not in cls.features:
        assert sparse is None, name
        return
    assert isinstance(sparse, SparseSupport)
    assert sparse.kv_dequant in (*DEQUANT_MODES, *CAST_VIEWS) and sparse.index_format == "token_slots"
    assert sparse.tolerance in TOLERANCES and sparse.kv_dequant in OTHER_VIEW
    assert set(sparse.formats()) <= set(FORMATS) and sparse.formats()
    if name in KERNELS:
        assert sparse.engine != SparseSupport.engine, name


def test_the_sparse_section_leaves_the_dense_declarations_as_they_were():
    """``list --json``'s "supports" object and a dense row's ``conventions`` hold no sparse section."""
    with_sparse = Capabilities(sparse=SparseSupport(kv_formats=("v4",)))
    assert with_sparse.describe() == Capabilities().describe() and "sparse" not in with_sparse.describe()
    assert with_sparse.conventions() == Capabilities().conventions()
    assert builtin_class("torch").capabilities.describe() == Capabilities(layouts=LAYOUTS).describe()


@pytest.mark.parametrize("name", NAMES)
def test_the_install_command_is_declared_on_the_class(name):
    cls = builtin_class(name)
    assert cls.packages and all(isinstance(m, str) and isinstance(d, str) for m, d in cls.packages), name
    assert cls.install and cls.install.startswith(("pip install ", "make ")), name
    if cls.install.startswith("pip install"):
        # kernel wheels go in without their dependencies (each pins a torch); the command installs a
        # distribution the backend imports
        assert "--no-deps" in cls.install, name
        assert any(dist in cls.install for _, dist in cls.packages), name


@pytest.mark.parametrize("name", NAMES)
def test_named_siblings_and_graph_refusals_are_consistent(name):
    cls = builtin_class(name)
    if cls.sparse_backend is not None:
        assert Feature.SPARSE in builtin_class(cls.sparse_backend).features, (name, cls.sparse_backend)
    if cls.no_graph_session is not None:
        assert Feature.GRAPH not in cls.features, name


@pytest.mark.parametrize("name", [n for n in NAMES if Feature.DENSE not in builtin_class(n).features])
def test_a_backend_without_a_dense_call_refuses_every_dense_case(name):
    backend = BUILTIN[name]()
    for case in (dense_case(), dense_case("verify"), dense_case(dtype="fp8_e4m3")):
        for device in ("cpu", "cuda"):
            assert backend.unsupported_reason(case, device), (name, case.id, device)
    with pytest.raises(NotImplementedError, match="only a sparse entry point"):
        backend.run(None)


def test_the_graph_scenario_names_exactly_the_backends_declaring_a_graph_session():
    declared = [n for n in NAMES if Feature.GRAPH in builtin_class(n).features]
    assert declared == builtins_supporting(Feature.GRAPH) and declared
    listed = graph.graph_backends()
    assert all(name in listed for name in declared)
    assert listed.count(",") + listed.count(" and ") == len(declared) - 1


# ---- the defaults a plug-in inherits ---------------------------------------------------------------------

class RunOnly(Backend):
    name = "run-only"

    def run(self, inputs):
        return None, None


def test_a_plugin_that_declares_nothing_offers_what_it_defines():
    backend = RunOnly()
    assert type(backend).features == {Feature.DENSE}
    assert not any(backend.supports(f) for f in Feature if f is not Feature.DENSE)
    assert backend.prepare(None) is None and backend.availability() is None and backend.available()
    with pytest.raises(Unsupported, match="run-only has no sparse entry point"):
        backend.run_sparse(None)
    with pytest.raises(Unsupported, match="run-only: no graph_session"):
        backend.graph_session(1, 1, None)
    with pytest.raises(InputError, match="run-only has no engine profiles"):
        backend.use_profile("any")
    assert backend.bug == "" and backend.caught_by == () and backend.capabilities.sparse is None


class SparseWithoutSection(Backend):
    name = "sparse-without-section"

    def run_sparse(self, inputs):
        return None, None


def test_a_run_sparse_without_a_sparse_section_is_not_called():
    backend = SparseWithoutSection()
    assert Feature.SPARSE in type(backend).features and not backend.supports(Feature.SPARSE)
    case = validate_case(Case(id="protocol/sparse/0", seed=1, scenario="sparse", heads=16, topk=64,
                              seqlen="list:20"), "test")
    outcome = scenarios_run(case, backend, "cpu")
    assert outcome.status.value == "unsupported"
    assert outcome.reason == ("sparse-without-section declares no sparse capabilities (capabilities.sparse, a "
                              "SparseSupport), so its run_sparse is not called")


def test_a_plugin_subclass_gains_the_features_it_defines_and_only_whole_ones():
    from harness.backends.torch_backend import TorchBackend

    class Graphy(TorchBackend):
        def prepare(self, inputs):
            pass

        def graph_session(self, max_bs, max_context_len, inputs):
            return None

    class HalfSplit(TorchBackend):
        def metadata_for(self, inputs):      # no call(inputs, meta): not a split call
            return None

    assert Graphy.features == {Feature.DENSE, Feature.SPARSE, Feature.PREPARE, Feature.GRAPH}
    assert HalfSplit.features == TorchBackend.features
    assert not HalfSplit().supports(Feature.SPLIT_CALL)


def test_a_captured_run_is_asked_of_the_instance_and_its_capabilities():
    from dataclasses import dataclass

    backend = RunOnly()
    assert not backend.supports(Feature.CAPTURED_RUN)
    backend.cuda_graph = True
    assert backend.supports(Feature.CAPTURED_RUN)

    @dataclass(frozen=True)
    class GraphCapabilities(Capabilities):
        cuda_graph: bool = True

    class Declared(RunOnly):
        capabilities = GraphCapabilities()

    assert Declared().supports(Feature.CAPTURED_RUN)


@pytest.mark.parametrize("spec", ["examples/plugin_backend.py:MyKernel", "examples/offbyone_verify.py:OffByOneVerify"])
def test_the_example_plugins_load_with_the_protocol(spec):
    backend = load_backend(str(REPO / spec))
    assert isinstance(backend, Backend) and backend.supports(Feature.DENSE)
    assert not backend.supports(Feature.GRAPH)


# ---- no attribute probes on a backend outside harness/backends/ ----------------------------------------------

BACKEND_NAMED = re.compile(r"^(b|backend|\w+_backend)$")


def backend_probes(source: str, filename: str = "<source>") -> list[str]:
    """``hasattr``/``getattr`` calls whose first argument is a backend: a variable named like one
    (``backend``, ``b``, ``sparse_backend``), or an attribute of that name (``self.backend``)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("hasattr", "getattr") and node.args):
            continue
        first = node.args[0]
        named = first.id if isinstance(first, ast.Name) else first.attr if isinstance(first, ast.Attribute) else ""
        if BACKEND_NAMED.match(named):
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_probe_finder_finds_probes_and_nothing_else():
    source = """
hasattr(backend, "prepare")
getattr(self.backend, "run_sparse", None)
getattr(b, "bug", "")
hasattr(rec.sparse_backend, "x")
getattr(backend.capabilities, "fixed_softmax_scale", None)
hasattr(session, "prepare")
getattr(batch, "b")
"""
    assert [line.split(": ", 1)[1] for line in backend_probes(source)] == [
        "hasattr(backend, 'prepare')", "getattr(self.backend, 'run_sparse', None)", "getattr(b, 'bug', '')",
        "hasattr(rec.sparse_backend, 'x')"]


def test_no_module_outside_backends_probes_a_backend():
    backends = REPO / "harness" / "backends"
    files = [p for folder in ("harness", "scripts", "examples") for p in sorted((REPO / folder).rglob("*.py"))
             if backends not in p.parents]
    assert len(files) > 50
    probes = [hit for p in files for hit in backend_probes(p.read_text(), str(p.relative_to(REPO)))]
    assert not probes, "ask backend.supports(Feature...) instead:\n" + "\n".join(probes)

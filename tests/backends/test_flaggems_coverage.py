"""FlagGems' coverage of the default suites: every decode case reaches one of its two MLA kernels
(the graph cases through its ``graph_session``) or is refused for a reason that quotes the kernel.  Read
from the backends' declarations, without importing flag_gems (docs/kernel-backends.md, "FlagGems
coverage").  Where flag_gems is installed, each quoted line is found in its source."""

import ast
import collections
import importlib.util
import re
from pathlib import Path

import pytest
from helpers import REPO

from harness.backends.base import Feature, no_sparse_reason
from harness.backends.flaggems_mla import SIGNATURE, SOURCE, FlagGemsMLABackend
from harness.backends.sparse_prefill import FlagGemsSparseBackend
from harness.planning.cases import load_suite

DEFAULT_SUITES = re.search(r"^SUITES \?= *(\S+)", (REPO / "Makefile").read_text(), re.M).group(1).split(",")


def reason_of(case) -> str | None:
    """What ``run --backend flaggems`` says of ``case`` on a GPU with flag_gems: the capability check, then
    the scenario's own (graph: ``graph_session``; sparse: ``run_sparse``), as the runner and scenarios do."""
    backend = FlagGemsMLABackend()
    if case.scenario == "sparse":
        return None if backend.supports(Feature.SPARSE) else no_sparse_reason(backend)
    reason = backend.capabilities.reason_unsupported(case, "cuda")
    if reason is None and case.scenario == "graph" and not backend.supports(Feature.GRAPH):
        return "no graph_session"
    return reason


def reason_class(reason: str | None) -> str:
    if reason is None:
        return "runs"
    for name, quote in (("s_q", SOURCE["grid"]), ("fp8", SIGNATURE + " has no descale"),
                        ("sparse", "no sparse entry point (run_sparse)")):
        if quote in reason:
            return name
    return f"unquoted: {reason}"


@pytest.fixture(scope="module")
def classes():
    found = collections.defaultdict(list)
    for suite in DEFAULT_SUITES:
        for case in load_suite(suite).cases:
            found[reason_class(reason_of(case))].append(case)
    return found


def test_every_refusal_of_a_default_suite_case_is_one_quoted_class(classes):
    assert set(classes) == {"runs", "s_q", "fp8", "sparse"}, sorted(classes)
    assert all(c.mode == "verify" and c.s_q > 1 for c in classes["s_q"])
    assert all(c.dtype.startswith("fp8") for c in classes["fp8"])


def test_every_dense_case_of_one_query_row_in_bf16_or_fp16_runs_scenarios_included(classes):
    """Decode, and verify of one draft token (its one row sees every key, as a decode row does)."""
    ran = classes["runs"]
    assert {c.scenario for c in ran} >= {"call", "padding", "determinism", "batch_invariance", "graph"}
    assert any(c.mode == "verify" for c in ran)
    for suite in DEFAULT_SUITES:
        for c in load_suite(suite).cases:
            if c.s_q == 1 and c.dtype in ("bf16", "fp16") and c.scenario != "sparse":
                assert c in ran, c.id


def test_the_graph_cases_it_runs_are_the_bf16_decode_group(classes):
    """CUDA-graph replay through ``graph_session`` (flaggems_graph.py): the graph suite's cases of one query row."""
    graph = [c for c in classes["runs"] if c.scenario == "graph"]
    assert len(graph) == 4 and all(c.mode == "decode" and c.dtype == "bf16" for c in graph)


def test_the_sparse_cases_flaggems_sparse_takes(classes):
    """FlagGems' sparse MLA (``flash_mla_sparse_fwd``) is the ``flaggems-sparse`` backend: it declares every
    sparse case of the default suites runnable but DeepSeek V4's two-cache and per-row-length ones (a prefill
    kernel over one KV: it takes no extra cache), which it refuses with that reason, and strided views, which
    its assert refuses (below)."""
    caps = FlagGemsSparseBackend.capabilities.sparse
    one_cache = [c for c in classes["sparse"] if not c.extra_topk and c.topk_length == "none"
                 and c.layout != "strided"]
    assert one_cache and all(caps.reason_unsupported(c, "cuda") is None for c in one_cache)
    second = [c for c in classes["sparse"] if c.extra_topk or c.topk_length != "none"]
    assert second and all("takes no" in caps.reason_unsupported(c, "cuda") for c in second)
    assert FlagGemsMLABackend.sparse_backend == FlagGemsSparseBackend.name        # the reason names it
    assert no_sparse_reason(FlagGemsMLABackend()).endswith(f"runs as the backend {FlagGemsSparseBackend.name}")


def test_each_kernel_limit_quotes_a_line_of_its_source():
    quotes = [f"`{line}`" for line in SOURCE.values()] + [SIGNATURE]
    for what, text in FlagGemsMLABackend.capabilities.quoted_limits:
        assert any(q in text for q in quotes), (what, text)


def flaggems_source() -> str | None:
    """flag_gems/fused/flash_mla.py as installed, read without importing flag_gems (its import needs CUDA)."""
    spec = importlib.util.find_spec("flag_gems")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "fused" / "flash_mla.py"
    return path.read_text() if path.exists() else None


@pytest.mark.skipif(flaggems_source() is None, reason="flag_gems is not installed here")
def test_the_quoted_lines_and_signature_are_flag_gems_own():
    text = flaggems_source()
    flat = re.sub(r"\s", "", text)
    for name, line in SOURCE.items():
        assert re.sub(r"\s", "", line) in flat, name
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "flash_mla")
    assert [a.arg for a in fn.args.args] == re.findall(r"(\w+)[,)]", SIGNATURE.split("(", 1)[1])


def test_flaggems_sparse_refuses_strided_views_quoting_its_assert():
    """``flash_mla_sparse_fwd`` asserts its inputs contiguous: the ``strided`` layout's sparse cases are
    unsupported, with that line; ``offset`` views are contiguous, and run."""
    layouts = [c for c in load_suite("layouts").cases if c.scenario == "sparse"]
    caps = FlagGemsSparseBackend.capabilities.sparse
    strided = [c for c in layouts if c.layout == "strided"]
    assert strided and all("assert q.is_contiguous() and kv.is_contiguous() and indices.is_contiguous()"
                           in caps.reason_unsupported(c, "cuda") for c in strided)
    others = [c for c in layouts if c.layout != "strided"]
    assert others and not any("layout" in (caps.reason_unsupported(c, "cuda") or "") for c in others)
    source = importlib.util.find_spec("flag_gems")
    if source is not None:          # the quoted line, in the installed package
        text = (Path(source.origin).parent / "fused" / "flashmla_sparse.py").read_text()
        assert "assert q.is_contiguous() and kv.is_contiguous() and indices.is_contiguous()" in text


def test_the_coverage_table_in_the_docs_counts_the_suites_as_they_are(classes):
    """docs/kernel-backends.md's "FlagGems coverage" counts, read back: a suite that grows changes them."""
    text = (REPO / "docs" / "kernel-backends.md").read_text().split("### FlagGems coverage", 1)[1]
    total = sum(len(v) for v in classes.values())
    assert f"`SUITES` ({total} cases)" in text
    rows = [line.split("|")[1:3] for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    counted = {label.split()[0].strip("`:"): int(count.split()[0]) for label, count in rows[1:]}
    assert counted == {"runs": len(classes["runs"]), "s_q": len(classes["s_q"]), "dtype": len(classes["fp8"]),
                       "sparse": len(classes["sparse"])}, counted
    decode = sum(c.mode == "decode" for c in classes["runs"])
    assert f"The {len(classes['runs'])} that run" in text and f"({decode}: the call" in text
    sparse_modes = [sum(c.mode == m for c in classes["sparse"]) for m in ("decode", "verify")]
    assert "The sparse cases ({} decode, {} verify)".format(*sparse_modes) in text

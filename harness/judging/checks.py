"""The checks a result row can fail, defined once.

A row's ``failed_checks`` names each failed check: ``TENSOR.KIND`` for a
comparison with the oracle (``out.element``, ``lse.dtype``), a scenario check
(``determinism``, ``graph.addresses``), or an outcome (``raised``, ``crash``,
``timeout``, ``harness.PHASE``).  The console summary, the self-check's kill
matrix, the report's columns and drill-downs all read their names, labels,
order and short names from here.

Adding a check: compute it (in ``compare.py`` for a tensor check, in its
scenario otherwise) and add one entry below.
"""

import math
from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    """How a compared tensor can fail, in the order a failure line reports them."""

    TYPE = "type"              # not a torch.Tensor at all (a numpy array, None, a list)
    DEVICE = "device"          # a tensor on another device than the kernel's inputs
    DTYPE = "dtype"            # not the dtype the engine needs
    SHAPE = "shape"            # not the shape the case implies
    NONFINITE = "nonfinite"    # NaN/inf positions differ from the oracle's
    ELEMENT = "element"        # an element over atol + rtol·|expected|
    COSINE = "cosine"          # the cosine difference over its bound


@dataclass(frozen=True)
class Tensor:
    """A tensor compared with the oracle."""

    name: str
    label: str
    short: str
    what: str
    gating: bool = True


TENSORS = (
    Tensor("out", "out", "out", "kernel output vs the float64 reference on the same inputs"),
    Tensor("lse", "LSE", "lse", "log-sum-exp vs the reference"),
    Tensor("out_end_to_end", "out, end to end", "out.e2e",
           "fp8: out vs the reference on the unquantised inputs; a warning, never gating: it measures the "
           "engine's quantisation of q and KV, which no kernel can undo", gating=False),
    Tensor("lse_end_to_end", "LSE, end to end", "lse.e2e",
           "fp8: LSE vs the reference on the unquantised inputs; a warning, never gating", gating=False),
)
TENSOR_NAMES = tuple(t.name for t in TENSORS)
BY_TENSOR = {t.name: t for t in TENSORS}

SHORT_KIND = {Kind.ELEMENT: "elem", Kind.COSINE: "cos", Kind.NONFINITE: "nonf", Kind.SHAPE: "shape",
              Kind.DTYPE: "dtype", Kind.DEVICE: "device", Kind.TYPE: "type"}
KIND_ORDER = (Kind.ELEMENT, Kind.COSINE, Kind.NONFINITE, Kind.SHAPE, Kind.DTYPE, Kind.DEVICE, Kind.TYPE)   # kill matrix

# Checks of a scenario beyond one comparison, and outcomes that are not comparisons.
INPUTS_UNCHANGED = "inputs.unchanged"
DETERMINISM, PADDING, BATCH_INVARIANCE = "determinism", "padding", "batch_invariance"
GRAPH_ADDRESSES, GRAPH_REPLAY_VS_EAGER, GRAPH_VS_ENGINE_EAGER = (
    "graph.addresses", "graph.replay_vs_eager", "graph.vs_engine_eager")
SCENARIO_CHECKS = {
    INPUTS_UNCHANGED: "the kernel changed an input it was given (q, the KV pool, a table, a length, a scale) or "
                      "wrote into a guard region beside the pool or the output buffer (harness/judging/integrity.py)",
    DETERMINISM: "the same call twice is not bitwise equal",
    PADDING: "the output changes with the table padding or the contents of unused slots",
    BATCH_INVARIANCE: "a request alone differs from its row in the batch beyond the dtype's tolerance",
    GRAPH_ADDRESSES: "the captured metadata or table buffers moved between capture and replay",
    GRAPH_REPLAY_VS_EAGER: "graph replay differs from an eager call on the same buffers",
    GRAPH_VS_ENGINE_EAGER: "graph replay differs from the engine's eager call beyond the dtype's tolerance",
}
RAISED, CRASH, TIMEOUT = "raised", "crash", "timeout"
HARNESS_PREFIX = "harness."


def float_or_nan(value) -> float:
    """A number read from a row as a float: rows spell inf and NaN as strings (JSON has neither); anything
    that is not a number (missing, a bool, text) is NaN."""
    if isinstance(value, bool) or value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def over_bound(metrics: dict) -> tuple[float, float]:
    """A tensor check's (worst |err|/bound, cos diff/bound) from its recorded metrics.

    A NaN/inf position that differs counts as infinitely far over the bound.  Pure
    Python on the row's numbers, so the report reads rows written by any version.
    """
    bound = metrics.get("bound") if isinstance(metrics.get("bound"), dict) else {}
    nonfinite = float_or_nan(metrics.get("nonfinite_mismatches")) > 0
    ratio = math.inf if nonfinite else float_or_nan(metrics.get("worst_ratio"))
    cos_bound = float_or_nan(bound.get("cos_diff"))
    cos = float_or_nan(metrics.get("cos_diff")) / cos_bound if cos_bound > 0 else math.nan
    return ratio, cos


FLOOR_TENSORS = ("out", "lse")      # the tensors a row's noise floor is measured for (noise_floor.py)


def over_floor(metrics: dict, tensor: str) -> float:
    """A row's kernel error over its noise floor for ``tensor`` (``metrics.noise_floor``; NaN where the row has
    none).  Pure Python on the row's numbers, as ``over_bound``."""
    floor = metrics.get("noise_floor") if isinstance(metrics.get("noise_floor"), dict) else {}
    entry = floor.get(tensor) if isinstance(floor.get(tensor), dict) else {}
    value = entry.get("over_floor")
    return float(value) if isinstance(value, (int, float)) else math.nan


def tensor_check(tensor: str, kind: Kind) -> str:
    return f"{tensor}.{Kind(kind).value}"


def harness_check(phase: str) -> str:
    return f"{HARNESS_PREFIX}{phase}"


def known(check: str) -> bool:
    """Whether ``check`` names a check this table defines (a mutant's ``caught_by`` must)."""
    tensor, _, kind = check.rpartition(".")
    return ((tensor in BY_TENSOR and kind in {k.value for k in Kind}) or check in SCENARIO_CHECKS
            or check in (RAISED, CRASH, TIMEOUT) or check.startswith(HARNESS_PREFIX))


def order(check: str) -> tuple:
    """Sort key: tensor checks first (out, lse, then end to end; by kind), then scenario checks, then outcomes."""
    tensor, _, kind = check.rpartition(".")
    if tensor in BY_TENSOR:
        kinds = [k.value for k in KIND_ORDER]
        return 0, TENSOR_NAMES.index(tensor), kinds.index(kind) if kind in kinds else len(kinds), check
    if check in SCENARIO_CHECKS:
        return 1, list(SCENARIO_CHECKS).index(check), 0, check
    return 2, 0, 0, check


def short(check: str) -> str:
    """A short column name for the kill matrix: ``out.elem``, ``lse.e2e.cos``."""
    tensor, _, kind = check.rpartition(".")
    if tensor in BY_TENSOR and kind in {k.value for k in Kind}:
        return f"{BY_TENSOR[tensor].short}.{SHORT_KIND[Kind(kind)]}"
    return check

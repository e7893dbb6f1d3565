"""Findings: failing rows clustered by what went wrong, so 111 rows of one bug read as one line.

A row's signature is its backend, what failed (the tensors and how: NaN/inf, over the bound,
or a raise with its reason) and where, when the row says (NaN only in rows with no keys).
Rows with one signature are one finding: how many cases, the smallest of them (the one to
rerun first), and one sentence of evidence over all of them ("LSE over its bound by 1.7-13x").

The console summary and the HTML report cluster alike: both read this module.  Clustering reads
records, a row's scalars (``finding_record`` makes one from a whole row; the report's lean
records carry the same keys).  Pure Python, so ``report`` stays light.
"""

import math
from dataclasses import dataclass

from ..judging.checks import BY_TENSOR, FLOOR_TENSORS, TENSOR_NAMES, float_or_nan, over_bound, over_floor
from .reasons import blank_numbers
from .status import Status, gates


def ratio(v) -> str:
    """An error over its bound: 0.25, 32.3, 13,600; ∞ for a NaN/inf position mismatch."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if math.isinf(v):
        return "∞"
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 0.01:
        return f"{v:.2f}"
    return f"{v:.1e}" if v > 0 else "0"


def max_seqlen(row: dict) -> float:
    """The longest request of a row's case (NaN where the row does not say)."""
    lens = row.get("seq_lens") or row.get("cache_seqlens")
    return float(max(lens)) if isinstance(lens, list) and lens and all(isinstance(x, int) for x in lens) else math.nan


def scores(row: dict) -> dict:
    """Each tensor's worst |err|/bound (``out_ratio``) and cos diff/bound (``out_cos``), and ``worst``: the
    largest of them, any check (inf for a NaN/inf mismatch), the one number a failing row is sorted by."""
    metrics = row.get("metrics") if isinstance(row.get("metrics"), dict) else {}
    found = {}
    for name in TENSOR_NAMES:
        m = metrics.get(name)
        found[f"{name}_ratio"], found[f"{name}_cos"] = over_bound(m) if isinstance(m, dict) else (math.nan, math.nan)
    scored = [v for v in found.values() if not math.isnan(v)]
    found["worst"] = max(scored, default=math.nan)
    for name in FLOOR_TENSORS:     # how far over its noise floor (judging/noise_floor.py): explains, never gates
        found[f"{name}_floor"] = over_floor(metrics, name)
    return found


def finding_record(row: dict) -> dict:
    """What ``cluster`` reads of a whole row, with the row itself under ``row`` (its messages, its rerun)."""
    rec = {"backend": str(row.get("backend") or row.get("backend_spec") or "?"), "status": str(row["status"]),
           "mode": str(row.get("mode") or "?"), "dtype": str(row.get("dtype") or "?"),
           "batch_size": row.get("batch_size"), "heads": row.get("heads"), "s_q": row.get("s_q"),
           "max_seqlen": max_seqlen(row), "row": row, **scores(row)}
    rec["sig"] = signature(row) if gates(rec["status"]) else None
    return rec


def _failed_tensors(row: dict, kind: str) -> list[str]:
    checks = row.get("failed_checks") or []
    return [t for t in TENSOR_NAMES if f"{t}.{kind}" in checks]


def _nonfinite_where(row: dict) -> str:
    """Where the NaN/inf lands, from the per-request error and lengths the row carries."""
    diag = row.get("diagnostics") if isinstance(row.get("diagnostics"), dict) else {}
    per_request, lengths = diag.get("request_ratio"), diag.get("request_seqlen")
    if not isinstance(per_request, list) or not isinstance(lengths, list) or len(per_request) != len(lengths):
        return ""
    hit = {i for i, r in enumerate(per_request) if math.isinf(float_or_nan(r))}
    empty = {i for i, n in enumerate(lengths) if n == 0}
    if hit and hit == empty:
        return "only in rows with no keys"
    if hit and len(hit) == len(per_request):
        return "in every request"
    return "in some requests with keys" if hit and not hit & empty else ""


def _hides_nonfinite(row: dict, tensor: str) -> bool:
    """Whether the kernel's first NaN/inf mismatch in ``tensor`` is a finite value where the reference has
    NaN/inf: the kernel hid a NaN (or inf) of its inputs rather than making one."""
    metrics = row.get("metrics") if isinstance(row.get("metrics"), dict) else {}
    check = metrics.get(tensor) if isinstance(metrics.get(tensor), dict) else {}
    if "first_nonfinite_expected" not in check:
        return False
    got, expected = (float_or_nan(check.get(f"first_nonfinite_{side}")) for side in ("actual", "expected"))
    return math.isfinite(got) and not math.isfinite(expected)


def _reason_pattern(reason: str) -> str:
    """A raise's first line with its numbers blanked, so one bug at many shapes is one finding."""
    first = (reason or "").strip().splitlines()[0] if (reason or "").strip() else "no reason recorded"
    return blank_numbers(first[:160])


def signature(row: dict) -> tuple[str, str, str]:
    """(what failed, where, kind) of a failing row; the backend completes the cluster key."""
    status = str(row.get("status"))
    if status != Status.FAIL:
        return status, _reason_pattern(row.get("reason") or ""), "raise"
    nonfinite = _failed_tensors(row, "nonfinite")
    if nonfinite:
        kind = "hidden" if all(_hides_nonfinite(row, t) for t in nonfinite) else "nonfinite"
        return " and ".join(BY_TENSOR[t].label for t in nonfinite), _nonfinite_where(row), kind
    over = [t for t in TENSOR_NAMES if any(c.startswith(f"{t}.") for c in row.get("failed_checks") or [])]
    if over:
        return " and ".join(BY_TENSOR[t].label for t in over), "", "bound"
    return ", ".join(row.get("failed_checks") or ["a check"]), "", "scenario"


@dataclass
class Finding:
    backend: str
    what: str                 # the tensors, or the status of a raise
    where: str                # a location pattern, or the raise's reason
    kind: str                 # nonfinite, hidden, bound, raise, scenario
    cases: int
    smallest: dict            # the record of the smallest case: rerun it first
    evidence: str
    worst: float
    gpus: tuple | None = None  # (GPU model, ((other model, its status), ...)) where the verdict differs by GPU


def size(rec: dict) -> float:
    """How big a case is, to pick the cheapest one to rerun: batch x heads x query tokens x longest request."""
    dims = [float_or_nan(rec.get(k)) for k in ("batch_size", "heads", "s_q", "max_seqlen")]
    dims = [d if d > 0 else 1.0 for d in dims]            # NaN (unknown) and 0 (all empty) count as 1
    return math.prod(dims)


def _span(values) -> str:
    values = sorted(v for v in values if not math.isnan(v))
    if not values:
        return "?"
    lo, hi = ratio(values[0]), ratio(values[-1])
    return f"{lo}x" if lo == hi else f"{lo}-{hi}x"


def _evidence(kind: str, what: str, where: str, recs: list[dict]) -> str:
    n = len(recs)
    modes = sorted({r["mode"] for r in recs})
    dtypes = sorted({r["dtype"] for r in recs})
    scope = f"{n} case{'s' if n != 1 else ''} ({', '.join(modes)}; {', '.join(dtypes)})"
    if kind == "nonfinite":
        return f"NaN/inf in {what} where the reference is finite{', ' + where if where else ''}: {scope}."
    if kind == "hidden":
        return f"finite {what} where the reference is NaN/inf (a NaN or inf of the inputs hidden): {scope}."
    if kind == "bound":
        parts = []
        for t in TENSOR_NAMES:
            if BY_TENSOR[t].label not in what.split(" and "):
                continue
            err = [r[f"{t}_ratio"] for r in recs]
            cos = [r[f"{t}_cos"] for r in recs]
            over = [e for e in err if e > 1]
            floor = [r.get(f"{t}_floor", math.nan) for r in recs]
            parts.append(f"{BY_TENSOR[t].label} over its bound by {_span(over)}{_floor_words(floor)}" if over
                         else f"{BY_TENSOR[t].label} cosine {_span(cos)} its bound")
        return f"{'; '.join(parts)}: {scope}."
    if kind == "raise":
        return f"{what}: {where}: {scope}."
    return f"failed {what}: {scope}."


def _floor_words(values) -> str:
    """`` (38-41x its noise floor)``, or nothing where no row has the ratio."""
    span = _span(v for v in values if isinstance(v, float) and not math.isinf(v))
    return "" if span == "?" else f" ({span} its noise floor)"


def cluster(records: list[dict]) -> list[Finding]:
    """Findings from the failing records (each carrying its ``sig``), most cases first.  A case that goes
    otherwise on another GPU model (a record's ``gpu_vs``) is its own finding, its ``gpus`` naming both."""
    groups: dict[tuple, list[dict]] = {}
    for rec in records:
        sig = rec.get("sig")
        if sig:
            gpus = (rec.get("gpu") or "", rec["gpu_vs"]) if rec.get("gpu_vs") else None
            groups.setdefault((rec["backend"], *sig, gpus), []).append(rec)
    found = []
    for (backend, what, where, kind, gpus), recs in groups.items():
        worst = max((r["worst"] for r in recs if not math.isnan(r["worst"])), default=math.nan)
        evidence = _evidence(kind, what, where, recs)
        found.append(Finding(backend, what, where, kind, len(recs), min(recs, key=size), evidence, worst, gpus))
    return sorted(found, key=lambda f: (-f.cases, f.backend, f.what, str(f.gpus)))

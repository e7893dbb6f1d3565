"""The report's data: result rows read back, one lean pandas frame, counts, environment, timing.

Everything the page shows is computed here from the results files alone, so a
report is rebuilt without rerunning anything.  The frame keeps only scalars
(ids, statuses, error over bound per check); the drill-downs read their few
rows' ``diagnostics`` straight from the row dicts.
"""

import math
from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from ..checks import TENSOR_NAMES, over_bound
from ..errors import InputError
from ..results import read_rows
from ..status import GATING, STATUSES, Status, Verdict, verdict_of

BAD = GATING          # statuses that fail the gate
CHECKS = TENSOR_NAMES
GROUP_BY = ["suite", "backend", "mode", "dtype"]


def num(value) -> float:
    """A metric as a float: rows spell inf/NaN as strings (JSON has neither); missing is NaN."""
    if isinstance(value, bool) or value is None:
        return math.nan
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def row_key(row: dict) -> tuple:
    """Rows match across files by case id and backend name (a plug-in's path may move)."""
    return row["case_id"], row.get("backend") or row.get("backend_spec") or "?"


def read(paths) -> list[dict]:
    """Rows of every file, in order; a row that is not a result row is bad input."""
    rows = []
    for path in paths:
        for n, row in enumerate(read_rows(path), 1):
            if not isinstance(row, dict) or not isinstance(row.get("case_id"), str) or "status" not in row:
                raise InputError(f"{path}: row {n} is not an mla-verify result row (no case_id or status)")
            rows.append(row)
    return rows


def latest(rows: list[dict]) -> tuple[list[dict], int]:
    """One row per case and backend: a later row (a rerun, a later file) supersedes an earlier one."""
    by_key = {}
    for row in rows:
        by_key.pop(row_key(row), None)     # re-insert so order follows the latest row
        by_key[row_key(row)] = row
    return list(by_key.values()), len(rows) - len(by_key)


def _check_columns(metrics: dict) -> dict:
    cols = {}
    for name in CHECKS:
        m = metrics.get(name)
        if not isinstance(m, dict):
            cols[f"{name}_ratio"] = cols[f"{name}_cos"] = math.nan
            continue
        cols[f"{name}_ratio"], cols[f"{name}_cos"] = over_bound(m)
    return cols


def frame(rows: list[dict]) -> pd.DataFrame:
    """One line per row with the scalars the summary, table and baseline diff need."""
    records = []
    for i, r in enumerate(rows):
        metrics = r.get("metrics") if isinstance(r.get("metrics"), dict) else {}
        rec = {
            "i": i, "case_id": r["case_id"], "backend": row_key(r)[1], "status": str(r["status"]),
            "suite": r.get("suite") or r["case_id"].split("/")[0], "group": r.get("group"),
            "mode": r.get("mode") or "?", "dtype": r.get("dtype") or "?",
            "batch_size": r.get("batch_size"), "heads": r.get("heads"), "s_q": r.get("s_q"),
            "page_size": r.get("page_size"), "reason": r.get("reason") or "", "rerun": r.get("rerun") or "",
            "wall_s": num(r.get("wall_s")), "kernel_ms": num(r.get("kernel_ms")),
            "has_diag": bool(r.get("diagnostics")),
        }
        rec.update(_check_columns(metrics))
        records.append(rec)
    df = pd.DataFrame.from_records(records, columns=None if records else ["i", "case_id", "backend", "status"])
    ratio_cols = [c for c in df.columns if c.endswith(("_ratio", "_cos"))]
    # the one number a row is sorted by: its largest error over bound, any check (inf for NaN/inf mismatch)
    df["worst"] = df[ratio_cols].max(axis=1, skipna=True) if ratio_cols else math.nan
    return df


def status_columns(df: pd.DataFrame) -> list[str]:
    """The status vocabulary, plus any status a row carries outside it (so counts still add up)."""
    extra = sorted(set(df["status"]) - set(STATUSES)) if len(df) else []
    return [*STATUSES, *extra]


def counts(df: pd.DataFrame) -> pd.DataFrame:
    """Rows per status, by suite, backend, mode and dtype."""
    cols = status_columns(df)
    if not len(df):
        return pd.DataFrame(columns=cols)
    table = df.groupby([*GROUP_BY, "status"]).size().unstack(fill_value=0)
    return table.reindex(columns=cols, fill_value=0).sort_index()


def _kernel(row: dict) -> str:
    info = row.get("backend_info") if isinstance(row.get("backend_info"), dict) else {}
    parts = [str(info.get("package") or "?"), str(info.get("version") or "")]
    api = info.get("api")
    return " ".join(p for p in parts if p) + (f" ({api})" if api else "")


ENV_FIELDS = [
    ("GPU", lambda r, e: e.get("gpu") or "none (CPU)"),
    ("driver", lambda r, e: e.get("driver")),
    ("CUDA", lambda r, e: e.get("cuda")),
    ("torch", lambda r, e: e.get("torch")),
    ("kernel", lambda r, e: f"{r.get('backend', '?')}: {_kernel(r)}"),
    ("backend spec", lambda r, e: r.get("backend_spec")),
    ("device", lambda r, e: r.get("device")),
    ("commit", lambda r, e: e.get("commit")),
    ("host", lambda r, e: e.get("host")),
    ("python", lambda r, e: e.get("python")),
]


def environment(rows: list[dict]) -> list[tuple[str, list[tuple[str, int]]]]:
    """Each environment field with its distinct values and how many rows carry each."""
    seen = {name: Counter() for name, _ in ENV_FIELDS}
    for r in rows:
        env = r.get("env") if isinstance(r.get("env"), dict) else {}
        for name, get in ENV_FIELDS:
            seen[name][str(get(r, env) or "–")] += 1
    return [(name, seen[name].most_common()) for name, _ in ENV_FIELDS]


def timing(df: pd.DataFrame) -> dict:
    """Run time as the sum of per-case wall time: rows carry no run start or end stamp."""
    wall = float(df["wall_s"].sum(skipna=True)) if len(df) else 0.0
    kernel = df["kernel_ms"].dropna() if len(df) else pd.Series(dtype=float)
    return {
        "cases": len(df), "seconds": wall, "cases_per_second": len(df) / wall if wall > 0 else math.nan,
        "kernel_s": float(kernel.sum()) / 1e3, "kernel_median_ms": float(kernel.median()) if len(kernel) else math.nan,
    }


def unsupported_reasons(df: pd.DataFrame, top: int = 8) -> list[tuple[str, int]]:
    if not len(df):
        return []
    reasons = df.loc[df["status"] == Status.UNSUPPORTED, "reason"].value_counts()
    return [(str(k), int(v)) for k, v in reasons.head(top).items()]


@dataclass
class ReportData:
    sources: list[tuple[str, int]]              # (path, rows read)
    rows: list[dict]                            # the latest row per case and backend
    df: pd.DataFrame
    superseded: int
    counts: pd.DataFrame
    statuses: list[str]
    env: list
    timing: dict
    unsupported: list
    verdict: Verdict                            # the same verdict the CLI gives these rows
    baseline: dict | None = None                # see baseline.diff_against
    drill: list[int] = field(default_factory=list)    # row indices that get a drill-down
    drill_total: int = 0                        # failing rows (drill-downs may be capped)


def collect(paths) -> ReportData:
    per_file = [(str(p), read([p])) for p in paths]
    rows, superseded = latest([r for _, rs in per_file for r in rs])
    df = frame(rows)
    return ReportData(sources=[(p, len(rs)) for p, rs in per_file], rows=rows, df=df, superseded=superseded,
                      counts=counts(df), statuses=status_columns(df), env=environment(rows),
                      timing=timing(df), unsupported=unsupported_reasons(df), verdict=verdict_of(rows))


def choose_drilldowns(df: pd.DataFrame, limit: int) -> tuple[list[int], int]:
    """Failing rows get a drill-down, the new failures first, then the largest error over bound."""
    bad = df[df["status"].isin(BAD)]
    if "mark" in bad.columns:
        bad = bad.assign(_new=(bad["mark"] != "new failure"))
        bad = bad.sort_values(["_new", "worst"], ascending=[True, False], na_position="last")
    else:
        bad = bad.sort_values("worst", ascending=False, na_position="last")
    return [int(i) for i in bad["i"].head(max(limit, 0))], len(bad)

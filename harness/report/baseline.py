"""Baseline diff: what changed against an older results file, matched by case id and backend (and GPU
model, where the current rows come from several: ``gpu_models``).

Marks (one per current row):
  new failure      fails now (fail, error, crash, timeout); passed or was unsupported before
  fixed            passes now; failed before
  regressed        passes in both, but an error over bound grew more than FACTOR times and now
                   reaches at least FLOOR of its bound (smaller growth is noise, not a trend)
  still failing    failed in both (its growth, if any, is noted too)
  now unsupported  unsupported now, ran before: coverage was lost
  new case         not in the baseline
Cases only in the baseline are listed as gone.  Metrics compared: worst |err|/bound and
cos_diff/bound of out, LSE and (fp8) their end-to-end checks.
"""

import math

import numpy as np
import pandas as pd

from ..recording.status import Status
from . import gpu_models
from .build import BAD, CHECKS

PASS, UNSUPPORTED = Status.PASS.value, Status.UNSUPPORTED.value

FACTOR = 2.0    # growth of an error over bound that counts as a regression
FLOOR = 0.1     # ... once the error is at least this fraction of its bound
METRICS = [f"{c}_{m}" for c in CHECKS for m in ("ratio", "cos")]
MARKS = ("new failure", "regressed", "still failing", "fixed", "now unsupported", "new case")
GROWTH_MARKS = ("regressed", "still failing")    # marks whose metric growth is worth a note


def _growth(cur: pd.DataFrame, old: pd.DataFrame, factor: float, floor: float):
    """Per row: the metric that grew the most beyond ``factor`` (name, old, new), or None."""
    best = [None] * len(cur)
    best_g = np.zeros(len(cur))
    for m in METRICS:
        if m not in cur.columns or m not in old.columns:
            continue
        new, was = cur[m].to_numpy(float), old[m].to_numpy(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            g = np.where(was > 0, new / was, np.where(new > 0, np.inf, 0.0))
        hit = (new > factor * np.nan_to_num(was, nan=np.inf)) & (new >= floor) & ~np.isnan(was)
        for k in np.flatnonzero(hit & (g > best_g)):
            best_g[k] = g[k]
            best[k] = (m, float(was[k]), float(new[k]))
    return best


def diff_against(df: pd.DataFrame, base: pd.DataFrame, factor: float = FACTOR, floor: float = FLOOR) -> dict:
    """Adds ``mark``, ``base_status`` and ``growth`` columns to ``df``; returns the diff's summary."""
    # rows from several GPU models: each model's row is set against the same model's baseline row
    keys = ["case_id", "backend", "gpu"] if gpu_models.several(df) and "gpu" in base.columns else ["case_id", "backend"]
    old = base.drop_duplicates(keys, keep="last").set_index(keys)
    idx = pd.MultiIndex.from_frame(df[keys]) if len(df) else pd.MultiIndex.from_tuples([], names=keys)
    matched = old.reindex(idx)
    was = matched["status"].to_numpy(object) if len(df) else np.array([], dtype=object)
    now = df["status"].to_numpy(object)
    present = pd.notna(was)
    now_bad, was_bad = np.isin(now, BAD), np.isin(was, BAD)
    growth = _growth(df.reset_index(drop=True), matched.reset_index(drop=True), factor, floor)
    grown = np.array([g is not None for g in growth], dtype=bool)
    marks = np.select(
        [~present, now_bad & ~was_bad, ~now_bad & (now != UNSUPPORTED) & was_bad, now_bad & was_bad,
         (now == UNSUPPORTED) & (was != UNSUPPORTED), grown & (now == PASS) & (was == PASS)],
        ["new case", "new failure", "fixed", "still failing", "now unsupported", "regressed"], default="")
    df["mark"] = marks
    df["base_status"] = np.where(present, was, "")
    df["growth"] = growth
    current = set(zip(*(df[k] for k in keys), strict=True))
    # (case id, "backend" or "backend on GPU")
    gone = [(k[0], " on ".join(x for x in k[1:] if x)) for k in old.index if k not in current]
    return {
        "marks": {m: int((marks == m).sum()) for m in MARKS},
        "gone": gone, "factor": factor, "floor": floor,
        "matched": int(present.sum()), "baseline_rows": len(old),
    }


def describe_growth(growth) -> str:
    """'out cos/bound 0.05 → 0.4 (8×)' for the note column."""
    if not growth:
        return ""
    metric, was, new = growth
    check, kind = metric.rsplit("_", 1)
    label = f"{check.replace('_end_to_end', ' e2e')} {'|err|' if kind == 'ratio' else 'cos'}/bound"
    factor = new / was if was > 0 else math.inf
    return f"{label} {was:.2g} → {new:.2g} ({'∞' if math.isinf(factor) else f'{factor:.3g}'}×)"

"""The same kernel on different GPU models, side by side (an H100 run merged with an H200 run).

A row's GPU model is its ``placement`` name, or its environment's GPU for rows written before placement
existed (``rows.gpu_model``).  Where the rows come from more than one model, each model keeps its own row
of a case and backend (``rows.load``), and the report adds: a backend x GPU model table of counts and worst
errors over bound; matrix columns per backend and model; and findings for a case whose verdict on one
kernel differs between models.  With one model, none of this shows.
"""

import math

import pandas as pd

from ..recording.status import Status
from .fold import fold
from .text import esc, ratio

NO_GPU = "no GPU"       # rows run without one, beside GPU rows
FOLD = 30               # table lines shown before "show all"


def models(df: pd.DataFrame) -> list[str]:
    """The GPU models the rows ran on, in the order they first appear."""
    if not len(df) or "gpu" not in df.columns:
        return []
    return [m for m in df["gpu"].unique() if m]          # unique keeps the order of appearance


def several(df: pd.DataFrame) -> bool:
    return len(models(df)) > 1


def label(model: str) -> str:
    return model or NO_GPU


def differing(df: pd.DataFrame) -> dict[tuple, dict[str, str]]:
    """(case id, backend) -> {GPU model: status} where one kernel's verdict on a case differs between models.
    Unsupported is left out: a kernel that cannot run a case on one model says nothing about the other."""
    if not several(df):
        return {}
    ran = df.loc[df["status"] != Status.UNSUPPORTED, ["case_id", "backend", "gpu", "status"]]
    varied = ran.groupby(["case_id", "backend"], sort=False)["status"].transform("nunique") > 1
    out: dict[tuple, dict[str, str]] = {}
    for case_id, backend, gpu, status in ran[varied].itertuples(index=False):
        out.setdefault((case_id, backend), {})[label(gpu)] = status
    return out


def mark_contrasts(df: pd.DataFrame) -> dict[tuple, dict[str, str]]:
    """Adds ``gpu_vs`` to ``df``: for a row whose case goes differently on another GPU model, those models and
    their statuses (((model, status), ...)), else None.  Findings cluster on it.  Returns ``differing``."""
    diff = differing(df)
    if not diff:
        df["gpu_vs"] = None
        return diff

    def contrast(case_id, backend, gpu):
        others = diff.get((case_id, backend))
        if not others:
            return None
        return tuple(sorted((m, s) for m, s in others.items() if m != label(gpu))) or None
    df["gpu_vs"] = [contrast(c, b, g) for c, b, g in zip(df["case_id"], df["backend"], df["gpu"], strict=True)]
    return diff


def describe(status: str, model: str, others) -> str:
    """'fail on NVIDIA H200, pass on NVIDIA H100 80GB HBM3': the models a finding sets apart."""
    return ", ".join(f"{s} on {m}" for m, s in ((label(model), status), *others))


def _line(backend: str, model: str, part: pd.DataFrame, differ: int) -> str:
    statuses = part["status"].value_counts()
    n_pass, n_fail = int(statuses.get(Status.PASS, 0)), int(statuses.get(Status.FAIL, 0))
    other = len(part) - n_pass - n_fail
    kinds = ", ".join(f"{n} {s}" for s, n in statuses.items() if s not in (Status.PASS, Status.FAIL))
    cells = [f'<td class="n{"" if n else " z"}" data-k="{k}">{n:,}'
             for k, n in (("pass", n_pass), ("fail", n_fail))]
    cells.append(f'<td class="n{"" if other else " z"}" data-k="other" title="{esc(kinds)}">{other:,}')
    for col in ("out_ratio", "lse_ratio"):
        worst = part[col].max(skipna=True) if col in part.columns else math.nan
        hot = " hot" if not math.isnan(worst) and worst > 1 else ""
        cells.append(f'<td class="n{hot}" data-k="{col}">{"–" if math.isnan(worst) else ratio(worst) + "×"}')
    return (f'<tr data-backend="{esc(backend)}" data-gpu="{esc(label(model))}"><td><b>{esc(backend)}</b>'
            f'<td>{esc(label(model))}<td class="n">{len(part):,}{"".join(cells)}'
            f'<td class="n{" hot" if differ else " z"}" data-k="differ">{differ:,}</tr>')


def section(data) -> str:
    """The backend x GPU model table; "" with one GPU model."""
    df = data.df
    if not several(df):
        return ""
    diff = getattr(data, "gpu_differ", None) or differing(df)
    per_backend: dict[str, int] = {}
    for _, backend in diff:
        per_backend[backend] = per_backend.get(backend, 0) + 1
    order = {m: k for k, m in enumerate(dict.fromkeys(df["gpu"]))}
    lines = []
    for backend, part in df.groupby("backend", sort=False):
        for model, sub in sorted(part.groupby("gpu", sort=False), key=lambda kv: order[kv[0]]):
            lines.append(_line(backend, model, sub, per_backend.get(backend, 0)))
    names = ", ".join(esc(m) for m in models(df))
    table = fold('<table id="gpu-table"><thead><tr><th>backend<th>GPU model<th>cases<th>pass<th>fail'
                 '<th title="unsupported, crash, error, timeout or harness_error">other'
                 '<th title="the largest out |err|/bound of any case">worst out<br>|err|/bound'
                 '<th title="the largest LSE |err|/bound of any case">worst LSE<br>|err|/bound'
                 '<th title="cases of this backend whose verdict differs between GPU models">cases that<br>'
                 'differ by GPU</thead>', lines, FOLD, "lines")
    return (f'<div class="panel" id="gpus"><h2>Kernels x GPU models</h2><p class="meta">These rows ran on '
            f'{len(models(df))} GPU models ({names}): each backend on each model, side by side. '
            f'{len(diff):,} case(s) where a kernel\'s verdict differs between models (unsupported aside); they are '
            f'findings above, and the matrix below marks them.</p>{table}</div>')

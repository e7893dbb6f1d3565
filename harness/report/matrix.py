"""The case x backend matrix: every backend's status and worst error over bound per case, side by side,
and where the kernels disagree with each other, beside where they disagree with the oracle.

Kernel against kernel is read from each row's ``out_sample`` (out at 64 positions drawn from the case's
seed, the same on every backend): per case, each backend's largest distance from the median of the
backends at those positions, in units of the case dtype's out bound (atol + rtol·|median|).  A cell over 1
is a disagreement the oracle comparison may or may not also show.
"""

import math
import warnings

import numpy as np

from ..judging.tolerances import TOLERANCES
from . import gpu_models
from .fold import fold
from .rows import sample
from .text import esc, ratio

SHOWN = 40          # matrix lines shown before "show all"
MAX_LINES = 2000    # lines the file holds: the disagreements first (a 100,000-row run has 20,000 cases)
# each box filters on its own line attribute (data-dis, data-gdis); checking one clears the other
FILTER_JS = ("const p=this.closest('.panel'),t=p.querySelector('table'),o=p.querySelector('#only-gdis');"
             "if(o)o.checked=false;t.dataset.by='dis';t.dataset.only=this.checked?'1':'0';refold(t)")
GPU_FILTER_JS = ("const p=this.closest('.panel'),t=p.querySelector('table');p.querySelector('#only-dis').checked="
                 "false;t.dataset.by='gdis';t.dataset.only=this.checked?'1':'0';refold(t)")
CSS = ("#matrix td.c{text-align:center;white-space:nowrap}#matrix td.c small{display:block;color:#666}"
       "#matrix tr.dis td:first-child{font-weight:600}#matrix .xdis,#matrix .gdis{color:#a3151b;font-weight:600}"
       "#matrix th small{display:block;font-weight:400;font-size:11px}")


def _far(values: np.ndarray, dtype) -> np.ndarray | None:
    """(cases, backends, positions) out samples -> (cases, backends): each backend's largest distance from
    the backends' median over the out bound; None for a dtype without a bound."""
    bound = TOLERANCES.get(dtype)
    if bound is None:
        return None
    nan = np.isnan(values)
    with warnings.catch_warnings():        # a position where every backend gave NaN has a NaN median
        warnings.simplefilter("ignore", RuntimeWarning)
        median = np.nanmedian(values, axis=1, keepdims=True) if nan.any() else np.median(values, axis=1,
                                                                                            keepdims=True)
        far = np.abs(values - median) / (bound.out.atol + bound.out.rtol * np.abs(median))
    # NaN where the others agree on a number (or a number where they agree on NaN): infinitely far
    median_nan = np.broadcast_to(np.isnan(median), values.shape)
    far = np.where(nan != median_nan, np.inf, np.where(nan | median_nan, 0.0, far))
    return far.max(axis=2)


def spread_of(samples: dict, dtype) -> dict[str, float]:
    """Per backend of one case: its largest distance from the backends' median, over the out bound.

    ``samples``: backend -> (positions key, out values at those positions), as ``rows.sample`` gives.
    """
    if len(samples) < 2 or len({(s[0], len(s[1])) for s in samples.values()}) != 1:
        return {}
    far = _far(np.array([[s[1] for s in samples.values()]], dtype=float), dtype)
    return {} if far is None else {b: float(w) for b, w in zip(samples, far[0])}


def spreads(by_case: dict, samples: list) -> dict[str, dict]:
    """``spread_of`` for every case at once: cases with the same backends, positions and dtype are one block."""
    blocks: dict[tuple, tuple[list, list]] = {}      # key -> (case ids, their samples' values, case by case)
    for case_id, cells in by_case.items():
        have = [(b, samples[r["i"]]) for b, r in cells.items()]
        have = [(b, s) for b, s in have if s is not None]
        if len(have) < 2:
            continue
        positions, n = have[0][1][0], len(have[0][1][1])
        if any(s[0] != positions or len(s[1]) != n for _, s in have):
            continue
        key = (tuple([b for b, _ in have]), positions, n, next(iter(cells.values()))["dtype"])
        block = blocks.get(key) or blocks.setdefault(key, ([], []))
        block[0].append(case_id)
        block[1].extend([s[1] for _, s in have])
    out = {}
    for (backends, _, n, dtype), (cases, arrays) in blocks.items():
        # the samples are arrays of doubles: joined as bytes, a block is one buffer
        values = np.frombuffer(b"".join(arrays), dtype=np.float64).reshape(len(cases), len(backends), n)
        far = _far(values, dtype)
        if far is None:
            continue
        for case_id, line in zip(cases, far.tolist()):
            out[case_id] = dict(zip(backends, line))
    return out


def spread(rows: list[dict]) -> dict[str, float]:
    """``spread_of`` over whole rows of one case (pass or fail rows with an out sample)."""
    samples = {r.get("backend"): sample(r) for r in rows}
    samples = {b: s for b, s in samples.items() if s is not None}
    return spread_of(samples, rows[0].get("dtype")) if rows else {}


def _cell(rec, d, gdis: bool = False) -> str:
    if rec is None:
        return '<td class="c">–'
    w = rec["worst"]
    x = f'<small class="{"xdis" if d is not None and d > 1 else ""}">vs kernels {ratio(d)}</small>' \
        if d is not None else ""
    err = f"<small>oracle {ratio(w)}</small>" if not math.isnan(w) else ""
    # a kernel that fixes a parameter ran the case at its own value: not set against the other kernels
    fixed = f"<small>{esc(rec['fixed'])}</small>" if rec.get("fixed") else ""
    gpu = '<small class="gdis">differs by GPU</small>' if gdis else ""
    return f'<td class="c"><span class="st s-{esc(rec["status"])}">{esc(rec["status"])}</span>{err}{x}{fixed}{gpu}'


def _columns(df) -> tuple[list, str]:
    """The matrix's columns: one per backend, or with several GPU models one per backend and model, a
    kernel's models side by side.  Returns the column keys and their header cells."""
    backends = list(dict.fromkeys(df["backend"].tolist())) if len(df) else []
    if not gpu_models.several(df):
        return backends, "".join(f"<th>{esc(b)}" for b in backends)
    order = {m: k for k, m in enumerate(dict.fromkeys(df["gpu"].tolist()))}
    pairs = sorted(dict.fromkeys(zip(df["backend"].tolist(), df["gpu"].tolist(), strict=True)),
                   key=lambda bg: (backends.index(bg[0]), order[bg[1]]))
    return pairs, "".join(f"<th>{esc(b)}<small>{esc(gpu_models.label(g))}</small>" for b, g in pairs)


CELL_COLUMNS = ["i", "case_id", "backend", "gpu", "status", "worst", "dtype", "fixed"]


def _by_case(df, several: bool) -> dict[str, dict]:
    """Case id -> its cells: column key -> the row's few fields the matrix reads, read column by column."""
    by_case: dict[str, dict] = {}
    for values in zip(*(df[c].tolist() for c in CELL_COLUMNS)):
        rec = dict(zip(CELL_COLUMNS, values))
        by_case.setdefault(rec["case_id"], {})[(rec["backend"], rec["gpu"]) if several else rec["backend"]] = rec
    return by_case


def _line(case_id, cells, dev, dis: bool, gdis, columns, several: bool) -> str:
    return (f'<tr class="{"dis" if dis else ""}" data-dis="{int(dis)}"'
            + (f' data-gdis="{int(bool(gdis))}"' if several else "") + f'><td>{esc(case_id)}'
            + "".join(_cell(cells.get(c), dev.get(c), several and c[0] in gdis) for c in columns) + "</tr>")


def section(data) -> str:
    df = data.df
    several = gpu_models.several(df)
    columns, head = _columns(df)
    if len(columns) < 2:
        return ""
    by_case = _by_case(df, several)
    differ: dict[str, set] = {}                # case id -> backends whose verdict differs by GPU model
    for case_id, backend in getattr(data, "gpu_differ", None) or {}:
        differ.setdefault(case_id, set()).add(backend)
    dis_cases, agree_cases, n_gdis = [], [], 0
    devs = spreads(by_case, data.samples)
    for case_id, cells in by_case.items():
        statuses = {r["status"] for r in cells.values()} - {"unsupported"}
        dis = len(statuses) > 1 or any(v > 1 for v in devs.get(case_id, {}).values())
        n_gdis += bool(differ.get(case_id))
        (dis_cases if dis else agree_cases).append(case_id)
    # only the lines the file holds are drawn: the disagreements first
    room = max(MAX_LINES - len(dis_cases), 0)
    shown = [(c, True) for c in dis_cases[:MAX_LINES]] + [(c, False) for c in agree_cases[:room]]
    lines = [_line(c, by_case[c], devs.get(c, {}), dis, differ.get(c, ()), columns, several) for c, dis in shown]
    any_failed = df["status"].isin(("fail", "error", "crash", "timeout", "harness_error")).any()
    only = bool(any_failed and dis_cases)      # where a backend failed, the disagreements are the news
    if only:     # the file opens filtered: the agreeing lines are hidden until the box is cleared
        lines = [ln.replace("<tr", "<tr hidden", 1) if 'data-dis="0"' in ln else ln for ln in lines]
    left_out = len(by_case) - len(lines)
    noun = "backend x GPU model column" if several else "backend"
    note = (f'<span class="meta">{left_out:,} agreeing case(s) are left out of this file (at most {MAX_LINES:,} '
            f'lines, the disagreements first); the case table has every row.</span>' if left_out > 0 else "")
    checked = " checked" if only else ""
    table = fold(f'<table data-only="{int(only)}"><thead><tr><th>case{head}</thead>', lines, SHOWN, "case(s)", note)
    return (f'<div class="panel" id="matrix"><style>{CSS}</style><h2>Cases x backends</h2>'
            f'<p class="meta">{len(by_case):,} case(s) on {len(columns)} {noun}(s); {len(dis_cases):,} where the '
            f"backends disagree (different statuses, or a kernel further than its out bound from the other kernels "
            f"at 64 sampled positions). Per cell: status, worst error over bound against the oracle, and distance "
            f"from the kernels' median over the bound. "
            f'<label><input type="checkbox" id="only-dis" onchange="{FILTER_JS}"{checked}> only where they disagree'
            f'</label>{_gpu_filter(n_gdis) if several else ""}</p>{table}</div>')


def _gpu_filter(n: int) -> str:
    return (f' · <label><input type="checkbox" id="only-gdis" onchange="{GPU_FILTER_JS}"> only the {n:,} case(s) '
            f"where a kernel's verdict differs between GPU models</label>")

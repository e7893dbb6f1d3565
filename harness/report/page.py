"""The page: the first screen (``lead``: verdict, time, scoreboard, findings), then the counts,
baseline, matrix and environment, the case table, and the drill-downs.

The case table is one lean line per row: metric cells carry their bar as two CSS
gradients and the value to sort by in ``data-v``; no per-cell tooltip or chart.  It holds
the worst ``TABLE_ROWS`` rows and lays out ``PAGE`` of them at a time.
"""

import math
import time

from ..judging.checks import BY_TENSOR, TENSORS
from ..recording.status import Status
from ..recording.summary import verified_backends
from . import bench, drilldown, gpu_models, lead, matrix, svg
from .assets import CSS, JS
from .baseline import GROWTH_MARKS, MARKS, describe_growth
from .build import BAD, ReportData, records
from .fold import fold
from .forked import Forked
from .gc_pause import uncollected
from .text import esc, int_text, ratio

STATUS_HELP = {
    Status.PASS: "every check within its bound", Status.FAIL: "a check out of bounds",
    Status.ERROR: "the kernel or its adapter raised", Status.CRASH: "the process running the kernel died",
    Status.TIMEOUT: "the case ran past its time limit",
    Status.UNSUPPORTED: "the backend declares it cannot run the case",
    Status.HARNESS_ERROR: "building the inputs, the oracle or the comparison raised: not the kernel's fault",
}


def verdict(data: ReportData) -> str:
    """The CLI's verdict on the same rows (harness.recording.status.verdict_of)."""
    return data.verdict.name


def _header(data: ReportData, title: str) -> str:
    src = ", ".join(f"{esc(p)} ({n:,} rows)" for p, n in data.sources)
    sup = (f" · {data.superseded} earlier row(s) superseded by a later row of the same case and backend"
           if data.superseded else "")
    return (f'<header><h1>{esc(title)}</h1>{lead.verdict_badge(data)}'
            f'<span class="meta">generated {time.strftime("%Y-%m-%d %H:%M:%S")} from {src}{sup}</span></header>'
            + lead.times(data) + lead.no_kernel(data))


def _verified(data: ReportData) -> str:
    """Every backend's package, version and API form, and how auto chose them."""
    verified = "; ".join(verified_backends([{"backend": b, "backend_info": info}
                                            for b, info in data.extras.infos.items()])) or "nothing"
    auto = "".join(f"<li>{esc(n)}</li>" for n in sorted(data.extras.selection))
    return (f'<p class="meta" id="verified">verified: {esc(verified)}</p>'
            + (f'<details class="meta" id="selection"><summary>how auto chose</summary><ul>{auto}</ul></details>'
               if auto else ""))


def _cards(data: ReportData) -> str:
    total = data.df["status"].value_counts() if len(data.df) else {}
    out = [f'<div class="cards" id="totals"><div class="card" style="--c:#3a434d" data-s="total" '
           f'data-n="{len(data.df)}"><b>{len(data.df):,}</b><span>cases</span></div>']
    for s in data.statuses:
        n = int(total.get(s, 0)) if len(data.df) else 0
        out.append(f'<div class="card{"" if n else " zero"}" style="--c:var(--{esc(s)},#888)" data-s="{esc(s)}" '
                   f'data-n="{n}" title="{esc(STATUS_HELP.get(s, ""))}"><b>{n:,}</b><span>{esc(s)}</span></div>')
    return "".join(out) + "</div>"


def _stack(counts: dict, total: int) -> str:
    if not total:
        return ""
    return '<div class="stack">' + "".join(
        f'<i style="width:{100 * n / total:.2f}%;background:var(--{esc(s)},#888)"></i>'
        for s, n in counts.items() if n) + "</div>"


def _counts_table(data: ReportData) -> str:
    cols = data.statuses
    head = "".join(f"<th>{esc(s).replace('_', '_<wbr>')}" for s in cols)     # harness_error may wrap
    body = []
    for key, line in data.counts.iterrows():
        c = {s: int(line[s]) for s in cols}
        cells = "".join(f'<td class="n{"" if n else " z"}" data-s="{esc(s)}">{n if n else "·"}' for s, n in c.items())
        body.append(f'<tr data-g="{esc("|".join(map(str, key)))}">' + "".join(f"<td>{esc(k)}" for k in key)
                    + cells + f'<td class="bar">{_stack(c, sum(c.values()))}</tr>')
    return fold('<table id="counts"><thead><tr><th>suite<th>backend<th>mode<th>dtype' + head + '<th></thead>',
                body, FOLD, "lines")


def _env_table(data: ReportData) -> str:
    rows = []
    for name, values in data.env:
        if len(values) == 1:
            shown = esc(values[0][0])
        else:   # files from different machines or commits: say which rows carry which
            shown = "<br>".join(f"{esc(v)} <span>({n} rows)</span>" for v, n in values[:6])
            if len(values) > 6:
                shown += f"<br><span>… {len(values) - 6} more</span>"
        rows.append(f'<tr data-k="{esc(name)}"><th>{esc(name)}<td>{shown}</tr>')
    return '<table class="kv" id="env">' + "".join(rows) + "</table>"


def _unsupported(data: ReportData) -> str:
    """The reasons cases were unsupported, grouped by their text with the numbers set aside ("N" where
    they differ); a cut list ends with how many reasons and cases it left out."""
    reasons = data.unsupported
    if not reasons.shown:
        return ""
    items = "".join(f"<tr><td class='n'>{g.cases:,}<td>{esc(g.text)}"
                    + (f" <span>({g.variants} variants)</span>" if g.variants > 1 else "") + "</tr>"
                    for g in reasons.shown)
    more = reasons.more_text("(filter the case table: unsupported)")
    items += f'<tr id="unsupported-more"><td><td>{esc(more)}</tr>' if more else ""
    return (f'<h2>Unsupported, by reason <span class="meta">{reasons.cases:,} case(s)</span></h2>'
            f'<table class="kv" id="unsupported">{items}</table>')


def _baseline(data: ReportData) -> str:
    b = data.baseline
    if not b:
        return ""
    chips = "".join(f'<span class="mk mk-{m.replace(" ", "-")}" data-mark="{esc(m)}" data-n="{n}">{esc(m)}: {n}'
                    f'</span> ' for m, n in b["marks"].items())
    gone = ""
    if b["gone"]:
        ids = "".join(f"<li>{esc(c)} ({esc(k)})" for c, k in b["gone"][:50])
        more = f"<li>… {len(b['gone']) - 50} more" if len(b["gone"]) > 50 else ""
        gone = (f'<details><summary>{len(b["gone"])} case(s) only in the baseline (gone)</summary>'
                f'<ul>{ids}{more}</ul></details>')
    src = ", ".join(esc(p) for p in b["sources"])
    return (f'<div class="panel" id="baseline"><h2>Against the baseline</h2><p class="meta">{src}: '
            f'{b["matched"]} of {len(data.df)} case(s) matched by case id and backend. Regressed: passes in both, '
            f'and an error over bound (|err|/bound or cos diff/bound of any check) grew more than '
            f'{b["factor"]:g}× to at least {b["floor"]:g} of its bound.</p><p>{chips}</p>{gone}</div>')


FOLD = 30          # lines of a summary table shown before "show all"
PAGE = 50          # case table rows laid out at once; "show more" lays out the next 50
TABLE_ROWS = 5000  # rows the file holds, worst first: 100,000 rows at ~550 bytes each were 46 MB of HTML

METRIC_COLUMNS = [   # (frame column, header, header tooltip)
    ("out_ratio", "out<br>|err|/bound", "out: worst |err| / (atol + rtol·|expected|)"),
    ("out_cos", "out<br>cos/bound", "out: cos diff / its bound"),
    ("lse_ratio", "LSE<br>|err|/bound", "LSE: worst |err| / (atol + rtol·|expected|)"),
    ("out_end_to_end_ratio", "fp8 e2e<br>|err|/bound<br>(warning)", BY_TENSOR["out_end_to_end"].what),
]
# shown, never gating: no red for values over 1
WARNING_ONLY = {f"{t.name}_ratio" for t in TENSORS if not t.gating}


def _metric(v, warning_only: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return '<td data-v="">'
    over = " warn" if warning_only else " hot"
    colour = "#b7791f" if warning_only and v > 1 else svg.colour(v)
    return (f'<td class="m{over if v > 1 else ""}" style="--w:{svg.bar_width(v):.0f}%;--c:{colour}" '
            f'data-v="{v:.4g}">{ratio(v)}')


def _case_row(r: dict, drill: set, with_mark: bool, with_backend: bool, with_gpu: bool = False) -> str:
    """One table line: kept lean, it is repeated up to 10,000 times."""
    s, mark = r["status"], r.get("mark", "")
    bad = s in BAD
    cid = esc(r["case_id"])
    link = f'<a href="#d{r["i"]}">{cid}</a>' if r["i"] in drill else cid
    why = (r.get("reason") or "")[:200]
    grew = describe_growth(r.get("growth")) if mark in GROWTH_MARKS else ""
    note = " · ".join(x for x in (why, grew) if x)
    note = f'<small class="{"why bad" if bad else "why"}">{esc(note)}</small>' if note else ""
    shape = (f'{int_text(r.get("batch_size"))}×{int_text(r.get("heads"))}×{int_text(r.get("s_q"))} '
             f'p{int_text(r.get("page_size"))}')
    cells = [f'<tr class="{"bad" if bad else ""}" data-s="{esc(s)}"'
             + (f' data-m="{esc(mark)}">' if with_mark else ">")]
    if with_mark:
        cells.append(f'<td><span class="mk mk-{esc(mark.replace(" ", "-"))}">{esc(mark)}</span>' if mark else "<td>")
    cells.append(f'<td><span class="st s-{esc(s)}">{esc(s)}</span><td>{link}{note}'
                 f'<code>{esc(r.get("rerun", ""))}</code>')
    if with_backend:
        gpu = f'<small class="why">{esc(gpu_models.label(r.get("gpu") or ""))}</small>' if with_gpu else ""
        cells.append(f'<td class="bk">{esc(r["backend"])}{gpu}')
    cells.append(f'<td>{esc(r["mode"])}<td>{esc(r["dtype"])}<td>{shape}')
    cells.extend(_metric(r.get(col), col in WARNING_ONLY) for col, _, _ in METRIC_COLUMNS)
    ms = r.get("kernel_ms")
    cells.append(f'<td class="n">{"" if ms is None or math.isnan(ms) else f"{ms:.3g}"}</tr>')
    return "".join(cells)


def _order(df):
    """Worst first: new failures, other failures, regressions, fixed, passes, unsupported last."""
    rank = {m: i for i, m in enumerate(("new failure", "still failing", "regressed", "fixed"))}
    status_rank = df["status"].map(lambda s: 0 if s in BAD else (2 if s == Status.UNSUPPORTED else 1))
    mark_rank = df["mark"].map(lambda m: rank.get(m, 9)) if "mark" in df.columns else 0
    return (df.assign(_s=status_rank, _m=mark_rank)
            .sort_values(["_s", "_m", "worst"], ascending=[True, True, False], na_position="last"))


def _case_table(data: ReportData) -> str:
    with_mark = data.baseline is not None
    with_gpu = gpu_models.several(data.df)                 # a kernel on several GPU models: say which ran it
    with_backend = with_gpu or (data.df["backend"].nunique() > 1 if len(data.df) else False)   # else: Environment
    drill = set(data.drill)
    ordered = _order(data.df) if len(data.df) else data.df
    rows = records(ordered.head(TABLE_ROWS)) if len(data.df) else []
    chips = "".join(f'<button class="chip" data-s="{esc(s)}" aria-pressed="true" style="--c:var(--{esc(s)},#888)">'
                    f'<i></i>{esc(s)}</button>' for s in data.statuses if (data.df["status"] == s).any())
    marks = ""
    if with_mark:
        opts = "".join(f'<option value="{esc(m)}">{esc(m)}</option>' for m in MARKS)
        marks = f'<select id="mark"><option value="">any baseline mark</option>{opts}</select>'
    head = (("<th data-t='s'>vs baseline" if with_mark else "")
            + "<th data-t='s'>status<th data-t='s'>case · what failed · rerun command"
            + (f"<th data-t='s'>backend{' · GPU' if with_gpu else ''}" if with_backend else "")
            + "<th data-t='s'>mode<th data-t='s'>dtype<th data-t='s' title='batch × heads × query tokens, page size'>"
              "shape"
            + "".join(f"<th data-t='n' title='{esc(tip)}'>{label}" for _, label, tip in METRIC_COLUMNS)
            + "<th data-t='n'>kernel<br>ms")
    lines = [_case_row(r, drill, with_mark, with_backend, with_gpu) for r in rows]
    # Only the first PAGE rows (worst first) are laid out; the rest wait in an inert <template>
    # that the page script draws from on filter, sort or "show more".  Without JS the worst
    # rows still show, and the file still holds every row.
    rest = (f'<template id="rest">{"".join(lines[PAGE:])}</template><p class="note" id="nojs">The table shows the '
            f'first {PAGE} of {len(lines)} rows, worst first; the page script shows the rest.</p>'
            if len(lines) > PAGE else "")
    if len(data.df) > len(lines):
        rest += (f'<p class="note" id="table-cap">This file holds the worst {len(lines):,} of {len(data.df):,} rows; '
                 f'the other {len(data.df) - len(lines):,} ({_statuses(ordered.iloc[len(lines):])}) are in the '
                 f'results file, and every row is counted above.</p>')
    return (f'<h2 id="cases">Cases</h2><div class="tools"><input type="search" id="q" placeholder="filter: words in '
            f'id, dtype, reason…">{chips}{marks}<span id="shown"></span><button id="more" class="chip" hidden>'
            f'show {PAGE} more</button></div>'
            f'<p class="meta">Bars: error over bound on a log axis, 0.001 to 1000; the dark tick in the middle is the '
            f'bound. Click a header to sort, a case id to open its drill-down; click a rerun command to select it.</p>'
            f'<div class="tablewrap"><table id="cases-t" data-page="{PAGE}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(lines[:PAGE])}</tbody></table></div>{rest}')


def _statuses(df) -> str:
    return ", ".join(f"{n:,} {s}" for s, n in df["status"].value_counts().items())


def _drilldowns(data: ReportData) -> str:
    if not data.drill:
        return ""
    by_i = data.df.set_index("i")
    note = ""
    if data.drill_total > len(data.drill):
        note = (f'<p class="note" id="drill-cap">Showing {len(data.drill)} of {data.drill_total} failing cases '
                f'(new failures first, then by error over bound); all are in the table. '
                f'<code>--max-drilldowns N</code> shows more.</p>')
    parts = [drilldown.render(i, data.row_of(i), by_i.loc[i].to_dict()) for i in data.drill]
    return f'<h2 id="failures">Failing cases</h2>{note}' + "".join(parts)


FORK_ROWS = 20_000   # a page of this many rows draws its matrix in a forked child meanwhile (``forked``)


def render(data: ReportData, title: str = "mla-verify report") -> str:
    with uncollected():          # the page's pieces hold no cycles (``gc_pause``)
        # the matrix, the longest piece to draw, is drawn on another core while this one draws the rest
        cases_x_backends = Forked(matrix.section, data, fork=len(data.df) >= FORK_ROWS)
        try:
            return _page(data, title, cases_x_backends)
        finally:
            cases_x_backends.cancel()


def _page(data: ReportData, title: str, cases_x_backends: Forked) -> str:
    summary = (f'<div class="panels"><div class="panel"><h2>By suite, backend, mode and dtype</h2>'
               f'{_counts_table(data)}{_unsupported(data)}</div><div class="panel"><h2>Environment</h2>'
               f'{_verified(data)}{_env_table(data)}</div></div>')
    # the first screen answers "what is wrong, and where do I start": verdict, time, scoreboard, findings
    first = _header(data, title) + lead.scoreboard(data) + lead.findings(data)
    rest = bench.section(data.extras.bench) + _case_table(data) + _drilldowns(data)
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width,initial-scale=1'>"
            f"<title>{esc(title)}: {verdict(data)}</title><style>{CSS}</style></head><body><main>"
            + first + _cards(data) + _baseline(data) + gpu_models.section(data) + cases_x_backends.result()
            + summary + rest + f"</main><div id='tip'></div><script>{JS}</script></body></html>")

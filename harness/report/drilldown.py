"""One failing case, drawn from its row alone: where in the tensor the error lives.

Sections: the failure lines and rerun command; every check against its bound
(for fp8 the kernel's error beside the end-to-end one); heatmaps over heads x
query tokens for out and LSE; the KV page strips per request; the histograms
of error over bound; the worst elements with their indices and values.
"""

import math

from ..judging.checks import BY_TENSOR, TENSOR_NAMES, float_or_nan
from ..planning.fixed_params import describe_fixed
from ..recording.status import Status
from . import svg
from .baseline import GROWTH_MARKS, describe_growth
from .text import esc, ratio, sci

# kernel and end-to-end side by side: out, out end to end, LSE, LSE end to end
ORDER = tuple(sorted(TENSOR_NAMES, key=lambda n: TENSOR_NAMES.index(n.removesuffix("_end_to_end"))))
OUT_AXES = ("request", "query token", "head", "d_v")


def metric_cell(r, label=None) -> str:
    """A table cell with an error-over-bound bar (log axis, the bound at the middle)."""
    r = float_or_nan(r)
    cls = "m hot" if r > 1 else "m"
    return (f'<td class="{cls}" style="--w:{svg.bar_width(r):.0f}%;--c:{svg.colour(r)}" data-v="{float_or_nan(r):.4g}">'
            f'{label or ratio(r) + "×"}')


def _checks_table(metrics: dict) -> str:
    rows = []
    for name in ORDER:
        m = metrics.get(name)
        if not isinstance(m, dict):
            continue
        label, what = BY_TENSOR[name].label, BY_TENSOR[name].what
        b = m.get("bound") if isinstance(m.get("bound"), dict) else {}
        cos, cos_b = float_or_nan(m.get("cos_diff")), float_or_nan(b.get("cos_diff"))
        verdict = "✓ pass" if m.get("passed") else "✗ " + ", ".join(map(str, m.get("failures") or []))
        idx = m.get("worst_index")
        worst = (f"[{', '.join(map(str, idx))}]: {sci(float_or_nan(m.get('worst_actual')))} vs "
                 f"{sci(float_or_nan(m.get('worst_expected')))}") if idx else "–"
        shape = m.get("shape") or []
        n = math.prod(int(s) for s in shape) if shape else 0
        bound = (f"|err| ≤ {float_or_nan(b.get('atol')):g} + {float_or_nan(b.get('rtol')):g}·|e|, "
                 f"cos ≤ {float_or_nan(b.get('cos_diff')):g}" if "atol" in b
                 else "shapes differ")
        rows.append(
            f'<tr><th title="{esc(what)}">{esc(label)}<small>{esc(bound)}</small>'
            f'<td class="{"ok" if m.get("passed") else "bad"}">{esc(verdict)}{metric_cell(m.get("worst_ratio"))}'
            f'{metric_cell(cos / cos_b if cos_b else math.nan, f"{sci(cos)} / {sci(cos_b)}")}'
            f'<td class="num">{int(float_or_nan(m.get("violations")) or 0):,} / {n:,}'
            f'<td class="num">{sci(float_or_nan(m.get("max_abs_err")))}'
            f'<td class="num">{sci(float_or_nan(m.get("rel_l2")))}'
            f'<td class="num">{int(float_or_nan(m.get("nonfinite_mismatches")) or 0)}<td class="idx">{esc(worst)}</tr>')
    if not rows:
        return ""
    return ('<table class="checks"><thead><tr><th>check (bound)<th>verdict<th>worst |err|/bound'
            '<th>cos diff / bound<th>elements over<th>max |err|<th>rel L2<th>NaN/inf diff<th>worst element '
            f'(index: got vs expected)</thead><tbody>{"".join(rows)}</tbody></table>')


def _scenario_metrics(metrics: dict) -> str:
    """A scenario's own numbers (determinism, batch invariance, ...), as short key=value lines."""
    items = []
    for name, m in metrics.items():
        if name in BY_TENSOR or not isinstance(m, dict):
            continue
        pairs = ", ".join(f"{k}={sci(v) if isinstance(v, float) else v}" for k, v in list(m.items())[:12])
        items.append(f"<li><b>{esc(name)}</b>: {esc(pairs)}")
    return f'<ul class="msg">{"".join(items)}</ul>' if items else ""


def _worst_table(worst: list) -> str:
    if not worst:
        return ""
    rows = []
    for w in worst:
        idx = list(w.get("index") or [])
        named = " · ".join(f"{a} {i}" for a, i in zip(OUT_AXES, idx, strict=False))
        a, e = float_or_nan(w.get("actual")), float_or_nan(w.get("expected"))
        err = abs(a - e) if not (math.isnan(a) or math.isnan(e)) else math.nan
        rows.append(f'<tr><td class="idx">{esc(named)}<td class="num">{sci(a)}<td class="num">{sci(e)}'
                    f'<td class="num">{sci(err)}{metric_cell(w.get("ratio"))}</tr>')
    return ('<table class="worst"><caption>worst output elements</caption><thead><tr><th>index'
            '<th>got<th>expected<th>|err|<th>err/bound</thead><tbody>' + "".join(rows) + "</tbody></table>")


def _transpose(m):
    """(h, s_q) as stored -> rows of query tokens, columns of heads (a wide, short map)."""
    if not m or not isinstance(m, list) or not all(isinstance(r, list) for r in m):
        return []
    return [list(col) for col in zip(*m, strict=False)]


def render(i: int, row: dict, frame_row) -> str:
    diag = row.get("diagnostics") if isinstance(row.get("diagnostics"), dict) else {}
    metrics = row.get("metrics") if isinstance(row.get("metrics"), dict) else {}
    status = str(row.get("status"))
    shape = (f"b={row.get('batch_size')} · heads {row.get('heads')}/{row.get('kv_heads')} kv · "
             f"s_q={row.get('s_q')} · page {row.get('page_size')} · seqlen {row.get('seqlen_dist')} · "
             f"padding {row.get('padding')}")
    mark = frame_row.get("mark") if hasattr(frame_row, "get") else ""
    badge = f' <span class="mk mk-{esc(mark.replace(" ", "-"))}">{esc(mark)}</span>' if mark else ""
    out = [f'<section class="dd" id="d{i}"><h3><span class="st s-{esc(status)}">{esc(status)}</span> '
           f'{esc(row["case_id"])}{badge} <a class="top" href="#cases">back to the table</a></h3>',
           f'<p class="sub">{esc(row.get("backend"))} · {esc(row.get("mode"))} · {esc(row.get("dtype"))} · '
           f'{esc(shape)} · seed {esc(row.get("seed"))}</p>']
    # a parameter the kernel fixes: the case ran, and the oracle computed, at the kernel's value
    out += [f'<p class="sub">{esc(line)}; the oracle computed at it too</p>'
            for line in describe_fixed(row.get("fixed_by_kernel"))]
    if mark and frame_row.get("base_status"):
        grew = describe_growth(frame_row.get("growth")) if mark in GROWTH_MARKS else ""
        out.append(f'<p class="sub">baseline: {esc(frame_row["base_status"])}'
                   f'{" · " + esc(grew) if grew else ""}</p>')
    lines = row.get("messages") or [f"{row['case_id']}: {status}: {row.get('reason')}"]
    out.append('<ul class="msg">' + "".join(f"<li>{esc(m)}" for m in lines) + "</ul>")
    if row.get("message"):      # an exception whose message ran on (Triton's CompilationError): all of it
        out.append(f'<pre class="msg">{esc(row["message"])}</pre>')
    out.append(f'<p class="rr">rerun <code>{esc(row.get("rerun", ""))}</code></p>')
    out.append(_checks_table(metrics))
    fp8 = "out_end_to_end" in metrics
    if fp8:
        out.append('<p class="note">fp8: the kernel checks compare with the reference on the same quantised '
                   'inputs the kernel read (its own arithmetic); the end-to-end checks compare with the reference '
                   'on the unquantised inputs, so they add the quantisation of q and KV and have looser bounds. '
                   'The charts below use the kernel bounds.</p>')
    out.append(_scenario_metrics(metrics))
    if not diag:
        ref_ok = all(isinstance(metrics.get(c), dict) and metrics[c].get("passed") for c in ("out", "lse"))
        why = ("the kernel did not return" if status != Status.FAIL else
               "out and LSE matched the reference: the scenario's own check failed, see above" if ref_ok else
               "shapes differed or the row has no summaries")
        out.append(f'<p class="note">No element summaries for this case ({why}).</p></section>')
        return "".join(out)
    charts = [svg.heatmap(_transpose(diag.get("head_query_ratio")), "head", "token",
                          "out: worst error / bound per head and query token"),
              svg.heatmap(_transpose(diag.get("lse_head_query_ratio")), "head", "token",
                          "LSE: error / bound per head and query token")]
    out.append('<div class="row">' + "".join(c for c in charts if c) + "</div>" + svg.legend())
    strips, note = svg.kv_strips(diag, int(float_or_nan(row.get("page_size")) or 0))
    if strips:
        out.append(f'<div class="row">{strips}</div>' + (f'<p class="note">{esc(note)}</p>' if note else ""))
    hists = [svg.histogram(diag.get("histogram"), "out: elements by error / bound"),
             svg.histogram(diag.get("lse_histogram"), "LSE: elements by error / bound")]
    out.append('<div class="row">' + "".join(h for h in hists if h) + _worst_table(diag.get("worst_elements"))
               + "</div></section>")
    return "".join(out)

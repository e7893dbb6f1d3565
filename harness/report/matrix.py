"""The case x backend matrix: every backend's status and worst error over bound per case, side by side,
and where the kernels disagree with each other, beside where they disagree with the oracle.

Kernel against kernel is read from each row's ``out_sample`` (out at 64 positions drawn from the case's
seed, the same on every backend): per case, each backend's largest distance from the median of the
backends at those positions, in units of the case dtype's out bound (atol + rtol·|median|).  A cell over 1
is a disagreement the oracle comparison may or may not also show.
"""

import math
import statistics

from ..tolerances import TOLERANCES
from .text import esc, ratio

FILTER_JS = ("for(const t of document.querySelectorAll('#matrix tbody tr'))"
             "t.hidden=this.checked&amp;&amp;t.dataset.dis==='0'")
CSS = ("#matrix td.c{text-align:center;white-space:nowrap}#matrix td.c small{display:block;color:#666}"
       "#matrix tr.dis td:first-child{font-weight:600}#matrix .xdis{color:#a3151b;font-weight:600}")


def _samples(row: dict):
    s = (row.get("metrics") or {}).get("out_sample") if isinstance(row.get("metrics"), dict) else None
    if not isinstance(s, dict) or not s.get("values"):
        return None
    return tuple(s.get("positions") or ()), [float(v) for v in s["values"]]


def spread(rows: list[dict]) -> dict[str, float]:
    """Per backend of one case: its largest distance from the backends' median, over the out bound."""
    sampled = {r.get("backend"): _samples(r) for r in rows if r.get("status") in ("pass", "fail")}
    sampled = {b: s for b, s in sampled.items() if s is not None}
    if len(sampled) < 2 or len({s[0] for s in sampled.values()}) != 1:
        return {}
    bound = TOLERANCES.get(rows[0].get("dtype"))
    if bound is None:
        return {}
    atol, rtol = bound.out.atol, bound.out.rtol
    columns = list(zip(*(s[1] for s in sampled.values())))
    medians = [statistics.median(c) for c in columns]
    out = {}
    for backend, (_, values) in sampled.items():
        worst = 0.0
        for v, m in zip(values, medians):
            if math.isnan(v) or math.isnan(m):      # NaN where the others agree on a number: infinitely far
                if math.isnan(v) != math.isnan(m):
                    worst = math.inf
                continue
            worst = max(worst, abs(v - m) / (atol + rtol * abs(m)))
        out[backend] = worst
    return out


def section(data) -> str:
    backends = list(dict.fromkeys(r.get("backend") for r in data.rows))
    if len(backends) < 2:
        return ""
    by_case = {}
    for r in data.rows:
        by_case.setdefault(r["case_id"], {})[r.get("backend")] = r
    worst = dict(zip(zip(data.df["case_id"], data.df["backend"]), data.df["worst"]))
    lines, disagreeing = [], 0
    for case_id, cells in by_case.items():
        dev = spread(list(cells.values()))
        statuses = {r["status"] for r in cells.values()} - {"unsupported"}
        dis = len(statuses) > 1 or any(v > 1 for v in dev.values())
        disagreeing += dis
        tds = []
        for b in backends:
            r = cells.get(b)
            if r is None:
                tds.append('<td class="c">–')
                continue
            w = worst.get((case_id, b))
            d = dev.get(b)
            x = f'<small class="{"xdis" if d is not None and d > 1 else ""}">vs kernels {ratio(d)}</small>' \
                if d is not None else ""
            err = f"<small>oracle {ratio(w)}</small>" if w is not None and not math.isnan(w) else ""
            tds.append(f'<td class="c"><span class="st s-{esc(r["status"])}">{esc(r["status"])}</span>{err}{x}')
        lines.append(f'<tr class="{"dis" if dis else ""}" data-dis="{int(dis)}"><td>{esc(case_id)}' + "".join(tds)
                     + "</tr>")
    head = "".join(f"<th>{esc(b)}" for b in backends)
    return (f'<div class="panel" id="matrix"><style>{CSS}</style><h2>Cases x backends</h2>'
            f'<p class="meta">{len(by_case)} case(s) on {len(backends)} backend(s); {disagreeing} where the backends '
            f"disagree (different statuses, or a kernel further than its out bound from the other kernels at 64 "
            f"sampled positions). Per cell: status, worst error over bound against the oracle, and distance from "
            f"the kernels' median over the bound. "
            f'<label><input type="checkbox" onchange="{FILTER_JS}"> only where they disagree</label></p>'
            f'<table><thead><tr><th>case{head}</thead><tbody>{"".join(lines)}</tbody></table></div>')

"""The report's bench section: a table of timed rows and a roofline, drawn from bench rows alone.

A bench row is a result row with a ``bench`` dict (``mla-verify bench``).  The roofline
puts each timed (case, backend) at its arithmetic intensity (FLOP/byte, log x) and
achieved FLOP/s (log y), under the two measured ceilings: the copy bandwidth
(``y = bandwidth * x``) and the bf16 matmul rate (flat), which meet at the ridge point.
"""

import math

from ..judging.checks import float_or_nan
from .text import esc

PALETTE = ["#1f5fa8", "#d4580f", "#2f8a4a", "#7b1fa2", "#b28704", "#c62828", "#00838f", "#5d4037"]
CSS = ("#bench .pt{stroke:#fff;stroke-width:1}#bench .cmem{stroke:#1f5fa8;stroke-width:2}"
       "#bench .ccmp{stroke:#c62828;stroke-width:2}#bench .ridge{stroke:#999;stroke-dasharray:3 3}"
       "#bench td{white-space:nowrap}#bench .warn{color:#a3151b;font-weight:600}")


def bench_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if isinstance(r.get("bench"), dict)]


def _si(v: float, unit: str) -> str:
    """1.2 T, 340 G: a rate for an axis label or a cell."""
    if not math.isfinite(v) or v <= 0:
        return "–"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, "")):
        if v >= scale:
            x = v / scale
            return f"{x:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def _us(k: dict | None) -> str:
    if not k:
        return ""
    return f"{float_or_nan(k.get('p50')):.1f}"


def _table(rows: list[dict]) -> str:
    head = ("<tr><th>status<th>case<th>backend<th>mode<th>dtype<th title='batch × heads × query tokens; mean kernel "
            "seq len'>shape<th title='kernel time: p50, with p10–p90'>kernel µs p50<th>p10–p90"
            "<th title='one step as an engine pays it: metadata/plan + launch or graph replay'>e2e µs p50"
            "<th>e2e mode<th>bytes/s<th>FLOP/s<th>FLOP/B<th>bound<th>% of ceiling<th title='harness p50 / "
            "do_bench_cudagraph median'>cross-check<th>note</tr>")
    body = []
    for r in rows:
        b = r["bench"]
        k = b.get("kernel_us") or {}
        s = esc(r.get("status"))
        shape = (f"{r.get('batch_size')}×{r.get('heads')}×{r.get('s_q')}"
                 + (f" L̄={float_or_nan(b.get('seqlen_mean')):.0f}" if b.get("seqlen_mean") is not None else ""))
        note = "" if b.get("timed") else esc(b.get("why") or r.get("reason") or "not timed")
        if k.get("wide"):
            note = f"<span class='warn'>wide spread p90/p10 = {float_or_nan(k.get('spread')):.2f}: noisy</span> " + note
        if b.get("e2e_note"):
            note += " " + esc(b["e2e_note"])
        x = b.get("cross_check") or {}
        xc = ""
        if x:
            xc = (esc(x.get("error", "error"))[:80] if "error" in x else
                  f"<span class='{'' if x.get('agrees') else 'warn'}'>{float_or_nan(x.get('ratio')):.3f}</span>")
        timed = b.get("timed")
        cells = [f"<span class='st s-{s}'>{s}</span>", esc(r["case_id"]), esc(r.get("backend")), esc(r.get("mode")),
                 esc(r.get("dtype")), esc(shape)]
        if timed:
            e = b.get("e2e_us")
            spread = f"{float_or_nan(k.get('p10')):.1f}–{float_or_nan(k.get('p90')):.1f}"
            cells += [_us(k), spread, _us(e), esc(b.get("e2e_mode", "")),
                      _si(float_or_nan(b.get("bytes_per_s")), "B/s"), _si(float_or_nan(b.get("flop_per_s")), "FLOP/s"),
                      f"{float_or_nan(b.get('intensity')):.1f}", esc(b.get("bound")),
                      f"{float_or_nan(b.get('pct_of_ceiling')):.1f}%"]
        else:
            cells += [""] * 9           # no speed for a row that was not verified and timed
        cells += [xc, note]
        body.append(f"<tr data-s='{s}' data-case='{esc(r['case_id'])}' data-backend='{esc(r.get('backend'))}'>"
                    + "".join(f"<td>{c}" for c in cells) + "</tr>")
    return (f"<div class='tablewrap'><table id='bench-t'><thead>{head}</thead><tbody>{''.join(body)}</tbody>"
            f"</table></div>")


def _decades(lo: float, hi: float) -> tuple[int, int]:
    return math.floor(math.log10(lo)), math.ceil(math.log10(hi))


def roofline(rows: list[dict]) -> str:
    """Inline SVG: log intensity x, log FLOP/s y, both ceilings, one point per timed (case, backend)."""
    timed = [r for r in rows if r["bench"].get("timed") and float_or_nan(r["bench"].get("flop_per_s")) > 0
             and float_or_nan(r["bench"].get("intensity")) > 0]
    if not timed:
        return ""
    c = timed[0]["bench"].get("ceilings") or {}
    bw, peak = float_or_nan(c.get("copy_bytes_per_s")), float_or_nan(c.get("matmul_flop_per_s"))
    ridge = peak / bw if bw > 0 and peak > 0 else math.nan
    xs = [float_or_nan(r["bench"]["intensity"]) for r in timed]
    ys = [float_or_nan(r["bench"]["flop_per_s"]) for r in timed]
    have_ceil = math.isfinite(ridge)
    x0, x1 = _decades(min(xs + ([ridge] if have_ceil else [])) / 2, max(xs + ([ridge] if have_ceil else [])) * 2)
    y0, y1 = _decades(min(ys + ([bw * 10.0 ** x0] if have_ceil else [])), max(ys + ([peak * 1.2] if have_ceil else [])))
    y0 = max(y0, y1 - 6)                # six decades at most: the ceilings stay readable
    left, top, w, h = 74, 28, 560, 300
    X = lambda v: left + (math.log10(v) - x0) / (x1 - x0) * w                                   # noqa: E731
    Y = lambda v: top + h - (min(max(math.log10(v), y0), y1) - y0) / (y1 - y0) * h              # noqa: E731
    out = [f"<svg class='chart' id='roofline' width='{left + w + 200}' height='{top + h + 52}' role='img' "
           f"data-ridge='{ridge:.6g}' data-bw='{bw:.6g}' data-peak='{peak:.6g}'>",
           f"<text x='0' y='14' class='ct'>Roofline: achieved FLOP/s against arithmetic intensity, "
           f"{esc(c.get('device_name', '?'))}</text>"]
    for d in range(x0, x1 + 1):
        out.append(f"<line x1='{X(10 ** d):.1f}' x2='{X(10 ** d):.1f}' y1='{top}' y2='{top + h}' class='grid'/>"
                   f"<text x='{X(10 ** d):.1f}' y='{top + h + 14}' class='tk' text-anchor='middle'>{10 ** d:g}</text>")
    for d in range(y0, y1 + 1):
        out.append(f"<line x1='{left}' x2='{left + w}' y1='{Y(10 ** d):.1f}' y2='{Y(10 ** d):.1f}' class='grid'/>"
                   f"<text x='{left - 5}' y='{Y(10 ** d) + 4:.1f}' class='tk' text-anchor='end'>"
                   f"{_si(10.0 ** d, 'FLOP/s')}</text>")
    out.append(f"<rect x='{left}' y='{top}' width='{w}' height='{h}' fill='none' class='axis'/>")
    if have_ceil:
        xa, xr, xb = max(10.0 ** x0, 10.0 ** y0 / bw), ridge, 10.0 ** x1      # the memory line enters at y0
        out.append(f"<line class='cmem' x1='{X(xa):.1f}' y1='{Y(bw * xa):.1f}' x2='{X(xr):.1f}' y2='{Y(peak):.1f}'>"
                   f"<title>copy bandwidth {_si(bw, 'B/s')}</title></line>"
                   f"<line class='ccmp' x1='{X(xr):.1f}' y1='{Y(peak):.1f}' x2='{X(xb):.1f}' y2='{Y(peak):.1f}'>"
                   f"<title>bf16 matmul {_si(peak, 'FLOP/s')}</title></line>"
                   f"<line class='ridge' x1='{X(xr):.1f}' x2='{X(xr):.1f}' y1='{top}' y2='{top + h}'/>"
                   f"<text x='{X(xr) + 4:.1f}' y='{top + 12}' class='tk'>ridge {ridge:.0f} FLOP/B</text>"
                   f"<text x='{X(xr) + 4:.1f}' y='{Y(peak) - 5:.1f}' class='tk'>matmul {_si(peak, 'FLOP/s')}</text>"
                   f"<text x='{left + 6}' y='{top + h - 6}' class='tk'>copy {_si(bw, 'B/s')}</text>")
    backends = list(dict.fromkeys(str(r.get("backend")) for r in timed))
    colour = {b: PALETTE[i % len(PALETTE)] for i, b in enumerate(backends)}
    for r, x, y in zip(timed, xs, ys):
        b = r["bench"]
        tip = (f"{r['case_id']} · {r.get('backend')}: {float_or_nan(b['kernel_us']['p50']):.1f} µs, "
               f"{_si(y, 'FLOP/s')}, {_si(float_or_nan(b.get('bytes_per_s')), 'B/s')}, {x:.1f} FLOP/B, "
               f"{b.get('bound')}-bound, "
               f"{float_or_nan(b.get('pct_of_ceiling')):.1f}% of ceiling")
        out.append(f"<circle class='pt' cx='{X(x):.1f}' cy='{Y(y):.1f}' r='5' fill='{colour[str(r.get('backend'))]}' "
                   f"data-case='{esc(r['case_id'])}' data-backend='{esc(r.get('backend'))}' data-x='{x:.6g}' "
                   f"data-y='{y:.6g}'><title>{esc(tip)}</title></circle>")
    for i, name in enumerate(backends):
        ly = top + 10 + i * 18
        out.append(f"<circle cx='{left + w + 20}' cy='{ly}' r='5' fill='{colour[name]}'/>"
                   f"<text x='{left + w + 30}' y='{ly + 4}' class='tk'>{esc(name)}</text>")
    out.append(f"<text x='{left + w / 2}' y='{top + h + 32}' class='ax' text-anchor='middle'>arithmetic intensity, "
               f"FLOP/byte (log)</text><text x='12' y='{top + h / 2}' class='ax' text-anchor='middle' "
               f"transform='rotate(-90 12 {top + h / 2})'>achieved FLOP/s (log)</text></svg>")
    return "".join(out)


def section(rows: list[dict]) -> str:
    """The bench section, or nothing when no row is a bench row."""
    rows = bench_rows(rows)
    if not rows:
        return ""
    timed = [r for r in rows if r["bench"].get("timed")]
    devices = {str((r["bench"].get("ceilings") or {}).get("device_name")) for r in timed}
    notes = []
    if any(not r["bench"].get("gpu_numbers") for r in timed):
        notes.append("Rows timed on the CPU use wall-clock time: these are not GPU numbers.")
    if len(devices) > 1:
        notes.append(f"Rows come from {len(devices)} devices; the roofline draws the first row's ceilings. "
                     f"Compare backends only within one run.")
    wide = sum(bool((r["bench"].get("kernel_us") or {}).get("wide")) for r in timed)
    if wide:
        notes.append(f"{wide} row(s) have a wide spread (p90/p10 > 1.10): the device was noisy.")
    c = (timed[0]["bench"].get("ceilings") or {}) if timed else {}
    ceil = (f"Ceilings ({esc(c.get('device_name'))}, measured {esc(c.get('measured_at'))}): copy "
            f"{_si(float_or_nan(c.get('copy_bytes_per_s')), 'B/s')}, bf16 matmul "
            f"{_si(float_or_nan(c.get('matmul_flop_per_s')), 'FLOP/s')}; "
            f"{esc(c.get('method'))}." if c else "")
    explain = ("Kernel time: device time per call (kineto on a GPU, L2 flushed before each call), p50 with p10–p90. "
               "FLOPs = b·h_q·s_q·2·L̄·(d_qk + d_v); bytes = KV once per KV head + q + out. A point is memory-bound "
               "left of the ridge (intensity below matmul rate / copy bandwidth) and compute-bound right of it; "
               "its % of ceiling is against that bound's ceiling. A row that failed verification has no speed.")
    return (f"<style>{CSS}</style><section id='bench'><h2>Bench: verified speed</h2>"
            f"<p class='meta'>{len(rows)} bench row(s), {len(timed)} timed. {ceil}</p><p class='note'>{explain}</p>"
            + "".join(f"<p class='note warn'>{esc(n)}</p>" for n in notes)
            + roofline(rows) + _table(rows) + "</section>")

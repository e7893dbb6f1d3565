"""Inline SVG charts: a colour scale for error over bound, heatmaps, histograms, KV page strips.

Every chart is a string of SVG with no external reference.  Heatmap cells of
one colour are drawn as one path, so a 128-head x 8-token map stays a few KB.
"""

import math

from ..judging.checks import float_or_nan
from .text import esc, ratio, short

# log10(error / bound) bucket edges; the bound itself (0) splits the calm blues from the hot reds
EDGES = [-3, -2, -1, -0.5, 0, 0.5, 1, 2, 3]
COLOURS = ["#f3f5f8", "#dde7f0", "#c2d4e5", "#9dbad5", "#6b98c2",
           "#f5c342", "#ef8a3c", "#dd4a2c", "#b0172f", "#640420"]
NONFINITE = "#151515"      # a NaN/inf position that differs from the reference
EMPTY = "#ffffff"


def bucket(r) -> int:
    """Colour index of an error over bound: 0..9, or 10 for NaN/inf (a non-finite mismatch)."""
    r = float_or_nan(r)
    if math.isnan(r) or math.isinf(r):
        return len(COLOURS)
    if r <= 0:
        return 0
    lg = math.log10(r)
    return sum(lg > e for e in EDGES)


def colour(r) -> str:
    b = bucket(r)
    return NONFINITE if b == len(COLOURS) else COLOURS[b]


def bar_width(r) -> float:
    """Percent of a bar for an error over bound on a log axis, 1e-3 .. 1e3; the bound sits at 50%."""
    r = float_or_nan(r)
    if math.isnan(r):
        return 0.0
    if math.isinf(r) or r >= 1e3:
        return 100.0
    if r <= 1e-3:
        return 1.0
    return max(1.0, (math.log10(r) + 3) / 6 * 100)


def _ticks(n: int, most: int = 16) -> list[int]:
    step = max(1, math.ceil(n / most))
    for nice in (1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100, 128, 250, 256, 500, 1000):
        if nice >= step:
            step = nice
            break
    return list(range(0, n, step))


def heatmap(grid, x_name: str, y_name: str, title: str) -> str:
    """``grid[y][x]`` of errors over bound, one coloured cell each; hover shows the value (page JS)."""
    ny = len(grid)
    nx = max((len(row) for row in grid), default=0)
    if not nx:
        return ""
    cw = min(22.0, max(4.0, 760 / nx))
    ch = 18.0 if ny <= 8 else min(18.0, max(5.0, 220 / ny))
    left, top, bottom = 58, 20, 34
    w, h = nx * cw, ny * ch
    paths = {}
    for y, row in enumerate(grid):
        x = 0
        while x < len(row):                   # merge runs of one colour into one rectangle
            b, run = bucket(row[x]), 1
            while x + run < len(row) and bucket(row[x + run]) == b:
                run += 1
            paths.setdefault(b, []).append(f"M{x} {y}h{run}v1h-{run}z")
            x += run
    cells = "".join(f'<path fill="{NONFINITE if b == len(COLOURS) else COLOURS[b]}" d="{"".join(d)}"/>'
                    for b, d in sorted(paths.items()))
    data = ";".join(",".join(short(float_or_nan(v)) for v in row) for row in grid)
    width = max(left + w + 12, 6.8 * len(title))       # room for the title over a narrow map
    out = [f'<svg class="chart" width="{width:.0f}" height="{top + h + bottom:.0f}" role="img">',
           f'<text x="0" y="13" class="ct">{esc(title)}</text>',
           f'<svg class="hm" x="{left}" y="{top}" width="{w:.1f}" height="{h:.1f}" viewBox="0 0 {nx} {ny}" '
           f'preserveAspectRatio="none" shape-rendering="crispEdges" data-m="{data}" '
           f'data-x="{esc(x_name)}" data-y="{esc(y_name)}">{cells}</svg>',
           f'<rect x="{left}" y="{top}" width="{w:.1f}" height="{h:.1f}" class="frame"/>']
    for y in _ticks(ny, 12):
        out.append(f'<text x="{left - 4}" y="{top + (y + 0.5) * ch + 4:.1f}" class="tk" text-anchor="end">{y}</text>')
    for x in _ticks(nx):
        out.append(f'<text x="{left + (x + 0.5) * cw:.1f}" y="{top + h + 13:.1f}" class="tk" '
                   f'text-anchor="middle">{x}</text>')
    out.append(f'<text x="{left + w / 2:.1f}" y="{top + h + 29:.1f}" class="ax" text-anchor="middle">'
               f'{esc(x_name)}</text>')
    out.append(f'<text x="{left - 20}" y="{top + min(h / 2, 9) + 4:.1f}" class="ax" text-anchor="end">'
               f'{esc(y_name)}</text>')
    out.append("</svg>")
    return "".join(out)


def legend() -> str:
    """The colour scale, labelled at its bucket edges; the bound is the 1 between blue and amber."""
    sw, left = 34, 4
    out = ['<svg class="chart legend" width="420" height="36" role="img">']
    for i, c in enumerate(COLOURS):
        out.append(f'<rect x="{left + i * sw}" y="4" width="{sw}" height="12" fill="{c}"/>')
    for i, e in enumerate(EDGES, 1):
        label = ratio(10.0 ** e)
        cls = "tk b" if e == 0 else "tk"
        out.append(f'<text x="{left + i * sw}" y="29" class="{cls}" text-anchor="middle">{label}</text>')
    x = left + len(COLOURS) * sw + 12
    out.append(f'<rect x="{x}" y="4" width="{sw}" height="12" fill="{NONFINITE}"/>'
               f'<text x="{x + sw / 2}" y="29" class="tk" text-anchor="middle">NaN/inf</text>')
    out.append(f'<line x1="{left + 5 * sw}" x2="{left + 5 * sw}" y1="1" y2="19" class="bound"/></svg>')
    return "".join(out)


def _edge_label(e: float) -> str:
    return ratio(10.0 ** e) if -2 <= e <= 3 else f"1e{int(e)}"


def _count(n: int) -> str:
    """A bar label that fits a 34 px bar: 987, 18.8k, 1.2M."""
    if n < 1000:
        return str(n)
    return f"{n / 1e3:.1f}k" if n < 10**5 else (f"{n / 1e3:.0f}k" if n < 10**6 else f"{n / 1e6:.1f}M")


def histogram(hist, title: str) -> str:
    """Element counts per bucket of log10(error / bound), bars on a log count axis."""
    if not isinstance(hist, dict) or not hist.get("counts"):
        return ""
    counts = [int(float_or_nan(c)) if not math.isnan(float_or_nan(c)) else 0 for c in hist["counts"]]
    edges = [float_or_nan(e) for e in hist.get("edges_log10", [])]
    if len(edges) != len(counts) + 1:
        return ""
    bw, left, top, ph = 34, 8, 34, 90
    peak = math.log10(1 + max(counts)) or 1
    out = [f'<svg class="chart" width="{left + bw * len(counts) + 16}" height="{top + ph + 34}" role="img">',
           f'<text x="0" y="13" class="ct">{esc(title)}</text>']
    for i, n in enumerate(counts):
        hgt = ph * math.log10(1 + n) / peak
        mid = (edges[i] + edges[i + 1]) / 2
        x = left + i * bw
        out.append(f'<rect x="{x + 2}" y="{top + ph - hgt:.1f}" width="{bw - 4}" height="{hgt:.1f}" '
                   f'fill="{colour(10.0 ** mid)}"><title>{n} element(s) with error/bound in '
                   f'({_edge_label(edges[i])}, {_edge_label(edges[i + 1])}]</title></rect>')
        if n:
            out.append(f'<text x="{x + bw / 2}" y="{top + ph - hgt - 3:.1f}" class="tk" '
                       f'text-anchor="middle">{_count(n)}</text>')
    for i, e in enumerate(edges):
        x = left + i * bw
        cls = "tk b" if e == 0 else "tk"
        out.append(f'<text x="{x}" y="{top + ph + 13}" class="{cls}" text-anchor="middle">{_edge_label(e)}</text>')
        if e == 0:
            out.append(f'<line x1="{x}" x2="{x}" y1="{top - 4}" y2="{top + ph + 3}" class="bound"/>')
    out.append(f'<line x1="{left}" x2="{left + bw * len(counts)}" y1="{top + ph}" y2="{top + ph}" class="axis"/>')
    out.append(f'<text x="{left + bw * len(counts) / 2}" y="{top + ph + 29}" class="ax" text-anchor="middle">'
               f'error / bound (log buckets; bars on a log count scale)</text></svg>')
    return "".join(out)


def kv_strips(diag: dict, page_size: int, cap: int = 32) -> tuple[str, str]:
    """Each request as a strip of its KV pages, coloured by the request's worst error over bound,
    with one cell per query token on the right.  Returns ``(svg, note)``."""
    seq = [int(float_or_nan(s)) for s in diag.get("request_seqlen") or []]
    req = [float_or_nan(r) for r in diag.get("request_ratio") or []]
    if not seq or len(req) != len(seq) or not page_size:
        return "", ""
    fills = diag.get("request_last_page_fill") or [s % page_size or page_size for s in seq]
    per_tok = diag.get("request_query_ratio") or [[r] for r in req]
    order = list(range(len(seq)))
    note = ""
    if len(order) > cap:                   # keep the worst requests, still drawn in length order
        order = sorted(order, key=lambda i: -req[i] if not math.isnan(req[i]) else 0)[:cap]
        note = f"showing the {cap} requests with the largest error of {len(seq)}"
    order.sort(key=lambda i: (seq[i], i))
    n_pages = max(1, max(math.ceil(s / page_size) for s in seq))
    width, left, top, sh, gap = 640.0, 40, 22, 12, 4
    px_page = width / n_pages
    s_q = max(len(t) for t in per_tok) if per_tok else 1
    tw = 12
    right = left + width + 10
    out = [f'<svg class="chart" width="{right + s_q * tw + 190:.0f}" height="{top + len(order) * (sh + gap) + 36}" '
           f'role="img"><text x="0" y="13" class="ct">error along KV position: each request\'s pages '
           f'(page size {page_size}), coloured by its worst error / bound</text>']
    for p in _ticks(n_pages, 20):
        x = left + p * px_page
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top - 3}" y2="{top + len(order) * (sh + gap)}" '
                   f'class="grid"/>')
    for row, i in enumerate(order):
        y = top + row * (sh + gap)
        pages = math.ceil(seq[i] / page_size) if seq[i] else 0
        c = colour(req[i])
        out.append(f'<text x="{left - 4}" y="{y + sh - 2}" class="tk" text-anchor="end">r{i}</text>')
        if pages:
            full = seq[i] / page_size * px_page
            out.append(f'<rect x="{left}" y="{y}" width="{pages * px_page:.1f}" height="{sh}" class="slot"/>'
                       f'<rect x="{left}" y="{y}" width="{max(full, 1):.1f}" height="{sh}" fill="{c}">'
                       f'<title>request {i}: {seq[i]} keys, {pages} page(s), last page {fills[i]}/{page_size}, '
                       f'worst error/bound {ratio(req[i])}</title></rect>')
            if px_page >= 4:                 # page boundaries inside the strip
                out.extend(f'<line x1="{left + p * px_page:.1f}" x2="{left + p * px_page:.1f}" y1="{y}" '
                           f'y2="{y + sh}" class="sep"/>' for p in range(1, pages))
        toks = per_tok[i] if i < len(per_tok) else []
        for t, r in enumerate(toks):
            out.append(f'<rect x="{right + t * tw}" y="{y}" width="{tw - 2}" height="{sh}" fill="{colour(r)}">'
                       f'<title>request {i}, query token {t}: sees keys up to {seq[i] - len(toks) + t}; '
                       f'error/bound {ratio(float_or_nan(r))}</title></rect>')
        out.append(f'<text x="{right + s_q * tw + 6}" y="{y + sh - 2}" class="tk">{seq[i]} keys · {pages} pg · '
                   f'last {fills[i]}/{page_size} · {ratio(req[i])}×</text>')
    base = top + len(order) * (sh + gap)
    for p in _ticks(n_pages, 20):
        out.append(f'<text x="{left + p * px_page:.1f}" y="{base + 12}" class="tk" text-anchor="middle">'
                   f'{p * page_size}</text>')
    out.append(f'<text x="{left + width / 2}" y="{base + 28}" class="ax" text-anchor="middle">KV position '
               f'(gridlines at page boundaries)</text>'
               f'<text x="{right}" y="{base + 12}" class="tk">query tokens</text></svg>')
    return "".join(out), note

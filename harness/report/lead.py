"""The first screen: what is wrong and where to start.  The verdict, the run's time, the backend
scoreboard and the findings, each finding with the command that reruns its smallest case."""

import math

from .fold import fold
from .gpu_models import describe
from .no_kernel import why as why_no_kernel
from .text import esc, int_text, ratio, seconds

SHOWN_FINDINGS = 8       # the rest fold away: the first screen keeps the scoreboard and the top findings

COPY = "copyCmd(this)"   # assets.JS: the command beside the button onto the clipboard


def verdict_badge(data) -> str:
    """The verdict, neutral rather than green where no real kernel was verified."""
    name = data.verdict.name
    if data.no_kernel and name == "PASSED":
        return ('<span class="verdict v-HARNESS" id="verdict" title="only the pure-PyTorch torch backend, the '
                'reference or mutants ran: the harness was checked, no kernel was">PASSED: harness only, no kernel '
                'verified</span>')
    badge = f'<span class="verdict v-{name.split()[0]}" id="verdict">{esc(name)}</span>'
    if data.no_kernel and name == "FAILED":
        badge += '<span class="verdict v-HARNESS" id="harness-only">harness only, no kernel verified</span>'
    return badge


def times(data) -> str:
    """Wall clock and summed case time, each under its own name: they differ with workers and start-up."""
    t = data.timing
    if t["stamped"]:
        partial = f" ({t['stamped']:,} of {t['cases']:,} rows carry stamps)" if t["stamped"] < t["cases"] else ""
        wall = (f'<b>{seconds(t["wall_s"])}</b> wall clock, first case start to last case end{partial}'
                + (f' · {t["cases_per_second"]:.1f} cases/s' if not math.isnan(t["cases_per_second"]) else ""))
    else:
        wall = "wall clock: not recorded (the rows carry no finish time, <code>finished_at</code>)"
    med = f", median {t['kernel_median_ms']:.3g} ms a call" if not math.isnan(t["kernel_median_ms"]) else ""
    warm = (f' ({t["warm_up_kernel_s"]:.3g} s of it in the warm-up: the first case of each of '
            f'{t["warm_up_cases"]:,} kernel variants, which built them)' if t.get("warm_up_cases") else "")
    return (f'<p class="times" id="runtime">{wall} · <b>{seconds(t["summed_s"])}</b> summed case time '
            f'(each case\'s wall_s added up: cases on parallel workers overlap, start-up is not counted) · '
            f'kernel {t["kernel_s"]:.3g} s summed{med}{warm}</p>')


def no_kernel(data) -> str:
    """Said in words on the first screen, not only in the badge's tooltip: no kernel was verified, and why."""
    text = why_no_kernel(data)
    if not text:
        return ""
    head, _, rest = text.partition(": ")
    return f'<p class="no-kernel" id="no-kernel"><b>{esc(head)}:</b> {esc(rest)}</p>'


def _worst(line) -> str:
    if math.isnan(line.worst):
        return "–"
    hot = " hot" if line.worst > 1 else ""
    return f'<span class="wr{hot}" title="{esc(line.worst_case)}">{ratio(line.worst)}×</span>'


def scoreboard(data) -> str:
    lines = []
    for ln in data.scoreboard:
        c = ln.counts
        tag = ' <span class="tag">harness only</span>' if ln.harness_only else ""
        cells = "".join(f'<td class="n{"" if c[k] else " z"}" data-k="{k}">{c[k]:,}'
                        for k in ("pass", "fail", "unsupported", "crash"))
        lines.append(f'<tr data-backend="{esc(ln.backend)}"><td><b>{esc(ln.backend)}</b>{tag}<td>{esc(ln.kernel)}'
                     f'{cells}<td class="n">{ln.findings}<td class="n">{_worst(ln)}<td class="n">{_floor(ln)}</tr>')
    return ('<section id="scoreboard"><table class="board"><thead><tr><th>backend<th>package and version'
            '<th>pass<th>fail<th>unsupported<th title="crash, error, timeout or harness_error">crash / error'
            '<th>findings<th title="the largest error over its bound of any check and case">worst err/bound'
            '<th title="the largest error over the noise floor (a float32 implementation\'s error) of any case: '
            'it explains, the bound gates">worst err/floor'
            f'</thead><tbody>{"".join(lines)}</tbody></table></section>')


def _floor(line) -> str:
    return "–" if math.isnan(line.over_floor) else f"{ratio(line.over_floor)}×"


def _finding(f, k: int) -> str:
    rec = f.smallest
    shape = (f'b={int_text(rec.get("batch_size"))} h={int_text(rec.get("heads"))} s_q={int_text(rec.get("s_q"))} '
             f'longest {int_text(rec.get("max_seqlen"))}')
    cmd = rec.get("rerun") or ""
    rerun = (f'<code class="cmd">{esc(cmd)}</code><button type="button" class="copy" onclick="{COPY}">copy</button>'
             if cmd else '<span class="meta">no rerun command recorded</span>')
    on = ""
    if f.gpus:       # the verdict differs by GPU model: rerun where it failed
        rerun += f'<span class="meta"> on a {esc(f.gpus[0] or "machine without a GPU")}</span>'
        on = f' data-gpus="{esc(describe(rec["status"], *f.gpus))}"'
    return (f'<tr class="finding" id="f{k}" data-backend="{esc(f.backend)}" data-kind="{esc(f.kind)}"{on}>'
            f'<td class="n"><b>{f.cases:,}</b><td><b>{esc(f.backend)}</b><td><span class="ev">{esc(f.evidence)}</span>'
            f'<small>smallest: <a href="#cases" title="{esc(shape)}">{esc(rec["case_id"])}</a> ({esc(shape)})</small>'
            f'<div class="rr">{rerun}</div></tr>')


def shard_problems(data) -> str:
    """What a merge of shards lacks or repeats, above the findings: the verdict covers only what arrived."""
    problems = getattr(data, "shard_problems", None)
    if not problems:
        return ""
    items = "".join(f"<li>{esc(p)}</li>" for p in problems)
    return (f'<div class="shard-problems" id="shards" style="color:#a3151b"><b>These results are not one whole '
            f'sharded run</b> (the verdict covers only the rows that arrived):<ul>{items}</ul></div>')


def findings(data) -> str:
    if not data.findings:
        return ('<section id="findings"><h2>Findings</h2>' + shard_problems(data)
                + '<p class="meta">No failing case: nothing to report.</p></section>')
    n = sum(f.cases for f in data.findings)
    rows = [_finding(f, k) for k, f in enumerate(data.findings)]
    return (f'<section id="findings"><h2>Findings <span class="meta">{len(rows)} from {n:,} failing case(s), '
            f'clustered by backend, failed check and pattern; most cases first</span></h2>'
            + shard_problems(data)
            + fold('<table class="findings"><thead><tr><th>cases<th>backend<th>evidence · smallest case · rerun'
                   '</thead>', rows, SHOWN_FINDINGS, "finding(s)")
            + "</section>")

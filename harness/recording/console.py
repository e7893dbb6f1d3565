"""The end of a run on the console, what is wrong first: a scoreboard line per backend, then the findings.

A GPU box's ``make verify`` runs every kernel on every suite, and most kernels are not installed
there: a backend x suite x mode x dtype table was 170 rows, nearly all unsupported, above the
failures.  Here a backend is one line of counts and what it called, and a backend with every row
unsupported is one line saying why (its reasons grouped, ``reasons``); the others' reasons are behind
``--table``.  Failing rows are clustered as the report
clusters them (``findings``): each finding is shown by its smallest case's worst element and the
command that reruns that case.  The table is behind ``run --table`` (the HTML report has it too).
"""

import shlex
from collections import Counter

from .findings import cluster, finding_record
from .reasons import and_more, group_reasons
from .results import failure_lines
from .status import STATUSES, Status, gates

SHOWN_FINDINGS = 4          # findings listed, most cases first; the rest are counted
REASONS_ON_ITS_LINE = 2     # an all-unsupported backend: reason groups on its one line
SHOWN_REASONS = 2           # --table: a backend with some unsupported rows, reason groups listed
SHOWN_WARNINGS = 1          # non-gating warnings listed; the rest are counted
RAISED = "error/crash/timeout"      # every gating status but fail (harness_error too): it raised or died
BUCKETS = (Status.PASS.value, Status.FAIL.value, RAISED, Status.UNSUPPORTED.value)


def bucket(status: str) -> str:
    """The scoreboard column of a row's status."""
    return status if status in (Status.PASS, Status.FAIL, Status.UNSUPPORTED) else RAISED


def by_backend(rows) -> dict[str, list[dict]]:
    """Rows per backend, the backends in the order their first row came."""
    grouped: dict[str, list[dict]] = {}
    for r in rows:
        grouped.setdefault(str(r.get("backend") or "?"), []).append(r)
    return grouped


def package_words(row: dict) -> str:
    """What a row's backend called: its package, version and API form (``backend_info``)."""
    info = row.get("backend_info") if isinstance(row.get("backend_info"), dict) else {}
    package = " ".join(str(x) for x in (info.get("package"), info.get("version")) if x)
    api = f", {info['api']}" if info.get("api") else ""
    return f"{package or 'no package'}{api}"


def scoreboard_lines(rows) -> list[str]:
    """One line per backend: its counts and what it called, or for a backend that ran nothing here, why.
    Why the others' unsupported rows are unsupported is in ``--table``'s reasons and the report."""
    groups = by_backend(rows)
    width = max((len(b) for b in groups), default=0)
    lines = []
    for backend, mine in groups.items():
        reasons = [r.get("reason") for r in mine if r["status"] == Status.UNSUPPORTED]
        if len(reasons) == len(mine):
            grouped = group_reasons(reasons, REASONS_ON_ITS_LINE)
            why = "; ".join(f"{g.text} ({g.cases})" for g in grouped.shown)
            more = grouped.more_text()
            lines.append(f"{backend:<{width}}  all {len(mine)} unsupported: {why}" + (f" {more}" if more else ""))
            continue
        counts = Counter(bucket(str(r["status"])) for r in mine)
        ran = next(r for r in mine if r["status"] != Status.UNSUPPORTED)
        lines.append(f"{backend:<{width}}  " + ", ".join(f"{counts[b]} {b}" for b in BUCKETS)
                     + f"  ({package_words(ran)})")
    return lines


def reason_lines(rows, where: str) -> list[str]:
    """``run --table``: under each backend that ran something, its unsupported rows' reasons, grouped."""
    lines = []
    for backend, mine in by_backend(rows).items():
        reasons = [r.get("reason") for r in mine if r["status"] == Status.UNSUPPORTED]
        if not reasons or len(reasons) == len(mine):
            continue
        grouped = group_reasons(reasons, SHOWN_REASONS)
        lines += [f"{backend} unsupported ({g.cases}): {g.text}" for g in grouped.shown]
        if more := grouped.more_text(f"in {where}"):
            lines.append(f"  {more}")
    return lines


def memcheck_command(row: dict) -> str | None:
    """For a crash on an illegal memory access: the command that shows the stray access every time, not only
    when it lands on unmapped memory (scripts/gpu/sanitize.sh; docs/kernel-findings.md #6)."""
    if row["status"] != Status.CRASH or "illegal memory access" not in (row.get("reason") or ""):
        return None
    suite = (row.get("case") or {}).get("suite_file") or row["suite"]
    backend = row.get("backend_spec") or row.get("backend", "?")
    return f"bash scripts/gpu/sanitize.sh {shlex.quote(suite)} {row['case_id']} {shlex.quote(backend)}"


def example_lines(row: dict) -> list[str]:
    """One case of a finding: its worst element (or what it raised), the command that reruns it alone,
    and for a raise where it was raised."""
    messages = failure_lines(row)
    worst = next((m for m in messages if "worst at index" in m), messages[0])
    lines = [f"     {worst}", f"     rerun: {row.get('rerun') or '(the row records none)'}"]
    if memcheck := memcheck_command(row):
        lines.append(f"     memcheck: {memcheck}")
    lines += [f"     at {frame}" for frame in (row.get("traceback") or [])[-1:]]
    return lines


def finding_lines(rows, where: str, shown: int = SHOWN_FINDINGS) -> list[str]:
    """The failing rows as findings (``findings.cluster``), each with its smallest case as the example."""
    found = cluster([finding_record(r) for r in rows if gates(str(r["status"]))])
    lines = []
    for f in found[:shown]:
        lines.append(f"FAIL {f.backend}: {f.evidence}")
        lines += example_lines(f.smallest["row"])
    rest = found[shown:]
    if more := and_more(len(rest), "finding", sum(f.cases for f in rest), f"in {where}"):
        lines.append(more)
    return lines


def warning_lines(rows, where: str, shown: int = SHOWN_WARNINGS) -> list[str]:
    """Checks that warn but never gate (fp8 end to end), the first few."""
    warned = [w for r in rows for w in r.get("warnings") or []]
    lines = [f"warning (not gating) {line}" for line in warned[:shown]]
    if more := and_more(max(len(warned) - shown, 0), "warning", where=f"in {where}"):
        lines.append(more)
    return lines


def table_lines(rows) -> list[str]:
    """``run --table``: a count per status for each backend, suite, mode and dtype, and the totals."""
    groups = Counter((r.get("backend", "?"), r["suite"], r["mode"], r["dtype"], r["status"]) for r in rows)
    keys = sorted({k[:4] for k in groups})
    widths = [max(8, len(c) + 2) for c in STATUSES]
    header = (f"{'backend':<16} {'suite':<18} {'mode':<7} {'dtype':<9}"
              + "".join(f"{c:>{w}}" for c, w in zip(STATUSES, widths)))
    lines = [header, "-" * len(header)]
    for k in keys:
        lines.append(f"{k[0]:<16} {k[1]:<18} {k[2]:<7} {k[3]:<9}"
                     + "".join(f"{groups[(*k, c)]:>{w}}" for c, w in zip(STATUSES, widths)))
    totals = Counter(r["status"] for r in rows)
    lines += ["-" * len(header),
              f"{'total':<53}" + "".join(f"{totals[c]:>{w}}" for c, w in zip(STATUSES, widths))]
    return lines

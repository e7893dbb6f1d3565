"""The console summary of a run: what was verified, counts by suite, mode and dtype, the failures, the verdict."""

import shlex
import sys
import time
from collections import Counter

from .reasons import group_reasons
from .results import failure_lines
from .status import STATUSES, Status, gates

COLUMNS = STATUSES
SHOWN_REASONS = 5      # unsupported reasons listed, grouped by their text with the numbers set aside


def verified_backends(rows) -> list[str]:
    """One line per backend: its name, package, version and API form, as the rows record them."""
    seen = {}
    for r in rows:
        info = r.get("backend_info") if isinstance(r.get("backend_info"), dict) else {}
        package = " ".join(str(x) for x in (info.get("package"), info.get("version")) if x)
        api = f", {info['api']}" if info.get("api") else ""
        seen.setdefault(r.get("backend", "?"), f"{r.get('backend', '?')} ({package or 'no package'}{api})")
    return list(seen.values())


def memcheck_command(row: dict) -> str | None:
    """For a crash on an illegal memory access: the command that shows the stray access every time, not only
    when it lands on unmapped memory (scripts/gpu/sanitize.sh; docs/kernel-findings.md #6)."""
    if row["status"] != Status.CRASH or "illegal memory access" not in (row.get("reason") or ""):
        return None
    suite = (row.get("case") or {}).get("suite_file") or row["suite"]
    backend = row.get("backend_spec") or row.get("backend", "?")
    return f"bash scripts/gpu/sanitize.sh {shlex.quote(suite)} {row['case_id']} {shlex.quote(backend)}"


def print_summary(summary, results_path, out=None, max_messages=20):
    out = out or sys.stdout          # looked up per call: callers may redirect stdout
    rows = summary.all_rows
    print(f"verified: {'; '.join(verified_backends(rows)) or 'nothing'}", file=out)
    for note in summary.selection[-1:]:
        if not note.startswith(tuple(f"{kernel}:" for kernel in auto_kernels(summary.selection))):
            print(f"  auto: {note}", file=out)      # its conclusion; each kernel's line was said at the start
    groups = Counter()
    for r in rows:
        groups[(r.get("backend", "?"), r["suite"], r["mode"], r["dtype"], r["status"])] += 1
    keys = sorted({k[:4] for k in groups})
    widths = [max(8, len(c) + 2) for c in COLUMNS]
    header = (f"{'backend':<16} {'suite':<18} {'mode':<7} {'dtype':<9}"
              + "".join(f"{c:>{w}}" for c, w in zip(COLUMNS, widths)))
    print(header, file=out)
    print("-" * len(header), file=out)
    for k in keys:
        print(f"{k[0]:<16} {k[1]:<18} {k[2]:<7} {k[3]:<9}"
              + "".join(f"{groups[(*k, c)]:>{w}}" for c, w in zip(COLUMNS, widths)), file=out)
    totals = Counter(r["status"] for r in rows)
    print("-" * len(header), file=out)
    print(f"{'total':<53}" + "".join(f"{totals[c]:>{w}}" for c, w in zip(COLUMNS, widths)), file=out)
    bad = [r for r in rows if gates(r["status"])]
    shown = 0
    for r in bad:
        lines = failure_lines(r)
        for line in lines:
            if shown < max_messages:
                print(f"FAIL {line}\n     rerun: {r['rerun']}", file=out)
                if (memcheck := memcheck_command(r)) and line is lines[-1]:
                    print(f"     memcheck: {memcheck}", file=out)
                for frame in (r.get("traceback") or [])[-2:] if line is lines[-1] else []:
                    print(f"     at {frame}", file=out)
            shown += 1
    if shown > max_messages:
        print(f"... and {shown - max_messages} more failure line(s) in {results_path}", file=out)
    warned = [w for r in rows for w in r.get("warnings") or []]
    for line in warned[:5]:
        print(f"warning (not gating) {line}", file=out)
    if len(warned) > 5:
        print(f"... and {len(warned) - 5} more warning(s) in {results_path}", file=out)
    reasons = group_reasons((r.get("reason") for r in rows if r["status"] == Status.UNSUPPORTED), SHOWN_REASONS)
    for group in reasons.shown:
        print(f"unsupported ({group.cases}): {group.text}", file=out)
    if more := reasons.more_text(f"in {results_path}"):
        print(more, file=out)
    print(time_line(summary), file=out)
    kept = f", {len(summary.previous)} kept from the resumed file" if summary.previous else ""
    print(f"{len(summary.rows)} case(s) run in {summary.seconds:.1f} s ({summary.cases_per_second:.1f} cases/s)"
          f"{kept}; results: {results_path}", file=out)
    verdict = summary.verdict
    if verdict.name == "NOTHING VERIFIED":
        print(f"no case was verified against a kernel: {nothing_verified_why(rows)}", file=out)
    print(f"verdict: {verdict.name} (exit {verdict.exit_code})", file=out)


def nothing_verified_why(rows) -> str:
    """Why a run verified nothing: it had no case at all (a shard dealt none), or every case was unsupported."""
    if not rows:
        return ("this run was given no case, so nothing ran (with --shard K/N, a shard gets none when there are "
                "fewer cases than shards)")
    return "every case was unsupported here (reasons above)"


PHASES = ("inputs", "kernel", "oracle", "compare")


def auto_kernels(notes: list[str]) -> list[str]:
    """The kernels ``auto`` notes one line each (``kernel: why``)."""
    return [note.partition(":")[0] for note in notes if ":" in note and " " not in note.partition(":")[0]]


def auto_lines(notes: list[str]) -> list[str]:
    """``auto``'s notes for the console: kernels with the same reason on one line, in their order."""
    kernels = auto_kernels(notes)
    by_reason: dict[str, list[str]] = {}
    for note in notes:
        name, _, reason = note.partition(": ")
        key = reason.strip() if name in kernels else note
        by_reason.setdefault(key, []).append(name if name in kernels else "")
    lines = []
    for reason, names in by_reason.items():
        named = [n for n in names if n]
        lines.append(f"{', '.join(named)}: {reason}" if named else reason)
    return lines


def time_breakdown(rows) -> dict:
    """Seconds per phase summed over rows (workers run in parallel: the sum can pass the wall time)."""
    totals = dict.fromkeys(PHASES, 0.0)
    for r in rows:
        for name, ms in (r.get("phase_ms") or {}).items():
            totals[name] = totals.get(name, 0.0) + ms / 1e3
    return totals


def gpus_used(rows) -> list[tuple[int, str]]:
    """(index, name) of each GPU the rows' ``placement`` names (``run --gpus``), by index."""
    seen = {}
    for r in rows:
        place = r.get("placement")
        if isinstance(place, dict) and isinstance(place.get("gpu"), int):
            seen.setdefault((place["gpu"], place.get("uuid")), str(place.get("name") or "?"))
    return sorted((index, name) for (index, _), name in seen.items())


def gpus_text(gpus: list[tuple[int, str]]) -> str:
    """'on 8 GPUs: 8x NVIDIA H200 (0-7)' or 'on 2 GPUs: NVIDIA H100 80GB HBM3 (0), NVIDIA H200 (1)'."""
    by_name: dict[str, list[int]] = {}
    for index, name in gpus:
        by_name.setdefault(name, []).append(index)
    parts = []
    for name, indices in by_name.items():
        run_of = len(indices) > 2 and indices == list(range(indices[0], indices[-1] + 1))
        span = f"{indices[0]}-{indices[-1]}" if run_of else ", ".join(map(str, indices))
        parts.append(f"{f'{len(indices)}x ' if len(indices) > 1 else ''}{name} ({span})")
    return f"on {len(gpus)} GPUs: {'; '.join(parts)}"


def time_line(summary) -> str:
    """Where the time went: each phase summed over this invocation's cases, and writing the rows."""
    phases = ", ".join(f"{name} {sec:.2f} s" for name, sec in time_breakdown(summary.rows).items())
    where = f"{summary.workers} worker process(es)" if summary.workers else "this process"
    gpus = gpus_used(summary.rows)
    if len(gpus) > 1:            # run --gpus: which GPUs the workers were spread over
        where += f" {gpus_text(gpus)}"
    wall = f"{summary.seconds:.1f} s wall"
    if summary.started is not None:     # the command's time so far: its imports and the workers' start-up too
        whole = time.perf_counter() - summary.started
        wall = f"{whole:.1f} s wall from the start ({summary.seconds:.1f} s running cases)"
    return f"time: {wall} in {where}; summed over cases: {phases}; writing rows {summary.io_seconds:.2f} s"

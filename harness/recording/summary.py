"""The console summary of a run: a line per backend (what it called), the findings, the time, the verdict.

The scoreboard, the findings and the ``--table`` table are worded in ``console``.
"""

import sys
import time

from . import console
from .status import Status


def verified_backends(rows) -> list[str]:
    """One entry per backend: its name, package, version and API form, as the rows record them."""
    seen = {}
    for r in rows:
        seen.setdefault(r.get("backend", "?"), f"{r.get('backend', '?')} ({console.package_words(r)})")
    return list(seen.values())


def verified_lines(summary) -> list[str]:
    """``verified: nothing`` when no row ran (each backend that ran something says what it called on its
    scoreboard line), and how ``auto`` concluded, when it chose."""
    ran = [r for r in summary.all_rows if r["status"] != Status.UNSUPPORTED]
    lines = [] if ran else ["verified: nothing"]
    for note in summary.selection[-1:]:
        if not note.startswith(tuple(f"{kernel}:" for kernel in auto_kernels(summary.selection))):
            lines.append(f"  auto: {note}")      # its conclusion; each kernel's line was said at the start
    return lines


def summary_lines(summary, results_path, table: bool = False) -> list[str]:
    """The end of a run: how ``auto`` chose, (with ``table``, the counts per backend, suite, mode and dtype,
    and the unsupported rows' reasons), a scoreboard line per backend, the findings, the time, the results
    file and the verdict."""
    rows = summary.all_rows
    lines = verified_lines(summary)
    if table:
        lines += console.table_lines(rows) + console.reason_lines(rows, results_path)
    lines += console.scoreboard_lines(rows)
    lines += console.finding_lines(rows, results_path)
    lines += console.warning_lines(rows, results_path)
    lines.append(time_line(summary))
    kept = f", {len(summary.previous)} kept from the resumed file" if summary.previous else ""
    lines.append(f"{len(summary.rows)} case(s) run in {summary.seconds:.1f} s ({summary.cases_per_second:.1f} "
                 f"cases/s){kept}; results: {results_path}")
    verdict = summary.verdict
    if verdict.name == "NOTHING VERIFIED":
        lines.append(f"no case was verified against a kernel: {nothing_verified_why(rows)}")
    lines.append(f"verdict: {verdict.name} (exit {verdict.exit_code})")
    return lines


def print_summary(summary, results_path, out=None, table: bool = False):
    out = out or sys.stdout          # looked up per call: callers may redirect stdout
    print("\n".join(summary_lines(summary, results_path, table)), file=out)


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
    busy = busy_share(summary)
    if busy is not None:
        where += f", busy {busy:.0%} of it"
    warm = warm_up_words(summary)
    wall = f"{summary.seconds:.1f} s wall" + (f" ({warm})" if warm else "")
    if summary.started is not None:     # the command's time so far: its imports and the workers' start-up too
        whole = time.perf_counter() - summary.started
        wall = f"{whole:.1f} s wall from the start ({summary.seconds:.1f} s running cases{', ' + warm if warm else ''})"
    return f"time: {wall} in {where}; summed over cases: {phases}; writing rows {summary.io_seconds:.2f} s" \
        + first_row_words(summary)


def first_row_words(summary) -> str:
    """When the first case that ran gave its row, and when each step before the cases ended (``run``'s marks),
    from the command's start: where a run's time before its cases went."""
    if summary.started is None or summary.first_row is None:
        return ""
    steps = ", ".join(f"{name} at {at - summary.started:.1f} s" for name, at in summary.marks.items())
    return f"; first row at {summary.first_row - summary.started:.1f} s" + (f" ({steps})" if steps else "")


def busy_share(summary) -> float | None:
    """How much of the workers' time running cases went to cases: the rows' own times (``wall_s``) over the
    workers times the running time.  The rest is the workers waiting: on a backend's last, longest chunk, on
    held-back cases, on memory, between backends.  None without workers or rows that ran."""
    ran = [r.get("wall_s") or 0.0 for r in summary.rows if r.get("phase_ms")]
    if not summary.workers or summary.seconds <= 0 or not ran:
        return None
    return sum(ran) / (summary.workers * summary.seconds)


def warm_up_words(summary) -> str:
    """The warm-up apart (``running/warm_up``): its wall time, and the kernel time its cases spent building."""
    if not summary.warm_up_cases:
        return ""
    built = sum((r.get("phase_ms") or {}).get("kernel", 0.0) for r in summary.rows if r.get("warm_up")) / 1e3
    return (f"{summary.warm_up_seconds:.1f} s of it the warm-up of {summary.warm_up_cases} kernel variant(s), "
            f"their kernel phase {built:.1f} s")

"""The console summary of a run: counts by suite, mode and dtype, then the failures."""

import sys
from collections import Counter

COLUMNS = ("pass", "fail", "error", "crash", "timeout", "unsupported")


def print_summary(summary, results_path, out=None, max_messages=20):
    out = out or sys.stdout          # looked up per call: callers may redirect stdout
    rows = summary.rows
    groups = Counter()
    for r in rows:
        groups[(r["suite"], r["mode"], r["dtype"], r["status"])] += 1
    keys = sorted({k[:3] for k in groups})
    header = f"{'suite':<18} {'mode':<7} {'dtype':<9}" + "".join(f"{c:>12}" for c in COLUMNS)
    print(header, file=out)
    print("-" * len(header), file=out)
    for k in keys:
        print(f"{k[0]:<18} {k[1]:<7} {k[2]:<9}" + "".join(f"{groups[(*k, c)]:>12}" for c in COLUMNS), file=out)
    totals = Counter(r["status"] for r in rows)
    print("-" * len(header), file=out)
    print(f"{'total':<36}" + "".join(f"{totals[c]:>12}" for c in COLUMNS), file=out)
    bad = [r for r in rows if r["status"] not in ("pass", "unsupported")]
    shown = 0
    for r in bad:
        for line in r.get("messages") or [f"{r['case_id']}: {r['status']}: {r.get('reason')}"]:
            if shown < max_messages:
                print(f"FAIL {line}\n     rerun: {r['rerun']}", file=out)
            shown += 1
    if shown > max_messages:
        print(f"... and {shown - max_messages} more failure line(s) in {results_path}", file=out)
    warned = [w for r in rows for w in r.get("warnings") or []]
    for line in warned[:5]:
        print(f"warning (not gating) {line}", file=out)
    if len(warned) > 5:
        print(f"... and {len(warned) - 5} more warning(s) in {results_path}", file=out)
    unsupported = Counter(r.get("reason") for r in rows if r["status"] == "unsupported")
    for reason, n in unsupported.most_common(5):
        print(f"unsupported ({n}): {reason}", file=out)
    print(f"{len(rows)} case(s) in {summary.seconds:.1f} s ({summary.cases_per_second:.1f} cases/s); "
          f"results: {results_path}", file=out)
    if rows and totals["unsupported"] == len(rows):
        print("warning: every case was unsupported by this backend; nothing was verified", file=out)
    verdict = "PASSED" if summary.ok else "FAILED"
    print(f"verdict: {verdict}", file=out)

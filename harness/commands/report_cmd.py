"""``mla-verify report``: an HTML report from results files, optionally diffed against a baseline."""

import sys
import time
from pathlib import Path

from ..errors import InputError
from ..recording.results import check_output_path
from ..recording.status import EXIT_BAD_INPUT, EXIT_FAILURES, Status
from ..report import MAX_DRILLDOWNS, write_report
from ..report.baseline import FACTOR, FLOOR


def add_parser(sub):
    p = sub.add_parser("report", help="write a self-contained HTML report from results files")
    p.add_argument("results", nargs="+", metavar="RESULTS", help="results file(s) (JSONL); a later row of the same "
                   "case and backend supersedes an earlier one.  Exits with the verdict of the rows read, as run "
                   "does (0 passed, 1 failed, 5 nothing verified: an empty file too); files of a sharded run (run "
                   "--shard K/N) with a shard absent or a case from two shards: named, exit 2")
    p.add_argument("-o", "--out", help="report file; default reports/report-<time>.html")
    p.add_argument("--baseline", action="append", metavar="OLD",
                   help="an older results file (repeat for several): mark new failures, fixed cases and "
                        "metric regressions")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 when a case that passed in the baseline no longer passes (with --baseline)")
    p.add_argument("--max-drilldowns", type=int, default=MAX_DRILLDOWNS, metavar="N",
                   help=f"drill-downs for at most N failing cases (default {MAX_DRILLDOWNS})")
    p.add_argument("--regression-factor", type=float, default=FACTOR, metavar="X",
                   help=f"an error over bound that grew more than X times is a regression (default {FACTOR:g})")
    p.add_argument("--regression-floor", type=float, default=FLOOR, metavar="F",
                   help=f"... once it reaches at least F of its bound (default {FLOOR:g})")
    p.add_argument("--title", default="mla-verify report", help="the page's title")
    p.set_defaults(func=main)


def main(args) -> int:
    if args.max_drilldowns < 0:
        raise InputError(f"--max-drilldowns: must be at least 0, got {args.max_drilldowns}")
    if not args.regression_factor >= 1:
        raise InputError(f"--regression-factor: must be at least 1, got {args.regression_factor:g}")
    if not args.regression_floor >= 0:
        raise InputError(f"--regression-floor: must be at least 0, got {args.regression_floor:g}")
    if args.fail_on_regression and not args.baseline:
        raise InputError("--fail-on-regression needs --baseline OLD")
    out = args.out or f"reports/report-{time.strftime('%Y%m%d-%H%M%S')}.html"
    if out.endswith("/"):
        raise InputError(f"-o {out}: names a directory; give a file name such as {out}report.html")
    target = report_target(out, [*args.results, *(args.baseline or ())])
    _, data = write_report(args.results, target, args.baseline or (), args.max_drilldowns, args.title,
                           args.regression_factor, args.regression_floor)
    print(out)
    for path, rows in data.sources:
        if not rows:
            print(f"mla-verify: report: {path}: no rows (an empty results file: the run was given no case, or "
                  f"stopped before its first row)", file=sys.stderr)
    for problem in data.shard_problems:
        print(f"mla-verify: report: {problem}", file=sys.stderr)
    if data.baseline is not None and not data.baseline["matched"]:
        print(f"mla-verify: report: {nothing_in_common(data)}", file=sys.stderr)
    regressed = args.fail_on_regression and regression_gate(data)
    sys.stdout.flush()
    return exit_code(data, regressed)


def exit_code(data, regressed: bool) -> int:
    """One rule, sharded or not: 2 when the files are not one whole sharded run, 1 when the regression gate
    tripped, else the verdict of the rows read: the code ``run`` gives the same rows (0, 1 or 5)."""
    if data.shard_problems:
        return EXIT_BAD_INPUT
    return EXIT_FAILURES if regressed else data.verdict.exit_code


def regression_gate(data) -> bool:
    """``--fail-on-regression``: whether it trips, each case lost said on stdout.  A baseline that matched
    no row trips it too: nothing was compared, so no regression can be ruled out."""
    if data.baseline is not None and not data.baseline["matched"]:
        return True
    lost = no_longer_passing(data.df)
    for case_id, backend, status in lost[:20]:
        print(f"regression: {case_id} [{backend}] passed in the baseline, now {status}")
    if len(lost) > 20:
        print(f"... and {len(lost) - 20} more")
    return bool(lost)


def report_target(out: str, inputs: list[str]) -> Path:
    """Where ``-o`` writes: through a link, to what it points to, which must be a regular file or not exist
    yet (``run``'s rule for its outputs), and none of the inputs.  The report is written beside it and
    renamed over it: over a device node (``/dev/null``, as root) that would replace the device."""
    check_output_path("-o", out)
    target = Path(out).resolve()
    if any(target == Path(p).resolve() for p in inputs):
        raise InputError(f"-o {out}: is one of the input files; the report would overwrite it")
    return target


def nothing_in_common(data) -> str:
    """The line for a baseline diff that matched no row: no verdict on regressions can be drawn from it."""
    now = ", ".join(sorted(set(data.df["backend"]))) or "none"
    before = ", ".join(sorted({backend for _, backend in data.baseline["gone"]})) or "none"
    return (f"the baseline has no (case, backend) pair in common with the results (backends now: {now}; in the "
            f"baseline: {before}): nothing was compared")


def no_longer_passing(df) -> list[tuple[str, str, str]]:
    """(case, backend, status now) of every case that passed in the baseline and does not pass now."""
    if not len(df) or "base_status" not in df.columns:
        return []
    lost = df[(df["base_status"] == Status.PASS) & (df["status"] != Status.PASS)]
    return list(zip(lost["case_id"], lost["backend"], lost["status"], strict=True))

"""``mla-verify selfcheck``: prove the checks can fail, by killing every shipped mutant.

Light at import, as every command is (cli.py): the mutants, the suites and the run, which import torch,
wait for ``main``.
"""

import sys

from ..errors import InputError
from ..judging import checks
from ..recording import junit
from ..recording.results import ResultsWriter
from ..recording.status import EXIT_FAILURES, EXIT_OK, Status, gates
from .run_cmd import check_writable, device_asked, load_suites


def add_parser(sub):
    p = sub.add_parser("selfcheck", help="run a suite against every mutant and the clean backend")
    p.add_argument("--suite", default="selfcheck", help="suite name(s), comma-separated (default: selfcheck)")
    p.add_argument("--mutant", action="append", metavar="NAME",
                   help="only this mutant (repeatable; default: all of them)")
    p.add_argument("--out", help="also write every row (all backends) to this JSONL file")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    p.add_argument("--markdown", action="store_true", help="print the kill matrix as a markdown table")
    p.add_argument("--junit-xml", metavar="PATH",
                   help="also write a JUnit XML file: one testcase per mutant (killed passes) and the clean backend")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=main)


class _NoFile:
    """A results writer that keeps nothing (selfcheck rows are summarised, not stored, by default)."""

    def write(self, row):
        pass

    def close(self):
        pass


def _mutant_names(chosen) -> list[str]:
    from ..mutants import MUTANTS, names
    asked = [n.strip() for arg in chosen or [] for n in arg.split(",") if n.strip()] or names()
    unknown = [n for n in asked if n not in MUTANTS]
    if unknown:
        raise InputError(f"--mutant: unknown mutant '{unknown[0]}' (known: {', '.join(names())})")
    return list(dict.fromkeys(asked))


def _rows(result):
    """(name, killed/cases, {check: count}, verdict) for the clean backend and each mutant."""
    clean = result.clean
    yield ("torch (clean)", f"{clean.killed_cases}/{clean.cases}", clean.kills,
           "PASS" if result.clean_ok else "FAIL")
    for m in result.mutants:
        verdict = "SURVIVED" if not m.killed else ("killed" if m.expected_hit else "killed (unexpected checks)")
        yield m.spec.removeprefix("mutant:"), f"{m.killed_cases}/{m.cases}", m.kills, verdict


def print_matrix(result, out=None):
    out = out or sys.stdout   # looked up per call, so a redirected stdout is honoured
    columns = sorted(result.checks(), key=checks.order)
    heads = [checks.short(c) for c in columns]
    widths = [max(len(h), 3) for h in heads]
    name_w = max(len(r[0]) for r in _rows(result))
    print(f"{'mutant':<{name_w}}  {'cases':>6}  " + "  ".join(f"{h:>{w}}" for h, w in zip(heads, widths))
          + "  verdict", file=out)
    for name, ratio, kills, verdict in _rows(result):
        cells = "  ".join(f"{kills.get(c) or '.':>{w}}" for c, w in zip(columns, widths))
        print(f"{name:<{name_w}}  {ratio:>6}  {cells}  {verdict}", file=out)


def print_markdown(result, out=None):
    out = out or sys.stdout
    columns = sorted(result.checks(), key=checks.order)
    print("| mutant | bug class modelled | expected check | killed (cases) | "
          + " | ".join(f"`{c}`" for c in columns) + " |", file=out)
    print("|---|---|---|---|" + "---|" * len(columns), file=out)
    verdicts = [result.clean, *result.mutants]
    for (name, ratio, kills, verdict), v in zip(_rows(result), verdicts):
        expected = ", ".join(f"`{c}`" for c in v.caught_by) or "none: must pass"
        cells = " | ".join(str(kills.get(c) or "") for c in columns)
        print(f"| `{name}` | {v.bug or 'the clean torch split-KV backend'} | {expected} | {ratio} {verdict} | "
              f"{cells} |", file=out)


def main(args) -> int:
    from ..planning import cases as case_mod
    from ..selfcheck import run_selfcheck
    names = _mutant_names(args.mutant)
    suites = load_suites(args.suite)
    cases = case_mod.select(suites, None)
    device = device_asked(args.device)
    if args.junit_xml:
        check_writable(args.junit_xml)
    writer = ResultsWriter(args.out) if args.out else _NoFile()   # opened first: a bad --out runs nothing
    try:
        print(f"mla-verify: selfcheck of {len(names)} mutant(s) and the clean backend on {len(cases)} case(s) "
              f"from {', '.join(s.name for s in suites)} ({device})", file=sys.stderr)
        bars = not args.no_progress and sys.stderr.isatty()
        result = run_selfcheck(cases, names, device, writer, progress=bars, on_done=None if bars else _said_done)
    finally:
        writer.close()
    (print_markdown if args.markdown else print_matrix)(result)
    if args.junit_xml:
        junit.write(args.junit_xml, junit_rows(result), name="mla-verify selfcheck")
    return report(result, args.out)


def _said_done(i: int, n: int, kills, seconds: float):
    """One line per backend where no bar shows (a log, ``--no-progress``): a long selfcheck says how far it is."""
    name = "torch (clean)" if i == 1 else kills.spec.removeprefix("mutant:")
    what = ("passed" if not kills.killed else "FAILED") if i == 1 else ("killed" if kills.killed else "SURVIVED")
    print(f"mla-verify: selfcheck [{i}/{n}] {name}: {what}, {kills.killed_cases}/{kills.cases} case(s) failing, "
          f"{seconds:.1f} s", file=sys.stderr, flush=True)


def junit_rows(result) -> list[dict]:
    """One row per mutant (passes when killed) and one for the clean backend (passes when it passes)."""
    clean_failures = [r["case_id"] for r in result.clean.summary.rows if gates(r["status"])]
    rows = [{"case_id": "clean", "backend": "selfcheck", "suite": "selfcheck", "wall_s": 0.0,
             "status": Status.FAIL if clean_failures else Status.PASS,
             "messages": [f"clean: the clean backend failed {', '.join(clean_failures)}"]}]
    for m in result.mutants:
        name = m.spec.removeprefix("mutant:")
        rows.append({"case_id": name, "backend": "selfcheck", "suite": "selfcheck", "wall_s": 0.0,
                     "status": Status.PASS if m.killed else Status.FAIL,
                     "messages": [f"{name}: survived ({m.bug}); expected to be caught by {', '.join(m.caught_by)}"]})
    return rows


def report(result, out_path) -> int:
    from ..mutants import NEEDS
    unsupported = result.clean.summary.count(Status.UNSUPPORTED)
    if unsupported:
        print(f"warning: {unsupported} case(s) unsupported by the clean backend verify nothing")
    for row in result.clean.summary.rows:
        if gates(row["status"]):
            print(f"CLEAN FAIL {row['case_id']}: {row['status']}: {row.get('reason')}")
    for m in result.survivors:
        unmet = "" if m.suite_meets_needs else f"; it needs {NEEDS[m.needs]}, and the suite has none"
        print(f"SURVIVED {m.spec}: {m.bug}; expected to be caught by {', '.join(m.caught_by)}{unmet}")
    where = f"; rows: {out_path}" if out_path else ""
    print(f"{len(result.mutants) - len(result.survivors)}/{len(result.mutants)} mutants killed, clean backend "
          f"{'passed' if result.clean_ok else 'FAILED'}, in {result.seconds:.1f} s{where}")
    print(f"verdict: {'PASSED' if result.ok else 'FAILED'}")
    return EXIT_OK if result.ok else EXIT_FAILURES

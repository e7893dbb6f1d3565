"""A suite file of the cases a results file ran: to time ``run`` on the cases a fuzz campaign drew.

    python scripts/suite_from_rows.py RESULTS.jsonl OUT.toml [--backend B]

Every row keeps its case's definition (``case``).  Each distinct case becomes one group of OUT, with the
fields a corpus file would write (``harness.fuzz.corpus.groups_text``), in the order the rows came; with
``--backend`` only that backend's rows count.  A suite file seeds each case from its id, so OUT's cases have
the same shapes, fields and value distributions as the campaign's, drawn from other seeds: comparable work,
not the same numbers.  ``mla-verify run --suite OUT.toml --backend B`` then gives run's cases/s on them, to set
beside the campaign's.  Exit 2 with one line when RESULTS has no row with a case.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.fuzz.corpus import groups_text  # noqa: E402
from harness.planning.case import Case  # noqa: E402
from harness.recording.results_read import read_rows  # noqa: E402


def cases_of(rows, backend: str | None) -> list[Case]:
    """The distinct cases of ``rows``, in their order (a case run by several backends counts once)."""
    seen, cases = set(), []
    for row in rows:
        if not isinstance(row.get("case"), dict) or (backend and row.get("backend") != backend):
            continue
        case = Case(**row["case"])
        if case.id not in seen:
            seen.add(case.id)
            cases.append(case)
    return cases


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results")
    p.add_argument("out")
    p.add_argument("--backend", help="only this backend's rows")
    args = p.parse_args(argv)
    cases = cases_of(read_rows(args.results), args.backend)
    if not cases:
        print(f"suite_from_rows.py: {args.results}: no row with a case definition"
              + (f" for backend {args.backend}" if args.backend else ""), file=sys.stderr)
        return 2
    text = groups_text([(str(k), case) for k, case in enumerate(cases)], 0,
                       f"the {len(cases)} case(s) of {Path(args.results).name}")
    Path(args.out).write_text(text)
    print(f"{len(cases)} case(s) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

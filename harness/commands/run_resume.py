"""``run --resume``: which rows of the results file are kept, and what is said about the rest."""

import sys
from collections import Counter

from ..planning.fixed_params import hashed_definition
from ..recording.results import case_hash, why_run_again
from ..recording.status import Status

# Rows --resume keeps.  A crash, timeout, error or harness error may be transient (a killed
# process, a full GPU), so those cases run again and their new row supersedes the old one.
# A kept row also has to be this kernel's, on this case definition, by this mla-verify (why_run_again).
KEPT_ON_RESUME = (Status.PASS.value, Status.FAIL.value, Status.UNSUPPORTED.value)


def previous_rows(rows: list[dict], backend, cases: list) -> tuple[list[dict], int, Counter]:
    """What --resume keeps of ``rows``: the latest row of each asked-for case on this backend, when its
    status is kept and it was made by this kernel, on this case definition, by this mla-verify.  Also
    how many cases have a row, and why those that would be kept but for their identity run again."""
    by_id = {c.id: c for c in cases}
    latest = {}
    for row in rows:
        if row.get("backend") == backend.name and row["case_id"] in by_id:
            latest[row["case_id"]] = row
    from ..environment import mla_verify_version
    info, version = backend.info(), mla_verify_version()
    # a kernel that fixes a parameter ran the case at its own value: its rows hash what ran
    declared = backend.capabilities.fixed_softmax_scale
    kept, changed = [], Counter()
    for case_id, row in latest.items():
        if row["status"] not in KEPT_ON_RESUME:
            continue
        reason = why_run_again(row, info, case_hash(hashed_definition(by_id[case_id], declared)), version)
        if reason is None:
            kept.append(row)
        else:
            changed[reason] += 1
    return kept, len(latest), changed


def kept_on_resume(writer, backend, cases, path) -> list[dict]:
    """The rows of ``backend`` kept from the resumed file (``previous_rows``), said on stderr."""
    kept, recorded, changed = previous_rows(writer.rows_before, backend, cases)
    transient = recorded - len(kept) - sum(changed.values())
    print(f"mla-verify: resume: {path} records {recorded} of these cases on {backend.name}; "
          f"{len(kept)} kept ({_tally(kept)}), {transient} crash/timeout/error row(s) run again"
          + _changed_note(changed), file=sys.stderr)
    return kept


def _changed_note(changed: Counter) -> str:
    """Why rows that would be kept run again: not made by this kernel, case definition or mla-verify."""
    if not changed:
        return ""
    reasons = ", ".join(f"{reason} ({n})" for reason, n in changed.most_common())
    return f", {sum(changed.values())} run again as their identity changed: {reasons}"


def _tally(rows) -> str:
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"

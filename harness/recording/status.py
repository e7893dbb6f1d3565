"""The status vocabulary of a result row, and the verdict over many rows.

Every place that names a status or decides a verdict reads it from here: the
runner, the console summary, the JUnit file, the HTML report and the baseline
diff.  Pure Python (no torch), so ``report`` starts fast.
"""

from collections import Counter
from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    PASS = "pass"                    # every check within its bound
    FAIL = "fail"                    # the kernel answered, and a check is out of bounds
    UNSUPPORTED = "unsupported"      # the backend declares it cannot run the case (reason quoted)
    ERROR = "error"                  # the kernel or its adapter raised
    CRASH = "crash"                  # the kernel's process died, or its CUDA context was lost
    TIMEOUT = "timeout"              # the case ran past its time limit
    HARNESS_ERROR = "harness_error"  # building inputs, the oracle or the comparison raised: not the kernel

    @property
    def gates(self) -> bool:
        """Whether a row with this status fails the run."""
        return self not in (Status.PASS, Status.UNSUPPORTED)

    @property
    def verified(self) -> bool:
        """Whether the kernel's answer was compared with the oracle."""
        return self in (Status.PASS, Status.FAIL)


STATUSES = tuple(s.value for s in Status)
GATING = tuple(s.value for s in Status if s.gates)


def gates(status: str) -> bool:
    """A status read from a row (a string); one this version does not know gates too."""
    try:
        return Status(status).gates
    except ValueError:
        return True


EXIT_OK, EXIT_FAILURES, EXIT_BAD_INPUT, EXIT_NOTHING_VERIFIED = 0, 1, 2, 5
EXIT_INTERNAL = 3           # mla-verify's own bug: never a verdict on a kernel
EXIT_INTERRUPTED = 130      # 128 + SIGINT, as a shell reports a command ended by Ctrl-C

# What each exit code means: the README's table is this one.
EXIT_CODES = {
    EXIT_OK: "PASSED: every case asked for was verified or declared unsupported, and at least one passed",
    EXIT_FAILURES: "FAILED: a case failed, raised, crashed, timed out, or the harness could not judge it",
    EXIT_BAD_INPUT: "bad input (a case file, a flag, a backend, an unwritable path), a required kernel that "
                    "does not import, or a case this machine cannot hold; one error line, no traceback",
    EXIT_INTERNAL: "internal error: mla-verify itself raised (a bug to report, not a finding): its traceback, then "
                   "one line; the rows written so far are kept",
    EXIT_NOTHING_VERIFIED: "NOTHING VERIFIED: no case was run against a kernel (every case unsupported, or none)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C): the run stopped; the rows written so far are kept; one line",
}


@dataclass(frozen=True)
class Verdict:
    name: str                 # PASSED, FAILED or NOTHING VERIFIED
    exit_code: int
    counts: Counter

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK


def verdict_of(rows) -> Verdict:
    """The verdict of result rows (dicts with ``status``), one per case and backend.

    Any gating row fails the run; a run that verified nothing is not a pass; a
    harness error caused by memory the machine lacks exits 2, unless a kernel
    failure already fails the run.
    """
    counts = Counter(str(r["status"]) for r in rows)
    if any(gates(s) for s in counts):
        kernel_failed = any(gates(s) and s != Status.HARNESS_ERROR.value for s in counts)
        cannot_hold = any(r.get("cannot_hold") for r in rows if r["status"] == Status.HARNESS_ERROR.value)
        return Verdict("FAILED", EXIT_BAD_INPUT if cannot_hold and not kernel_failed else EXIT_FAILURES, counts)
    if not counts[Status.PASS.value]:
        return Verdict("NOTHING VERIFIED", EXIT_NOTHING_VERIFIED, counts)
    return Verdict("PASSED", EXIT_OK, counts)

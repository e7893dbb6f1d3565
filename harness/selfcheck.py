"""Selfcheck: run one suite against every mutant and the clean backend; build the kill matrix.

A mutant is killed when at least one case fails on it (any status other than
pass or unsupported).  The clean torch backend must pass every case, or the
matrix proves nothing.  Rows come from ``runner.run_cases``, so a mutant is
judged by exactly the checks a real kernel is judged by.  The mutants come from the one registry
(``mutants.MUTANTS``), each with the cases it needs (dense or sparse): a survivor whose suite holds none
of those is told so.
"""

import time
from collections import Counter
from dataclasses import dataclass, field

from .mutants import MUTANTS, meets
from .recording.status import gates
from .running.backend_loader import load_backend
from .running.run_summary import RunSummary
from .running.runner import run_cases

CLEAN_SPEC = "torch"


def killing_checks(row: dict) -> list[str]:
    """The checks a failed row names (a row without any names its status instead)."""
    if not gates(row["status"]):
        return []
    return list(dict.fromkeys(row.get("failed_checks") or [row["status"]]))


@dataclass
class BackendKills:
    """One backend's rows, and which checks failed on how many cases."""

    spec: str
    summary: RunSummary
    bug: str = ""
    caught_by: tuple = ()
    kills: Counter = field(default_factory=Counter)   # check -> number of cases it failed
    needs: str = ""                                   # a mutant's: the cases its bug can show on
    suite_meets_needs: bool = True                    # whether the suite holds any of them

    @property
    def cases(self) -> int:
        return len(self.summary.rows)

    @property
    def killed_cases(self) -> int:
        return sum(bool(killing_checks(r)) for r in self.summary.rows)

    @property
    def killed(self) -> bool:
        return self.killed_cases > 0

    @property
    def expected_hit(self) -> bool:
        """Whether one of the checks the mutant was written for is among those that caught it."""
        return bool(set(self.caught_by) & set(self.kills))


@dataclass
class SelfcheckResult:
    clean: BackendKills
    mutants: list[BackendKills]
    seconds: float

    @property
    def survivors(self) -> list[BackendKills]:
        return [m for m in self.mutants if not m.killed]

    @property
    def clean_ok(self) -> bool:
        return self.clean.summary.ok

    @property
    def ok(self) -> bool:
        return self.clean_ok and not self.survivors

    def checks(self) -> list[str]:
        seen = Counter()
        for v in [self.clean, *self.mutants]:
            seen.update(v.kills)
        return list(seen)


def kills_of(spec: str, backend, cases, device, writer, progress, needs: str = "") -> BackendKills:
    summary = run_cases(cases, backend, spec, device, writer, progress=progress)
    kills = Counter(c for r in summary.rows for c in killing_checks(r))
    met = not needs or any(meets(needs, case) for case in cases)
    return BackendKills(spec, summary, backend.bug, backend.caught_by, kills, needs, met)


def run_selfcheck(cases, mutant_names, device, writer, progress=False, on_done=None) -> SelfcheckResult:
    """The clean backend first, then each mutant on a fresh instance, all in this process.  ``on_done(i, n,
    kills, seconds)`` after each of the ``n`` backends: a long selfcheck says how far it is."""
    started = time.perf_counter()
    steps = [(CLEAN_SPEC, lambda: load_backend(CLEAN_SPEC), "")]
    steps += [(f"mutant:{n}", MUTANTS[n], MUTANTS[n].needs) for n in mutant_names]
    done = []
    for i, (spec, make, needs) in enumerate(steps, 1):
        t0 = time.perf_counter()
        done.append(kills_of(spec, make(), cases, device, writer, progress, needs))
        if on_done is not None:
            on_done(i, len(steps), done[-1], time.perf_counter() - t0)
    return SelfcheckResult(done[0], done[1:], time.perf_counter() - started)

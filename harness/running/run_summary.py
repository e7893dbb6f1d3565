"""What one invocation's running came to: its rows, and the wall time of its cases, its warm-up and the steps
before them (``RunSummary``)."""

import threading
from dataclasses import dataclass, field

from ..recording.status import verdict_of


@dataclass
class RunSummary:
    rows: list = field(default_factory=list)        # rows written by this invocation
    previous: list = field(default_factory=list)    # rows kept from the resumed file, for the cases asked for
    seconds: float = 0.0                             # running the cases, backend by backend
    started: float | None = None                     # perf_counter at the command's start, for the whole wall
    io_seconds: float = 0.0                          # writing rows to the results file
    workers: int = 0                                 # the most worker processes any backend ran in
    warm_up_seconds: float = 0.0                     # of ``seconds``: running each kernel variant's first case
    warm_up_cases: int = 0                           # those first cases (``warm_up``), over every backend
    selection: list = field(default_factory=list)   # how ``auto`` chose its backends, line by line
    marks: dict = field(default_factory=dict)        # perf_counter when each step before the cases ended (``run``)
    first_row: float | None = None                   # perf_counter when the first case that ran gave its row
    # each backend's (start, end) running cases and warming up: backends side by side overlap (``add_span``)
    spans: dict = field(default_factory=lambda: {"cases": [], "warm_up": []})

    def add_span(self, start: float, end: float, warm_up: bool = False):
        """One backend's time running cases (or its warm-up) counted once where backends overlap (``overlap``):
        ``seconds`` (``warm_up_seconds``) grows by what the span adds to the union of those before."""
        with _SPANS:
            spans = self.spans["warm_up" if warm_up else "cases"]
            before = _covered(spans)
            spans.append((start, end))
            gained = _covered(spans) - before
            if warm_up:
                self.warm_up_seconds += gained
            else:
                self.seconds += gained

    @property
    def all_rows(self) -> list:
        return self.previous + self.rows

    def count(self, status: str) -> int:
        return sum(r["status"] == status for r in self.all_rows)

    @property
    def verdict(self):
        return verdict_of(self.all_rows)

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    @property
    def cases_per_second(self) -> float:
        return len(self.rows) / self.seconds if self.seconds > 0 else float("inf")


_SPANS = threading.Lock()       # backends side by side add their spans from their own threads


def _covered(spans: list) -> float:
    """The length of the union of ``spans``."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        total += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return total

"""Giving up on a backend that hangs: ``--max-timeouts`` and the breaker that counts timeouts in a row.

Light (no torch): ``run``'s parser reads ``MAX_TIMEOUTS`` and ``timeout_limit`` before its workers start.
"""

import argparse
from dataclasses import dataclass

from ..recording.status import Status

MAX_TIMEOUTS = 3      # consecutive timeouts that stop a backend's run (``--max-timeouts``)


def timeout_limit(text: str) -> int:
    """``--max-timeouts``' value: a count, 0 or more (argparse turns the error into one line)."""
    try:
        limit = int(text)
    except ValueError:
        limit = -1
    if limit < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number, 0 or more, got {text!r}")
    return limit


@dataclass
class CircuitBreaker:
    """Gives up on a backend after ``limit`` timeouts in a row (0: never).  Each hung case costs the whole
    ``--timeout``: a kernel that hangs on everything would otherwise hold a run for hours.  Once tripped
    it stays tripped, whatever rows still arrive from cases already in flight."""

    limit: int = MAX_TIMEOUTS
    streak: int = 0

    @property
    def tripped(self) -> bool:
        return self.limit > 0 and self.streak >= self.limit

    def see(self, row: dict):
        if not self.tripped:
            self.streak = self.streak + 1 if row["status"] == Status.TIMEOUT else 0

    def reason(self) -> str:
        return f"not run: {self.limit} consecutive timeouts on this backend, --max-timeouts {self.limit}"

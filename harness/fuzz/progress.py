"""The campaign's progress line on stderr: cases run, cases/s, failures found, the smallest failing case.

On a terminal it is one line rewritten in place as each row arrives; in a log, a line per round.
"""

import sys
import time

from ..planning.case import Case
from ..recording.findings import size
from ..recording.status import gates
from .shrink import sizes
from .signature import describe


def case_size(case: Case) -> float:
    """The report's measure of a case (``findings.size``): batch x heads x query tokens x longest request."""
    s = sizes(case)
    return size({"batch_size": s["batch"], "heads": s["heads"], "s_q": s["drafts"], "max_seqlen": s["context"]})


def case_text(case: Case) -> str:
    s = sizes(case)
    drafts = case.draft_tokens
    kind = f"verify {drafts} draft{'s' if drafts != 1 else ''}" if case.mode == "verify" else "decode"
    topk = f", topk {case.topk}" if case.topk else ""
    return f"{case.id}: batch {s['batch']}, heads {s['heads']}, {kind}, context {s['context']}{topk}"


class Progress:
    def __init__(self, out=None, tty: bool | None = None, shown: bool = True):
        self.out = out or sys.stderr
        self.shown = shown
        self.tty = self.out.isatty() if tty is None else tty
        self.started = time.perf_counter()
        self.cases = 0
        self.failures = 0
        self.smallest: tuple | None = None       # (size, case, signature)

    def row(self, row: dict):
        """A row arrived: counted, and on a terminal the line redrawn."""
        self.cases += 1
        self.failures += gates(row["status"])
        if self.tty:
            self._say(end="")

    def failed(self, case: Case, sig: tuple):
        """A failing case (drawn, replayed, or the smaller one a shrink found)."""
        measure = case_size(case)
        if self.smallest is None or measure < self.smallest[0]:
            self.smallest = (measure, case, sig)

    def round_done(self):
        self._say(end="" if self.tty else "\n")

    def line(self) -> str:
        seconds = time.perf_counter() - self.started
        rate = self.cases / seconds if seconds > 0 else 0.0
        text = f"fuzz: {self.cases} case(s), {rate:.1f} cases/s, {self.failures} failure(s)"
        if self.smallest is not None:
            _, case, sig = self.smallest
            text += f"; smallest failing: {case_text(case)} ({describe(sig)})"
        return text

    def _say(self, end: str):
        if not self.shown:
            return
        prefix = "\r\033[K" if self.tty else ""
        print(prefix + self.line(), end=end, file=self.out, flush=True)

    def close(self):
        if self.tty and self.shown:
            print(file=self.out, flush=True)

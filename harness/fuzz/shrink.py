"""Shrinking: a failing case made smaller, step by step, while it keeps failing the same way.

Greedy: each step (``candidates.STEPS``: fewer requests, shorter contexts, fewer heads, fewer drafts, a
smaller topk, fewer pages, then fields back to their defaults) offers smaller cases; they run together,
and the smallest that fails with the same signature (``signature``) is taken.  The steps repeat until
none makes the case smaller.  Every candidate is run as its suite file will give it: its lengths written
out and its seed the one a one-case suite of that name derives (``corpus.suite_case``), so the case
that comes out is exactly the one written to the corpus.

``rerun(cases) -> rows`` runs candidates (the campaign runs them in a worker: a crash is a signature
too) and returns their rows in order.
"""

import time
from dataclasses import dataclass, field

from ..planning.case import Case
from ..planning.case_lengths import draw_seq_lens
from . import candidates, corpus
from .signature import signature

SUITE_SEEDS = 8       # suite seeds tried for the first step, where the failure hangs on the drawn values
MAX_RERUNS = 40       # rerun calls one shrink may make


@dataclass
class Shrunk:
    """The smallest case found that fails as the original did, as its suite file gives it."""
    original: Case
    case: Case | None          # None: the failure did not come back as a suite file
    suite_seed: int
    sig: tuple
    row: dict | None = None
    steps: list = field(default_factory=list)    # the names of the steps taken, in order
    reruns: int = 0             # candidates run
    stopped: bool = False       # the campaign's time ran out before no step made it smaller


def sizes(case: Case) -> dict[str, int]:
    """What the before/after line compares: requests, heads, query tokens, longest context, topk (and
    DeepSeek V4's extra width, where either case has an extra cache)."""
    found = {"batch": case.batch_size, "heads": case.heads, "drafts": case.s_q,
             "context": max(draw_seq_lens(case), default=0), "topk": case.topk}
    return {**found, "extra_topk": case.extra_topk} if case.extra_topk else found


def sizes_line(before: Case, after: Case) -> str:
    old, new = sizes(before), sizes(after)
    return ", ".join(f"{k} {old.get(k, 0)} -> {new.get(k, 0)}" for k in {**old, **new})


def shrink(case: Case, row: dict, rerun, deadline: float | None = None) -> Shrunk:
    """``case``, which failed with ``row``, as small as it gets while the same checks fail; past ``deadline``
    (``time.perf_counter``'s, the end of ``fuzz --time``) no further step is tried, and the case is as small
    as it got by then."""
    sig = signature(row)
    start = candidates.explicit(case)
    result = Shrunk(case, None, 0, sig)
    for seeds in ([0], range(1, SUITE_SEEDS)):          # other seeds only where the first does not do
        tries = [corpus.suite_case(start, sig, s) for s in seeds]
        rows = rerun(tries)
        result.reruns += len(tries)
        held = [i for i, r in enumerate(rows) if signature(r) == sig]
        if held:
            result.suite_seed, result.case, result.row = seeds[held[0]], tries[held[0]], rows[held[0]]
            break
    if result.case is None:
        return result
    calls, smaller_found = 1, True
    while smaller_found and calls < MAX_RERUNS:
        smaller_found = False
        for name, step in candidates.STEPS:
            if deadline is not None and time.perf_counter() >= deadline:
                result.stopped = True
                return result
            taken = _step(result, step, rerun)
            calls += taken is not None
            if taken:
                result.steps.append(name)
                smaller_found = True
            if calls >= MAX_RERUNS:
                break
    return result


def _step(result: Shrunk, step, rerun) -> bool | None:
    """One step on ``result``: True where a smaller case failing the same way was taken, False where none
    was, None where the step had no candidate (nothing ran)."""
    best = result.case
    offered = {}
    for c in step(best):
        c = corpus.suite_case(c, result.sig, result.suite_seed)
        if candidates.size_key(c) < candidates.size_key(best):
            offered.setdefault(c, None)
    if not offered:
        return None
    tried = list(offered)
    rows = rerun(tried)
    result.reruns += len(tried)
    holding = [(candidates.size_key(c), i) for i, (c, r) in enumerate(zip(tried, rows)) if signature(r) == result.sig]
    if not holding:
        return False
    i = min(holding)[1]
    result.case, result.row = tried[i], rows[i]
    return True

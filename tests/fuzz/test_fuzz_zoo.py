"""Fuzzing finds the whole mutant zoo: seed 1's draws (``draw.draw_case``, contexts up to 512, as
docs/fuzz.md's campaigns) run in this process through the runner (``runner.run_case``), each mutant's first
failure shrunk (``shrink.shrink``) to a case of at most 2 requests that fails the same way alone.

Most mutants fail within ``BUDGET`` draws.  Those that need a rarer draw say why, with the draw that first
shows them (``LATER``): that draw alone is run and must fail, so the claim is checked without running every
draw before it (page_id_16bit's 431 draws take over two minutes here).  The campaign itself, its workers,
corpus and rerun commands, is tests/fuzz/test_fuzz_command.py's.
"""

import pytest

from harness.backends.base import Feature
from harness.fuzz.draw import draw_case
from harness.fuzz.shrink import shrink
from harness.fuzz.signature import signature
from harness.fuzz.space import Bounds
from harness.mutants import MUTANTS, names
from harness.running.chunk import run_chunk
from harness.running.runner import precheck, run_case

SEED, BOUNDS, BUDGET = 1, Bounds(max_context=512), 64
NOT_RUN = ("pass", "unsupported")

# mutant -> (the first of seed 1's draws it fails on, why it takes that long)
LATER = {
    "page_id_16bit": (431, "it needs live page ids past 65,535: a pool spread over more than 2^16 pages"),
    "flush_subnormals": (183, "it needs an fp8 cache whose scale, set by a few large values, leaves the rest in "
                              "e4m3's subnormal range"),
    "nondeterministic": (157, "it needs a scenario that calls the kernel twice on the same inputs and compares "
                              "the bits (determinism, padding)"),
    "topk_length_ignored": (388, "it needs a V4 case whose per-row lengths cut valid entries short"),
    "extra_page_size_from_main": (96, "it needs a V4 case whose extra cache has its own page size and entries"),
    "softmax_per_cache": (96, "it needs a V4 case with an extra cache that holds entries"),
    "extra_cache_dropped": (96, "it needs a V4 case with an extra cache that holds entries"),
    "extra_topk_length_ignored": (857, "it needs an extra cache whose random per-row lengths cut its valid "
                                       "entries short (a 60-second campaign draws about 800)"),
}
# mutant -> why its first failure does not shrink: alone, the case passes
UNSHRINKABLE = {
    "stale_seqlens": "its failure is the seq lens of the call before: rerun alone, the case passes",
}


def draw(backend, index: int):
    return draw_case(SEED, index, BOUNDS, dense=backend.supports(Feature.DENSE),
                     sparse=backend.supports(Feature.SPARSE), refused=lambda c: backend.unsupported_reason(c, "cpu"))


def run_as(name: str):
    backend = MUTANTS[name]()
    return backend, lambda case: run_case(case, backend, f"mutant:{name}", "cpu")


def rerun_as(name: str):
    """Shrink candidates run as a campaign runs them: the ones the backend takes in one chunk (their oracles
    in one pass), the ones it refuses alone, rows in the candidates' order."""
    backend, run = run_as(name)

    def rerun(cases):
        taken = [i for i, c in enumerate(cases) if precheck(c, backend, "cpu") is None]
        rows = [None] * len(cases)
        chunk_rows = run_chunk([cases[i] for i in taken], backend, f"mutant:{name}", "cpu") if taken else []
        for i, row in zip(taken, chunk_rows):
            rows[i] = row
        return [row if row is not None else run(c) for row, c in zip(rows, cases)]
    return rerun


def first_failure(name: str, indices):
    backend, run = run_as(name)
    for i in indices:
        case = draw(backend, i)
        row = run(case)
        if row["status"] not in NOT_RUN:
            return i, case, row
    return None


@pytest.mark.parametrize("name", [n for n in names() if n not in LATER])
def test_a_mutant_is_found_early_and_shrunk_to_two_requests(name):
    found = first_failure(name, range(BUDGET))
    assert found is not None, f"{name}: no failure in seed {SEED}'s first {BUDGET} draws"
    _, case, row = found
    _, run = run_as(name)
    shrunk = shrink(case, row, rerun_as(name))
    if name in UNSHRINKABLE:
        assert shrunk.case is None, f"{name} shrank after all: drop it from UNSHRINKABLE"
        return
    assert shrunk.case is not None and shrunk.case.batch_size <= 2, (name, shrunk.case)
    assert signature(run(shrunk.case)) == signature(row)       # alone, it fails as the drawn case did


@pytest.mark.parametrize("name", sorted(LATER))
def test_a_mutant_that_needs_a_rarer_draw_fails_on_the_draw_that_has_it(name):
    index, why = LATER[name]
    backend, run = run_as(name)
    assert why and run(draw(backend, index))["status"] not in NOT_RUN, f"{name}: draw {index} passes"


def test_the_exceptions_name_shipped_mutants_and_say_why():
    assert set(LATER) | set(UNSHRINKABLE) <= set(MUTANTS) and not set(LATER) & set(UNSHRINKABLE)
    assert all(why for _, why in LATER.values()) and all(UNSHRINKABLE.values())

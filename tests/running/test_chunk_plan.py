"""How cases are grouped into chunks (``harness.running.chunk.plan``): every case once, short ones first, and no
chunk past its memory budget by the size estimate (``resources.chunk_bytes``)."""

from harness.planning.cases import load_suite
from harness.running import chunk, resources


def test_every_case_lands_once_in_chunks_within_their_budget():
    cases = load_suite("flashmla-upstream").cases
    budget = 3 << 30
    chunks = chunk.plan(cases, max_cases=16, max_bytes=budget)
    assert sorted(c.id for group in chunks for c in group) == sorted(c.id for c in cases)
    assert all(len(group) <= 16 for group in chunks)
    for group in chunks:     # a case too large for the budget alone still runs, alone
        assert len(group) == 1 or resources.chunk_bytes(group) <= budget
    assert any(len(group) == 1 and resources.chunk_bytes(group) > budget for group in chunks)
    # short cases first: once a chunk holds a long case, no later one holds only short ones
    first_long = next(i for i, group in enumerate(chunks) if chunk.shape_order(group[0])[0])
    assert all(chunk.shape_order(c)[0] for group in chunks[first_long:] for c in group)


def test_a_chunk_counts_what_its_cases_hold_and_the_largest_passing_need_once():
    cases = load_suite("flashmla-upstream").cases[:5]
    parts = [resources.estimated_bytes(c) for c in cases]
    assert resources.chunk_bytes(cases) == sum(p["held"] for p in parts) + max(p["passing"] for p in parts)
    assert resources.chunk_bytes(cases[:1]) >= resources.estimated_bytes(cases[0])["total"]
    assert resources.chunk_bytes([]) == 0


def test_a_backends_cases_are_spread_over_every_worker():
    """A few cases give each worker a chunk (``runner.spread``), a matrix keeps chunks of ``CHUNK_CASES``."""
    from harness.running.runner import spread
    few = load_suite("decode").cases[:23]
    chunks = chunk.plan(few, max_cases=min(chunk.CHUNK_CASES, spread(len(few), 8)))
    assert len(chunks) == 8 and sum(map(len, chunks)) == 23
    assert spread(2328, 8) > chunk.CHUNK_CASES
    assert (spread(5, 8), spread(0, 8), spread(10, 0)) == (1, 1, 10)

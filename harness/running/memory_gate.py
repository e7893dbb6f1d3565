"""The memory gate: which chunk may start in a worker beside what every worker of its GPU holds.

Pure: it reads estimates and counts of bytes, and decides; the event loop (``isolation``) keeps the
counts.  A worker's allocator keeps what its chunks allocated, to reuse without allocating again
(emptying it after each large chunk cost the upstream matrix 5-10% on the H200, docs/archive/gpu-runs-history.md).
So a worker holds its chunk in flight and the cache it reported after its last chunk, and a chunk is
admitted only beside everything every worker holds.  When no chunk fits, the idle workers are told to
empty their caches (``dispatch.hand_out``).  A chunk that fits nothing runs alone (its cases' fit was
checked before the run).  The gate is as good as ``cost``: the scale suite ran out of memory with
SGLang's kernels while their fp8 verify view went uncounted (docs/archive/gpu-runs-history.md, 2026-12-03).
"""

LOOKAHEAD = 64            # chunks scanned for one that fits, past a large one that must wait


def next_chunk(todo: list, cost, budget: int, others: int, own_cache: int = 0, alone: bool = False,
               allowed=None) -> int | None:
    """The index in ``todo`` of the next chunk to start in a worker whose allocator keeps ``own_cache``
    bytes while the other workers hold ``others`` bytes, or None to wait for memory.

    ``cost(chunk)``: a chunk's estimated peak bytes (None: no gate, the first allowed chunk starts);
    ``budget``: what all workers may hold at once; ``alone``: nothing else runs or keeps memory it could
    hand back, so the first allowed chunk starts whatever its size; ``allowed(chunk)``: whether this
    worker may take it (a rerun avoids the GPU it died on)."""
    for i, chunk in enumerate(todo if alone or cost is None else todo[:LOOKAHEAD]):
        if allowed is not None and not allowed(chunk):
            continue
        if cost is None or alone or others + own_cache + cost(chunk) <= budget:
            return i
    return None


class MemoryGate:
    """One GPU's gate: ``cost`` and ``budget`` for ``next_chunk``."""

    LOOKAHEAD = LOOKAHEAD

    def __init__(self, cost=None, budget: int = 0):
        self.cost, self.budget = cost, budget

    def pick(self, todo: list, others: int, own_cache: int = 0, alone: bool = False, allowed=None) -> int | None:
        """``next_chunk`` under this gate's cost and budget."""
        return next_chunk(todo, self.cost, self.budget, others, own_cache, alone, allowed)

    def holds(self, chunk) -> int:
        """What a started chunk is counted as holding: its estimate (0 without a gate)."""
        return self.cost(chunk) if self.cost else 0

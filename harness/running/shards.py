"""``run --shard K/N``: a deterministic, balanced slice of the cases, for CI jobs on several machines.

The cases are dealt largest first, each to the shard with the least estimated work so far (ties to
the lowest shard), the largest-processing-time rule: the shards' loads then differ by at most the
largest case's.  A case's work is its estimated peak memory (``resources.estimated_bytes``, which
grows with its cached tokens times their heads and width): a count would put the serving-scale
cases of one suite in whichever shard their index fell to.  The deal depends only on the cases (ids
break ties), so every machine computes the same split and each case lands in exactly one shard.
The first ``min(N, cases)`` shards hold a case each at least; with fewer cases than N the rest are
empty, and rows record ``shard_of`` (the cases over all shards) so ``report`` expects only those.
"""

import heapq
import re

from ..errors import InputError

_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse(text: str) -> tuple[int, int]:
    """``K/N`` as (K, N), 1 <= K <= N; anything else is bad input."""
    m = _SPEC.match(text or "")
    k, n = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    if not m or n < 1 or not 1 <= k <= n:
        raise InputError(f"--shard {text}: expected K/N with 1 <= K <= N, such as 2/4")
    return k, n


def work(case) -> int:
    """A case's estimated work, at least 1 (an empty case still costs a launch)."""
    # imported here: it brings torch, and ``report`` reads only labels from this module
    from . import resources
    return max(int(resources.estimated_bytes(case)["total"]), 1)


def deal(cases, n: int, weight=work) -> list[int]:
    """The shard (0-based) of each case, in the order given."""
    order = sorted(range(len(cases)), key=lambda i: (-weight(cases[i]), cases[i].id))
    loads = [(0, s) for s in range(n)]          # (load, shard): the heap pops the least, lowest shard first
    shard_of = [0] * len(cases)
    for i in order:
        load, s = heapq.heappop(loads)
        shard_of[i] = s
        heapq.heappush(loads, (load + weight(cases[i]), s))
    return shard_of


def take(cases, k: int, n: int, weight=work) -> list:
    """Shard ``k`` of ``n`` (1-based) of ``cases``, in their order."""
    return [c for c, s in zip(cases, deal(cases, n, weight)) if s == k - 1]


def label(k: int, n: int) -> str:
    return f"{k}/{n}"


def read_label(value) -> tuple[int, int] | None:
    """A row's ``shard`` as (K, N), or None when it has none or it is not one."""
    if not isinstance(value, str):
        return None
    m = _SPEC.match(value)
    if not m:
        return None
    k, n = int(m.group(1)), int(m.group(2))
    return (k, n) if 1 <= k <= n else None

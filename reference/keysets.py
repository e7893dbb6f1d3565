"""Key sets: which KV slots each query token may read, the oracle's unit of work.

A pool slot is ``page * page_size + offset``.  Request ``r`` has a list of ``counts[r]`` slots, and its
query token ``i`` reads the first ``visible[r, i]`` of them, in order (a slot listed twice is read
twice).  A mode is one way to fill this:

- dense paged decode and verify (``dense``): request r's list is the prefix of its block table row,
  slot ``t`` at ``block_table[r, t // page_size] * page_size + t % page_size``, and token i sees the
  causal count (bottom-right aligned) or, without ``causal``, all of them;
- a list per query token (``per_token``, e.g. sparse top-k, a window): each query token is a request of
  one token, its list the valid entries (``-1`` marks an invalid one) of its index row.

The list is kept as given: page by page (``block_table``, the dense form: the oracle gathers whole
pages) or slot by slot (``slots``).  Everything here is host-side integers (numpy).
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class KeySets:
    """Per request its slot list, and per query token how many of them it reads (module doc)."""

    counts: tuple                           # (b,) python ints: the length of each request's list
    visible: np.ndarray                     # (b, s_q) int64: the keys each query token reads, <= counts[r]
    page_size: int
    block_table: np.ndarray | None = None   # (b, width): the lists page by page (dense)
    slots: np.ndarray | None = None         # (b, width): the lists slot by slot

    @property
    def unit(self) -> int:
        """Slots per entry of ``table``: a page, or one slot."""
        return self.page_size if self.slots is None else 1

    @property
    def table(self) -> np.ndarray:
        """Each request's list, in entries of ``unit`` consecutive slots."""
        return self.block_table if self.slots is None else self.slots

    def slot_list(self, r: int) -> np.ndarray:
        """Request ``r``'s ``counts[r]`` slots, int64."""
        t = np.arange(self.counts[r])
        return self.table[r, t // self.unit].astype(np.int64) * self.unit + t % self.unit


def causal_counts(lengths, s_q: int, causal: bool) -> np.ndarray:
    """``(b, s_q)``: query token i of a request of n keys sees ``n - s_q + i + 1`` of them (at least 0)
    with ``causal``, else all n."""
    n = np.asarray(lengths, dtype=np.int64).reshape(-1, 1)
    seen = n - s_q + np.arange(s_q)[None, :] + 1 if causal else np.repeat(n, s_q, 1)
    return np.clip(seen, 0, None)


def dense(block_table: np.ndarray, lengths, page_size: int, s_q: int, causal: bool) -> KeySets:
    """Paged decode and verify: each request's first ``lengths[r]`` tokens through its block table row."""
    lengths = tuple(int(n) for n in lengths)
    return KeySets(lengths, causal_counts(lengths, s_q, causal), page_size, block_table=block_table)


def per_token(index_rows: np.ndarray, page_size: int) -> KeySets:
    """One request per index row ``(n, k)`` (a query token's slots, ``-1`` invalid), reading all its valid
    entries, kept in their order."""
    rows = np.asarray(index_rows, dtype=np.int64).reshape(len(index_rows), -1)
    valid = rows >= 0
    order = np.argsort(~valid, axis=1, kind="stable")            # valid entries first, in order
    slots = np.take_along_axis(rows, order, axis=1)
    counts = valid.sum(axis=1)
    return KeySets(tuple(int(n) for n in counts), counts.reshape(-1, 1), page_size, slots=slots)

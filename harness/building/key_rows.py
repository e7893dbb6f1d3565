"""Which drawn KV tokens each query row reads (``KeyRows``), for the value distributions that are set from a
row's scores (``values``): dense from the lengths and the radix sharing, sparse from the index rows.

A dense request's rows read its own tokens, in order, except on the pages it shares with the request that
wrote the shared prefix (``kv_store.first_writes``): there the pool holds that request's tokens.  A sparse
row reads the tokens written to the slots its index row lists.
"""

from dataclasses import dataclass

import torch

from ..planning.case import Case
from ..planning.case_lengths import shared_pages_for


@dataclass(frozen=True)
class KeyRows:
    """``tokens (rows, width)``: the index (into the drawn KV tokens) of each key a query row reads, -1 past
    its keys; ``row_request (rows,)``: the request of each query row; ``token_request (tokens,)``: the
    request (or, sparse, the group) each drawn token belongs to."""

    tokens: torch.Tensor
    row_request: torch.Tensor
    token_request: torch.Tensor

    @property
    def valid(self) -> torch.Tensor:
        return self.tokens >= 0


def dense_rows(case: Case, cache: list[int], device) -> KeyRows:
    """The dense case's rows, request by request and query token by query token (``(b, s_q)`` flattened),
    with the causal count: query token i of a request of ``n`` keys sees ``n - s_q + 1 + i`` of them."""
    s_q, b = case.s_q, len(cache)
    counts = torch.tensor(cache, dtype=torch.long, device=device)
    starts = torch.cumsum(counts, 0) - counts
    request = torch.arange(b, device=device).repeat_interleave(s_q)
    token = torch.arange(s_q, device=device).repeat(b)
    seen = counts[request] - s_q + 1 + token if case.causal else counts[request]
    position = torch.arange(max(cache, default=0) or 1, device=device)[None, :]
    tokens = starts[request][:, None] + position
    shared = shared_pages_for(case, cache)
    if any(shared):            # a shared page holds the tokens of the request that wrote the prefix
        owner = max(range(b), key=lambda r: shared[r])
        shared_tokens = torch.tensor(shared, dtype=torch.long, device=device)[request] * case.page_size
        from_owner = (position < shared_tokens[:, None]) & (request != owner)[:, None]
        tokens = torch.where(from_owner, starts[owner] + position, tokens)
    tokens = torch.where(position < seen[:, None], tokens, -1)
    return KeyRows(tokens, request, torch.arange(b, device=device).repeat_interleave(counts))


def sparse_rows(indices: torch.Tensor, slots: torch.Tensor, num_slots: int, requests: list[int]) -> KeyRows:
    """A sparse case's rows: ``indices (n, s_q, topk)`` listed slots, ``slots`` the slot each drawn token is
    written to (padding writes go to slot ``num_slots``), ``requests`` the request of each query row.  The
    tokens make one group: the writes are the listed ones, shared by requests."""
    device = indices.device
    token_at = torch.full((num_slots + 1,), -1, dtype=torch.long, device=device)
    token_at[slots.long()] = torch.arange(len(slots), device=device)
    listed = indices.reshape(-1, indices.shape[-1]).long()
    tokens = torch.where(listed >= 0, token_at[listed.clamp_min(0)], -1)
    return KeyRows(tokens, torch.tensor(requests, dtype=torch.long, device=device),
                   torch.zeros(len(slots), dtype=torch.long, device=device))

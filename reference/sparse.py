"""Sparse attention over key sets: the oracle of DeepSeek V3.2/V4 sparse MLA decode (DSA).

A query token's key set is a row of slot indices into a pool of key rows; ``-1`` marks an
invalid entry.  Each valid entry is one key: a slot listed twice is attended twice, as a kernel
that walks the index row does.  For query token t and head h::

    s_j   = scale * q[t, h] . K[idx[t, j]]            over the valid entries j
    lse   = log sum_j exp(s_j)                         (natural log, without the sink)
    out   = sum_j exp(s_j - lse) V[idx[t, j]]          V = the first d_v columns of K
    out  *= exp(lse) / (exp(lse) + exp(sink[h]))       only with a sink

A row with no valid entry has out 0 and LSE +inf (FlashMLA's convention: a backend that says
otherwise declares it).  A sink of +inf zeroes the row's out; -inf leaves it unchanged.  The
arithmetic is float64 on whatever device ``keys`` is on, a few query rows at a time.
"""

import math

import torch

ROW_BLOCK_ELEMENTS = 1 << 26        # gathered key elements per block of query rows (512 MiB of float64)


def sparse_attention(q: torch.Tensor, keys: torch.Tensor, indices: torch.Tensor, softmax_scale: float,
                     d_v: int, sink: torch.Tensor | None = None, trusted: bool = False
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """``q (n, h, d)``, ``keys (slots, d)`` (the pool as the kernel reads it, one row per slot),
    ``indices (n, topk)`` (slot or -1), ``sink (h,)`` or None.  ``trusted``: the caller built the
    indices in range itself, so their check (a wait for the device) is skipped.

    Returns out ``(n, h, d_v)`` and LSE ``(n, h)``, float64.
    """
    n, h, d = q.shape
    if indices.shape[0] != n:
        raise ValueError(f"{n} query rows but {indices.shape[0]} index rows")
    if keys.shape[1] != d:
        raise ValueError(f"q has {d} columns, the keys {keys.shape[1]}")
    if not trusted and bool(((indices < -1) | (indices >= keys.shape[0])).any()):
        raise ValueError(f"an index is neither -1 nor one of the {keys.shape[0]} key rows")
    if keys.shape[0] == 0:                 # every entry is -1: a zero row to gather, never used
        keys = keys.new_zeros(1, d)
    topk = indices.shape[1]
    out = torch.zeros(n, h, d_v, dtype=torch.float64, device=keys.device)
    lse = torch.full((n, h), math.inf, dtype=torch.float64, device=keys.device)
    rows = max(1, ROW_BLOCK_ELEMENTS // max(1, topk * d))
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        out[r0:r1], lse[r0:r1] = _attend(q[r0:r1], keys, indices[r0:r1], softmax_scale, d_v)
    if sink is not None:
        out = out * sink_factor(lse, sink.to(keys.device, torch.float64))[..., None]
    return out, lse


def weighted_value_magnitudes(q: torch.Tensor, keys: torch.Tensor, indices: torch.Tensor, softmax_scale: float,
                              d_v: int, sink: torch.Tensor | None = None) -> torch.Tensor:
    """``sum_j p_j |V[idx_j]|`` per query row, head and value column ``(n, h, d_v)``, float64, with ``p`` the
    softmax weights (the sink's factor applied, as to out): the scale of the error a kernel makes by rounding
    each weight before the P.V product (harness/tolerances.py's error model).  Arguments as for
    ``sparse_attention``; meant for a few rows at a time."""
    if keys.shape[0] == 0:
        keys = keys.new_zeros(1, q.shape[-1])
    magnitudes, lse = _attend(q, keys, indices, softmax_scale, d_v, absolute_values=True)
    if sink is not None:
        magnitudes = magnitudes * sink_factor(lse, sink.to(keys.device, torch.float64))[..., None]
    return magnitudes


def _attend(q, keys, indices, scale, d_v, absolute_values=False):
    idx = indices.to(keys.device, torch.long)
    valid = idx >= 0
    k = keys[torch.where(valid, idx, torch.zeros_like(idx))].double()           # (n, topk, d)
    k = torch.where(valid[..., None], k, torch.zeros_like(k))                   # poison never multiplied
    s = torch.einsum("nhd,nkd->nhk", q.to(keys.device, torch.float64), k) * scale
    s = torch.where(valid[:, None, :], s, torch.full_like(s, -math.inf))
    lse = torch.logsumexp(s, dim=-1)                                             # -inf for an empty row
    empty = torch.isneginf(lse)
    p = torch.exp(s - torch.where(empty, torch.zeros_like(lse), lse)[..., None])
    values = k[..., :d_v].abs() if absolute_values else k[..., :d_v]
    out = torch.einsum("nhk,nkd->nhd", p, values)
    return out, torch.where(empty, torch.full_like(lse, math.inf), lse)


def sink_factor(lse: torch.Tensor, sink: torch.Tensor) -> torch.Tensor:
    """``exp(lse) / (exp(lse) + exp(sink))`` per row and head, as ``sigmoid(lse - sink)`` (no overflow):
    0 for a sink of +inf, 1 for -inf; an empty row (LSE +inf) keeps its zero out."""
    factor = torch.sigmoid(lse - sink[None, :])
    return torch.where(torch.isposinf(lse), torch.ones_like(factor), factor)

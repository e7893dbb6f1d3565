"""Sparse attention over key sets: the oracle of DeepSeek V3.2/V4 sparse MLA decode (DSA).

A query token's key set is a row of slot indices into a pool of key rows; ``-1`` marks an
invalid entry.  Each valid entry is one key: a slot listed twice is attended twice, as a kernel
that walks the index row does.  For query token t and head h::

    s_j   = scale * q[t, h] . K[idx[t, j]]            over the valid entries j
    lse   = log sum_j exp(s_j)                         (natural log, without the sink)
    out   = sum_j exp(s_j - lse) V[idx[t, j]]          V = the first d_v columns of K
    out  *= exp(lse) / (exp(lse) + exp(sink[h]))       only with a sink

DeepSeek V4 reads two pools in one call, the main cache and an extra (compressed) one, each with its own
index rows and, per request, a length: an entry at or past its row's length is invalid whatever its index
says (``counted``).  Its key set is the valid entries of both, in one softmax: the same attention over the
two pools stacked into one, the extra indices moved past the main pool's slots (``joined``), which is how
FlashMLA's ``tests/ref.py`` computes it (it gathers both and concatenates them along the key axis).

A row with no valid entry has out 0 and LSE +inf (FlashMLA's convention: a backend that says
otherwise declares it).  A sink of +inf zeroes the row's out; -inf leaves it unchanged.  The
arithmetic is float64 on whatever device ``keys`` is on, a few query rows at a time (``attend_listed`` computes
in its keys' dtype: float32 keys are the noise floor's emulation, harness/judging/noise_floor.py).
"""

import math

import torch

ROW_BLOCK_ELEMENTS = 1 << 26        # gathered key elements per block of query rows (512 MiB of float64)


def sparse_attention(q: torch.Tensor, keys: torch.Tensor, indices: torch.Tensor, softmax_scale: float,
                     d_v: int, sink: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``q (n, h, d)``, ``keys (slots, d)`` (the pool as the kernel reads it, one row per slot),
    ``indices (n, topk)`` (slot or -1), ``sink (h,)`` or None.

    Returns out ``(n, h, d_v)`` and LSE ``(n, h)``, float64.
    """
    n, h, d = q.shape
    if indices.shape[0] != n:
        raise ValueError(f"{n} query rows but {indices.shape[0]} index rows")
    if keys.shape[1] != d:
        raise ValueError(f"q has {d} columns, the keys {keys.shape[1]}")
    if bool(((indices < -1) | (indices >= keys.shape[0])).any()):
        raise ValueError(f"an index is neither -1 nor one of the {keys.shape[0]} key rows")
    if keys.shape[0] == 0:                 # every entry is -1: a zero row to gather, never used
        keys = keys.new_zeros(1, d)
    out, lse = empty_answers(n, h, d_v, keys.device)
    for r0, r1 in row_blocks(n, indices.shape[1], d):
        listed, valid = _listed(keys, indices[r0:r1])
        out[r0:r1], lse[r0:r1] = attend_listed(q[r0:r1], listed, valid, softmax_scale, d_v)
    return with_sink(out, lse, sink)


def counted(indices: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """``indices (n, s_q, k)`` with every entry at or past its kernel row's ``lengths (n,)`` set to -1 (the
    indices themselves where ``lengths`` is None: all k count)."""
    if lengths is None:
        return indices
    at = torch.arange(indices.shape[-1], device=indices.device)
    past = at[None, None, :] >= lengths.to(indices.device).long()[:, None, None]
    return indices.masked_fill(past, -1)


def joined(keys: torch.Tensor, indices: torch.Tensor, extra_keys: torch.Tensor,
           extra_indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two pools as one: ``extra_keys`` stacked after ``keys``, and each query row's entries, its main ones
    then its extra ones moved past the main pool's slots (-1 stays -1).  ``indices (n, k)``,
    ``extra_indices (n, k2)``, both already ``counted``."""
    moved = torch.where(extra_indices >= 0, extra_indices + keys.shape[0], extra_indices)
    return torch.cat([keys, extra_keys]), torch.cat([indices, moved], dim=-1)


def row_blocks(n: int, topk: int, d: int) -> list[tuple[int, int]]:
    """Query rows ``[r0, r1)`` a block, so that a block's listed keys hold ``ROW_BLOCK_ELEMENTS`` or fewer."""
    rows = max(1, ROW_BLOCK_ELEMENTS // max(1, topk * d))
    return [(r0, min(n, r0 + rows)) for r0 in range(0, n, rows)]


def empty_answers(n: int, h: int, d_v: int, device, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """out zeros and LSE +inf: the answer of a row no block reaches (an empty row's)."""
    return (torch.zeros(n, h, d_v, dtype=dtype, device=device),
            torch.full((n, h), math.inf, dtype=dtype, device=device))


def with_sink(out: torch.Tensor, lse: torch.Tensor, sink: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """out scaled by the sink's factor (``sink_factor``); the LSE excludes the sink."""
    if sink is not None:
        out = out * sink_factor(lse, sink.to(out.device, out.dtype))[..., None]
    return out, lse


def weighted_value_magnitudes(q: torch.Tensor, keys: torch.Tensor, indices: torch.Tensor, softmax_scale: float,
                              d_v: int, sink: torch.Tensor | None = None) -> torch.Tensor:
    """``sum_j p_j |V[idx_j]|`` per query row, head and value column ``(n, h, d_v)``, float64, with ``p`` the
    softmax weights (the sink's factor applied, as to out): the scale of the error a kernel makes by rounding
    each weight before the P.V product (harness/judging/tolerances.py's error model).  Arguments as for
    ``sparse_attention``; meant for a few rows at a time."""
    if keys.shape[0] == 0:
        keys = keys.new_zeros(1, q.shape[-1])
    listed, valid = _listed(keys, indices)
    magnitudes, lse = attend_listed(q, listed, valid, softmax_scale, d_v, absolute_values=True)
    return with_sink(magnitudes, lse, sink)[0]


def _listed(keys: torch.Tensor, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each entry's key ``(n, topk, d)`` float64, zero where the entry is -1 (the poison of slot 0, read in its
    place, is never multiplied), and which entries are valid ``(n, topk)``."""
    idx = indices.to(keys.device, torch.long)
    valid = idx >= 0
    listed = keys[torch.where(valid, idx, torch.zeros_like(idx))].double()
    return listed.masked_fill_(~valid[..., None], 0.0), valid


def attend_listed(q: torch.Tensor, listed: torch.Tensor, valid: torch.Tensor, scale: float, d_v: int,
                  absolute_values: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention of ``q (n, h, d)`` over its listed keys ``listed (n, topk, d)`` (entry j of row t
    is the key ``idx[t, j]`` names; zero where ``valid (n, topk)`` is false), out ``(n, h, d_v)`` and LSE
    ``(n, h)``: ``softmax(scale * q.K) . V``, computed as ``exp(s - m) . V / l`` with ``m`` the row's
    largest score and ``l = sum exp(s - m)``, so that ``lse = m + log l``.  Each pass over the scores is in
    place: they are the largest tensor but the keys."""
    # scale * q.K, with -inf added where an entry is invalid (its key is zero): one product, no pass after it
    bias = torch.zeros(valid.shape, dtype=listed.dtype, device=listed.device).masked_fill_(~valid, -math.inf)
    s = torch.baddbmm(bias[:, None, :], q.to(listed.device, listed.dtype), listed.transpose(1, 2), alpha=scale)
    m = s.amax(dim=-1, keepdim=True)
    m.masked_fill_(torch.isneginf(m), 0.0)                                       # an empty row: s - m stays -inf
    p = s.sub_(m).exp_()
    total = p.sum(dim=-1)                                                        # 0 for an empty row
    values = listed[..., :d_v].abs() if absolute_values else listed[..., :d_v]
    out = torch.bmm(p, values).div_(total.clamp_min(torch.finfo(listed.dtype).tiny)[..., None])
    lse = (m.squeeze(-1) + total.log()).masked_fill_(total == 0, math.inf)
    return out, lse


def sink_factor(lse: torch.Tensor, sink: torch.Tensor) -> torch.Tensor:
    """``exp(lse) / (exp(lse) + exp(sink))`` per row and head, as ``sigmoid(lse - sink)`` (no overflow):
    0 for a sink of +inf, 1 for -inf; an empty row (LSE +inf) keeps its zero out."""
    factor = torch.sigmoid(lse - sink[None, :])
    return torch.where(torch.isposinf(lse), torch.ones_like(factor), factor)

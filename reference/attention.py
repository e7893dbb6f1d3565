"""Paged MLA decode and target-verify attention: the oracle.

MLA in its absorbed form is multi-query attention over one latent vector per
token: each cached token holds ``d_qk`` values (DeepSeek: 512 latent + 64 rope =
576), K is all of them and V is the first ``d_v`` (512).  The cache is a pool of
pages ``(num_pages, page_size, h_kv, d_qk)``; request ``r`` owns the pages listed
in ``block_table[r]`` and its first ``cache_seqlens[r]`` tokens are valid.

Query token ``i`` of ``s_q`` (decode: ``s_q == 1``; target-verify: the draft
tokens) sits at position ``cache_seqlens - s_q + i``.  With ``causal`` it sees
keys ``0 .. cache_seqlens - s_q + i`` (the mask is aligned to the bottom right);
without, it sees all ``cache_seqlens`` keys.  A row that sees no key gives out 0
and LSE +inf, FlashMLA's convention.  LSE is in natural log.

Everything is computed in float64.  fp8 inputs are read as ``value * descale``.
Two forms are given: ``mla_attention_loop`` (one request and one query token at
a time, the readable definition) and ``mla_attention_batched`` (padded and
vectorised, for speed on a GPU), tested equal to each other.
"""

import math

import torch

from .fp8 import dequantize_fp8, is_fp8


def _read(x: torch.Tensor, descale, dtype=torch.float64) -> torch.Tensor:
    if is_fp8(x.dtype):
        return dequantize_fp8(x, 1.0 if descale is None else float(descale), dtype)
    if descale is not None:
        raise ValueError("a descale was given for a non-fp8 tensor")
    return x.to(dtype)


def visible_key_count(cache_seqlen: int, s_q: int, i: int, causal: bool) -> int:
    """How many keys (a prefix of the sequence) query token ``i`` attends to."""
    if not causal:
        return max(cache_seqlen, 0)
    return max(0, min(cache_seqlen, cache_seqlen - s_q + i + 1))


def gather_tokens(kv_pool: torch.Tensor, block_table_row: torch.Tensor, n: int) -> torch.Tensor:
    """The first ``n`` cached tokens of one request, ``(n, h_kv, d_qk)``."""
    page_size = kv_pool.shape[1]
    t = torch.arange(n, device=kv_pool.device)
    pages = block_table_row.to(kv_pool.device).long()[t // page_size]
    return kv_pool[pages, t % page_size]


def mla_attention_loop(q, kv_pool, block_table, cache_seqlens, softmax_scale, d_v,
                       causal=True, descale_q=None, descale_k=None):
    """The definition, one request and one query token at a time.

    q ``(b, s_q, h_q, d_qk)``; returns out ``(b, s_q, h_q, d_v)`` and LSE
    ``(b, h_q, s_q)``, both float64.
    """
    b, s_q, h_q, d_qk = q.shape
    h_kv = kv_pool.shape[2]
    group = h_q // h_kv
    qf = _read(q, descale_q)
    out = torch.zeros(b, s_q, h_q, d_v, dtype=torch.float64, device=q.device)
    lse = torch.full((b, h_q, s_q), math.inf, dtype=torch.float64, device=q.device)
    for r in range(b):
        seqlen = int(cache_seqlens[r])
        keys = _read(gather_tokens(kv_pool, block_table[r], max(seqlen, 0)), descale_k).to(q.device)
        for i in range(s_q):
            n = visible_key_count(seqlen, s_q, i, causal)
            if n == 0:
                continue
            for h in range(h_q):
                k = keys[:n, h // group]                      # (n, d_qk)
                scores = (k @ qf[r, i, h]) * softmax_scale    # (n,)
                row_lse = torch.logsumexp(scores, dim=0)
                out[r, i, h] = torch.exp(scores - row_lse) @ k[:, :d_v]
                lse[r, h, i] = row_lse
    return out, lse


def mla_attention_batched(q, kv_pool, block_table, cache_seqlens, softmax_scale, d_v,
                          causal=True, descale_q=None, descale_k=None,
                          max_elements=2**28, compute_dtype=torch.float64):
    """The same function, padded and vectorised over requests, heads and tokens.

    Requests are taken shortest first in chunks, each padded to its longest request and
    sized so neither the score tensor nor the gathered keys exceed ``max_elements``
    entries: a long-tail batch of 512 pads little, and only the pages a chunk reads are
    gathered (on the pool's device) and widened to ``compute_dtype``.  Padded key slots
    are masked by selection (not by adding -inf), so poisoned (NaN) memory outside a
    request never leaks in.
    """
    b, s_q, h_q, d_qk = q.shape
    page_size, h_kv = kv_pool.shape[1], kv_pool.shape[2]
    group = h_q // h_kv
    device = q.device
    seqlens = cache_seqlens.to(device).long()
    out = torch.zeros(b, s_q, h_q, d_v, dtype=compute_dtype, device=device)
    lse = torch.full((b, h_q, s_q), math.inf, dtype=compute_dtype, device=device)
    if b == 0:
        return out, lse
    block_table = block_table.to(device)
    order = torch.argsort(seqlens, stable=True)
    sorted_lengths = seqlens[order].clamp(min=0).tolist()
    # both the scores (s_q * h_q per key) and the gathered keys (h_kv * d_qk per key) count
    per_key = max(s_q * h_q, h_kv * d_qk)
    i = torch.arange(s_q, device=device)
    start = 0
    while start < b:
        end = start + 1                     # sorted: the chunk's last request is its longest
        while end < b and (end + 1 - start) * max(sorted_lengths[end], 1) * per_key <= max_elements:
            end += 1
        rows = order[start:end]
        start = end
        L = seqlens[rows]                                              # (c,)
        n_keys = int(L.max().clamp(min=0))
        if n_keys == 0:
            continue
        t = torch.arange(n_keys, device=device)
        in_seq = t[None, :] < L[:, None]                               # (c, n)
        n_pages_used = (n_keys + page_size - 1) // page_size
        table = block_table[rows, :n_pages_used].long()
        page_ids = table[:, t // page_size]
        page_ids = torch.where(in_seq, page_ids, torch.zeros_like(page_ids))  # never index padding
        pool_device = kv_pool.device
        keys = kv_pool[page_ids.to(pool_device), (t % page_size).to(pool_device)]   # (c, n, h_kv, d)
        keys = _read(keys.to(device), descale_k, compute_dtype)
        keys.masked_fill_(~in_seq[:, :, None, None], 0.0)             # in place: the chunk's biggest tensor
        qf = _read(q[rows], descale_q, compute_dtype)                  # (c, s_q, h_q, d)
        qf = qf.view(-1, s_q, h_kv, group, d_qk)
        scores = torch.einsum("csgjd,cngd->cgjsn", qf, keys).flatten(1, 2) * softmax_scale  # (c, h_q, s_q, n)
        if causal:
            limit = (L[:, None] - s_q + i[None, :] + 1).clamp(min=0)   # (c, s_q)
        else:
            limit = L[:, None].expand(-1, s_q).clamp(min=0)
        visible = t[None, None, :] < limit[:, :, None]                 # (c, s_q, n)
        visible = visible[:, None, :, :]                               # (c, 1, s_q, n)
        scores.masked_fill_(~visible, -math.inf)
        row_lse = torch.logsumexp(scores, dim=-1)                      # (c, h_q, s_q)
        empty = torch.isneginf(row_lse)
        p = scores.sub_(torch.where(empty, torch.zeros_like(row_lse), row_lse)[..., None]).exp_()
        values = keys[..., :d_v]                                       # (c, n, h_kv, d_v)
        p = p.view(-1, h_kv, group, s_q, n_keys)
        o = torch.einsum("cgjsn,cngd->csgjd", p, values).flatten(2, 3)  # (c, s_q, h_q, d_v)
        out[rows] = o
        lse[rows] = torch.where(empty, torch.full_like(row_lse, math.inf), row_lse)
    return out, lse

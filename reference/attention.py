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


def _plan_chunks(lengths: list[int], per_key: int, max_elements: int) -> list[tuple[int, int]]:
    """``(start, end)`` ranges of requests taken shortest first, each small enough to pad to its longest."""
    sorted_lengths = sorted(max(n, 0) for n in lengths)
    chunks, start = [], 0
    while start < len(sorted_lengths):
        end = start + 1                     # sorted: the chunk's last request is its longest
        while end < len(sorted_lengths) and \
                (end + 1 - start) * max(sorted_lengths[end], 1) * per_key <= max_elements:
            end += 1
        chunks.append((start, end))
        start = end
    return chunks


def mla_attention_batched(q, kv_pool, block_table, cache_seqlens, softmax_scale, d_v,
                          causal=True, descale_q=None, descale_k=None,
                          max_elements=2**28, compute_dtype=torch.float64, host_lengths=None):
    """The same function, padded and vectorised over requests, heads and tokens.

    Requests are taken shortest first in chunks, each padded to its longest request and
    sized so neither the score tensor nor the gathered keys exceed ``max_elements``
    entries: a long-tail batch of 512 pads little, and only the pages a chunk reads are
    gathered (on the pool's device) and widened to ``compute_dtype``.  Padded key slots
    never read memory outside the requests (they read a real token, with weight 0), so
    poisoned (NaN) memory never leaks in.  ``host_lengths``: ``cache_seqlens`` as ints,
    when the caller has them, so planning the chunks needs no wait on the device.
    """
    b, s_q, h_q, d_qk = q.shape
    h_kv = kv_pool.shape[2]
    device = q.device
    seqlens = cache_seqlens.to(device).long()
    lengths = cache_seqlens.tolist() if host_lengths is None else list(host_lengths)
    # both the scores (s_q * h_q per key) and the gathered keys (h_kv * d_qk per key) count
    chunks = _plan_chunks(lengths, max(s_q * h_q, h_kv * d_qk), max_elements)
    if len(chunks) == 1:          # one chunk (the usual case): every request, in its own order
        longest = max(range(b), key=lambda r: lengths[r])
        return _attend(q, kv_pool, block_table, seqlens, longest, max(lengths[longest], 0), softmax_scale, d_v,
                       causal, descale_q, descale_k, compute_dtype)
    out = torch.zeros(b, s_q, h_q, d_v, dtype=compute_dtype, device=device)
    lse = torch.full((b, h_q, s_q), math.inf, dtype=compute_dtype, device=device)
    order = torch.argsort(seqlens, stable=True)       # the same order _plan_chunks sorted the host's copy in
    sorted_lengths = sorted(max(n, 0) for n in lengths)
    for start, end in chunks:
        rows = order[start:end]       # shortest first: the chunk's last request is its longest
        out[rows], lse[rows] = _attend(q[rows], kv_pool, block_table[rows], seqlens[rows], end - start - 1,
                                       sorted_lengths[end - 1], softmax_scale, d_v, causal, descale_q, descale_k,
                                       compute_dtype)
    return out, lse


def _attend(q, kv_pool, block_table, L, longest, n_keys, softmax_scale, d_v, causal, descale_q, descale_k,
            compute_dtype):
    """Attention for requests of lengths ``L`` (a device tensor); request ``longest`` is ``n_keys`` long.

    The float64 tensors are the cost, so each is made once and touched as few times as it can
    be: keys are gathered head-major, ``(c, h_kv, n, d)``, so both matmuls read them in place;
    padded key slots read a real token (the first of the longest request) instead of being zeroed
    afterwards, since their scores are masked and their weight is exactly 0; and the softmax's
    normalisation is applied to the (small) output rather than to the weights.
    """
    c, s_q, h_q, d_qk = q.shape
    h_kv = kv_pool.shape[2]
    group = h_q // h_kv
    page_size = kv_pool.shape[1]
    device = q.device
    if c == 0 or n_keys == 0:
        return (torch.zeros(c, s_q, h_q, d_v, dtype=compute_dtype, device=device),
                torch.full((c, h_q, s_q), math.inf, dtype=compute_dtype, device=device))
    t = torch.arange(n_keys, device=device)
    in_seq = t[None, :] < L[:, None]                                   # (c, n)
    n_pages_used = (n_keys + page_size - 1) // page_size
    page_ids = block_table[:, :n_pages_used].long()[:, t // page_size]
    slots = page_ids * page_size + t % page_size
    # never index padding: it reads the longest request's first token, a real one (poison cannot leak)
    slots = torch.where(in_seq, slots, slots[longest, 0])
    heads = torch.arange(h_kv, device=device)
    pool_device = kv_pool.device
    flat = kv_pool.flatten(0, 1)                                        # (slots, h_kv, d)
    keys = flat[slots.to(pool_device)[:, None, :], heads.to(pool_device)[None, :, None]]   # (c, h_kv, n, d)
    keys = _read(keys.to(device), descale_k, compute_dtype)
    # the softmax scale goes on q (small) rather than on the scores (the biggest tensor)
    qf = _read(q, descale_q, compute_dtype) * softmax_scale
    qf = qf.view(c, s_q, h_kv, group, d_qk).permute(0, 2, 3, 1, 4).reshape(c, h_kv, group * s_q, d_qk)
    scores = torch.matmul(qf, keys.transpose(-1, -2)).view(c, h_kv, group, s_q, n_keys)
    i = torch.arange(s_q, device=device)
    if causal:
        limit = (L[:, None] - s_q + i[None, :] + 1).clamp(min=0)       # (c, s_q)
    else:
        limit = L[:, None].expand(-1, s_q).clamp(min=0)
    visible = t[None, None, :] < limit[:, :, None]                     # (c, s_q, n)
    scores.masked_fill_(~visible[:, None, None], -math.inf)
    top = scores.amax(dim=-1, keepdim=True)                            # (c, h_kv, g, s_q, 1)
    empty = torch.isneginf(top)                                        # a row that sees no key
    weights = scores.sub_(torch.where(empty, 0.0, top)).exp_()
    total = weights.sum(dim=-1, keepdim=True)
    o = torch.matmul(weights.view(c, h_kv, group * s_q, n_keys), keys[..., :d_v])
    o = (o.view(c, h_kv, group, s_q, d_v) / total).masked_fill_(empty, 0.0)
    lse = torch.where(empty, math.inf, total.log() + top)
    return (o.permute(0, 3, 1, 2, 4).reshape(c, s_q, h_q, d_v),
            lse.view(c, h_q, s_q))

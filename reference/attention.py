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

The attention itself is over key sets (``keysets.py``): what each query token reads; the paged
form above is one way to fill them (``keysets.dense``), and ``key_set_attention_loop`` is the definition
for any.  Everything is computed in float64.  fp8 inputs are read as ``value * descale``.
Two forms are given: ``mla_attention_loop`` (one request and one query token at
a time, the readable definition) and ``mla_attention_batched`` (padded and
vectorised, for speed on a GPU; many calls at once: ``batched.mla_attention_many``),
tested equal to each other.
"""

import math

import torch

from . import keysets
from .batched import MAX_BLOCK_ELEMENTS, Problem, mla_attention_many, read_as
from .keysets import KeySets


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
    """The definition on the paged form, one request and one query token at a time.

    q ``(b, s_q, h_q, d_qk)``; returns out ``(b, s_q, h_q, d_v)`` and LSE
    ``(b, h_q, s_q)``, both float64.
    """
    keys = keysets.dense(block_table.cpu().numpy(), cache_seqlens.tolist(), kv_pool.shape[1], q.shape[1], causal)
    return key_set_attention_loop(q, kv_pool, keys, softmax_scale, d_v, descale_q, descale_k)


def key_set_attention_loop(q, kv_pool, keys: KeySets, softmax_scale, d_v, descale_q=None, descale_k=None):
    """The definition over key sets: query token i of request r attends to the first ``keys.visible[r, i]``
    slots of its list.  Shapes as ``mla_attention_loop``."""
    b, s_q, h_q, d_qk = q.shape
    h_kv = kv_pool.shape[2]
    group = h_q // h_kv
    qf = read_as(q, descale_q, torch.float64)
    out = torch.zeros(b, s_q, h_q, d_v, dtype=torch.float64, device=q.device)
    lse = torch.full((b, h_q, s_q), math.inf, dtype=torch.float64, device=q.device)
    pool_slots = kv_pool.reshape(-1, h_kv, d_qk)
    for r in range(b):
        slots = torch.from_numpy(keys.slot_list(r)).to(kv_pool.device)
        tokens = read_as(pool_slots[slots], descale_k, torch.float64).to(q.device)
        for i in range(s_q):
            n = int(keys.visible[r, i])
            if n == 0:
                continue
            for h in range(h_q):
                k = tokens[:n, h // group]                    # (n, d_qk)
                scores = (k @ qf[r, i, h]) * softmax_scale    # (n,)
                row_lse = torch.logsumexp(scores, dim=0)
                out[r, i, h] = torch.exp(scores - row_lse) @ k[:, :d_v]
                lse[r, h, i] = row_lse
    return out, lse


def mla_attention_batched(q, kv_pool, block_table, cache_seqlens, softmax_scale, d_v,
                          causal=True, descale_q=None, descale_k=None,
                          max_elements=MAX_BLOCK_ELEMENTS, compute_dtype=torch.float64):
    """The same function, vectorised: ``mla_attention_many`` on this one call.

    Requests are computed in blocks of one shape (``batched.py``): on the CPU one request each, on a
    GPU padded so no block's largest float64 tensor passes ``max_elements`` entries (beyond what one
    request needs); padded key slots read a real token with weight 0, so poisoned (NaN) memory never
    leaks in.
    """
    keys = keysets.dense(block_table.cpu().numpy(), cache_seqlens.tolist(), kv_pool.shape[1], q.shape[1], causal)
    problem = Problem(q, kv_pool, keys, softmax_scale, d_v, descale_scalar(descale_q), descale_scalar(descale_k))
    return mla_attention_many([problem], compute_dtype, max_elements)[0]


def descale_scalar(descale) -> float | None:
    """A one-element descale tensor (or a number) as a float; None stays None."""
    return None if descale is None else float(descale)

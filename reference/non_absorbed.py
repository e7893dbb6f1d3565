"""MLA in its original, non-absorbed form: an independent check of the absorbed one.

DeepSeek's MLA caches per token a latent ``c`` (``kv_lora_rank`` wide) and a
rope key ``k_pe`` (``rope`` wide).  Head ``h`` reconstructs its key and value
with up-projections ``W_UK[h]`` (lora -> nope) and ``W_UV[h]`` (lora -> v):

    k_h = [c @ W_UK[h], k_pe]        v_h = c @ W_UV[h]

and attends with its query ``[q_nope_h, q_pe_h]``.  The serving kernels "absorb"
the up-projections into the query instead: ``q_latent_h = W_UK[h] @ q_nope_h``,
attend over the cached ``[c, k_pe]`` directly with V = c, then apply ``W_UV[h]``
to the output.  Both give the same attention weights, hence the same LSE and,
after ``W_UV``, the same output.  This module computes the non-absorbed side
plainly, one head at a time, in float64, and the helpers that map its inputs to
the absorbed ones.
"""

import math

import torch


def attention_non_absorbed(q_nope, q_pe, latent, k_pe, w_uk, w_uv, softmax_scale, s_q_offset=None):
    """Per-head attention with explicit K and V for one request.

    q_nope ``(s_q, h, nope)``, q_pe ``(s_q, h, rope)``, latent ``(n, lora)``,
    k_pe ``(n, rope)``, w_uk ``(h, lora, nope)``, w_uv ``(h, lora, v)``.
    Query token ``i`` sees keys ``0 .. n - s_q + i`` (bottom-right causal).
    Returns out ``(s_q, h, v)`` and LSE ``(h, s_q)`` in float64.
    """
    s_q, h, _ = q_nope.shape
    n = latent.shape[0]
    f = torch.float64
    out = torch.zeros(s_q, h, w_uv.shape[-1], dtype=f)
    lse = torch.full((h, s_q), math.inf, dtype=f)
    for head in range(h):
        k = torch.cat([latent.to(f) @ w_uk[head].to(f), k_pe.to(f)], dim=-1)   # (n, nope + rope)
        v = latent.to(f) @ w_uv[head].to(f)                                    # (n, v)
        for i in range(s_q):
            visible = n - s_q + i + 1
            if visible <= 0:
                continue
            qh = torch.cat([q_nope[i, head].to(f), q_pe[i, head].to(f)])
            scores = (k[:visible] @ qh) * softmax_scale
            row_lse = torch.logsumexp(scores, 0)
            out[i, head] = torch.exp(scores - row_lse) @ v[:visible]
            lse[head, i] = row_lse
    return out, lse


def absorb_query(q_nope, q_pe, w_uk):
    """The absorbed query ``[W_UK[h] @ q_nope_h, q_pe_h]``, ``(s_q, h, lora + rope)``."""
    f = torch.float64
    q_latent = torch.einsum("shn,hln->shl", q_nope.to(f), w_uk.to(f))
    return torch.cat([q_latent, q_pe.to(f)], dim=-1)


def unabsorb_output(out_latent, w_uv):
    """Apply ``W_UV`` to the absorbed output: ``(..., h, lora) -> (..., h, v)``."""
    return torch.einsum("...hl,hlv->...hv", out_latent.to(torch.float64), w_uv.to(torch.float64))

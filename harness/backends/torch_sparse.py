"""The torch backend's sparse MLA path: a float32 gather per query token, written apart from the oracle.

It decodes the records from their bytes itself (not through ``sparse_cache``'s reader), gathers each
query row's listed slots, masks the -1 entries, and computes the softmax in float32, a block of rows at a
time; out is bf16, as the engine's.  It runs on the CPU, so CPU CI runs the whole sparse scenario, and
it is the base of the sparse mutants: each step is a method a mutant may override to plant one bug.
"""

import math

import torch

from .sparse_base import SparseCapabilities

GATHER_ELEMENTS = 1 << 24          # gathered key values per block of query rows (64 MiB of float32)


class TorchSparse:
    """Mixed into ``TorchBackend``: ``run_sparse`` and its steps."""

    sparse_capabilities = SparseCapabilities(kv_formats=("v32", "v4"), kv_dequant="exact",
                                             engine="mla-verify torch (float32 gather per query token)")

    # ---- steps a mutant may override ------------------------------------------------
    def sparse_records(self, inputs, slots: torch.Tensor):
        """The listed slots' parts, from the pool's bytes: e4m3 values and scales as float32
        ``(m, d_nope)``, ``(m, tiles)``, and the rope values ``(m, d_rope)``."""
        fmt, P = inputs.fmt, inputs.page_size
        pages = inputs.kv_pool.view(inputs.kv_pool.shape[0], -1)
        page, offset = slots // P, slots % P
        if fmt.name == "v32":                                         # [512 e4m3][4 float32][64 bf16]
            rec = pages.view(-1, fmt.bytes_per_token)[slots]
            scales = rec[:, 512:528].contiguous().view(torch.float32)
            rope = rec[:, 528:656]
        else:                                                         # rows [448 e4m3][64 bf16], then scales
            rec = pages[page[:, None], offset[:, None] * 576 + torch.arange(576, device=slots.device)]
            scale_at = P * 576 + offset[:, None] * 8 + torch.arange(fmt.tiles, device=slots.device)
            scales = pages[page[:, None], scale_at].contiguous().view(torch.float8_e8m0fnu).float()
            rope = rec[:, 448:576]
        values = rec[:, :fmt.d_nope].contiguous().view(torch.float8_e4m3fn).float()
        return values, scales, rope.contiguous().view(torch.bfloat16).float()

    def sparse_keys(self, inputs, slots: torch.Tensor) -> torch.Tensor:
        """``(m, d_qk)`` float32 keys: each tile's values times its scale, then the rope values."""
        values, scales, rope = self.sparse_records(inputs, slots)
        m, tile = values.shape[0], inputs.fmt.tile
        nope = (values.view(m, -1, tile) * scales[..., None]).view(m, -1)
        return torch.cat([nope, rope], dim=1)

    def sparse_valid(self, indices: torch.Tensor) -> torch.Tensor:
        """Which entries are keys: all but -1 (FlashMLA's rule)."""
        return indices != -1

    def sparse_attend(self, q, keys, valid, scale, d_v):
        """``(rows, heads, d_v)`` out and ``(rows, heads)`` LSE of rows whose keys are gathered
        ``(rows, topk, d)``; a row with no key gets out 0 and LSE +inf."""
        s = torch.einsum("nhd,nkd->nhk", q, keys) * scale
        s = torch.where(valid[:, None, :], s, torch.full_like(s, -math.inf))
        lse = torch.logsumexp(s, dim=-1)
        empty = torch.isneginf(lse)
        p = torch.exp(s - torch.where(empty, torch.zeros_like(lse), lse)[..., None])
        out = torch.einsum("nhk,nkd->nhd", p, keys[..., :d_v])
        return out, torch.where(empty, torch.full_like(lse, math.inf), lse)

    def sparse_sink(self, out, lse, sink):
        """Scale out by ``exp(lse) / (exp(lse) + exp(sink))``; the LSE keeps no sink."""
        if sink is None:
            return out
        factor = 1.0 / (1.0 + torch.exp(sink.float()[None, :] - lse))    # sink +inf: 0; -inf: 1
        return out * torch.where(torch.isposinf(lse), torch.ones_like(factor), factor)[..., None]

    # ---- the kernel --------------------------------------------------------------------
    def run_sparse(self, inputs):
        n, s_q, heads, d = inputs.q.shape
        q = inputs.q.reshape(n * s_q, heads, d).float()
        indices = inputs.indices.reshape(n * s_q, -1).long()
        out = torch.zeros(n * s_q, heads, inputs.d_v, device=q.device)
        lse = torch.full((n * s_q, heads), math.inf, device=q.device)
        rows = max(1, GATHER_ELEMENTS // max(1, indices.shape[1] * d))
        for r0 in range(0, n * s_q, rows):
            idx = indices[r0:r0 + rows]
            valid = self.sparse_valid(idx)
            slots = torch.where(valid, idx, torch.zeros_like(idx))
            keys = self.sparse_keys(inputs, slots.reshape(-1)).view(*idx.shape, d)
            keys = torch.where(valid[..., None], keys, torch.zeros_like(keys))   # poison never multiplied
            o, l_ = self.sparse_attend(q[r0:r0 + rows], keys, valid, inputs.softmax_scale, inputs.d_v)
            out[r0:r0 + rows], lse[r0:r0 + rows] = self.sparse_sink(o, l_, inputs.attn_sink), l_
        result = out.view(n, s_q, heads, inputs.d_v)
        lse = lse.view(n, s_q, heads).transpose(1, 2)
        if inputs.out is not None and inputs.out.shape == result.shape:
            return inputs.out.copy_(result), lse
        return result.to(torch.bfloat16), lse

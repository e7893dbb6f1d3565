"""The torch backend's sparse MLA path: a float32 gather per query token, written apart from the oracle.

It decodes the records from their bytes itself (not through ``sparse_cache``'s reader), gathers each
query row's listed slots, masks the -1 entries, and computes the softmax in float32, a block of rows at a
time; out is bf16, as the engine's.  It runs on the CPU, so CPU CI runs the whole sparse scenario, and
it is the base of the sparse mutants: each step is a method a mutant may override to plant one bug.
"""

import math

import torch

from .capabilities import SparseSupport

GATHER_ELEMENTS = 1 << 24          # gathered key values per block of query rows (64 MiB of float32)


# The torch backend's sparse section (``Capabilities.sparse``): every record format, as it reads each part
# where the format's data puts it
SPARSE_SUPPORT = SparseSupport(kv_formats=None, kv_dequant="exact",
                               engine="mla-verify torch (float32 gather per query token)")


class TorchSparse:
    """Mixed into ``TorchBackend``: ``run_sparse`` and its steps (declared by ``SPARSE_SUPPORT``)."""

    # ---- steps a mutant may override ------------------------------------------------
    def sparse_records(self, inputs, slots: torch.Tensor):
        """The listed slots' parts, from the pool's bytes where the format puts them: the quantized values
        and scales as float32 ``(m, d_nope)``, ``(m, tiles)``, and the rope values ``(m, d_rope)``."""
        fmt, P = inputs.fmt, inputs.page_size
        pages = inputs.kv_pool.view(inputs.kv_pool.shape[0], -1)
        at = slots // P, slots % P
        rows = pages[:, :P * fmt.row_bytes].unflatten(1, (P, fmt.row_bytes))[at]          # (m, row_bytes)
        scales_in = rows          # a slot's scales: in its row, or in its part of the block after the rows
        if fmt.scale_block:
            scales_in = pages[:, P * fmt.row_bytes:P * fmt.bytes_per_token].unflatten(1, (P, fmt.scale_block))[at]
        return (_decoded(rows, fmt.values_at, fmt.d_nope, fmt.value_dtype),
                _decoded(scales_in, fmt.scales_at, fmt.tiles, fmt.scale_dtype),
                _decoded(rows, fmt.rope_at, fmt.d_rope, fmt.rope_dtype))

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


def _decoded(held: torch.Tensor, start: int, count: int, dtype: str) -> torch.Tensor:
    """``count`` elements of ``dtype`` (a torch dtype's name) from byte ``start`` of each row of ``held``
    ``(m, bytes)`` uint8, as float32 ``(m, count)``."""
    dtype = getattr(torch, dtype)
    return held[:, start:start + count * dtype.itemsize].contiguous().view(dtype).float()

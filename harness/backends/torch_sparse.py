"""The torch backend's sparse MLA path: a float32 gather per query token, written apart from the oracle.

It decodes the records from their bytes itself (not through ``sparse_cache``'s reader), gathers each
query row's listed slots, masks the -1 entries, and computes the softmax in float32, a block of rows at a
time; out is bf16, as the engine's.  It runs on the CPU, so CPU CI runs the whole sparse scenario, and
it is the base of the sparse mutants: each step is a method a mutant may override to plant one bug.
DeepSeek V4's extra cache is a second scope read by the same steps, its keys joined to the main cache's
in one softmax; each scope's entries at or past its row's length are invalid.
"""

import math
from dataclasses import dataclass

import torch

from ..planning.record_formats import RecordFormat
from .capabilities import SparseSupport

GATHER_ELEMENTS = 1 << 24          # gathered key values per block of query rows (64 MiB of float32)


# The torch backend's sparse section (``Capabilities.sparse``): every record format, as it reads each part
# where the format's data puts it
SPARSE_SUPPORT = SparseSupport(kv_formats=None, kv_dequant="exact", extra_pairs=None, length_formats=None,
                               engine="mla-verify torch (float32 gather per query token)")


@dataclass(frozen=True)
class ScopeRead:
    """One cache as the torch path reads it: its records and how to read them (named as ``SparseInputs``
    names them, so a record step reads either cache), its indices ``(n, s_q, k)`` and lengths ``(n,)``."""

    kv_pool: torch.Tensor
    fmt: RecordFormat
    page_size: int
    indices: torch.Tensor
    lengths: torch.Tensor | None


class TorchSparse:
    """Mixed into ``TorchBackend``: ``run_sparse`` and its steps (declared by ``SPARSE_SUPPORT``)."""

    # ---- steps a mutant may override ------------------------------------------------
    def sparse_scopes(self, inputs) -> list[ScopeRead]:
        """The caches a row reads, in one softmax: the main one and, with DeepSeek V4's, the extra one."""
        scopes = [ScopeRead(inputs.kv_pool, inputs.fmt, inputs.page_size, inputs.indices,
                            self.sparse_main_length(inputs))]
        if inputs.extra_kv_pool is not None:
            scopes.append(ScopeRead(inputs.extra_kv_pool, inputs.extra_fmt, inputs.extra_page_size,
                                    inputs.extra_indices, self.sparse_extra_length(inputs)))
        return scopes

    def sparse_main_length(self, inputs):
        return inputs.topk_length

    def sparse_extra_length(self, inputs):
        return inputs.extra_topk_length

    def sparse_records(self, inputs, slots: torch.Tensor):
        """The listed slots' parts, from the pool's bytes where the format puts them: the quantized values
        and scales as float32 ``(m, d_nope)``, ``(m, tiles)``, and the rope values ``(m, d_rope)``.
        ``inputs``: anything with ``kv_pool``, ``fmt`` and ``page_size`` (the inputs, or a ``ScopeRead``)."""
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
        out = torch.einsum("nhk,nkd->nhd", self.weights(p), keys[..., :d_v])
        return out, torch.where(empty, torch.full_like(lse, math.inf), lse)

    def sparse_sink(self, out, lse, sink):
        """Scale out by ``exp(lse) / (exp(lse) + exp(sink))``; the LSE keeps no sink."""
        if sink is None:
            return out
        factor = 1.0 / (1.0 + torch.exp(sink.float()[None, :] - lse))    # sink +inf: 0; -inf: 1
        return out * torch.where(torch.isposinf(lse), torch.ones_like(factor), factor)[..., None]

    def sparse_attend_scopes(self, q, parts, scale, d_v):
        """One softmax over every scope's keys: ``parts`` is ``(keys (rows, k, d), valid (rows, k))`` per
        scope, joined along the key axis."""
        keys = torch.cat([k for k, _ in parts], dim=1)
        return self.sparse_attend(q, keys, torch.cat([v for _, v in parts], dim=1), scale, d_v)

    # ---- the kernel --------------------------------------------------------------------
    def run_sparse(self, inputs):
        n, s_q, heads, d = inputs.q.shape
        q = inputs.q.reshape(n * s_q, heads, d).float()
        scopes = [(scope, scope.indices.reshape(n * s_q, -1).long(), _row_lengths(scope.lengths, s_q))
                  for scope in self.sparse_scopes(inputs)]
        out = torch.zeros(n * s_q, heads, inputs.d_v, device=q.device)
        lse = torch.full((n * s_q, heads), math.inf, device=q.device)
        width = sum(indices.shape[1] for _, indices, _ in scopes)
        rows = max(1, GATHER_ELEMENTS // max(1, width * d))
        for r0 in range(0, n * s_q, rows):
            parts = [self._gathered(scope, indices[r0:r0 + rows], None if lengths is None else lengths[r0:r0 + rows],
                                    d) for scope, indices, lengths in scopes]
            o, l_ = self.sparse_attend_scopes(q[r0:r0 + rows], parts, inputs.softmax_scale, inputs.d_v)
            out[r0:r0 + rows], lse[r0:r0 + rows] = self.sparse_sink(o, l_, inputs.attn_sink), l_
        result = out.view(n, s_q, heads, inputs.d_v)
        lse = lse.view(n, s_q, heads).transpose(1, 2)
        if inputs.out is not None and inputs.out.shape == result.shape:
            return inputs.out.copy_(result), lse
        return result.to(torch.bfloat16), lse

    def _gathered(self, scope: ScopeRead, idx: torch.Tensor, lengths: torch.Tensor | None, d: int):
        """A block's keys of one scope ``(rows, k, d)`` (zero where invalid: poison never multiplied) and
        which entries are valid: not -1, and before the row's length."""
        valid = self.sparse_valid(idx)
        if lengths is not None:
            valid = valid & (torch.arange(idx.shape[1], device=idx.device)[None, :] < lengths[:, None])
        slots = torch.where(valid, idx, torch.zeros_like(idx))
        keys = self.sparse_keys(scope, slots.reshape(-1)).view(*idx.shape, d)
        return torch.where(valid[..., None], keys, torch.zeros_like(keys)), valid


def _row_lengths(lengths: torch.Tensor | None, s_q: int) -> torch.Tensor | None:
    """Per kernel row lengths ``(n,)`` as one per flattened query row ``(n * s_q,)``."""
    return None if lengths is None else lengths.long().repeat_interleave(s_q)


def _decoded(held: torch.Tensor, start: int, count: int, dtype: str) -> torch.Tensor:
    """``count`` elements of ``dtype`` (a torch dtype's name) from byte ``start`` of each row of ``held``
    ``(m, bytes)`` uint8, as float32 ``(m, count)``."""
    dtype = getattr(torch, dtype)
    return held[:, start:start + count * dtype.itemsize].contiguous().view(dtype).float()

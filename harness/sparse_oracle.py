"""The float64 oracle of a sparse case: each query token's key set, read from the pool's records.

Only the slots some index lists are read (a serving-size pool would not fit in float64), through the
format's reader (``sparse_cache``) in one of two views:

- ``exact``: ``e4m3 * float32 scale``, what the record means;
- ``bf16_product``: ``bf16(e4m3 * bf16(scale))``, what FlashMLA's SM90 kernel computes with.

A backend declares the view its arithmetic starts from (``SparseCapabilities.kv_dequant``); the
comparison that gates uses that view, and the other is recorded beside it (docs/sparse.md).
"""

import torch

from reference.sparse import sparse_attention

from .sparse_cache import dequantize, read_records
from .sparse_inputs import SparseCase


def expected(case: SparseCase, view: str) -> tuple[torch.Tensor, torch.Tensor]:
    """out ``(n, s_q, heads, d_v)`` and LSE ``(n, heads, s_q)``, float64, on the inputs' device."""
    return expected_views(case, (view,))[view]


def expected_views(case: SparseCase, views: tuple) -> dict:
    """``expected`` in each view, the records read once; a view whose keys equal an earlier view's bit
    for bit (power-of-two scales: docs/sparse.md) shares that view's answer, the same tensors."""
    inputs = case.inputs
    n, s_q, heads, d = inputs.q.shape
    flat = inputs.indices.reshape(n * s_q, -1).long()                  # on the device: no host round trip
    used = torch.unique(flat[flat >= 0])                              # sorted slots some row lists
    position = torch.searchsorted(used, flat.clamp_min(0))            # each entry's row of ``keys``
    local = torch.where(flat >= 0, position, torch.full_like(flat, -1))
    pool = inputs.kv_pool.view(inputs.kv_pool.shape[0], -1)
    records = read_records(pool, used, inputs.fmt, inputs.page_size)
    answers, seen = {}, []
    for view in views:
        keys = dequantize(records, inputs.fmt, view)
        same = next((v for v, k in seen if torch.equal(k, keys)), None)
        if same is not None:
            answers[view] = answers[same]
            continue
        seen.append((view, keys))
        out, lse = sparse_attention(inputs.q.reshape(n * s_q, heads, d), keys, local, inputs.softmax_scale,
                                    inputs.d_v, inputs.attn_sink)
        answers[view] = out.view(n, s_q, heads, inputs.d_v), lse.view(n, s_q, heads).transpose(1, 2)
    return answers

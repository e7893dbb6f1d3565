"""The float64 oracle of a sparse case: each query token's key set, read from the pool's records.

Only the slots some index lists are read (a serving-size pool would not fit in float64), through the
format's reader (``sparse_cache``) in one of two views:

- ``exact``: ``e4m3 * float32 scale``, what the record means;
- ``bf16_product``: ``bf16(e4m3 * bf16(scale))``, what FlashMLA's SM90 kernel computes with.

A backend declares the view its arithmetic starts from (``SparseCapabilities.kv_dequant``); the
comparison that gates uses that view, and the other is recorded beside it (docs/sparse.md).  Where the
two views' keys are equal bit for bit (power-of-two scales) the other view shares the first's answer.

For a chunk of cases (``start_views`` then ``finish_views``) whether the views are equal is a device
flag, read with the others of the chunk in one transfer; ``expected_views`` is the same for one case.
The slot set is taken on the device (``torch.unique``: its size is the one wait a case costs here).
"""

from dataclasses import dataclass

import torch

from reference.sparse import sparse_attention
from reference.sparse import weighted_value_magnitudes as reference_magnitudes

from .sparse_cache import dequantize, read_records
from .sparse_inputs import SparseCase


@dataclass
class PendingViews:
    """A case's oracle under way: the first view's answer, and the second view's, to be decided."""

    case: SparseCase
    views: tuple
    answers: dict                       # view -> (out, lse)
    same: torch.Tensor | None = None    # device bool: the second view's keys equal the first's bit for bit


def expected(case: SparseCase, view: str) -> tuple[torch.Tensor, torch.Tensor]:
    """out ``(n, s_q, heads, d_v)`` and LSE ``(n, heads, s_q)``, float64, on the inputs' device."""
    return expected_views(case, (view,))[view]


def expected_views(case: SparseCase, views: tuple) -> dict:
    """``expected`` in each of one or two views, the records read once; a second view whose keys equal
    the first's bit for bit (power-of-two scales: docs/sparse.md) shares its answer, the same tensors."""
    pending = start_views(case, views)
    return finish_views(pending, pending.same is not None and bool(pending.same))


def start_views(case: SparseCase, views: tuple) -> PendingViews:
    """The first view's answer queued on the device and, with a second view, whether its keys equal the
    first's (a device flag: ``finish_views`` is told it)."""
    if not 1 <= len(views) <= 2:
        raise ValueError(f"one or two views, not {views}")
    used, local, records = _key_rows(case)
    keys = dequantize(records, case.inputs.fmt, views[0])
    pending = PendingViews(case, views, {views[0]: _attend(case, keys, local)})
    if len(views) == 2:
        # the row of a -1 entry (slot 0 read in its place) is never attended: it does not count
        other = dequantize(records, case.inputs.fmt, views[1])
        pending.same = ((keys == other) | (used < 0)[:, None]).all()
    return pending


def finish_views(pending: PendingViews, same: bool) -> dict:
    """Every view's answer: the second view's the first's where ``same``, else computed (the records
    read again: a chunk does not hold its cases' keys while their flags travel)."""
    answers = dict(pending.answers)
    if len(pending.views) == 2:
        first, second = pending.views
        if same:
            answers[second] = answers[first]
        else:
            _, local, records = _key_rows(pending.case)
            answers[second] = _attend(pending.case, dequantize(records, pending.case.inputs.fmt, second), local)
    return answers


def weighted_value_magnitudes(case: SparseCase, view: str, rows: torch.Tensor) -> torch.Tensor:
    """``sum_j p_j |V_j|`` of the flattened query ``rows`` ``(len(rows), heads, d_v)``, in ``view``: the
    scale of the kernel's weight-rounding error there (``weight_rounding``)."""
    inputs = case.inputs
    n, s_q, heads, d = inputs.q.shape
    _, local, records = _key_rows(case, rows)
    return reference_magnitudes(inputs.q.reshape(n * s_q, heads, d)[rows], dequantize(records, inputs.fmt, view),
                                local, inputs.softmax_scale, inputs.d_v, inputs.attn_sink)


def _key_rows(case: SparseCase, rows: torch.Tensor | None = None):
    """The sorted slots some entry (of ``rows``, else of every query row) lists (-1 first where an entry
    is invalid), each entry's row among them (-1 kept), and their records (slot 0's in the row of -1:
    read, never attended)."""
    inputs = case.inputs
    n, s_q = inputs.q.shape[:2]
    flat = inputs.indices.reshape(n * s_q, -1).long()                 # on the device: no host round trip
    flat = flat if rows is None else flat[rows]
    used = torch.unique(flat)
    local = torch.where(flat >= 0, torch.searchsorted(used, flat), torch.full_like(flat, -1))
    pool = inputs.kv_pool.view(inputs.kv_pool.shape[0], -1)
    return used, local, read_records(pool, used.clamp_min(0), inputs.fmt, inputs.page_size)


def _attend(case: SparseCase, keys: torch.Tensor, local: torch.Tensor):
    inputs = case.inputs
    n, s_q, heads, d = inputs.q.shape
    # ``local`` is in range by construction (searchsorted over the slots it came from): no check, no wait
    out, lse = sparse_attention(inputs.q.reshape(n * s_q, heads, d), keys, local, inputs.softmax_scale,
                                inputs.d_v, inputs.attn_sink, trusted=True)
    return out.view(n, s_q, heads, inputs.d_v), lse.view(n, s_q, heads).transpose(1, 2)

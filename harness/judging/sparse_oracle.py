"""The float64 oracle of a sparse case: each query token's key set, read from the pool's records.

The records are read entry by entry, in each index row's order, a block of query rows at a time
(``reference.sparse.row_blocks``): the listed keys of a block are one float64 tensor, written once by the
format's reader (``sparse_cache``; on CUDA in one pass, ``sparse_keys_kernel``, the same bits) and read by
two products (``reference.sparse.attend_listed``; on CUDA its softmax in one pass, ``sparse_softmax_kernel``,
within 1e-13 of it).  A -1 entry reads a record of zeros in its place (never attended).  Only the slots
some index lists are read (a serving-size pool would not fit in float64), in one of three views:

- ``exact``: ``e4m3 * float32 scale``, what the record means;
- ``bf16_product``: ``bf16(e4m3 * bf16(scale))``, what FlashMLA's SM90 kernel computes with;
- ``e4m3``: the ``exact`` keys and q both cast to e4m3 (``sparse_cache.as_e4m3``), what an FP8 kernel
  that takes q and KV as e4m3 computes with (SGLang's FP8 sparse prefill).

A backend declares the view its arithmetic starts from (``capabilities.sparse.kv_dequant``); the
comparison that gates uses that view, and ``exact`` is recorded beside ``bf16_product`` (docs/sparse.md).
Where every listed scale is a power of two (``sparse_cache.views_agree``: the two views' keys are then equal
bit for bit) the other view shares the first's answer.

DeepSeek V4's extra cache is read the same way, in its own format and page size, and its keys join the
main cache's in one softmax; entries at or past a row's length are -1 before any is read
(``reference.sparse.counted``).

For a chunk of cases (``start_views`` then ``finish_views``) that agreement is a device flag, read with
the others of the chunk in one transfer; ``expected_views`` is the same for one case.  Nothing here waits
for the device.
"""

import dataclasses
from dataclasses import dataclass

import torch

from reference.sparse import attend_listed, counted, empty_answers, row_blocks, with_sink

from ..building.sparse_cache import as_e4m3, dequantize, read_records, read_scales, views_agree
from ..building.sparse_inputs import SparseCase
from ..fast import sparse_keys_kernel, sparse_softmax_kernel

# a view whose operands are cast after they are read: the records' view it reads them in, then the cast
CAST_VIEWS = {"e4m3": "exact"}


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
    """``expected`` in each of one or two views; a second view whose keys equal the first's bit for bit
    (power-of-two scales: docs/sparse.md) shares its answer, the same tensors."""
    pending = start_views(case, views)
    return finish_views(pending, pending.same is not None and bool(pending.same))


def start_views(case: SparseCase, views: tuple) -> PendingViews:
    """The first view's answer queued on the device and, with a second view, whether its keys equal the
    first's (a device flag: ``finish_views`` is told it)."""
    if not 1 <= len(views) <= 2:
        raise ValueError(f"one or two views, not {views}")
    answer, agree = _attend(case, views[0], agreement=len(views) == 2)
    return PendingViews(case, views, {views[0]: answer}, agree)


def finish_views(pending: PendingViews, same: bool) -> dict:
    """Every view's answer: the second view's the first's where ``same``, else computed (the records
    read again: a chunk does not hold its cases' keys while their flags travel)."""
    answers = dict(pending.answers)
    if len(pending.views) == 2:
        first, second = pending.views
        answers[second] = answers[first] if same else _attend(pending.case, second)[0]
    return answers


def weighted_value_magnitudes(case: SparseCase, view: str, rows: torch.Tensor) -> torch.Tensor:
    """``sum_j p_j |V_j|`` of the flattened query ``rows`` ``(len(rows), heads, d_v)``, in ``view``: the
    scale of the kernel's weight-rounding error there (``weight_rounding``)."""
    heads, d_v = case.inputs.heads, case.inputs.d_v
    return _attend(case, view, rows, magnitudes=True)[0][0].view(len(rows), heads, d_v)


def score_magnitudes(case: SparseCase, view: str, rows: torch.Tensor) -> torch.Tensor:
    """``scale * sum_j p_j sum_i |q_i k_ij|`` ``(len(rows), heads)`` of the flattened query ``rows``, in ``view``:
    the scale of a float32 kernel's score-rounding error in LSE (``weight_rounding.LSE``)."""
    inputs = case.inputs
    n, s_q, heads, d = inputs.q.shape
    # every key column, not d_v; no sink: LSE leaves it out, so its scores' errors are the keys' alone
    whole = dataclasses.replace(case, inputs=dataclasses.replace(inputs, d_v=d, attn_sink=None))
    keys_seen = _attend(whole, view, rows, magnitudes=True)[0][0].view(len(rows), heads, d)
    q = inputs.q.reshape(n * s_q, heads, d)[rows].to(keys_seen.dtype).abs()
    return (keys_seen * q).sum(-1) * inputs.softmax_scale


def floor(case: SparseCase, view: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``expected``'s arithmetic in float32 on the same keys (read exactly, then rounded to float32): the
    noise floor's emulation (``noise_floor``)."""
    return _attend(case, view, dtype=torch.float32)[0]


def _attend(case: SparseCase, view: str, rows: torch.Tensor | None = None, magnitudes: bool = False,
            agreement: bool = False, dtype=torch.float64):
    """``((out (n, s_q, heads, d_v), lse (n, heads, s_q)), agree)`` of the flattened query ``rows`` (all by
    default; then out is ``(len(rows), 1, heads, d_v)``), float64; ``magnitudes``: ``sum p |V|`` in place of
    out.  ``agree`` (asked for with ``agreement``, else None): a device bool, whether every listed scale lets
    the two views agree.  A row's keys are its counted entries of every scope, main then extra, in one
    softmax (``reference.sparse``'s module doc).  ``dtype``: the arithmetic's (float32: ``floor``)."""
    inputs = case.inputs
    n, s_q, heads, d = inputs.q.shape
    q = inputs.q.reshape(n * s_q, heads, d)
    cast = view in CAST_VIEWS
    if cast:
        q, view = as_e4m3(q).to(q.dtype), CAST_VIEWS[view]       # e4m3 values are exact in bf16
    scopes = [(pool, listed.reshape(n * s_q, -1), fmt, page_size)
              for pool, listed, fmt, page_size in _scopes(inputs)]
    if rows is not None:
        q, n, s_q = q[rows], len(rows), 1
        scopes = [(pool, listed[rows], fmt, page_size) for pool, listed, fmt, page_size in scopes]
    width = sum(listed.shape[1] for _, listed, _, _ in scopes)
    # 1 once a listed scale lets the views differ (sparse_cache.views_agree): the keys kernel sets it as it reads
    disagree = torch.zeros((), dtype=torch.int32, device=q.device) if agreement else None
    # no entry listed (graph padding, an all -1 case): every row is empty, the answer empty_answers' bits;
    # otherwise the blocks write every row, so nothing is filled first
    blocks = row_blocks(n * s_q, width, d) if _any_entry(case) else []
    out, lse = (torch.empty(n * s_q, heads, inputs.d_v, dtype=dtype, device=q.device),
                torch.empty(n * s_q, heads, dtype=dtype, device=q.device)) if blocks else \
        empty_answers(n * s_q, heads, inputs.d_v, q.device, dtype)
    for r0, r1 in blocks:
        parts = [_listed_keys(pool, listed[r0:r1].long(), fmt, page_size, view, disagree)
                 for pool, listed, fmt, page_size in scopes]
        keys = torch.cat([k.view(r1 - r0, -1, d) for k, _ in parts], dim=1)
        keys = (as_e4m3(keys) if cast else keys).to(dtype)
        valid = torch.cat([v for _, v in parts], dim=1)
        _attend_listed(out[r0:r1], lse[r0:r1], q[r0:r1], keys, valid, inputs.softmax_scale, inputs.d_v,
                       magnitudes)
    out, lse = with_sink(out, lse, inputs.attn_sink)
    agree = disagree == 0 if agreement else None
    return (out.view(n, s_q, heads, inputs.d_v), lse.view(n, s_q, heads).transpose(1, 2)), agree


def _scopes(inputs) -> list:
    """``(records (pages, page bytes), counted indices (n, s_q, k), format, page size)`` of the main cache
    and, where there is one, the extra cache."""
    scopes = [(inputs.kv_pool, counted(inputs.indices, inputs.topk_length), inputs.fmt, inputs.page_size)]
    if inputs.extra_kv_pool is not None:
        scopes.append((inputs.extra_kv_pool, counted(inputs.extra_indices, inputs.extra_topk_length),
                       inputs.extra_fmt, inputs.extra_page_size))
    return [(pool.view(pool.shape[0], -1), listed, fmt, page_size) for pool, listed, fmt, page_size in scopes]


def _any_entry(case: SparseCase) -> bool:
    """Whether some row counts an entry in some scope (known on the host since the build)."""
    return bool(case.index_stats.valid_entries or (case.extra_stats and case.extra_stats.valid_entries))


def _listed_keys(pool, idx: torch.Tensor, fmt, page_size: int, view: str, disagree):
    """A block's listed keys of one scope ``(rows * k, d)`` float64 (zeros for -1 entries) and which are
    valid ``(rows, k)``; ``disagree`` (or None) set where a listed scale lets the views differ."""
    valid = idx >= 0
    zeroed, slots = ~valid.flatten(), idx.clamp_min(0).flatten()
    keys = sparse_keys_kernel.read_keys(pool, slots, zeroed, fmt, page_size, view, disagree)
    if keys is None:        # off CUDA, or no Triton: PyTorch's form, the same bits and flag
        keys = dequantize(read_records(pool, slots, fmt, page_size, zeroed=zeroed), fmt, view)
        if disagree is not None:
            disagree |= ~views_agree(read_scales(pool, slots, fmt, page_size), zeroed)
    return keys, valid


def _attend_listed(out, lse, q, keys, valid, scale: float, d_v: int, magnitudes: bool):
    """``reference.sparse.attend_listed`` written into ``out`` and ``lse`` (a block's rows of the case's): on
    CUDA its softmax in one pass (``sparse_softmax_kernel``: float64 within 1e-13 of them, float32 for the
    noise floor), else PyTorch's passes."""
    if sparse_softmax_kernel.attend_listed(q, keys, valid, scale, d_v, magnitudes, out, lse) is None:
        out[...], lse[...] = attend_listed(q, keys, valid, scale, d_v, absolute_values=magnitudes)

"""The gates every kernel launch goes through: no kernel ever sees a layout, block table or per-token
key set that is out of range or too short for its seq lens.  The checks run in numpy on the host."""

import numpy as np
import torch

from ..errors import InputError
from ..planning.pages import pages_for
from .page_layout import PageLayout, first_true, host_ints, on_host


def _token_slots(req_to_token: np.ndarray, pool_rows: np.ndarray, seq: np.ndarray, page_size: int,
                 dtype) -> np.ndarray:
    """(b, pages of the longest request, page_size): a fresh ``dtype`` copy of each request's row
    of req_to_token, page by page.  Columns past req_to_token's width (never a token's: seq lens
    were checked) read 0."""
    cols = int(pages_for(seq.max(), page_size)) * page_size
    if cols <= req_to_token.shape[1]:
        slots = req_to_token[pool_rows, :cols].astype(dtype, copy=False)   # a gather: always a copy
    else:
        slots = np.zeros((len(pool_rows), cols), dtype=dtype)
        slots[:, :req_to_token.shape[1]] = req_to_token[pool_rows]
    return slots.reshape(len(pool_rows), -1, page_size)


def _pages_hold_their_slots(req_to_token: np.ndarray, pool_rows: np.ndarray, seq: np.ndarray,
                            num_pages: int, page_size: int) -> bool:
    """Whether every page of every request holds ``page_size`` consecutive, page-aligned slots in the pool.

    The verdict of ``_first_bad_slot`` in fewer passes: every token is good iff each page's first
    slot is a page start in the pool and every token's slot is that plus its position on the page.
    """
    # int32 arithmetic is exact while the pool's last slot, plus page_size, still fits in int32
    fits = req_to_token.dtype == np.int32 and num_pages * page_size <= 2**31 - page_size
    slots = _token_slots(req_to_token, pool_rows, seq, page_size, np.int32 if fits else np.int64)
    first = slots[:, :, 0].copy()                     # each page's first slot (slots is rewritten below)
    is_page = np.arange(slots.shape[1]) < pages_for(seq, page_size)[:, None]
    page_ok = (first >= 0) & (first // page_size < num_pages) & (first % page_size == 0)
    if (is_page & ~page_ok).any():
        return False
    np.subtract(slots, np.arange(page_size, dtype=slots.dtype), out=slots)   # in place: slots is our copy
    off = (slots != first[:, :, None]).reshape(len(seq), -1)
    # a request is good iff its first off token (argmax stops there) is past its last token
    first_off = off.argmax(axis=1)
    return not (off[np.arange(len(seq)), first_off] & (first_off < seq)).any()


def _first_bad_slot(req_to_token: np.ndarray, pool_rows: np.ndarray, seq: np.ndarray, num_pages: int,
                    page_size: int):
    """(request, token, outside) of the first token (request by request, token by token) whose slot
    is outside the pool, or else of the first that breaks page alignment; None if none does."""
    slots = _token_slots(req_to_token, pool_rows, seq, page_size, np.int64)
    pos = np.arange(page_size)                          # each token's position on its page (t % P)
    is_token = (np.arange(slots.shape[1] * page_size) < seq[:, None]).reshape(slots.shape)
    outside = is_token & ((slots < 0) | (slots // page_size >= num_pages))
    misaligned = is_token & ((slots % page_size != pos) | (slots - pos != slots[:, :, :1]))
    for bad, is_outside in ((outside, True), (misaligned, False)):
        if bad.any():
            return (*first_true(bad.reshape(len(seq), -1)), is_outside)
    return None


def validate_req_to_token(layout: PageLayout):
    """Every page of every request holds consecutive, page-aligned slots inside the pool."""
    P = layout.page_size
    rows, width = layout.req_to_token.shape
    seq, pool_rows = host_ints(layout.cache_seqlens), host_ints(layout.req_pool_indices)
    # shape checks first, so a bad layout is an InputError, not an IndexError
    for bad, message in (
        (seq < 0, lambda r: f"negative seq len {int(seq[r])}"),
        (seq > width, lambda r: f"seq len {int(seq[r])} but req_to_token has only {width} columns"),
        ((pool_rows < 0) | (pool_rows >= rows),
         lambda r: f"req_pool_indices entry {int(pool_rows[r])} is outside req_to_token's {rows} rows"),
    ):
        if bad.any():
            r = first_true(bad)
            raise InputError(f"request {r}: {message(r)}")
    req_to_token = on_host(layout.req_to_token)
    if not seq.sum() or _pages_hold_their_slots(req_to_token, pool_rows, seq, layout.num_pages, P):
        return
    r, t, outside = _first_bad_slot(req_to_token, pool_rows, seq, layout.num_pages, P)
    slot = int(req_to_token[pool_rows[r], t])
    if outside:
        raise InputError(f"request {r}: token {t} sits in slot {slot}, outside "
                         f"the pool's {layout.num_pages} pages of {P} slots")
    raise InputError(f"request {r}: token {t} sits in slot {slot}, which "
                     f"breaks page alignment (pages must hold {P} consecutive, page-aligned slots)")


def validate_block_table(block_table: torch.Tensor, cache_seqlens: torch.Tensor,
                         num_pages: int, page_size: int):
    """Refuse a block table a kernel must not be launched on.

    Every entry a request needs must be a page id in ``[0, num_pages)`` and the
    table must be wide enough for every seq len.  Entries past the last needed
    page are padding and may hold anything.
    """
    if page_size < 1:
        raise InputError(f"page_size must be at least 1, got {page_size}")
    if block_table.dim() != 2 or block_table.shape[0] != cache_seqlens.shape[0]:
        raise InputError(f"block table shape {tuple(block_table.shape)} does not match "
                         f"{cache_seqlens.shape[0]} requests")
    if block_table.dtype != torch.int32 or cache_seqlens.dtype != torch.int32:
        raise InputError(f"block table and seq lens must be int32, got {block_table.dtype} and {cache_seqlens.dtype}")
    seq = host_ints(cache_seqlens)
    if (seq < 0).any():
        r = first_true(seq < 0)
        raise InputError(f"request {r}: negative seq len {int(seq[r])}")
    need = pages_for(seq, page_size)
    width = block_table.shape[1]
    if (need > width).any():
        r = first_true(need > width)
        raise InputError(f"request {r}: seq len {int(seq[r])} needs {int(need[r])} pages, "
                         f"the block table has {width} columns")
    table = on_host(block_table)
    needed = np.arange(width) < need[:, None]
    out_of_range = needed & ((table < 0) | (table >= num_pages))
    if out_of_range.any():
        r, p = first_true(out_of_range)
        raise InputError(f"request {r}: block table entry {p} is page {int(table[r, p])}, "
                         f"outside the pool's {num_pages} pages")

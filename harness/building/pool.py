"""The KV page pool, allocated the way SGLang allocates it.

SGLang keeps a ``req_to_token`` pool: row ``req_pool_indices[r]`` lists the KV
slot of every token of request ``r``.  With paged allocation every page holds
``page_size`` consecutive, page-aligned slots.  Here a page allocator hands out
shuffled, non-contiguous pages (page 0 stays reserved, as SGLang reserves slot 0
for padded tokens), fills ``req_to_token``, and derives the block table from it
(``block_tables``).  At serving scale the pool has a fixed size (hundreds of
thousands of pages) with the live pages spread over all of it, and requests may
share a prefix's pages, as SGLang's radix cache does.  The gates every kernel
launch goes through are ``pool_gates``; ``page_layout`` holds the layout type and
the host arrays all three share.

All of this integer work runs in numpy on the host, a few whole-array
operations per call: done as many small torch ops it cost milliseconds of
per-op overhead per case, and a device sync per read-back when a layout lived
on the GPU.  Tensors go to their device once, at the end; a CUDA input is read
back in one copy.  The random draws stay torch's (``torch.randperm`` on the
caller's generator), so a seed gives the same layout as ever, on every device.

Re-exported here, for the tests, scenarios and plug-ins that import them from ``pool``: the page arithmetic
(``pages_for``, ``boundary_pages``, from ``planning.pages``), ``PageLayout``, the block-table names
(``PADDING_VALUES``, ``STALE``, ``padding_fill``, ``build_block_table``, ``fill_stale``) and the gates
(``validate_*``).
"""

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from ..planning.pages import boundary_pages, pages_for  # noqa: F401  (re-exported: see the module doc)
from .block_tables import (  # noqa: F401  (re-exported: see the module doc)
    PADDING_VALUES,
    STALE,
    build_block_table,
    fill_stale,
    padding_fill,
    pages_within,
    table_from_page_starts,
)
from .page_layout import PageLayout, first_true, host_ints  # noqa: F401
from .pool_gates import validate_block_table, validate_req_to_token  # noqa: F401

SPARE_ROWS = 2        # rows of req_to_token past the batch's, as a real pool has


def token_index(lengths: torch.Tensor, device=None, total: int | None = None):
    """For requests of these lengths: each token's request and its position in the request.

    ``lengths`` may live on the CPU while the result is built on ``device``: the
    total is read on the CPU, so a GPU build needs no device-to-host sync.  ``total``:
    their sum where the caller knows it (then device ``lengths`` are not read back).
    """
    lengths = lengths.long()
    device = lengths.device if device is None else torch.device(device)
    total = int(lengths.sum()) if total is None else total
    lengths = lengths.to(device)
    request = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths, output_size=total)
    starts = torch.cumsum(lengths, 0) - lengths
    return request, torch.arange(total, device=device) - starts[request]



def _shuffled_pages(n: int, gen: torch.Generator) -> np.ndarray:
    """Pages ``1..n`` in random order.  Drawn by torch on ``gen``, so a seed gives the same order as ever."""
    return torch.randperm(n, generator=gen).numpy() + 1


def choose_pages(used: int, num_pages: int, gen: torch.Generator, pinned=()) -> torch.Tensor:
    """``used`` distinct pages of ``[1, num_pages)`` in random order; the ``pinned`` ones first in line.

    The rest is a uniform sample of the whole range, so in a large pool the live pages spread
    over all of it; page 0 stays reserved.
    """
    order = _shuffled_pages(num_pages - 1, gen)
    pinned = np.array(list(pinned)[:used], dtype=np.int64)
    if len(pinned):
        # the unpinned pages taken are the order's first unpinned ones, all among its first `used`:
        # filtering only those, not the whole pool, saves a millisecond at serving scale
        head = order[:used]
        order = np.concatenate([pinned, head[~np.isin(head, pinned)]])
    chosen = order[:used]
    if len(pinned):                       # pinned pages go to random requests, not always the first
        chosen = chosen[torch.randperm(used, generator=gen).numpy()]
    return torch.from_numpy(chosen.astype(np.int32))


def _request_pages(order: np.ndarray, need: np.ndarray, shared: np.ndarray, first_own: np.ndarray) -> np.ndarray:
    """(b, the most pages a request needs) int32: request r's page j, 0 past its last page.

    Its first ``shared[r]`` pages are the common chain's (``order[j]``), the rest its own
    (``order[first_own[r] + j - shared[r]]``).
    """
    j = np.arange(int(need.max(initial=0)))
    has = j < need[:, None]
    slot_in_order = np.where(j < shared[:, None], j, first_own[:, None] + j - shared[:, None])
    pages = np.zeros(has.shape, dtype=np.int32)
    pages[has] = order[slot_in_order[has]]
    return pages


def _req_to_token(pages: np.ndarray, lengths: np.ndarray, rows: np.ndarray, max_reqs: int,
                  page_size: int) -> np.ndarray:
    """(max_reqs, max_context) int32: row ``rows[r]`` holds request r's slots, page j's tokens in
    ``pages[r, j] * page_size + 0, 1, ...``; slots past a request's last token, and spare rows, are 0.

    Built in row order in one pass (rather than built per request and scattered to the rows).
    """
    row_pages = np.zeros((max_reqs, max(pages.shape[1], 1)), dtype=np.int32)
    row_pages[rows, :pages.shape[1]] = pages
    row_lengths = np.zeros(max_reqs, dtype=np.int64)
    row_lengths[rows] = lengths
    # int32, as the pool's slots are: one that overflows wraps as it does in an int32 tensor
    slots = (row_pages[:, :, None] * page_size + np.arange(page_size, dtype=np.int32)).reshape(max_reqs, -1)
    slots[np.arange(slots.shape[1]) >= row_lengths[:, None]] = 0
    return slots


@dataclass(frozen=True)
class PageAssignment:
    """Which pages each request holds, before any table is built from it (host numpy, int32)."""

    page_size: int
    num_pages: int
    pages: np.ndarray           # (b, the most pages a request needs): request r's page j, 0 past its last
    rows: np.ndarray            # (b,) req_pool_indices: request r's row of req_to_token
    lengths: np.ndarray         # (b,) tokens per request
    used_pages: np.ndarray      # pages holding some request's tokens
    max_reqs: int               # rows of req_to_token, the spare ones included


def assign_pages(cache_seqlens: list[int], page_size: int, extra_pages: int, gen: torch.Generator,
                 pool_pages: int = 0, shared_pages: list[int] | None = None, pinned_pages=()) -> PageAssignment:
    """Shuffled pages for each request, drawn as ``allocate`` draws them (the same seed, the same pages)."""
    if page_size < 1:
        raise InputError(f"page_size must be at least 1, got {page_size}")
    if any(n < 0 for n in cache_seqlens):
        raise InputError(f"negative seq len in {cache_seqlens}")
    b = len(cache_seqlens)
    lengths = host_ints(cache_seqlens)
    need = pages_for(lengths, page_size)
    shared = np.zeros(b, dtype=np.int64) if shared_pages is None else host_ints(shared_pages)
    bad_share = (shared > need) | (shared < 0)
    if bad_share.any():
        r = first_true(bad_share)
        raise InputError(f"request {r}: shares {int(shared[r])} pages but has {int(need[r])}")
    chain = int(shared.max()) if b else 0             # the common prefix's pages come first in the order
    own = need - shared
    used = pages_used(need, shared)
    num_pages = pool_size(used, extra_pages, pool_pages)
    if pool_pages:
        if pool_pages < 1 + used:
            raise InputError(f"pool_pages {pool_pages} cannot hold page 0 and the {used} pages the requests need")
        order = choose_pages(used, num_pages, gen, pinned_pages).numpy()
    else:
        order = _shuffled_pages(num_pages - 1, gen).astype(np.int32)
    max_reqs = b + SPARE_ROWS
    rows = torch.randperm(max_reqs, generator=gen)[:b].numpy().astype(np.int32)   # req_pool_indices
    first_own = chain + np.cumsum(own) - own          # request r's own pages: order[first_own[r] : + own[r]]
    return PageAssignment(page_size, num_pages, _request_pages(order, need, shared, first_own), rows,
                          lengths.astype(np.int32), order[:used], max_reqs)


def allocate(cache_seqlens: list[int], page_size: int, extra_pages: int, gen: torch.Generator,
             padding: str = "minus_one", table_width: int | None = None,
             pool_pages: int = 0, shared_pages: list[int] | None = None, pinned_pages=()) -> PageLayout:
    """Allocate shuffled pages for each request (``assign_pages``) and build ``req_to_token`` and the
    block table.

    ``pool_pages > 0`` fixes the pool's size (``extra_pages`` is then unused) and
    spreads the live pages over all of it, ``pinned_pages`` among them.
    ``shared_pages[r]``: request r's first pages are the first pages of one common
    chain (same physical pages), as a radix cache shares a matched prefix.

    The page order is drawn by torch on the CPU (so it is the same on every
    device); everything else is built in numpy on the host, and the layout is
    returned on the CPU (``transfer.to_device`` sends it).
    """
    a = assign_pages(cache_seqlens, page_size, extra_pages, gen, pool_pages, shared_pages, pinned_pages)
    req_to_token = _req_to_token(a.pages, a.lengths, a.rows, a.max_reqs, page_size)
    need = pages_for(a.lengths.astype(np.int64), page_size)
    width = table_width if table_width is not None else max(int(need.max()) if len(need) else 1, 1)
    # read back from req_to_token, as build_block_table does, so the two can never disagree
    block_table = table_from_page_starts(req_to_token[:, ::page_size], a.rows,
                                         pages_within(a.lengths, page_size, width), page_size, width,
                                         padding_fill(padding))
    return PageLayout(page_size, a.num_pages, *(torch.from_numpy(x) for x in (
        req_to_token, a.rows, block_table, a.lengths, a.used_pages)))


def req_to_token_of(pages: torch.Tensor, lengths: torch.Tensor, rows: torch.Tensor, max_reqs: int,
                    page_size: int) -> torch.Tensor:
    """``req_to_token`` (``_req_to_token``'s int32 values) built by torch on the tensors' device, from a
    ``PageAssignment``'s ``pages``, ``lengths`` and ``rows`` there: nothing read back, nothing as wide as
    the table sent."""
    device = pages.device
    row_pages = torch.zeros((max_reqs, max(pages.shape[1], 1)), dtype=torch.int32, device=device)
    row_pages[rows.long(), :pages.shape[1]] = pages
    row_lengths = torch.zeros(max_reqs, dtype=torch.int64, device=device)
    row_lengths[rows.long()] = lengths.long()
    offsets = torch.arange(page_size, dtype=torch.int32, device=device)
    slots = (row_pages[:, :, None] * page_size + offsets).reshape(max_reqs, -1)
    beyond = torch.arange(slots.shape[1], device=device)[None, :] >= row_lengths[:, None]
    return slots.masked_fill_(beyond, 0)


def pages_used(need, shared) -> int:
    """Pages ``allocate`` hands out for requests of ``need`` pages, the first ``shared`` of them the
    common chain's: the chain once, then each request's own."""
    need, shared = np.asarray(need, dtype=np.int64), np.asarray(shared, dtype=np.int64)
    return int(shared.max(initial=0)) + int((need - shared).sum())


def pool_size(used: int, extra_pages: int, pool_pages: int) -> int:
    """The pool's pages: ``pool_pages`` when the case fixes it, else page 0 (reserved), the pages in use
    and the extra (poisoned) ones."""
    return pool_pages or 1 + used + extra_pages


def layout_bytes(cache_seqlens: list[int], page_size: int) -> int:
    """What a layout of these lengths allocates: ``req_to_token`` (int32, the spare rows included, as wide
    as the longest request's pages), and about six int64 index tensors a token (``allocate``, the gates,
    ``kv_store.write_kv``)."""
    widest = max((pages_for(n, page_size) for n in cache_seqlens), default=1)
    return (len(cache_seqlens) + SPARE_ROWS) * widest * page_size * 4 + sum(cache_seqlens) * 8 * 6

"""The KV page pool and block tables, built the way SGLang builds them.

SGLang keeps a ``req_to_token`` pool: row ``req_pool_indices[r]`` lists the KV
slot of every token of request ``r``.  With paged allocation every page holds
``page_size`` consecutive, page-aligned slots, so FlashMLA's block table entry p
is ``req_to_token[row, p * page_size] // page_size``
(``create_flashmla_kv_indices_triton``).  Entries past a request's last page
are padding: -1 in eager mode, 1 in SGLang's CUDA-graph buffers, and "stale"
where an engine reuses a block-table scratch buffer: the entries past a row's
last page still hold live pages of other requests (finite data, not poison),
so a kernel that reads one page too far gets plausible numbers, not NaN.

Here a page allocator hands out shuffled, non-contiguous pages (page 0 stays
reserved, as SGLang reserves slot 0 for padded tokens), fills ``req_to_token``,
and derives the block table from it.  At serving scale the pool has a fixed
size (hundreds of thousands of pages) with the live pages spread over all of
it, and requests may share a prefix's pages, as SGLang's radix cache does.  ``validate_block_table`` is the gate every
kernel launch goes through: no kernel ever sees a table that is out of range or
too short for its seq lens.

All of this integer work runs in numpy on the host, a few whole-array
operations per call: done as many small torch ops it cost milliseconds of
per-op overhead per case, and a device sync per read-back when a layout lived
on the GPU.  Tensors go to their device once, at the end; a CUDA input is read
back in one copy.  The random draws stay torch's (``torch.randperm`` on the
caller's generator), so a seed gives the same layout as ever, on every device.
"""

from dataclasses import dataclass

import numpy as np
import torch

from .errors import InputError

PADDING_VALUES = {"minus_one": -1, "one": 1, "zero": 0, "huge": 2**31 - 1}
STALE = "stale"   # not a value: padding entries hold other requests' live pages (see build_block_table)


def padding_fill(policy: str):
    """What ``build_block_table`` pads with under a case's padding policy: a value, or ``STALE``."""
    return STALE if policy == STALE else PADDING_VALUES[policy]


@dataclass
class PageLayout:
    """Where every request's tokens live.  Tensors are int32, on the device the case runs on."""

    page_size: int
    num_pages: int
    req_to_token: torch.Tensor       # (max_reqs, max_context) KV slot per token
    req_pool_indices: torch.Tensor   # (b,) row of req_to_token for request r
    block_table: torch.Tensor        # (b, max_pages) page ids, padded past the last page
    cache_seqlens: torch.Tensor      # (b,) tokens in the cache per request
    used_pages: torch.Tensor         # (num_used,) pages holding some request's tokens

    def to(self, device) -> "PageLayout":
        """The same layout with its tensors on ``device``."""
        moved = {k: v.to(device) for k, v in vars(self).items() if isinstance(v, torch.Tensor)}
        return PageLayout(**{**vars(self), **moved})


def pages_for(n_tokens, page_size: int):
    """Pages that hold ``n_tokens`` tokens (an int, or a tensor or array of counts)."""
    return (n_tokens + page_size - 1) // page_size


def token_index(lengths: torch.Tensor, device=None):
    """For requests of these lengths: each token's request and its position in the request.

    ``lengths`` may live on the CPU while the result is built on ``device``: the
    total is read on the CPU, so a GPU build needs no device-to-host sync.
    """
    lengths = lengths.long()
    device = lengths.device if device is None else torch.device(device)
    total = int(lengths.sum())
    lengths = lengths.to(device)
    request = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths, output_size=total)
    starts = torch.cumsum(lengths, 0) - lengths
    return request, torch.arange(total, device=device) - starts[request]


def boundary_pages(num_pages: int, page_elements: int) -> list[int]:
    """Pages on either side of where index arithmetic wraps, highest first, that this pool has.

    Page ids wrap at 2^16 and 2^17 in 16/17-bit fields; element offsets
    ``page * page_elements`` wrap at 2^30 (int32 bytes of a 2-byte dtype), 2^31
    (int32 elements) and 2^32 (uint32: FlashInfer #3130).  For DeepSeek's
    64 x 576 pages the last two are pages 58,254/58,255 and 116,508/116,509.
    """
    pages = {num_pages - 1}
    for first_past in (1 << 16, 1 << 17):
        pages |= {first_past - 1, first_past}
    for limit in (1 << 30, 1 << 31, 1 << 32):
        straddling = limit // page_elements      # the page whose elements cross the limit
        pages |= {straddling, straddling + 1}
    return sorted((p for p in pages if 1 <= p < num_pages), reverse=True)


# ---- host arrays ---------------------------------------------------------------------------------

def _on_host(tensor: torch.Tensor) -> np.ndarray:
    """A tensor's values as a numpy array: a view of a CPU tensor, one copy of a device one."""
    return tensor.cpu().numpy()


def _host_ints(values) -> np.ndarray:
    """Per-request integers (seq lens, rows, shared pages) as int64, so no arithmetic on them wraps."""
    if isinstance(values, torch.Tensor):
        values = _on_host(values)
    return np.asarray(values, dtype=np.int64)


def _first(mask: np.ndarray):
    """Index of ``mask``'s first True in row-major order (a tuple for 2-D masks)."""
    i = int(np.argmax(mask))
    return i if mask.ndim == 1 else tuple(int(x) for x in np.unravel_index(i, mask.shape))


# ---- allocation ----------------------------------------------------------------------------------

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


def allocate(cache_seqlens: list[int], page_size: int, extra_pages: int, gen: torch.Generator,
             padding: str = "minus_one", table_width: int | None = None,
             pool_pages: int = 0, shared_pages: list[int] | None = None, pinned_pages=()) -> PageLayout:
    """Allocate shuffled pages for each request and build ``req_to_token`` and the block table.

    ``pool_pages > 0`` fixes the pool's size (``extra_pages`` is then unused) and
    spreads the live pages over all of it, ``pinned_pages`` among them.
    ``shared_pages[r]``: request r's first pages are the first pages of one common
    chain (same physical pages), as a radix cache shares a matched prefix.

    The page order is drawn by torch on the CPU (so it is the same on every
    device); everything else is built in numpy on the host, and the layout is
    returned on the CPU (``transfer.to_device`` sends it).
    """
    if page_size < 1:
        raise InputError(f"page_size must be at least 1, got {page_size}")
    if any(n < 0 for n in cache_seqlens):
        raise InputError(f"negative seq len in {cache_seqlens}")
    b = len(cache_seqlens)
    lengths = _host_ints(cache_seqlens)
    need = pages_for(lengths, page_size)
    shared = np.zeros(b, dtype=np.int64) if shared_pages is None else _host_ints(shared_pages)
    bad_share = (shared > need) | (shared < 0)
    if bad_share.any():
        r = _first(bad_share)
        raise InputError(f"request {r}: shares {int(shared[r])} pages but has {int(need[r])}")
    chain = int(shared.max()) if b else 0             # the common prefix's pages come first in the order
    own = need - shared
    used = chain + int(own.sum())
    if pool_pages:
        if pool_pages < 1 + used:
            raise InputError(f"pool_pages {pool_pages} cannot hold page 0 and the {used} pages the requests need")
        num_pages = pool_pages
        order = choose_pages(used, num_pages, gen, pinned_pages).numpy()
    else:
        num_pages = 1 + used + extra_pages               # page 0 is reserved
        order = _shuffled_pages(num_pages - 1, gen).astype(np.int32)
    max_reqs = b + 2                                  # spare rows, as a real pool has
    rows = torch.randperm(max_reqs, generator=gen)[:b].numpy().astype(np.int32)   # req_pool_indices
    first_own = chain + np.cumsum(own) - own          # request r's own pages: order[first_own[r] : + own[r]]
    pages = _request_pages(order, need, shared, first_own)
    req_to_token = _req_to_token(pages, lengths, rows, max_reqs, page_size)
    width = table_width if table_width is not None else max(int(need.max()) if b else 1, 1)
    # read back from req_to_token, as build_block_table does, so the two can never disagree
    block_table = _block_table(req_to_token[:, ::page_size], rows, _pages_within(lengths, page_size, width),
                               page_size, width, padding_fill(padding))
    return PageLayout(page_size, num_pages, *(torch.from_numpy(a) for a in (
        req_to_token, rows, block_table, lengths.astype(np.int32), order[:used])))


# ---- block tables --------------------------------------------------------------------------------

def _pages_within(lengths: np.ndarray, page_size: int, width: int) -> np.ndarray:
    """Pages each request needs; an ``InputError`` if a table ``width`` columns wide cannot hold them."""
    need = pages_for(lengths, page_size)
    if len(need) and int(need.max()) > width:
        r = int(need.argmax())
        raise InputError(f"request {r}: {int(lengths[r])} tokens need {int(need[r])} pages "
                         f"but the table has {width} columns")
    return need


def _block_table(page_starts: np.ndarray, rows: np.ndarray, need: np.ndarray, page_size: int, width: int,
                 pad_value) -> np.ndarray:
    """The (b, width) int32 table: entry (r, p) is ``page_starts[rows[r], p] // page_size`` for
    p < need[r], padding past it.  ``page_starts`` is req_to_token's every page_size-th column."""
    stale = isinstance(pad_value, str) and pad_value == STALE
    table = np.full((len(need), width), 0 if stale else pad_value, dtype=np.int32)
    live = np.arange(width) < need[:, None]
    request, p = np.nonzero(live)
    table[live] = page_starts[rows[request], p] // page_size
    if stale:
        fill_stale(table, need)
    return table


def build_block_table(req_to_token, req_pool_indices, cache_seqlens, page_size, width, pad_value):
    """FlashMLA's block table from ``req_to_token``, as create_flashmla_kv_indices does it.

    Built on the host; a CUDA ``req_to_token`` is read back in one copy of its page-start columns
    (all a table needs), and the table goes back to its device.
    """
    need = _pages_within(_host_ints(cache_seqlens).reshape(-1), page_size, width)
    table = _block_table(_on_host(req_to_token[:, ::page_size]), _on_host(req_pool_indices), need,
                         page_size, width, pad_value)
    return torch.from_numpy(table).to(req_to_token.device)


def fill_stale(table: np.ndarray, need: np.ndarray):
    """Padding entry (r, j) gets a live page of another request when there is one (of r's own
    otherwise), cycling through them: what a reused scratch buffer holds after other batches.

    In place on a numpy ``table`` whose entries (r, j < need[r]) are the live pages.  Request r's
    k-th padding entry is entry ``(k + r) % len(pool)`` of ``pool``: the other requests' live pages,
    request by request (or r's own when no other request has any).
    """
    is_live = np.arange(table.shape[1]) < need[:, None]
    live = table[is_live]                             # row-major: request by request, page by page
    if not len(live):
        return
    n_live = is_live.sum(axis=1)
    start = np.cumsum(n_live) - n_live                # r's own pages are live[start[r] : + n_live[r]]
    r, j = np.nonzero(~is_live)                       # the padding entries, row by row
    n_others = len(live) - n_live[r]
    i = (j - n_live[r] + r) % np.where(n_others > 0, n_others, len(live))    # j - n_live[r] is k
    # pool[i]: the others are live with r's own run cut out; with no others the pool is live itself
    table[r, j] = live[np.where(n_others > 0, i + n_live[r] * (i >= start[r]), i)]


# ---- validation ----------------------------------------------------------------------------------

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
            return (*_first(bad.reshape(len(seq), -1)), is_outside)
    return None


def validate_req_to_token(layout: PageLayout):
    """Every page of every request holds consecutive, page-aligned slots inside the pool."""
    P = layout.page_size
    rows, width = layout.req_to_token.shape
    seq, pool_rows = _host_ints(layout.cache_seqlens), _host_ints(layout.req_pool_indices)
    # shape checks first, so a bad layout is an InputError, not an IndexError
    for bad, message in (
        (seq < 0, lambda r: f"negative seq len {int(seq[r])}"),
        (seq > width, lambda r: f"seq len {int(seq[r])} but req_to_token has only {width} columns"),
        ((pool_rows < 0) | (pool_rows >= rows),
         lambda r: f"req_pool_indices entry {int(pool_rows[r])} is outside req_to_token's {rows} rows"),
    ):
        if bad.any():
            r = _first(bad)
            raise InputError(f"request {r}: {message(r)}")
    req_to_token = _on_host(layout.req_to_token)
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
    seq = _host_ints(cache_seqlens)
    if (seq < 0).any():
        r = _first(seq < 0)
        raise InputError(f"request {r}: negative seq len {int(seq[r])}")
    need = pages_for(seq, page_size)
    width = block_table.shape[1]
    if (need > width).any():
        r = _first(need > width)
        raise InputError(f"request {r}: seq len {int(seq[r])} needs {int(need[r])} pages, "
                         f"the block table has {width} columns")
    table = _on_host(block_table)
    needed = np.arange(width) < need[:, None]
    out_of_range = needed & ((table < 0) | (table >= num_pages))
    if out_of_range.any():
        r, p = _first(out_of_range)
        raise InputError(f"request {r}: block table entry {p} is page {int(table[r, p])}, "
                         f"outside the pool's {num_pages} pages")


def validate_token_slots(token_slots: torch.Tensor, batch_size: int, s_q: int, num_slots: int):
    """Refuse a per-query-token key set (``Inputs.token_slots``) a kernel must not be launched on: it must
    be int32 ``(batch_size, s_q, k)``, every entry -1 (unused) or a slot in ``[0, num_slots)``."""
    if token_slots.dim() != 3 or tuple(token_slots.shape[:2]) != (batch_size, s_q):
        raise InputError(f"token slots shape {tuple(token_slots.shape)} is not ({batch_size}, {s_q}, k)")
    if token_slots.dtype != torch.int32:
        raise InputError(f"token slots must be int32, got {token_slots.dtype}")
    slots = _on_host(token_slots)
    bad = (slots < -1) | (slots >= num_slots)
    if bad.any():
        r, i, j = _first(bad)
        raise InputError(f"request {r}, query token {i}: key {j} is slot {int(slots[r, i, j])}, "
                         f"neither -1 nor one of the pool's {num_slots} slots")

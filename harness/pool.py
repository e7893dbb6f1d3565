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
"""

from dataclasses import dataclass

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
    """Pages that hold ``n_tokens`` tokens (an int, or a tensor of counts)."""
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


def choose_pages(used: int, num_pages: int, gen: torch.Generator, pinned=()) -> torch.Tensor:
    """``used`` distinct pages of ``[1, num_pages)`` in random order; the ``pinned`` ones first in line.

    The rest is a uniform sample of the whole range, so in a large pool the live pages spread
    over all of it; page 0 stays reserved.
    """
    order = torch.randperm(num_pages - 1, generator=gen) + 1
    pinned = torch.tensor(list(pinned)[:used], dtype=torch.long)
    if len(pinned):
        order = torch.cat([pinned, order[~torch.isin(order, pinned)]])
    chosen = order[:used]
    if len(pinned):                       # pinned pages go to random requests, not always the first
        chosen = chosen[torch.randperm(used, generator=gen)]
    return chosen.to(torch.int32)


def allocate(cache_seqlens: list[int], page_size: int, extra_pages: int, gen: torch.Generator,
             padding: str = "minus_one", table_width: int | None = None, device="cpu",
             pool_pages: int = 0, shared_pages: list[int] | None = None, pinned_pages=()) -> PageLayout:
    """Allocate shuffled pages for each request and build ``req_to_token`` and the block table.

    ``pool_pages > 0`` fixes the pool's size (``extra_pages`` is then unused) and
    spreads the live pages over all of it, ``pinned_pages`` among them.
    ``shared_pages[r]``: request r's first pages are the first pages of one common
    chain (same physical pages), as a radix cache shares a matched prefix.

    The page order is drawn on the CPU (so it is the same on every device); the
    per-token work runs on ``device``.
    """
    if page_size < 1:
        raise InputError(f"page_size must be at least 1, got {page_size}")
    if any(n < 0 for n in cache_seqlens):
        raise InputError(f"negative seq len in {cache_seqlens}")
    b = len(cache_seqlens)
    lengths = torch.tensor(cache_seqlens, dtype=torch.long)
    need = pages_for(lengths, page_size)
    shared = torch.zeros(b, dtype=torch.long) if shared_pages is None else torch.tensor(shared_pages, dtype=torch.long)
    if bool((shared > need).any()) or bool((shared < 0).any()):
        r = int(((shared > need) | (shared < 0)).nonzero()[0])
        raise InputError(f"request {r}: shares {int(shared[r])} pages but has {int(need[r])}")
    chain = int(shared.max()) if b else 0             # the common prefix's pages come first in the order
    own = need - shared
    used = chain + int(own.sum())
    if pool_pages:
        if pool_pages < 1 + used:
            raise InputError(f"pool_pages {pool_pages} cannot hold page 0 and the {used} pages the requests need")
        num_pages = pool_pages
        order = choose_pages(used, num_pages, gen, pinned_pages)
    else:
        num_pages = 1 + used + extra_pages               # page 0 is reserved
        order = (torch.randperm(num_pages - 1, generator=gen) + 1).to(torch.int32)
    max_ctx = max(int(need.max()) if b else 0, 1) * page_size
    max_reqs = b + 2                                  # spare rows, as a real pool has
    req_pool_indices = torch.randperm(max_reqs, generator=gen)[:b].to(torch.int32)
    first_own = chain + torch.cumsum(own, 0) - own    # request r's own pages: order[first_own[r] : + own[r]]
    request, t = token_index(lengths, device)
    page_of_token = t // page_size
    shared_d = shared.to(device)[request]
    in_chain = page_of_token < shared_d
    slot_in_order = torch.where(in_chain, page_of_token, first_own.to(device)[request] + page_of_token - shared_d)
    pages = order.to(device)[slot_in_order]
    req_to_token = torch.zeros(max_reqs, max_ctx, dtype=torch.int32, device=device)
    req_pool_indices = req_pool_indices.to(device)
    req_to_token[req_pool_indices[request].long(), t] = (pages * page_size + (t % page_size)).to(torch.int32)
    width = table_width if table_width is not None else max(int(need.max()) if b else 1, 1)
    block_table = build_block_table(req_to_token, req_pool_indices, cache_seqlens, page_size,
                                    width, padding_fill(padding))
    return PageLayout(page_size, num_pages, req_to_token, req_pool_indices, block_table,
                      lengths.to(torch.int32).to(device), order[:used].to(device))


def build_block_table(req_to_token, req_pool_indices, cache_seqlens, page_size, width, pad_value):
    """FlashMLA's block table from ``req_to_token``, as create_flashmla_kv_indices does it."""
    lengths = torch.as_tensor(cache_seqlens, dtype=torch.long).reshape(-1).cpu()
    need = pages_for(lengths, page_size)
    if len(need) and int(need.max()) > width:
        r = int(need.argmax())
        raise InputError(f"request {r}: {int(lengths[r])} tokens need {int(need[r])} pages "
                         f"but the table has {width} columns")
    device = req_to_token.device
    stale = isinstance(pad_value, str) and pad_value == STALE
    table = torch.full((len(lengths), width), 0 if stale else pad_value, dtype=torch.int32, device=device)
    request, p = token_index(need, device)
    rows = req_pool_indices.to(device).long()[request]
    live = (req_to_token[rows, p * page_size] // page_size).to(torch.int32)
    table[request, p] = live
    if stale and len(live):
        fill_stale(table, need.to(device), request, live)
    return table


def fill_stale(table, need, request, live):
    """Padding entry (r, j) gets a live page of another request when there is one (of r's own
    otherwise), cycling through them: what a reused scratch buffer holds after other batches."""
    b, width = table.shape
    pad = torch.arange(width, device=table.device)[None, :] >= need[:, None]          # (b, width)
    for r in range(b):
        n_pad = int(pad[r].sum())
        if not n_pad:
            continue
        others = live[request != r]
        pool = others if len(others) else live
        idx = (torch.arange(n_pad, device=table.device) + r) % len(pool)
        table[r, pad[r]] = pool[idx]


def validate_req_to_token(layout: PageLayout):
    """Every page of every request holds consecutive, page-aligned slots inside the pool."""
    P = layout.page_size
    rows, width = layout.req_to_token.shape
    seq, pool_rows = layout.cache_seqlens.long().cpu(), layout.req_pool_indices.long().cpu()
    # shape checks first, so a bad layout is an InputError, not an IndexError
    for bad, message in (
        (seq < 0, lambda r: f"negative seq len {int(seq[r])}"),
        (seq > width, lambda r: f"seq len {int(seq[r])} but req_to_token has only {width} columns"),
        ((pool_rows < 0) | (pool_rows >= rows),
         lambda r: f"req_pool_indices entry {int(pool_rows[r])} is outside req_to_token's {rows} rows"),
    ):
        if bool(bad.any()):
            r = int(bad.nonzero()[0])
            raise InputError(f"request {r}: {message(r)}")
    device = layout.req_to_token.device
    request, t = token_index(seq, device)
    slots = layout.req_to_token[pool_rows.to(device)[request], t].long()
    outside = (slots < 0) | (slots // P >= layout.num_pages)
    start_of_page = torch.arange(len(t), device=device) - t % P   # flat index of the first token on its page
    first = slots[start_of_page] if len(t) else slots
    misaligned = (slots % P != t % P) | (slots - t % P != first)
    if not bool((outside | misaligned).any()):        # one sync on the good path
        return
    if bool(outside.any()):
        i = int(outside.nonzero()[0])
        raise InputError(f"request {int(request[i])}: token {int(t[i])} sits in slot {int(slots[i])}, outside "
                         f"the pool's {layout.num_pages} pages of {P} slots")
    i = int(misaligned.nonzero()[0])
    raise InputError(f"request {int(request[i])}: token {int(t[i])} sits in slot {int(slots[i])}, which "
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
    seq = cache_seqlens.cpu().long()
    if bool((seq < 0).any()):
        r = int((seq < 0).nonzero()[0])
        raise InputError(f"request {r}: negative seq len {int(seq[r])}")
    need = pages_for(seq, page_size)
    width = block_table.shape[1]
    if bool((need > width).any()):
        r = int((need > width).nonzero()[0])
        raise InputError(f"request {r}: seq len {int(seq[r])} needs {int(need[r])} pages, "
                         f"the block table has {width} columns")
    table = block_table.cpu().long()
    needed = torch.arange(width)[None, :] < need[:, None]
    out_of_range = needed & ((table < 0) | (table >= num_pages))
    if bool(out_of_range.any()):
        r, p = (int(x) for x in out_of_range.nonzero()[0])
        raise InputError(f"request {r}: block table entry {p} is page {int(table[r, p])}, "
                         f"outside the pool's {num_pages} pages")

"""Block tables: FlashMLA's per-request page lists, read from ``req_to_token``, and their padding.

FlashMLA's block table entry p of a request is ``req_to_token[row, p * page_size] // page_size``
(``create_flashmla_kv_indices_triton``).  Entries past a request's last page are padding: -1 in eager
mode, 1 in SGLang's CUDA-graph buffers, and "stale" where an engine reuses a block-table scratch buffer:
the entries past a row's last page still hold live pages of other requests (finite data, not poison), so
a kernel that reads one page too far gets plausible numbers, not NaN.  Built in numpy on the host.
"""

import numpy as np
import torch

from ..errors import InputError
from ..planning.pages import pages_for
from .page_layout import host_ints, on_host

PADDING_VALUES = {"minus_one": -1, "one": 1, "zero": 0, "huge": 2**31 - 1}
STALE = "stale"   # not a value: padding entries hold other requests' live pages (see build_block_table)


def padding_fill(policy: str):
    """What ``build_block_table`` pads with under a case's padding policy: a value, or ``STALE``."""
    return STALE if policy == STALE else PADDING_VALUES[policy]



def pages_within(lengths: np.ndarray, page_size: int, width: int) -> np.ndarray:
    """Pages each request needs; an ``InputError`` if a table ``width`` columns wide cannot hold them."""
    need = pages_for(lengths, page_size)
    if len(need) and int(need.max()) > width:
        r = int(need.argmax())
        raise InputError(f"request {r}: {int(lengths[r])} tokens need {int(need[r])} pages "
                         f"but the table has {width} columns")
    return need


def table_from_page_starts(page_starts: np.ndarray, rows: np.ndarray, need: np.ndarray, page_size: int, width: int,
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
    need = pages_within(host_ints(cache_seqlens).reshape(-1), page_size, width)
    table = table_from_page_starts(on_host(req_to_token[:, ::page_size]), on_host(req_pool_indices), need,
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


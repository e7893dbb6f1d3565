"""A case's lengths and page sharing, drawn on the CPU from its seed alone, so they are the same on
every device and cost no inputs: the size check, the chunk plan and the inputs all ask."""

from functools import lru_cache

import torch

from . import seqlens
from .case import Case
from .pages import boundary_pages


def draw_seq_lens(case: Case) -> list[int]:
    """SGLang's ``seq_lens`` (the prefix, for verify) of each request."""
    return list(_drawn_seq_lens(case))


@lru_cache(maxsize=4096)      # the size check, the chunk plan and the inputs all ask
def _drawn_seq_lens(case: Case) -> tuple:
    gen = torch.Generator().manual_seed(case.seed)
    drawn = seqlens.draw(case.seqlen, case.batch_size, case.page_size, gen)
    if case.seqlen_is_cache and case.mode == "verify":
        # FlashMLA's own test draws cache lengths and keeps them >= s_q; the prefix is what is left
        return tuple(max(n, case.s_q) - case.s_q for n in drawn)
    return tuple(drawn)


def cache_seqlens_for(case: Case, seq_lens: list[int]) -> list[int]:
    """What FlashMLA is given: verify adds the draft tokens (``seq_lens + num_draft_tokens``)."""
    if case.mode != "verify":
        return list(seq_lens)
    drafts = case.s_q                   # a property: read once, not per request
    return [n + drafts for n in seq_lens]



def shared_pages_for(case: Case, cache: list[int]) -> list[int]:
    """How many of the common prefix's pages each request shares (a radix cache's matched prefix).

    Only whole pages of committed tokens are shared: the tokens this step writes (the decode
    token, the drafts) are always on the request's own pages.
    """
    P = case.page_size
    return [min(case.shared_prefix // P, max(n - case.s_q, 0) // P) for n in cache]


def pinned_pages_for(case: Case) -> list[int]:
    """In a spread pool: the pages at which page ids and element offsets wrap must be live."""
    if not case.pool_pages:
        return []
    return boundary_pages(case.pool_pages, case.page_size * case.kv_heads * case.d_qk)


def extra_entries(case: Case, cache: list[int]) -> list[int]:
    """Entries each request holds in the extra (compressed) cache: ``ratio:N`` compresses its ``cache``
    tokens N to one (DeepSeek V4's C4 and C128); any other spec draws them as ``seqlen`` does, on a
    generator of their own (FlashMLA's tests draw each scope independently)."""
    ratio = extra_ratio(case)
    if ratio:
        return [n // ratio for n in cache]
    gen = torch.Generator().manual_seed(case.seed + 10)
    return seqlens.draw(case.extra_seqlen, case.batch_size, case.extra_page_size, gen)


def extra_ratio(case: Case) -> int:
    """N of an ``extra_seqlen`` of ``ratio:N``, else 0."""
    name, _, value = case.extra_seqlen.partition(":")
    return int(value) if name == "ratio" else 0

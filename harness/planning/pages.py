"""Page arithmetic a plan needs before any pool exists: how many pages a length takes (``pages_for``) and
which pages a spread pool must keep live (``boundary_pages``).  The size check and the case's lengths ask
here; the pool (``building.pool``) allocates by the same numbers."""


def pages_for(n_tokens, page_size: int):
    """Pages that hold ``n_tokens`` tokens (an int, or a tensor or array of counts)."""
    return (n_tokens + page_size - 1) // page_size


def boundary_pages(num_pages: int, page_elements: int) -> list[int]:
    """Pages on either side of where index arithmetic wraps, highest first, that this pool has.

    Page ids wrap at 2^16 and 2^17 in 16/17-bit fields; element offsets
    ``page * page_elements`` wrap at 2^30 (int32 bytes of a 2-byte dtype), 2^31
    (int32 elements) and 2^32 (uint32: flashinfer-ai/flashinfer#3130).  For DeepSeek's
    64 x 576 pages the last two are pages 58,254/58,255 and 116,508/116,509.
    """
    pages = {num_pages - 1}
    for first_past in (1 << 16, 1 << 17):
        pages |= {first_past - 1, first_past}
    for limit in (1 << 30, 1 << 31, 1 << 32):
        straddling = limit // page_elements      # the page whose elements cross the limit
        pages |= {straddling, straddling + 1}
    return sorted((p for p in pages if 1 <= p < num_pages), reverse=True)

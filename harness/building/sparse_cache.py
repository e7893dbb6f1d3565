"""The writers and readers of the quantized token records of sparse MLA caches.  The formats themselves
(V3.2's and V4's layouts, ``RecordFormat``, ``FORMATS``) are data a case names, so they live in
``planning.record_formats``; they are re-exported here, where the tests and the sparse inputs import them.
Every offset, stride and dtype is the format's: nothing here knows a format by its name.

Scale policies (how a writer picks a tile's scale from its amax):

- ``amax``: SGLang's writer (``dsa_quant_k_cache.py``, ``_quantize_k_cache_fast_kernel``): scale =
  amax / 448 in float32 (``tile_scales``: the product with float32(1 / 448)), stored as is (not a power
  of two), values ``clamp(x * (1 / scale))``; no epsilon, so an all-zero tile gets scale 0 and NaN values,
  as in SGLang;
- ``ue8m0``: FlashMLA's tests (``tests/quant.py``): scale = 2^ceil(log2(max(amax / 448, 1e-4))), the
  smallest power of two at or above that ratio (worked out in bits), values ``x / scale``.  V4 stores
  ue8m0 bytes, so it takes this policy only.

Readers: ``exact`` is ``e4m3 * scale`` in float64 (what the record means); ``bf16_product`` is what
FlashMLA's SM90 kernel computes, ``bf16(e4m3 * bf16(scale))`` (docs/sparse.md): the two agree only
for power-of-two scales.  Rope values are bf16 in the record and read exactly by both.

A poisoned pool is all 0xFF bytes: NaN as e4m3, as a float32 scale, as bf16 rope and as ue8m0, so a
read of any part of a record nobody wrote shows.
"""

from dataclasses import dataclass

import torch

from ..planning.record_formats import (  # noqa: F401  (re-exported: see the module doc)
    DEQUANT_MODES,
    E4M3_MAX,
    FORMATS,
    SCALE_POLICIES,
    RecordFormat,
    check_policy,
    check_view,
    record_format,
)

POISON_BYTE = 0xFF


def as_e4m3(values: torch.Tensor) -> torch.Tensor:
    """``values`` cast to e4m3 as a saturating cast does (round to nearest even; beyond ±448, infinities
    included, ±448; NaN stays NaN): Triton's ``cvt.rn.satfinite``, which SGLang's FP8 prefill gather writes
    its workspace with (``dsv4/dequant_k_cache.py``).  Clamped first, so no torch version's overflow rule
    decides it."""
    return values.float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


@dataclass
class Quantized:
    """Tokens as a record holds them: quantized values, one scale per tile (as float32), the rope part."""

    nope: torch.Tensor        # (n, d_nope) the format's value dtype (e4m3)
    scales: torch.Tensor      # (n, tiles) float32
    rope: torch.Tensor        # (n, d_rope) the format's rope dtype (bf16)


def tile_scales(amax: torch.Tensor, policy: str, value_max: float = E4M3_MAX) -> torch.Tensor:
    """Each tile's scale from its amax (float32), by policy; ``value_max``: the value dtype's largest (448
    for e4m3).  ``amax / 448`` is the product ``amax * float32(1 / 448)``: PyTorch's CUDA division by a
    constant computes that (it can differ from the quotient in the last bit), and written as the product
    the scales are the same on every device."""
    ratio = amax.float() * (1.0 / value_max)
    if policy == "amax":
        return ratio
    if policy == "ue8m0":         # 2^ceil(log2(r)) said in bits, so no rounding of a log2 decides it
        bits = torch.clamp_min(ratio, 1e-4).view(torch.int32)
        exponent = (bits >> 23) + ((bits & 0x7FFFFF) != 0).to(torch.int32)
        kept = (bits & 0x7FFFFFFF) >= 0x7F800000                                            # NaN and inf
        return torch.where(kept, bits, exponent << 23).view(torch.float32)
    raise ValueError(f"unknown scale policy '{policy}' (known: {', '.join(SCALE_POLICIES)})")


def quantize(tokens: torch.Tensor, fmt: RecordFormat, policy: str) -> Quantized:
    """``tokens (n, d_qk)`` (bf16, the model's KV) as ``fmt``'s writer under ``policy`` stores them."""
    check_policy(fmt, policy)
    n = tokens.shape[0]
    tiles = tokens[:, :fmt.d_nope].to(torch.float32, copy=True).view(n, fmt.tiles, fmt.tile)   # scaled in place
    amax = torch.linalg.vector_norm(tiles, ord=torch.inf, dim=-1)               # max |x|, exact, one pass
    scales = tile_scales(amax, policy, fmt.value_max)                           # (n, tiles)
    if policy == "amax":       # SGLang multiplies by the reciprocal and clamps
        values = tiles.mul_((1.0 / scales)[..., None]).clamp_(-fmt.value_max, fmt.value_max)
    else:                      # FlashMLA's tests divide (|x / scale| <= 448 by construction)
        values = tiles.div_(scales[..., None])
    nope = values.to(torch_dtype(fmt.value_dtype)).view(n, fmt.d_nope)
    return Quantized(nope, scales, tokens[:, fmt.d_nope:].to(torch_dtype(fmt.rope_dtype)))


def torch_dtype(name: str) -> torch.dtype:
    """A format's dtype name (``record_formats.ELEMENT_BYTES``) as torch's dtype."""
    return getattr(torch, name)


def _page_parts(pool: torch.Tensor, fmt: RecordFormat, page_size: int):
    """Byte views of a pool ``(pages, page_bytes)`` uint8, never copies: rows ``(pages, page_size,
    row_bytes)`` and scale bytes ``(pages, page_size, tiles * scale_bytes)`` (in the rows, or in the block
    after a page's rows)."""
    rows = pool[:, :page_size * fmt.row_bytes].unflatten(1, (page_size, fmt.row_bytes))
    holder = rows
    if fmt.scale_block:
        block_at = page_size * fmt.row_bytes
        holder = pool[:, block_at:block_at + page_size * fmt.scale_block].unflatten(1, (page_size, fmt.scale_block))
    start, length, _ = fmt.parts()["scales"]
    return rows, holder[..., start:start + length]


def _part(rows: torch.Tensor, fmt: RecordFormat, name: str) -> torch.Tensor:
    """The bytes of part ``name`` (``values`` or ``rope``) of rows ``(..., row_bytes)``: a view."""
    start, length, _ = fmt.parts()[name]
    return rows[..., start:start + length]


def _at(slots: torch.Tensor, page_size: int) -> tuple:
    """A slot's (page, offset): slot = page * page_size + offset."""
    slots = slots.long()
    return slots // page_size, slots % page_size


def write_records(pool: torch.Tensor, slots: torch.Tensor, q: Quantized, fmt: RecordFormat, page_size: int):
    """Store ``q``'s tokens at ``slots`` of ``pool (pages, page_bytes)`` uint8, in place."""
    rows, scale_bytes = _page_parts(pool, fmt, page_size)
    at = _at(slots, page_size)
    _part(rows, fmt, "values")[at] = q.nope.contiguous().view(torch.uint8)
    _part(rows, fmt, "rope")[at] = q.rope.contiguous().view(torch.uint8)
    scale_bytes[at] = q.scales.to(torch_dtype(fmt.scale_dtype)).contiguous().view(torch.uint8)


def read_records(pool: torch.Tensor, slots: torch.Tensor, fmt: RecordFormat, page_size: int,
                 zeroed: torch.Tensor | None = None) -> Quantized:
    """The records at ``slots`` of ``pool``, decoded into their parts (no arithmetic).  Where ``zeroed``
    (a bool per slot) is true the record read is all zero bytes instead: a key of zeros in every view
    (the oracle's stand-in for a -1 entry, never attended, and never the poison of the slot read)."""
    rows = _page_parts(pool, fmt, page_size)[0]
    got = rows[_at(slots, page_size)]                      # a copy: a gather
    if zeroed is not None:
        got.masked_fill_(zeroed[:, None], 0)
    nope = _part(got, fmt, "values").contiguous().view(torch_dtype(fmt.value_dtype))
    rope = _part(got, fmt, "rope").contiguous().view(torch_dtype(fmt.rope_dtype))
    return Quantized(nope, read_scales(pool, slots, fmt, page_size, zeroed), rope)


def read_scales(pool: torch.Tensor, slots: torch.Tensor, fmt: RecordFormat, page_size: int,
                zeroed: torch.Tensor | None = None) -> torch.Tensor:
    """The float32 scales ``(len(slots), tiles)`` of the records at ``slots`` (``read_records``' part)."""
    raw = _page_parts(pool, fmt, page_size)[1][_at(slots, page_size)]     # a copy: a gather
    if zeroed is not None:
        raw.masked_fill_(zeroed[:, None], 0)
    return raw.contiguous().view(torch_dtype(fmt.scale_dtype)).float()


def dequantize(q: Quantized, fmt: RecordFormat, mode: str, dtype=torch.float64) -> torch.Tensor:
    """``(n, d_qk)`` keys in ``dtype``: ``exact`` (e4m3 * scale) or ``bf16_product`` (the SM90 kernel's
    ``bf16(e4m3 * bf16(scale))``; the product of 4 and 8 significant bits is exact in float32).  Each part
    is written once, into its columns of the result (the keys are the oracle's largest tensor)."""
    check_view(mode)
    n = q.nope.shape[0]
    keys = torch.empty(n, fmt.d_qk, dtype=dtype, device=q.nope.device)
    nope = keys[:, :fmt.d_nope].view(n, fmt.tiles, fmt.tile)           # a view of the result's columns
    values = q.nope.view(n, fmt.tiles, fmt.tile)
    if mode == "exact":
        nope.copy_(values).mul_(q.scales.to(dtype)[..., None])        # float64: 4 x 24 bits, exact
    else:                      # bf16_product
        scale = q.scales.to(torch.bfloat16).float()
        nope.copy_((values.float() * scale[..., None]).to(torch.bfloat16))
    keys[:, fmt.d_nope:].copy_(q.rope)
    return keys


def dequantize_pool(pool: torch.Tensor, fmt: RecordFormat, mode: str, dtype) -> torch.Tensor:
    """Every record of ``pool`` ``(pages, page_size, 1, bytes)``, slot by slot, as ``(slots, d_qk)`` keys in
    ``dtype`` (``dequantize``): the flat KV a kernel reading no records is handed."""
    pages, page_size = pool.shape[:2]
    slots = torch.arange(pages * page_size, device=pool.device)
    return dequantize(read_records(pool.view(pages, -1), slots, fmt, page_size), fmt, mode, dtype)


def views_agree(scales: torch.Tensor, zeroed: torch.Tensor) -> torch.Tensor:
    """A device bool: whether every scale (float32, ``(n, tiles)``) of a record not ``zeroed`` (``(n,)``,
    ``read_records``': its values are all zero, equal in both views) is 0 or a power of two within
    2^-100 .. 2^100, so that both views give the same keys bit for bit: ``e4m3 * 2^k`` has at most 4
    significant bits and stays far inside bf16's normal range, so ``bf16(e4m3 * bf16(scale)) == e4m3 *
    scale``.  Sufficient, not necessary: where it is false the other view is computed (and may agree)."""
    bits = scales.contiguous().view(torch.int32) & 0x7FFFFFFF
    exponent = bits >> 23
    power_of_two = (bits == 0) | (((bits & 0x7FFFFF) == 0) & (exponent >= 27) & (exponent <= 227))
    return (power_of_two | zeroed[:, None]).all()

"""The fp8 token records of DeepSeek sparse MLA caches, as data: what a case's ``kv_format`` names, and the
vocabulary its writers and readers (``building.sparse_cache``) take.

V3.2 (``v32``, 656 bytes a token, FlashMLA's ``V32_FP8Sparse``): 512 e4m3 values, 4 float32 scales
(one per 128 values), then the 64 rope values in bf16, in that order, one record per slot; a page of
``P`` slots is ``P * 656`` bytes.

V4 (``v4``, 584 bytes a token, FlashMLA's ``MODEL1_FP8Sparse``): each slot's row is 448 e4m3 values
and 64 bf16 rope values (576 bytes); after all ``P`` rows of its page come the page's scales, 8 bytes
a slot: 7 ue8m0 scales (one per 64 values) and a pad byte; a page's stride is rounded up to a multiple
of 576 bytes, as FlashMLA's tests lay it out.
"""

from dataclasses import dataclass

E4M3_MAX = 448.0
DEQUANT_MODES = ("exact", "bf16_product")
SCALE_POLICIES = ("amax", "ue8m0")


@dataclass(frozen=True)
class RecordFormat:
    name: str
    d_qk: int                 # values a token holds: d_nope fp8 + d_rope bf16
    d_nope: int
    d_rope: int
    tile: int                 # values per scale
    bytes_per_token: int
    scale_bytes: int          # 4 (float32) or 1 (ue8m0)
    scales_after_rows: bool   # V4: a page's scales follow all its token rows
    policies: tuple
    page_align: int = 1       # a page's bytes are rounded up to a multiple of this (its stride in the pool)

    @property
    def tiles(self) -> int:
        return self.d_nope // self.tile

    @property
    def row_bytes(self) -> int:
        """Bytes of a token's row (V3.2: the whole record; V4: without its scales)."""
        return self.d_nope + 2 * self.d_rope + (0 if self.scales_after_rows else self.tiles * self.scale_bytes)

    def page_bytes(self, page_size: int) -> int:
        """A page's stride in the pool: its records, rounded up to ``page_align``."""
        return -(-page_size * self.bytes_per_token // self.page_align) * self.page_align


FORMATS = {
    "v32": RecordFormat("v32", 576, 512, 64, 128, 656, 4, False, ("amax", "ue8m0")),
    # FlashMLA's tests (quant.py) round a V4 page up to a multiple of 576 bytes; so do we
    "v4": RecordFormat("v4", 512, 448, 64, 64, 584, 1, True, ("ue8m0",), page_align=576),
}


def check_policy(fmt: RecordFormat, policy: str):
    """Refuse a scale policy ``fmt`` does not take (the writers' shared check)."""
    if policy not in fmt.policies:
        raise ValueError(f"format {fmt.name} takes scale policies {', '.join(fmt.policies)}, not '{policy}'")


def check_view(view: str):
    """Refuse an unknown dequantization view (the readers' shared check)."""
    if view not in DEQUANT_MODES:
        raise ValueError(f"unknown dequantization '{view}' (known: {', '.join(DEQUANT_MODES)})")

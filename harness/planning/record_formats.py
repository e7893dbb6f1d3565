"""The quantized token records of sparse MLA caches, as data: what a case's ``kv_format`` names, and every
number its writers and readers take (``building.sparse_cache``, ``backends.torch_sparse``, the Triton passes
``fast.sparse_write_kernel`` and ``fast.sparse_keys_kernel``, the bench's byte count).  No reader infers a
layout from a format's name: a new format is one ``FORMATS`` entry.

A page of ``P`` slots holds ``P`` rows of ``row_bytes``, slot by slot: each row its ``d_nope`` quantized
values at ``values_at`` and its ``d_rope`` rope values at ``rope_at``.  A slot's scales (one per ``tile``
values) sit at ``scales_at`` of its row or, where ``scale_block`` is set, at ``scales_at`` of its
``scale_block`` bytes in a block after all ``P`` rows of its page.  A page's stride in the pool is its slots'
bytes rounded up to ``page_align``.

V3.2 (``v32``, 656 bytes a token, FlashMLA's ``V32_FP8Sparse``): 512 e4m3 values, 4 float32 scales
(one per 128 values), then the 64 rope values in bf16, in that order, one record per slot.

V4 (``v4``, 584 bytes a token, FlashMLA's ``MODEL1_FP8Sparse``): each slot's row is 448 e4m3 values
and 64 bf16 rope values (576 bytes); after all ``P`` rows of its page come the page's scales, 8 bytes
a slot: 7 ue8m0 scales (one per 64 values) and a pad byte; a page's stride is rounded up to a multiple
of 576 bytes, as FlashMLA's tests lay it out.
"""

from dataclasses import dataclass

from ..errors import InputError

DEQUANT_MODES = ("exact", "bf16_product")
SCALE_POLICIES = ("amax", "ue8m0")
# The dtypes a record's parts may take (torch's names): bytes per element, and for the quantized values
# the largest finite value (the writer maps a tile's amax onto it)
ELEMENT_BYTES = {"float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e8m0fnu": 1, "bfloat16": 2, "float16": 2,
                 "float32": 4}
VALUE_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
SCALE_DTYPES = ("float32", "float8_e8m0fnu")          # e8m0: a power of two's biased exponent (ue8m0)
E4M3_MAX = VALUE_MAX["float8_e4m3fn"]


@dataclass(frozen=True)
class RecordFormat:
    name: str
    d_nope: int               # quantized values a token holds
    d_rope: int               # rope values, kept in ``rope_dtype``
    tile: int                 # values per scale
    row_bytes: int            # a slot's row: its stride among the page's rows
    rope_at: int              # where the rope values start in a row
    scales_at: int            # where a slot's scales start: in its row, or in its part of the scale block
    policies: tuple           # the scale policies its writer takes (``SCALE_POLICIES``)
    values_at: int = 0        # where the quantized values start in a row
    scale_block: int = 0      # bytes a slot takes in the scale block after the page's rows; 0: none
    value_dtype: str = "float8_e4m3fn"
    scale_dtype: str = "float32"
    rope_dtype: str = "bfloat16"
    page_align: int = 1       # a page's bytes are rounded up to a multiple of this (its stride in the pool)

    def __post_init__(self):
        problem = layout_problem(self)
        if problem:
            raise ValueError(f"record format {self.name}: {problem}")

    @property
    def d_qk(self) -> int:
        return self.d_nope + self.d_rope

    @property
    def tiles(self) -> int:
        return self.d_nope // self.tile

    @property
    def value_bytes(self) -> int:
        return ELEMENT_BYTES[self.value_dtype]

    @property
    def scale_bytes(self) -> int:
        """Bytes of one scale (4: float32, 1: ue8m0)."""
        return ELEMENT_BYTES[self.scale_dtype]

    @property
    def rope_bytes(self) -> int:
        return ELEMENT_BYTES[self.rope_dtype]

    @property
    def value_max(self) -> float:
        return VALUE_MAX[self.value_dtype]

    @property
    def bytes_per_token(self) -> int:
        """A slot's share of its page: its row and its part of the scale block."""
        return self.row_bytes + self.scale_block

    def page_bytes(self, page_size: int) -> int:
        """A page's stride in the pool: its records, rounded up to ``page_align``."""
        return -(-page_size * self.bytes_per_token // self.page_align) * self.page_align

    def parts(self) -> dict:
        """Each part's ``(start, bytes, element bytes)`` in the bytes that hold it (the row, or the slot's
        part of the scale block for the scales)."""
        return {"values": (self.values_at, self.d_nope * self.value_bytes, self.value_bytes),
                "rope": (self.rope_at, self.d_rope * self.rope_bytes, self.rope_bytes),
                "scales": (self.scales_at, self.tiles * self.scale_bytes, self.scale_bytes)}


def layout_problem(fmt: RecordFormat) -> str | None:
    """What makes ``fmt`` impossible to read (parts outside their bytes, overlapping, misaligned for their
    dtype, a scale dtype its policies cannot fill), or None."""
    if fmt.value_dtype not in VALUE_MAX or fmt.scale_dtype not in SCALE_DTYPES or fmt.rope_dtype not in ELEMENT_BYTES:
        return (f"dtypes {fmt.value_dtype}, {fmt.scale_dtype}, {fmt.rope_dtype}: values take one of "
                f"{', '.join(VALUE_MAX)}, scales one of {', '.join(SCALE_DTYPES)}")
    if fmt.tile < 1 or fmt.d_nope % fmt.tile or fmt.d_rope < 0:
        return f"{fmt.d_nope} values are not whole tiles of {fmt.tile}"
    if not set(fmt.policies) <= set(SCALE_POLICIES) or (fmt.scale_dtype != "float32" and "amax" in fmt.policies):
        return f"scale policies {fmt.policies}: amax scales need float32 (known: {', '.join(SCALE_POLICIES)})"
    parts = fmt.parts()
    in_row = [parts["values"], parts["rope"]] + ([] if fmt.scale_block else [parts["scales"]])
    holders = [(fmt.row_bytes, in_row)] + ([(fmt.scale_block, [parts["scales"]])] if fmt.scale_block else [])
    for size, held in holders:
        ends = sorted((start, start + length) for start, length, _ in held)
        if ends[0][0] < 0 or ends[-1][1] > size or any(a[1] > b[0] for a, b in zip(ends, ends[1:])):
            return f"parts {ends} overlap or fall outside their {size} bytes"
    # every part aligned for its dtype on any page size: the Triton passes load a scale or rope value whole
    widest = max(width for _, _, width in parts.values())
    if any(start % width for _, held in holders for start, _, width in held):
        return "a part does not start at a multiple of its element size"
    if fmt.row_bytes % widest or fmt.scale_block % widest or (fmt.page_align != 1 and fmt.page_align % widest):
        return f"row_bytes, scale_block and page_align must be multiples of {widest} bytes (its widest element)"
    return None


FORMATS = {
    "v32": RecordFormat("v32", d_nope=512, d_rope=64, tile=128, row_bytes=656, rope_at=528, scales_at=512,
                        policies=("amax", "ue8m0")),
    # FlashMLA's tests (quant.py) round a V4 page up to a multiple of 576 bytes; so do we
    "v4": RecordFormat("v4", d_nope=448, d_rope=64, tile=64, row_bytes=576, rope_at=448, scales_at=0,
                       policies=("ue8m0",), scale_block=8, scale_dtype="float8_e8m0fnu", page_align=576),
}


def record_format(name: str) -> RecordFormat:
    """The format ``name`` names; an unknown name is one line naming the known ones."""
    if name not in FORMATS:
        raise InputError(f"unknown record format '{name}' (known: {', '.join(FORMATS)})")
    return FORMATS[name]


def check_policy(fmt: RecordFormat, policy: str):
    """Refuse a scale policy ``fmt`` does not take (the writers' shared check)."""
    if policy not in fmt.policies:
        raise ValueError(f"format {fmt.name} takes scale policies {', '.join(fmt.policies)}, not '{policy}'")


def check_view(view: str):
    """Refuse an unknown dequantization view (the readers' shared check)."""
    if view not in DEQUANT_MODES:
        raise ValueError(f"unknown dequantization '{view}' (known: {', '.join(DEQUANT_MODES)})")

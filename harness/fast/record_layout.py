"""A record format (``planning.record_formats.RecordFormat``) as the Triton passes take it: where each part
sits, as their compile-time constants, and whether they handle its dtypes at all.

Both passes (``sparse_write_kernel``, ``sparse_keys_kernel``) convert e4m3 values, bf16 rope values and
float32 or ue8m0 scales in bits; a format with other dtypes is left to PyTorch's form, which takes any the
format names.
"""

from ..planning.record_formats import RecordFormat

HANDLED = {"value_dtype": ("float8_e4m3fn",), "rope_dtype": ("bfloat16",),
           "scale_dtype": ("float32", "float8_e8m0fnu")}


def handled(fmt: RecordFormat, chunk: int = 1) -> bool:
    """Whether the passes take ``fmt``: its dtypes are ``HANDLED`` and its values and tiles whole ``chunk``s
    (the values a program converts at a time)."""
    return all(getattr(fmt, part) in dtypes for part, dtypes in HANDLED.items()) \
        and not (fmt.d_nope % chunk or fmt.tile % chunk)


def refusal(fmt: RecordFormat) -> str:
    return (f"format {fmt.name}: the Triton passes take "
            + "; ".join(f"{part} {' or '.join(dtypes)}" for part, dtypes in HANDLED.items())
            + f", not {fmt.value_dtype}, {fmt.rope_dtype} and {fmt.scale_dtype} (or its widths are no whole chunks)")


def constants(fmt: RecordFormat) -> dict:
    """The kernels' constants: the widths, a row's stride and where each part starts (``SCALE_BLOCK``: a
    slot's bytes in the block after its page's rows that holds its scales, 0 where they are in its row)."""
    return {"D_NOPE": fmt.d_nope, "D_ROPE": fmt.d_rope, "TILE": fmt.tile, "ROW": fmt.row_bytes,
            "VALUES_AT": fmt.values_at, "ROPE_AT": fmt.rope_at, "SCALES_AT": fmt.scales_at,
            "SCALE_BLOCK": fmt.scale_block, "UE8M0": fmt.scale_dtype == "float8_e8m0fnu"}

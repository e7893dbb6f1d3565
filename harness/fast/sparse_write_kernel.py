"""A sparse case's tokens quantized and written into the pool's records in one pass on CUDA: a Triton kernel
for ``sparse_cache.quantize`` followed by ``sparse_cache.write_records``.

PyTorch's form widens the tokens' values to float32, takes each tile's amax, scales, clamps and converts
them (a pass each), then scatters the values, the rope and the scales into the records (three more).  Here
each program reads ``BLOCK`` tokens once and writes their records once.  The arithmetic is the same
operations, each correctly rounded: the ratio ``amax * float32(1 / 448)`` (``sparse_cache.tile_scales``);
under ``amax`` that is the scale, and the values are times its reciprocal (``div_rn``), then clamped; under
``ue8m0`` the scale is the smallest power of two at or above ``max(ratio, 1e-4)`` (in bits) and the values
are divided by it (exact).  The e4m3 conversion is PyTorch's (nearest, ties to even, as c10's
``fp8e4m3fn_from_fp32_value`` and the GPU's ``cvt`` both round; NaN is 0x7F with its sign), said in bits so
that Triton's interpreter converts as the GPU does.  So the pool's bytes are PyTorch's
(``tests/fast/test_sparse_write_kernel.py``).  Where each part goes is the format's data (``RecordFormat``), handed
in as constants (``constants``).  Where Triton does not import or cannot build the kernel, or the format's
dtypes are not those it converts, ``write_tokens`` says no and PyTorch's form runs.
"""

import functools

import torch

from ..planning.record_formats import FORMATS, RecordFormat, check_policy
from .triton_probe import defined_with_triton, usable

BLOCK = 16           # tokens a program writes
# What both record passes (this writer and ``sparse_keys_kernel``'s reader) convert in bits; a format of other
# dtypes is left to PyTorch's form, which takes any a format names
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


def write_tokens(pool: torch.Tensor, slots: torch.Tensor, tokens: torch.Tensor, fmt: RecordFormat, page_size: int,
                 policy: str) -> bool:
    """Store ``tokens (len(slots), d_qk)`` bf16 at ``slots`` of ``pool (pages, page_bytes)`` uint8 as
    ``write_records(pool, slots, quantize(tokens, fmt, policy), fmt, page_size)`` does, the same bytes.
    False, with nothing written, where the kernel does not apply (off CUDA, another device, a format it does
    not write) or cannot run."""
    if not (pool.is_cuda and slots.device == tokens.device == pool.device and handled(fmt)):
        return False
    kernel = usable_kernel(str(pool.device))
    if kernel is None:
        return False
    run(kernel, pool, slots, tokens, fmt, page_size, policy)
    return True


def run(kernel, pool, slots, tokens, fmt: RecordFormat, page_size: int, policy: str):
    """``write_tokens`` with this kernel (the tests run it under Triton's interpreter too)."""
    check_policy(fmt, policy)
    if not handled(fmt):
        raise ValueError(refusal(fmt))
    if tokens.dtype != torch.bfloat16 or tokens.shape != (slots.numel(), fmt.d_qk):
        raise ValueError(f"tokens must be bf16 ({slots.numel()}, {fmt.d_qk}), got {tokens.dtype} "
                         f"{tuple(tokens.shape)}")
    n = slots.numel()
    if n:
        kernel[(-(-n // BLOCK),)](pool.view(torch.uint8), slots.reshape(-1), tokens.contiguous(), n, page_size,
                                  pool.stride(0), **constants(fmt), AMAX_POLICY=policy == "amax",
                                  INVERSE_MAX=1.0 / fmt.value_max, BLOCK=BLOCK)


@functools.cache
def usable_kernel(device: str):
    """The kernel, once it has built and run on ``device`` (one V3.2 record); None where Triton does not
    import or cannot build it (then one warning line: a Triton it was not tried with costs speed)."""
    def first_launch(kernel):
        fmt = FORMATS["v32"]
        pool = torch.zeros(1, fmt.page_bytes(64), dtype=torch.uint8, device=device)
        tokens = torch.zeros(1, fmt.d_qk, dtype=torch.bfloat16, device=device)
        run(kernel, pool, torch.zeros(1, dtype=torch.int64, device=device), tokens, fmt, 64, "ue8m0")
    return usable("the sparse records' Triton writer", device, "writing records with PyTorch's form",
                  _triton_kernel, first_launch)


@defined_with_triton
def _triton_kernel(triton, tl):
    """The kernel (``triton_probe.defined_with_triton``: made on first use, None without Triton)."""

    @triton.jit(do_not_specialize=["n"], do_not_specialize_on_alignment=["slots_ptr"])
    def token_records(pool_ptr, slots_ptr, tokens_ptr, n, page_size, page_stride, D_NOPE: tl.constexpr,
                      D_ROPE: tl.constexpr, TILE: tl.constexpr, ROW: tl.constexpr, VALUES_AT: tl.constexpr,
                      ROPE_AT: tl.constexpr, SCALES_AT: tl.constexpr, SCALE_BLOCK: tl.constexpr,
                      UE8M0: tl.constexpr, AMAX_POLICY: tl.constexpr, INVERSE_MAX: tl.constexpr,
                      BLOCK: tl.constexpr):
        token = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = token < n
        slot = tl.load(slots_ptr + token, mask=inside, other=0).to(tl.int64)
        page, offset = slot // page_size, slot % page_size
        row = page * page_stride + offset * ROW                                     # int64: large pools
        if SCALE_BLOCK:             # the slot's part of the block after all the page's rows (V4)
            scales = page * page_stride + page_size * ROW + offset * SCALE_BLOCK + SCALES_AT
        else:                       # in the slot's row (V3.2)
            scales = row + SCALES_AT
        source = tokens_ptr + token[:, None] * (D_NOPE + D_ROPE)
        for start in tl.static_range(0, D_NOPE, TILE):
            column = start + tl.arange(0, TILE)
            x = tl.load(source + column[None, :], mask=inside[:, None], other=0.0).to(tl.float32)
            ratio = tl.max(tl.abs(x), axis=1) * INVERSE_MAX             # sparse_cache.tile_scales' product
            if AMAX_POLICY:         # SGLang: amax / 448 as is, values times its reciprocal, clamped (NaN kept)
                scale = ratio
                v = x * tl.div_rn(tl.full(ratio.shape, 1.0, tl.float32), scale)[:, None]
                v = tl.where(v != v, v, tl.minimum(tl.maximum(v, -448.0), 448.0))
            else:                   # the smallest power of two at or above max(amax / 448, 1e-4)
                bits = tl.maximum(ratio, 1e-4).to(tl.int32, bitcast=True)
                exponent = (bits >> 23) + ((bits & 0x7FFFFF) != 0).to(tl.int32)
                scale = (exponent << 23).to(tl.float32, bitcast=True)
                v = tl.div_rn(x, scale[:, None])                                     # exact: a power of two
            # float -> e4m3fn as c10 says it in bits (|v| <= 448 here, or NaN: 0x7F from 480 up)
            f = v.to(tl.int32, bitcast=True)
            sign = (f >> 24) & 0x80
            magnitude = f & 0x7FFFFFFF
            tiny = ((magnitude.to(tl.float32, bitcast=True) + 16384.0).to(tl.int32, bitcast=True)
                    - (141 << 23))                                                    # below 2^-6: units of 2^-9
            normal = (magnitude + ((7 - 127) << 23) + 0x7FFFF + ((magnitude >> 20) & 1)) >> 20
            code = tl.where(magnitude >= (1087 << 20), 0x7F, tl.where(magnitude < (121 << 23), tiny, normal))
            tl.store(pool_ptr + row[:, None] + VALUES_AT + column[None, :], ((code & 0xFF) | sign).to(tl.uint8),
                     mask=inside[:, None])
            if UE8M0:               # a ue8m0 byte: the power of two's biased exponent
                tl.store(pool_ptr + scales + start // TILE, (exponent & 0xFF).to(tl.uint8), mask=inside)
            else:
                at = (pool_ptr + scales + 4 * (start // TILE)).to(tl.pointer_type(tl.float32))
                tl.store(at, scale, mask=inside)
        column = tl.arange(0, D_ROPE)
        rope = tl.load(source + D_NOPE + column[None, :], mask=inside[:, None], other=0.0)
        rope_at = (pool_ptr + row + ROPE_AT).to(tl.pointer_type(tl.bfloat16))
        tl.store(rope_at[:, None] + column[None, :], rope, mask=inside[:, None])

    return token_records

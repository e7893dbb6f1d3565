"""The sparse oracle's listed keys read from the pool's records and dequantized to float64 in one pass on
CUDA: a Triton kernel for ``sparse_cache.read_records`` followed by ``sparse_cache.dequantize``.

PyTorch's form gathers each listed record's bytes, zeroes the copies of -1 entries, splits them into
contiguous parts, then writes the float64 key in two passes (the values, then times their scales): about
17 KB moved per entry of a 656-byte record.  Here each program reads ``BLOCK`` entries' records and writes
their keys, the record read once and the key written once (about 4.6 KB).  The arithmetic is the same
operations in the same order, each correctly rounded: ``exact`` is ``e4m3 * scale`` in float64;
``bf16_product`` is ``bf16(e4m3 * bf16(scale))`` in float32 (FlashMLA's SM90 kernel); the rope values are
widened; a ``zeroed`` entry reads a record of zero bytes.  So the keys are PyTorch's bits, NaN where a
record holds one (``tests/fast/test_sparse_keys_kernel.py``).  Where each part sits is the format's data
(``RecordFormat``), handed in as constants (``sparse_write_kernel.constants``, the writer's).  Where Triton
does not import or cannot build the kernel, or the format's dtypes are not those it converts, ``read_keys``
says no and PyTorch's form runs.
"""

import functools

import torch

from ..planning.record_formats import FORMATS, RecordFormat, check_view
from .sparse_write_kernel import constants, handled, refusal
from .triton_probe import defined_with_triton, usable

BLOCK = 32           # entries a program reads
CHUNK = 64           # values it converts at a time (a scale's tile is 64 or 128 values)


def read_keys(pool: torch.Tensor, slots: torch.Tensor, zeroed: torch.Tensor, fmt: RecordFormat, page_size: int,
              view: str, disagree: torch.Tensor | None = None) -> torch.Tensor | None:
    """The keys ``(len(slots), d_qk)`` float64 of the records at ``slots`` of ``pool (pages, page_bytes)``
    in ``view``, zeros where ``zeroed`` (a bool per slot): ``dequantize(read_records(...), fmt, view)``'s
    bits.  ``disagree`` (an int32 on the device, or None): set to 1 where some scale read fails
    ``sparse_cache.views_agree`` (left as it is otherwise).  None where the kernel does not apply (off
    CUDA, another device, a format it does not read) or cannot run."""
    if not (pool.is_cuda and slots.device == pool.device == zeroed.device and handled(fmt, CHUNK)):
        return None
    kernel = usable_kernel(str(pool.device))
    return None if kernel is None else run(kernel, pool, slots, zeroed, fmt, page_size, view, disagree)


def run(kernel, pool, slots, zeroed, fmt: RecordFormat, page_size: int, view: str,
        disagree: torch.Tensor | None = None) -> torch.Tensor:
    """``read_keys`` with this kernel (the tests run it under Triton's interpreter too)."""
    check_view(view)
    if not handled(fmt, CHUNK):
        raise ValueError(refusal(fmt))
    n = slots.numel()
    keys = torch.empty(n, fmt.d_qk, dtype=torch.float64, device=pool.device)
    if n:
        pool = pool.view(torch.uint8)
        flag = disagree if disagree is not None else keys      # any pointer: not written without CHECK_VIEWS
        kernel[(-(-n // BLOCK),)](pool, slots.reshape(-1), zeroed.reshape(-1), keys, flag, n, page_size,
                                  pool.stride(0), **constants(fmt), EXACT=view == "exact",
                                  CHECK_VIEWS=disagree is not None, BLOCK=BLOCK, CHUNK=CHUNK)
    return keys


@functools.cache
def usable_kernel(device: str):
    """The kernel, once it has built and run on ``device`` (a zeroed V3.2 record); None where Triton does
    not import or cannot build it (then one warning line: a Triton it was not tried with costs speed)."""
    def first_launch(kernel):
        fmt = FORMATS["v32"]
        pool = torch.zeros(1, fmt.page_bytes(64), dtype=torch.uint8, device=device)
        slots = torch.zeros(1, dtype=torch.int64, device=device)
        run(kernel, pool, slots, torch.ones(1, dtype=torch.bool, device=device), fmt, 64, "bf16_product")
    return usable("the sparse oracle's Triton kernel", device, "reading records with PyTorch's form",
                  _triton_kernel, first_launch)


@defined_with_triton
def _triton_kernel(triton, tl):
    """The kernel (``triton_probe.defined_with_triton``: made on first use, None without Triton)."""

    # the index arrays may be views at any offset: not specialised on alignment; the pool's page stride is
    # (a multiple of 16 bytes in both shipped formats), so a record's bytes load 16 at a time
    @triton.jit(do_not_specialize=["n"], do_not_specialize_on_alignment=["slots_ptr", "zeroed_ptr"])
    def record_keys(pool_ptr, slots_ptr, zeroed_ptr, keys_ptr, disagree_ptr, n, page_size, page_stride,
                    D_NOPE: tl.constexpr, D_ROPE: tl.constexpr, TILE: tl.constexpr, ROW: tl.constexpr,
                    VALUES_AT: tl.constexpr, ROPE_AT: tl.constexpr, SCALES_AT: tl.constexpr,
                    SCALE_BLOCK: tl.constexpr, UE8M0: tl.constexpr, EXACT: tl.constexpr,
                    CHECK_VIEWS: tl.constexpr, BLOCK: tl.constexpr, CHUNK: tl.constexpr):
        entry = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = entry < n
        slot = tl.load(slots_ptr + entry, mask=inside, other=0).to(tl.int64)
        live = inside & (tl.load(zeroed_ptr + entry, mask=inside, other=1) == 0)   # a zeroed entry reads 0
        page, offset = slot // page_size, slot % page_size
        row = page * page_stride + offset * ROW                                     # int64: large pools
        if SCALE_BLOCK:             # the slot's part of the block after all the page's rows (V4)
            scales = page * page_stride + page_size * ROW + offset * SCALE_BLOCK + SCALES_AT
        else:                       # in the slot's row (V3.2)
            scales = row + SCALES_AT
        key = keys_ptr + entry[:, None] * (D_NOPE + D_ROPE)
        for start in tl.static_range(0, D_NOPE, CHUNK):
            column = start + tl.arange(0, CHUNK)
            raw = tl.load(pool_ptr + row[:, None] + VALUES_AT + column[None, :], mask=live[:, None], other=0)
            value = raw.to(tl.float8e4nv, bitcast=True).to(tl.float32)
            # e4m3fn's one NaN (0x7F, either sign), said outright: Triton's interpreter reads it as a number
            value = tl.where((raw & 0x7F) == 0x7F, float("nan"), value)
            if UE8M0:               # ue8m0 byte b is 2^(b - 127): byte 0 the subnormal 2^-127, 255 NaN
                b = tl.load(pool_ptr + scales + start // TILE, mask=live, other=0).to(tl.int32)
                bits = tl.where(b == 0, 0x400000, tl.where(b == 255, 0x7FC00000, b << 23))
                scale = bits.to(tl.float32, bitcast=True)
            else:
                at = (pool_ptr + scales + 4 * (start // TILE)).to(tl.pointer_type(tl.float32))
                scale = tl.load(at, mask=live, other=0.0)
            if CHECK_VIEWS:         # sparse_cache.views_agree: 0 or a power of two in 2^-100 .. 2^100
                bits = scale.to(tl.int32, bitcast=True) & 0x7FFFFFFF
                exponent = bits >> 23
                power_of_two = (bits == 0) | (((bits & 0x7FFFFF) == 0) & (exponent >= 27) & (exponent <= 227))
                fails = tl.max((live & ~power_of_two).to(tl.int32), axis=0)
                if fails != 0:
                    tl.atomic_max(disagree_ptr, fails)
            if EXACT:
                out = value.to(tl.float64) * scale.to(tl.float64)[:, None]
            else:
                # bf16 rounding (nearest, ties to even, as PyTorch rounds; NaN kept) said in bits, on
                # float32s: Triton's interpreter truncates a cast to bf16 where the GPU rounds
                bits = scale.to(tl.int32, bitcast=True)
                half = ((bits + 0x7FFF + ((bits >> 16) & 1)) & -65536).to(tl.float32, bitcast=True)
                product = value * tl.where(scale != scale, scale, half)[:, None]     # exact: 4 x 8 bits
                bits = product.to(tl.int32, bitcast=True)
                rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & -65536).to(tl.float32, bitcast=True)
                out = tl.where(product != product, product, rounded).to(tl.float64)
            tl.store(key + column[None, :], out, mask=inside[:, None])
        rope_at = (pool_ptr + row + ROPE_AT).to(tl.pointer_type(tl.bfloat16))
        column = tl.arange(0, D_ROPE)
        rope = tl.load(rope_at[:, None] + column[None, :], mask=live[:, None], other=0.0)
        tl.store(key + D_NOPE + column[None, :], rope.to(tl.float64), mask=inside[:, None])

    return record_keys

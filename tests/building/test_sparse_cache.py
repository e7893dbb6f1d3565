"""The sparse cache records (harness/building/sparse_cache.py): byte layout read by hand, round trips, and
the readers against the writers' input within the format's quantization."""

import math
import struct

import pytest
import torch

from harness.building.sparse_cache import (
    FORMATS,
    POISON_BYTE,
    dequantize,
    quantize,
    read_records,
    tile_scales,
    views_agree,
    write_records,
)

P = 4


def tokens(n, fmt, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(n, fmt.d_qk, generator=gen) * 3).to(torch.bfloat16)


def pool_for(fmt, pages=3):
    return torch.full((pages, fmt.page_bytes(P)), POISON_BYTE, dtype=torch.uint8)


def bf16_bytes(x: float) -> bytes:
    return struct.pack("<H", int(torch.tensor([x], dtype=torch.bfloat16).view(torch.int16)[0]) & 0xFFFF)


def test_formats_sizes_match_their_documented_bytes():
    assert FORMATS["v32"].bytes_per_token == 512 + 4 * 4 + 64 * 2 == 656
    assert FORMATS["v4"].bytes_per_token == 448 + 64 * 2 + 7 + 1 == 584
    assert FORMATS["v32"].page_bytes(64) == 64 * 656
    assert FORMATS["v4"].page_bytes(64) == 65 * 576 >= 64 * 584      # FlashMLA's tests' padded page


@pytest.mark.parametrize("policy", ["amax", "ue8m0"])
def test_v32_record_bytes_where_the_format_puts_them(policy):
    fmt = FORMATS["v32"]
    x = tokens(2, fmt)
    pool = pool_for(fmt)
    write_records(pool, torch.tensor([5, 2]), quantize(x, fmt, policy), fmt, P)
    flat = pool.view(-1)
    record = bytes(flat[5 * 656:6 * 656].tolist())            # slot 5 = page 1, offset 1
    amax = x[0, :128].float().abs().max()
    scale = float(tile_scales(amax[None], policy)[0])
    assert record[512:516] == struct.pack("<f", scale)
    assert record[528:530] == bf16_bytes(float(x[0, 512]))
    assert record[654:656] == bf16_bytes(float(x[0, 575]))
    e4m3 = torch.tensor([record[0]], dtype=torch.uint8).view(torch.float8_e4m3fn).double()
    assert abs(float(e4m3) * scale - float(x[0, 0])) <= abs(float(x[0, 0])) * 2**-4 + scale * 2**-9
    untouched = [s for s in range(3 * P) if s not in (5, 2)]
    for s in untouched:
        assert set(flat[s * 656:(s + 1) * 656].tolist()) == {POISON_BYTE}


def test_v4_rows_then_the_pages_scales():
    fmt = FORMATS["v4"]
    x = tokens(1, fmt)
    pool = pool_for(fmt)
    write_records(pool, torch.tensor([6]), quantize(x, fmt, "ue8m0"), fmt, P)   # page 1, offset 2
    page = bytes(pool[1].tolist())
    row = page[2 * 576:3 * 576]
    assert row[448:450] == bf16_bytes(float(x[0, 448]))
    scales = page[P * 576 + 2 * 8:P * 576 + 3 * 8]
    amax = float(x[0, :64].float().abs().max())
    assert scales[0] == 127 + math.ceil(math.log2(max(amax / 448, 1e-4)))       # ue8m0: biased exponent
    assert scales[7] == POISON_BYTE                                              # the pad byte: not written
    assert set(page[:2 * 576]) == {POISON_BYTE}
    assert set(page[P * 584:]) == {POISON_BYTE}                                  # the page's padding


@pytest.mark.parametrize("name,policy", [("v32", "amax"), ("v32", "ue8m0"), ("v4", "ue8m0")])
def test_round_trip_returns_the_parts_written(name, policy):
    fmt = FORMATS[name]
    q = quantize(tokens(7, fmt, seed=3), fmt, policy)
    pool = pool_for(fmt)
    slots = torch.tensor([11, 0, 3, 4, 9, 1, 6])
    write_records(pool, slots, q, fmt, P)
    back = read_records(pool, slots, fmt, P)
    assert torch.equal(back.nope.view(torch.uint8), q.nope.view(torch.uint8))
    assert torch.equal(back.scales, q.scales)
    assert torch.equal(back.rope.view(torch.int16), q.rope.view(torch.int16))


@pytest.mark.parametrize("name,policy", [("v32", "amax"), ("v32", "ue8m0"), ("v4", "ue8m0")])
def test_reader_equals_the_writers_input_within_e4m3(name, policy):
    fmt = FORMATS[name]
    x = tokens(16, fmt, seed=4)
    q = quantize(x, fmt, policy)
    keys = dequantize(q, fmt, "exact")
    err = (keys - x.double()).abs()
    scale = q.scales.double().repeat_interleave(fmt.tile, dim=1)
    # e4m3 rounds to 3 mantissa bits (2^-4 relative); near zero its subnormal step is 2^-9 scale units
    assert (err[:, :fmt.d_nope] <= x[:, :fmt.d_nope].double().abs() * 2**-4 + scale * 2**-9).all()
    assert torch.equal(keys[:, fmt.d_nope:], x[:, fmt.d_nope:].double())       # rope is bf16: exact


def test_kernel_dequant_equals_exact_for_power_of_two_scales_only():
    fmt = FORMATS["v32"]
    x = tokens(16, fmt, seed=5)
    pow2 = quantize(x, fmt, "ue8m0")
    assert torch.equal(dequantize(pow2, fmt, "bf16_product"), dequantize(pow2, fmt, "exact"))
    amax = quantize(x, fmt, "amax")
    differ = dequantize(amax, fmt, "bf16_product") != dequantize(amax, fmt, "exact")
    assert differ.any()
    rel = ((dequantize(amax, fmt, "bf16_product") - dequantize(amax, fmt, "exact")).abs()
           / dequantize(amax, fmt, "exact").abs().clamp_min(1e-30))
    # two bf16 roundings (unit roundoff u = 2^-8 each): |err| <= (2u + u^2) |exact| (docs/sparse.md)
    assert float(rel.max()) <= 2 * 2**-8 + 2**-16


@pytest.mark.parametrize("name", ["v32", "v4"])
def test_views_agree_on_power_of_two_scales_and_ignores_zeroed_records(name):
    fmt = FORMATS[name]
    pool = pool_for(fmt)
    write_records(pool, torch.arange(4), quantize(tokens(4, fmt, seed=6), fmt, "ue8m0"), fmt, P)
    zeroed = torch.tensor([False, True, False, True])
    records = read_records(pool, torch.tensor([0, 9, 2, 11]), fmt, P, zeroed=zeroed)   # 9, 11: poison, zeroed
    assert bool(views_agree(records.scales, zeroed))
    for mode in ("exact", "bf16_product"):            # a zeroed record is a key of zeros in every view
        assert torch.equal(dequantize(records, fmt, mode)[zeroed], torch.zeros(2, fmt.d_qk, dtype=torch.float64))
    assert torch.equal(dequantize(records, fmt, "exact"), dequantize(records, fmt, "bf16_product"))
    unmasked = bool(views_agree(records.scales, torch.zeros(4, dtype=torch.bool)))
    assert unmasked == (name == "v32")          # a zero float32 scale passes; V4's e8m0 byte 0 is 2^-127
    if name == "v32":
        amax = quantize(tokens(4, fmt, seed=7), fmt, "amax")
        assert not bool(views_agree(amax.scales, torch.zeros(4, dtype=torch.bool)))


def test_poisoned_records_read_as_nan_in_every_part():
    for fmt in FORMATS.values():
        back = read_records(pool_for(fmt), torch.tensor([3]), fmt, P)
        for mode in ("exact", "bf16_product"):
            assert torch.isnan(dequantize(back, fmt, mode)).all()


def test_v4_refuses_a_non_power_of_two_policy():
    with pytest.raises(ValueError, match="ue8m0"):
        quantize(tokens(1, FORMATS["v4"]), FORMATS["v4"], "amax")

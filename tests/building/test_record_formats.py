"""A record format is one entry of data (``harness/planning/record_formats.py``): a toy third format, added
in this file alone, is written, read by the torch backend and by the oracle, and judged like V3.2 and V4.

The toy puts the rope values first in a row, the e4m3 values after them, and 8 float32 scales (one per 64
values) in a block after the page's rows, 16 bytes into each slot's 48: no shipped format does any of these.
"""

import dataclasses
import struct
import textwrap

import pytest
import torch
from helpers import disagreements_on_cuda, disagreements_under_interpreter

from harness.backends.torch_backend import TorchBackend
from harness.building import sparse_cache
from harness.errors import InputError
from harness.planning.cases import Case, validate_case
from harness.planning.record_formats import FORMATS, RecordFormat, record_format
from harness.recording.status import Status
from harness.running.backend_loader import load_backend
from harness.scenarios import sparse

TOY = RecordFormat("toy", d_nope=512, d_rope=64, tile=64, row_bytes=640, rope_at=0, values_at=128,
                   scales_at=16, scale_block=48, policies=("amax", "ue8m0"))
TOY_E5M2 = dataclasses.replace(TOY, name="toy-e5m2", value_dtype="float8_e5m2")   # for PyTorch's form only
P = 4


@pytest.fixture(autouse=True)
def toys(monkeypatch):
    for fmt in (TOY, TOY_E5M2):
        monkeypatch.setitem(FORMATS, fmt.name, fmt)


def toy_case(kv_format="toy", kv_scales="amax", **fields):
    case = Case(id=f"toy/{kv_format}-{kv_scales}/0", seed=11, scenario="sparse", kv_format=kv_format,
                kv_scales=kv_scales, d_qk=576, heads=16, topk=64, batch_size=3, seqlen="list:20,64,100",
                index_pattern="repeat", sink="random", **fields)
    return validate_case(case, "test")


def test_the_toy_format_puts_each_part_where_its_data_says():
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(1, TOY.d_qk, generator=gen) * 3).to(torch.bfloat16)
    pool = torch.full((3, TOY.page_bytes(P)), sparse_cache.POISON_BYTE, dtype=torch.uint8)
    sparse_cache.write_records(pool, torch.tensor([6]), sparse_cache.quantize(x, TOY, "amax"), TOY, P)
    page = bytes(pool[1].tolist())                                      # slot 6: page 1, offset 2
    row, block = page[2 * 640:3 * 640], page[P * 640 + 2 * 48:P * 640 + 3 * 48]
    assert row[:2] == struct.pack("<H", int(x[0, 512].view(torch.int16)) & 0xFFFF)   # the rope first
    scale = float(sparse_cache.tile_scales(x[0, 64:128].float().abs().max()[None], "amax")[0])
    assert block[16 + 4:16 + 8] == struct.pack("<f", scale)             # tile 1's float32 scale
    value = torch.tensor([row[128 + 64]], dtype=torch.uint8).view(torch.float8_e4m3fn).double()
    assert abs(float(value) * scale - float(x[0, 64])) <= abs(float(x[0, 64])) * 2**-4 + scale * 2**-9
    assert set(block[:16]) == {sparse_cache.POISON_BYTE}                # the block's first 16 bytes: unwritten
    assert set(page[:2 * 640]) == {sparse_cache.POISON_BYTE}


@pytest.mark.parametrize("kv_format,kv_scales", [("toy", "amax"), ("toy", "ue8m0"), ("toy-e5m2", "ue8m0")])
def test_a_sparse_case_on_a_toy_format_passes_the_torch_backend_against_the_oracle(kv_format, kv_scales):
    outcome = sparse.run(toy_case(kv_format, kv_scales), load_backend("torch"), "cpu")
    assert outcome.status is Status.PASS, outcome.messages
    assert outcome.metrics["sparse"]["kv_format"] == kv_format and outcome.metrics["sparse"]["valid_entries"]


VALUES_FIRST = dataclasses.replace(TOY, name="values-first", values_at=0, rope_at=512)


class ReadsValuesFirst(TorchBackend):
    """A kernel that reads any pool in the shipped formats' order: the values first, the rope after them."""

    name = "reads-values-first"

    def sparse_records(self, inputs, slots):
        return super().sparse_records(dataclasses.replace(inputs, fmt=VALUES_FIRST), slots)


def test_the_oracle_reads_the_toy_layout_not_another(monkeypatch):
    monkeypatch.setitem(FORMATS, VALUES_FIRST.name, VALUES_FIRST)
    outcome = sparse.run(toy_case(), ReadsValuesFirst(), "cpu")
    assert outcome.status is Status.FAIL, outcome.reason


def test_a_backend_declaring_its_formats_refuses_the_toy():
    from harness.backends.flashmla_sparse import FlashMLASparseBackend
    reason = FlashMLASparseBackend.capabilities.sparse.reason_unsupported(toy_case(), "cuda")
    assert reason == "kv_format toy not supported (reads v32, v4)"


def test_an_unknown_format_is_one_line_naming_the_known_ones():
    with pytest.raises(InputError, match=r"^unknown record format 'v9' \(known: v32, v4, toy, toy-e5m2\)$"):
        record_format("v9")
    with pytest.raises(InputError, match="kv_format: unknown record format 'v9'"):
        toy_case("v9")


@pytest.mark.parametrize("fields,problem", [
    (dict(rope_at=600), "overlap or fall outside"),                 # the rope past the row's end
    (dict(values_at=100), "overlap or fall outside"),               # the values over the rope
    (dict(scales_at=14), "not start at a multiple"),                # a float32 scale at byte 14
    (dict(scale_block=38, scales_at=4), "multiples of 4 bytes"),    # a block of 38: slot 1's scales misaligned
    (dict(scale_dtype="float8_e8m0fnu"), "amax scales need float32"),
    (dict(tile=100), "not whole tiles"),
])
def test_a_format_that_cannot_be_read_is_refused_when_made(fields, problem):
    with pytest.raises(ValueError, match=problem):
        dataclasses.replace(TOY, **fields)


TRITON_CHECK = textwrap.dedent("""
    import dataclasses
    import torch
    from harness.building import sparse_cache
    from harness.fast import sparse_keys_kernel, sparse_write_kernel
    from harness.planning.record_formats import RecordFormat

    TOY = RecordFormat("toy", d_nope=512, d_rope=64, tile=64, row_bytes=640, rope_at=0, values_at=128,
                       scales_at=16, scale_block=48, policies=("amax", "ue8m0"))

    def disagreements(device, kernels):
        writer, reader = kernels
        gen, found = torch.Generator().manual_seed(5), []
        for policy, page_size in [("amax", 4), ("ue8m0", 5)]:
            slots = torch.randperm(3 * page_size, generator=gen)[:9].to(device)
            tokens = (torch.randn(len(slots), TOY.d_qk, generator=gen) * 3).to(device, torch.bfloat16)
            pool = torch.full((3, TOY.page_bytes(page_size)), 0xFF, dtype=torch.uint8, device=device)
            torch_form, one_pass = pool.clone(), pool.clone()
            sparse_cache.write_records(torch_form, slots, sparse_cache.quantize(tokens, TOY, policy), TOY, page_size)
            sparse_write_kernel.run(writer, one_pass, slots, tokens, TOY, page_size, policy)
            if not torch.equal(one_pass, torch_form):
                found.append(f"{policy}: written bytes differ at {(one_pass != torch_form).nonzero()[:3].tolist()}")
            zeroed = torch.arange(len(slots), device=device) == 0
            for view in sparse_cache.DEQUANT_MODES:
                keys = sparse_cache.dequantize(sparse_cache.read_records(torch_form, slots, TOY, page_size,
                                                                         zeroed=zeroed), TOY, view)
                read = sparse_keys_kernel.run(reader, torch_form, slots, zeroed, TOY, page_size, view)
                if not torch.equal(read, keys) or not keys[1:].ne(0).any():
                    found.append(f"{policy} {view}: keys differ")
        return found
""")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled kernels run on CUDA; none here")
def test_the_compiled_triton_passes_write_and_read_the_toy_as_pytorch_does():
    from harness.fast import sparse_keys_kernel, sparse_write_kernel
    kernels = (sparse_write_kernel.usable_kernel("cuda:0"), sparse_keys_kernel.usable_kernel("cuda:0"))
    assert None not in kernels, "Triton does not build the kernels on this CUDA box"
    assert disagreements_on_cuda(TRITON_CHECK, kernels) == []
    outcome = sparse.run(toy_case(), load_backend("torch"), "cuda")      # built and read by the passes
    assert outcome.status is Status.PASS, outcome.messages


def test_the_triton_passes_write_and_read_the_toy_as_pytorch_does_under_the_interpreter():
    out, err = disagreements_under_interpreter(
        TRITON_CHECK, "(sparse_write_kernel._triton_kernel(), sparse_keys_kernel._triton_kernel())")
    assert out == "equal", (out + err)[-3000:]


def test_the_triton_passes_leave_a_format_of_other_dtypes_to_pytorch():
    from harness.fast import sparse_keys_kernel, sparse_write_kernel
    pool = torch.zeros(1, TOY_E5M2.page_bytes(P), dtype=torch.uint8)
    slots, tokens = torch.zeros(1, dtype=torch.int64), torch.zeros(1, TOY_E5M2.d_qk, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="value_dtype float8_e4m3fn"):
        sparse_write_kernel.run(None, pool, slots, tokens, TOY_E5M2, P, "ue8m0")
    with pytest.raises(ValueError, match="value_dtype float8_e4m3fn"):
        sparse_keys_kernel.run(None, pool, slots, slots == 0, TOY_E5M2, P, "exact")

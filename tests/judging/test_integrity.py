"""Input integrity: a kernel that writes into what it was given, or beside it, fails ``inputs.unchanged``.

The witness (``harness/judging/integrity.py``) is tested on its own (every field, the copy and the hashed paths,
the guard regions), then through the CLI with plug-ins that compute the right answer and then write
where they must not, as a user's kernel would.
"""

import dataclasses
import json
import textwrap

import pytest
import torch
from helpers import run_cli, under_triton_interpreter

from harness.building import guards
from harness.building.inputs import generate, output_buffer
from harness.judging import block_hash, integrity
from harness.planning.cases import Case

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def small_inputs(device="cpu", seqlen="list:70,3,130", dtype="bf16"):
    case = Case(id="t/integrity", seed=5, batch_size=3, heads=4, d_qk=40, d_v=32, seqlen=seqlen, dtype=dtype,
                mode="verify", draft_tokens=2)
    inputs = generate(case, device)
    return dataclasses.replace(inputs, out=output_buffer(inputs))


def witnessed(inputs, write):
    """The witness of one 'call' that does ``write(inputs)``."""
    w = integrity.Witness(inputs)
    write(inputs)
    return w.seal()


@pytest.mark.parametrize("device", DEVICES)
def test_untouched_inputs_and_a_written_output_are_unchanged(device):
    inputs = small_inputs(device)
    w = witnessed(inputs, lambda i: i.out.fill_(1.0))       # the output view is the kernel's to write
    assert integrity.changed_flags([w]) == [False]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("field, index", [("q", (1, 0, 2, 7)), ("kv_pool", (3, 5, 0, 11)),
                                          ("block_table", (2, 0)), ("cache_seqlens", (1,)), ("seq_lens", (0,)),
                                          ("req_to_token", (1, 4)), ("req_pool_indices", (2,))])
def test_a_change_to_any_input_is_named_with_its_index(device, field, index):
    inputs = small_inputs(device)
    t = getattr(inputs, field)
    w = witnessed(inputs, lambda i: t.__setitem__(index, t[index] + 1 if not t.is_floating_point() else 1.0))
    assert integrity.changed_flags([w]) == [True]
    assert f"{field}: first changed at index {list(index)}" in w.describe()


def test_fp8_scales_and_model_precision_inputs_are_watched_too():
    inputs = small_inputs(dtype="fp8_e4m3")
    for field in ("descale_q", "descale_k", "q_model", "kv_pool_model"):
        w = witnessed(inputs, lambda i, f=field: getattr(i, f).view(-1)[0:1].zero_())
        assert integrity.changed_flags([w]) == [True], field
        assert w.describe().startswith(field + ":"), w.describe()
        inputs = small_inputs(dtype="fp8_e4m3")


def test_a_large_pool_is_hashed_and_still_located(monkeypatch):
    monkeypatch.setattr(integrity, "COPY_MAX_BYTES", 1024)      # every storage over 1 KiB is hashed
    inputs = small_inputs()
    assert inputs.kv_pool.untyped_storage().nbytes() > 1024
    # a swap of two different values in one block leaves a plain sum unchanged, not the weighted one
    flat = inputs.kv_pool.view(-1)
    at = int((flat[:-1].isfinite() & flat[1:].isfinite() & (flat[:-1] != flat[1:])).nonzero()[0, 0])

    def swap(i):
        flat[at], flat[at + 1] = flat[at + 1].clone(), flat[at].clone()
    w = witnessed(inputs, swap)
    assert integrity.changed_flags([w]) == [True]
    block_start = (at * 2 + inputs.kv_pool.storage_offset() * 2) // 256 * 256 - inputs.kv_pool.storage_offset() * 2
    index = list(torch.unravel_index(torch.tensor(block_start // 2), inputs.kv_pool.shape))
    text = w.describe()
    assert text.startswith(f"kv_pool: first changed at index {[int(i) for i in index]}"), text
    assert "256-byte block" in text


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the one-pass block sums run on CUDA; none here")
def test_the_one_pass_block_sums_equal_pytorchs_bit_for_bit(monkeypatch):
    monkeypatch.setattr(block_hash, "TRITON_MIN_BYTES", 0)          # Triton for every size, the small ones too
    integrity.warm_up("cuda")           # a worker's warm-up launches it first: it leaves nothing behind
    gen = torch.Generator(device="cuda").manual_seed(11)
    for blocks in (1, 63, 64, 65, 100_003):
        rows = torch.randint(-2 ** 63, 2 ** 63 - 1, (blocks, 32), generator=gen, dtype=torch.int64, device="cuda")
        weights = integrity._weights("cuda")
        fused, plain = (torch.full((blocks,), 7, dtype=torch.int64, device="cuda") for _ in range(2))
        block_hash.block_sums(rows, weights, fused)
        block_hash.block_sums_torch(rows, weights, plain)
        assert torch.equal(fused, plain), blocks


def test_the_triton_block_sums_equal_pytorchs_under_the_interpreter():
    """The same kernel on the CPU under TRITON_INTERPRET=1 (a subprocess: the flag is read when Triton loads)."""
    script = textwrap.dedent("""
        import os, torch
        from harness.judging import block_hash, integrity
        kernel = block_hash._triton_kernel()
        assert kernel is not None, "triton does not load"
        gen = torch.Generator().manual_seed(3)
        rows = torch.randint(-2 ** 63, 2 ** 63 - 1, (130, 32), generator=gen, dtype=torch.int64)
        weights = integrity._weights("cpu")
        fused, plain = torch.zeros(130, dtype=torch.int64), torch.ones(130, dtype=torch.int64)
        kernel[(3,)](rows, weights, fused, 130, WORDS=32, ROWS=block_hash.ROWS_PER_PROGRAM)
        block_hash.block_sums_torch(rows, weights, plain)
        print("equal" if torch.equal(fused, plain) else "differ")
    """)
    out, err = under_triton_interpreter(script, timeout=300)
    assert out == "equal", err[-2000:]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("where", ["before", "after"])
def test_writes_beside_the_pool_and_the_output_land_in_guards(device, where):
    inputs = small_inputs(device)
    for field in ("kv_pool", "out"):
        t = getattr(inputs, field)
        offset = t.storage_offset() - 1 if where == "before" else t.storage_offset() + t.numel()
        beside = torch.as_strided(t, (1,), (1,), offset)
        w = witnessed(inputs, lambda i, beside=beside: beside.fill_(0.5))
        assert integrity.changed_flags([w]) == [True], field
        text = w.describe()
        assert text.startswith(f"{field}: ") and "guard region" in text
        assert ("before its first element" if where == "before" else "past its last element") in text


def test_the_guarded_pool_is_an_aligned_poisoned_view():
    inputs = small_inputs()
    for t in (inputs.kv_pool, inputs.out):
        assert t.is_contiguous() and (t.storage_offset() * t.element_size()) % 512 == 0
        around = torch.as_strided(t, (guards.GUARD_BYTES // t.element_size(),), (1,), 0)
        assert bool(around.float().isnan().all())


# ---- through the CLI: plug-ins that compute the right answer, then write where they must not -------------

WRITERS = """
import torch
from harness.backends.torch_backend import TorchBackend

class DoublesQ(TorchBackend):
    name = "doubles-q"
    def run(self, inputs):
        answer = super().run(inputs)
        inputs.q.copy_((inputs.q.float() * 2).to(inputs.q.dtype))
        return answer

class DoublesQFirst(TorchBackend):
    # q changed before computing: the answer matches an oracle that reads q after the call
    name = "doubles-q-first"
    def run(self, inputs):
        inputs.q.copy_((inputs.q.float() * 2).to(inputs.q.dtype))
        return super().run(inputs)

class ZeroesEverything(TorchBackend):
    name = "zeroes-everything"
    def run(self, inputs):
        inputs.q.zero_()
        inputs.kv_pool.zero_()
        return super().run(inputs)

class StraysIntoTable(TorchBackend):
    name = "strays-into-table"
    def run(self, inputs):
        answer = super().run(inputs)
        inputs.block_table[-1, -1] = 0
        return answer
"""


@pytest.fixture
def writers(tmp_path):
    path = tmp_path / "writers.py"
    path.write_text(textwrap.dedent(WRITERS))
    return path


@pytest.mark.parametrize("name", ["DoublesQ", "DoublesQFirst", "ZeroesEverything", "StraysIntoTable"])
def test_kernels_that_change_their_inputs_fail_every_case(tmp_path, writers, name):
    out = tmp_path / "r.jsonl"
    code, _, err = run_cli(["run", "--suite", "smoke", "--backend", f"{writers}:{name}", "--workers", "0",
                            "--no-progress", "--out", out])
    assert code == 1, err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and all(r["status"] == "fail" and "inputs.unchanged" in r["failed_checks"] for r in rows)
    assert all("changed its inputs" in " ".join(r["messages"]) for r in rows)
    assert "metrics" not in rows[0] or "out" not in rows[0]["metrics"]     # no comparison on changed inputs


def test_a_write_into_a_strided_view_is_named_by_its_index_and_into_its_slack_as_slack():
    """A view into a larger buffer (``layout = "strided"``): a changed element is named by the view's own index,
    and a changed byte between its elements as the view's slack, not as some element."""
    from harness.judging.integrity import _storage_region
    g = torch.Generator().manual_seed(3)
    base = torch.randn(3, 4, 5, 130, generator=g).to(torch.bfloat16)
    q = base[:2, :3, :4, :2]                      # every dim one larger, the last 128 larger: as FlashMLA's tests
    region = _storage_region("q", q)
    size = q.element_size()
    at = (q[1, 0, 3, 1].data_ptr() - base.data_ptr())          # byte of the element, from the storage's start
    assert region.place(at) == "q: first changed at index [1, 0, 3, 1]"
    slack = (base[0, 0, 0, 7].data_ptr() - base.data_ptr())    # inside the buffer, outside the view
    assert "between its elements (a view's slack)" in region.place(slack)
    assert region.place(at + 1) == "q: first changed at index [1, 0, 3, 1]"      # the element's second byte
    assert size == 2

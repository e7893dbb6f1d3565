"""The host-side shortcuts the speed work added: each must give what the slow way gives.

Host copies of the table and lengths stand in for device reads only while they describe the
inputs; the engine's writes worked out on the host match a token-by-token loop; the oracle's
host-planned chunks match its own planning; the transfer helper hands over tensors of their own.
And a crash on an illegal memory access names the command that shows the stray access every time.
"""

import dataclasses
import io

import pytest
import torch

from harness import cli, phases
from harness.building.inputs import generate, host_copy, write_slots
from harness.building.pool import allocate
from harness.building.transfer import to_device
from harness.commands import run_cmd
from harness.planning.cases import Case
from harness.recording.console import memcheck_command
from harness.recording.summary import print_summary
from harness.running import gpu_memory, worker_pool
from harness.running.run_summary import RunSummary
from reference import mla_attention_batched


def case(**kw) -> Case:
    fields = dict(id="host/paths/0", seed=5, batch_size=5, heads=8, seqlen="uniform:0:150", page_size=16,
                  mode="verify", draft_tokens=3)
    return Case(**{**fields, **kw})


def test_host_copy_is_the_sent_one_until_a_tensor_is_replaced():
    inputs = generate(case())
    assert host_copy(inputs) is inputs.host
    assert torch.equal(inputs.host.block_table, inputs.block_table)
    assert inputs.host.cache_seqlens.tolist() == inputs.cache_seqlens.tolist()
    other_table = inputs.block_table.clone()
    other_table[0, 0] = 7
    replaced = dataclasses.replace(inputs, block_table=other_table)
    copy = host_copy(replaced)          # no longer the sent table: read from the tensor the kernel would get
    assert copy is not inputs.host and int(copy.block_table[0, 0]) == 7
    longer = dataclasses.replace(inputs, cache_seqlens=inputs.cache_seqlens + 1)
    assert host_copy(longer).cache_seqlens.tolist() == (inputs.cache_seqlens + 1).tolist()


def _slots_one_by_one(layout, first, last):
    lengths = layout.cache_seqlens.tolist()
    slots, source = [], []
    for r, (f, l) in enumerate(zip(first, last)):
        row = int(layout.req_pool_indices[r])
        for t in range(f, l):
            slots.append(int(layout.req_to_token[row, t]))
            source.append(sum(lengths[:r]) + t)
    return slots, source


@pytest.mark.parametrize("first, last", [([0, 0, 0], [30, 0, 77]), ([3, 0, 64], [30, 5, 77]),
                                         ([0, 0], [10, 2]), ([0, 0, 0], [30, 1, 77])])
def test_write_slots_match_a_token_by_token_loop(first, last):
    layout = allocate([30, 1, 77], 16, 2, torch.Generator().manual_seed(3))
    slots, source = write_slots(layout, first, last)
    want_slots, want_source = _slots_one_by_one(layout, first, last)
    assert slots.tolist() == want_slots
    if source is None:                  # every token, in order
        assert want_source == list(range(sum(layout.cache_seqlens.tolist())))
    else:
        assert source.tolist() == want_source


def test_the_oracles_block_size_does_not_change_its_bits():
    inputs = generate(case(seqlen="list:0,17,150,3,64", batch_size=5, mode="decode"))
    args = (inputs.q, inputs.kv_pool, inputs.block_table, inputs.cache_seqlens, inputs.softmax_scale, inputs.d_v)
    # the CPU's blocks hold one request whatever the size (the BLAS's bits depend on a matmul's whole shape)
    plain = mla_attention_batched(*args, max_elements=2**28)
    blocked = mla_attention_batched(*args, max_elements=4096)
    for a, b in zip(plain, blocked):
        assert torch.equal(a, b)
    assert torch.isfinite(plain[0]).all()          # padding reads real tokens with weight 0, never poison
    assert torch.isposinf(plain[1][0]).all()       # the empty request


def test_to_device_on_the_cpu_hands_back_the_tensors_and_refuses_other_dtypes():
    t = torch.arange(6, dtype=torch.int32).view(2, 3)
    assert to_device([t], "cpu")[0] is t
    with pytest.raises(TypeError, match="int32"):
        to_device([t.long()], "cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: no CUDA device here")
def test_to_device_gives_whole_tensors_of_their_own():
    tensors = [torch.arange(n, dtype=torch.int32) for n in (5, 0, 130)] + [torch.ones(3, 4, dtype=torch.int32)]
    sent = to_device(tensors, "cuda")
    for t, s in zip(tensors, sent):
        assert s.is_cuda and s.storage_offset() == 0 and s.is_contiguous() and torch.equal(s.cpu(), t)
    assert len({s.untyped_storage().data_ptr() for s in sent if s.numel()}) == 3


def test_phase_clock_on_the_cpu_times_each_phase_on_the_host():
    clock = phases.PhaseClock()
    with clock:
        with phases.phase("inputs"):
            sum(range(1000))
        with phases.phase("inputs"):
            pass
        with phases.phase("oracle"):
            pass
    ms = clock.read()
    assert set(ms) == {"inputs", "oracle"} and all(v >= 0 for v in ms.values())


@pytest.mark.parametrize("argv, gpu, wanted", [
    (["run", "--suite", "smoke"], False, 1),
    (["run", "--suite", "smoke"], True, worker_pool.default_workers("cuda")),
    (["run", "--suite", "smoke", "--device", "cpu"], True, 1),
    (["run", "--suite", "smoke", "--device=cuda"], False, worker_pool.default_workers("cuda")),
    (["run", "--suite", "smoke", "--workers", "0"], True, 0),
    (["run", "--suite", "smoke", "--workers=0"], False, 0),
    (["run", "--suite", "smoke", "--workers", "2"], False, 2),
    (["run", "--suite", "smoke", "--workers", "two"], False, 0),
    (["run", "--help"], False, 0),
    (["report", "x.jsonl"], False, 0),
    ([], False, 0),
])
def test_spare_workers_are_started_for_the_workers_a_run_will_want(argv, gpu, wanted, monkeypatch):
    """``run`` parses its options with argparse, then starts its spares; any other command, help and bad
    input start none."""
    started = []
    monkeypatch.setattr(worker_pool, "gpu_present", lambda: gpu)
    monkeypatch.setattr(worker_pool.WorkerPool, "start_spares", lambda self, count, **how: started.append(count))
    monkeypatch.setattr(run_cmd, "run", lambda args, pool, at_start: 0)
    try:
        cli.main(argv)
    except SystemExit:          # --help
        pass
    assert (started or [0]) == [wanted]


@pytest.mark.parametrize("argv, free, measured, warm", [
    (["run", "--suite", "smoke", "--device", "cuda"], (8 << 30, "8.0 GiB free (NVML)", 0.01), True, True),
    (["run", "--suite", "smoke", "--device", "cuda"], None, True, False),       # NVML cannot say: torch measures
    (["run", "--suite", "smoke", "--device", "cpu"], (8 << 30, "unused", 0.01), False, False),
    (["run", "--suite", "smoke", "--device", "cuda", "--workers", "0"], (8 << 30, "unused", 0.01), False, None),
])
def test_free_memory_is_asked_of_nvml_before_spares_that_warm_up_at_once(argv, free, measured, warm, monkeypatch):
    """Where NVML measured the GPU before any spare started, the spares make their CUDA contexts at once
    and the run is handed the measure; anywhere else they wait to be told, as before."""
    asked, started, handed = [], [], []
    monkeypatch.setattr(gpu_memory, "free_memory", lambda: asked.append(1) or free)
    monkeypatch.setattr(worker_pool.WorkerPool, "start_spares", lambda self, count, warm=False, pins=(None,):
                        started.append(warm))
    monkeypatch.setattr(run_cmd, "run", lambda args, pool, at_start: handed.append(at_start.whole) or 0)
    assert cli.main(argv) == 0
    assert bool(asked) == measured and started == ([] if warm is None else [warm])
    assert handed == [free if measured else None]


class _FakeNvml:
    """libnvidia-ml as ctypes sees it: each call fills what its pointers point to and returns 0 (success)."""

    def __init__(self, count=1, mig=0):
        self.count, self.mig, self.shut = count, mig, False

    def nvmlInit_v2(self):
        return 0

    def nvmlShutdown(self):
        self.shut = True
        return 0

    def nvmlDeviceGetCount_v2(self, count):
        count._obj.value = self.count
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
        return 0

    def nvmlDeviceGetMigMode(self, handle, current, pending):
        current._obj.value = self.mig
        return 0

    def nvmlDeviceGetMemoryInfo(self, handle, memory):
        memory._obj.total, memory._obj.free = 141 << 30, 140 << 30
        return 0

    def nvmlDeviceGetName(self, handle, name, size):
        name.value = b"NVIDIA H200"
        return 0


@pytest.mark.parametrize("count, mig, visible, answers", [
    (1, 0, None, True), (1, 0, "0", True), (2, 0, None, False), (1, 1, None, False), (1, 0, "1", False),
    (1, 0, "GPU-5d2c", False),
])
def test_nvml_is_asked_only_where_the_gpu_the_run_uses_is_plain(count, mig, visible, answers, monkeypatch):
    nvml = _FakeNvml(count, mig)
    monkeypatch.setattr(gpu_memory.ctypes, "CDLL", lambda name: nvml)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    got = gpu_memory.free_memory()
    if not answers:
        assert got is None
        return
    assert got[0] == 140 << 30 and got[1] == "140.0 GiB free of 141.0 GiB on NVIDIA H200 before the run (NVML)"
    assert got[2] >= 0 and nvml.shut


def test_without_nvml_the_run_measures_with_torch(monkeypatch):
    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(gpu_memory.ctypes, "CDLL", missing)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpu_memory.free_memory() is None


def test_gpu_workers_are_one_per_two_cores_at_most_eight(monkeypatch):
    for cores, wanted in ((2, 1), (8, 4), (16, 8), (128, 8)):
        monkeypatch.setattr(worker_pool.os, "cpu_count", lambda cores=cores: cores)
        assert worker_pool.default_workers("cuda") == wanted
        assert worker_pool.default_workers("cpu") == 1


def test_a_crash_on_an_illegal_access_names_the_memcheck_rerun():
    row = {"status": "crash", "case_id": "edge/empty-rows/1", "suite": "edge", "mode": "decode", "dtype": "fp8_e4m3",
           "backend": "flashmla", "backend_spec": "flashmla", "case": {"suite_file": ""}, "failed_checks": ["crash"],
           "reason": "CUDA context lost: AcceleratorError: CUDA error: an illegal memory access was encountered",
           "rerun": "mla-verify run --suite edge --backend flashmla --device cuda --case edge/empty-rows/1"}
    assert memcheck_command(row) == "bash scripts/gpu/sanitize.sh edge edge/empty-rows/1 flashmla"
    assert memcheck_command({**row, "reason": "worker killed by signal SIGSEGV"}) is None
    assert memcheck_command({**row, "status": "fail"}) is None
    out = io.StringIO()
    print_summary(RunSummary(rows=[row]), "r.jsonl", out=out)
    assert "memcheck: bash scripts/gpu/sanitize.sh edge edge/empty-rows/1 flashmla" in out.getvalue()


@pytest.mark.parametrize("dtype", ["bf16", "fp8_e4m3"])
def test_a_store_filled_in_one_copy_matches_the_engines_writes_one_step_at_a_time(dtype):
    """``generate`` sends the layout, the writes and the lengths in one copy (``KVStore(filled=True)``);
    the pools, table and lengths are those of a store written by ``write_up_to`` as the graph scenario does."""
    from harness.building.inputs import KVStore, cache_seqlens_for, draw_seq_lens
    c = case(dtype=dtype, shared_prefix=32, seqlen="uniform:40:150")
    cache = cache_seqlens_for(c, draw_seq_lens(c))
    tokens = torch.randn(sum(cache), c.kv_heads, c.d_qk, generator=torch.Generator().manual_seed(3)).bfloat16()
    q = torch.randn(c.batch_size, c.s_q, c.heads, c.d_qk, generator=torch.Generator().manual_seed(4)).bfloat16()
    filled = KVStore(c, cache, tokens, torch.device("cpu"), filled=True)
    stepwise = KVStore(c, cache, tokens, torch.device("cpu"))
    stepwise.write_up_to([max(n - c.s_q, 0) for n in cache])      # the prefix, then the drafts
    stepwise.write_up_to(cache)
    bits = lambda t: t.view(torch.uint8)                            # noqa: E731  (NaN poison compares equal)
    a, b = filled.inputs(q, cache, table=filled.layout.block_table), stepwise.inputs(q, cache)
    assert torch.equal(bits(a.kv_pool), bits(b.kv_pool))
    assert (a.kv_pool_model is None) == (dtype == "bf16")
    if a.kv_pool_model is not None:
        assert torch.equal(bits(a.kv_pool_model), bits(b.kv_pool_model))
    for name in ("block_table", "cache_seqlens", "seq_lens", "q"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert a.host.describes(a) and torch.equal(a.host.seq_lens, b.seq_lens)


def test_a_case_whose_requests_are_all_empty_builds_an_all_poison_pool():
    """No token to write (every request has length 0): the scatter moves nothing and the pool stays NaN."""
    from harness.planning.cases import load_suite
    empty = [c for c in load_suite("edge").cases if c.group == "all-empty"]
    assert empty
    for case in empty:
        inputs = generate(case, "cpu")
        assert int(inputs.cache_seqlens.sum()) == 0 and bool(inputs.kv_pool.float().isnan().all())


def test_the_wide_scatter_writes_the_same_bits_as_a_token_by_token_one():
    from harness.building.inputs import write_kv
    gen = torch.Generator().manual_seed(3)
    for dtype, h_kv, d in ((torch.bfloat16, 1, 576), (torch.float8_e4m3fn, 3, 40), (torch.float16, 2, 7)):
        pool = torch.full((6, 4, h_kv, d), float("nan")).to(dtype)
        tokens = torch.randn(9, h_kv, d, generator=gen).to(dtype)
        slots = torch.randperm(24, generator=gen)[:9].to(torch.int32)
        source = torch.randperm(9, generator=gen)
        expected = pool.clone().view(-1, h_kv, d)
        for i in range(9):
            expected[int(slots[i])] = tokens[int(source[i])]
        write_kv(pool, tokens, slots, source)
        assert torch.equal(pool.view(-1, h_kv, d).view(torch.uint8), expected.view(torch.uint8))

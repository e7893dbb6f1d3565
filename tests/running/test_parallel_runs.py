"""A result must not depend on how the cases were run: one at a time in this process, or compared in
chunks spread over worker processes that take them in whatever order they free up.

Both runs use the same suite seeds and a backend that fails some cases, so failing rows (their
messages, metrics and drill-down summaries) are compared as well as passing ones.

Both run with one torch thread.  With two, the CPU torch backend's float32 output sometimes differs
in its last bits on the first call in a fresh process (seen here: the same inputs, three calls in a
new worker, the first one off), which is the CPU BLAS's threading, not the harness's.  On the H200
the whole flashmla-upstream matrix gave the same rows chunked and one at a time (docs/gpu-runs.md).
"""

import pytest
import torch
from fakes import FakeWorker

from harness.building.inputs import cache_seqlens_for, draw_seq_lens
from harness.planning.cases import parse_suite
from harness.recording.results import ResultsWriter, read_rows
from harness.running.backend_loader import load_backend
from harness.running.runner import run_cases

SUITE = """
[suite]
seed = {seed}

[defaults]
batch_size = [1, 3]
seqlen = "uniform:0:400"      # short requests and long ones (over reference.batched.SHARED_MAX_KEYS)

[[group]]
name = "decode"
mode = "decode"
heads = [16, 128]
dtype = ["bf16", "fp8_e4m3"]

[[group]]
name = "verify"
mode = "verify"
heads = 16
draft_tokens = [2, 4]
causal = [true, false]
"""

# what differs between two runs of the same case by design: how long it took
TIMINGS = ("wall_s", "kernel_ms", "reference_ms", "phase_ms", "finished_at")


def suite_cases(tmp_path, seed):
    import tomllib
    path = tmp_path / "mixed.toml"
    path.write_text(SUITE.format(seed=seed))
    return parse_suite(tomllib.loads(path.read_text()), path).cases


def run(tmp_path, name, cases, spec, workers, chunk_cases=1):
    path = tmp_path / f"{name}.jsonl"
    with ResultsWriter(path) as writer:
        run_cases(cases, load_backend(spec), spec, "cpu", writer, progress=False, workers=workers,
                  chunk_cases=chunk_cases)
    rows = {r["case_id"]: {k: v for k, v in r.items() if k not in TIMINGS} for r in read_rows(path)}
    assert len(rows) == len(cases)
    return rows


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)          # workers take the parent's count
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("seed", [2, 7])
@pytest.mark.parametrize("spec", ["torch", "mutant:read_past_seqlen"])
def test_rows_do_not_depend_on_chunks_workers_or_order(tmp_path, spec, seed, one_thread):
    cases = suite_cases(tmp_path, seed)
    one_at_a_time = run(tmp_path, "serial", cases, spec, workers=0)
    chunked = run(tmp_path, "spread", cases[::-1], spec, workers=3, chunk_cases=5)
    statuses = {r["status"] for r in one_at_a_time.values()}
    if spec.startswith("mutant"):
        assert "fail" in statuses, "the mutant must fail some case, or failing rows go unchecked"
    for case_id, row in one_at_a_time.items():
        assert chunked[case_id] == row, case_id


def test_memory_gate_holds_back_a_case_that_does_not_fit_beside_what_others_hold():
    from harness.running.isolation import MemoryGate
    gate = MemoryGate(cost=lambda case: case, budget=10)
    assert gate.pick([9, 1], others=2, alone=True) == 0      # alone, anything starts (its own fit was prechecked)
    assert gate.pick([9, 1], others=2) == 1                  # 9 waits; the small one behind it goes
    assert gate.pick([9, 12], others=2) is None              # nothing fits: wait for memory
    assert gate.pick([2], others=2, own_cache=7) is None     # its own kept cache counts beside the chunk
    assert gate.pick([1], others=2, own_cache=7) == 0
    assert MemoryGate().pick([9], others=5) == 0             # no gate: first come


def test_kept_caches_count_and_are_emptied_only_when_a_chunk_does_not_fit():
    from harness.running.isolation import MemoryGate, hand_out
    gate = MemoryGate(cost=sum, budget=10)
    # room for both: each worker keeps its cache
    busy, idle = FakeWorker(cache=1, chunk=[3], holds=3), FakeWorker(cache=2)
    hand_out([[4]], [busy, idle], gate)
    assert idle.told == [[4]] and busy.told == []
    # no room beside another's kept cache: the idle caches go back, the chunk waits
    keeper, taker = FakeWorker(cache=6), FakeWorker(cache=1)
    todo = [[7]]
    hand_out(todo, [taker, keeper], gate)
    assert keeper.told == ["empty"] and taker.told == ["empty"] and todo == [[7]]
    keeper.cache_emptied(1)
    taker.cache_emptied(taker.cache)
    hand_out(todo, [taker, keeper], gate)          # now it fits
    assert taker.told == ["empty", [7]] and keeper.told == ["empty", "retire"] and todo == []
    # a chunk that fits nothing waits for the others' caches, then runs alone
    big, other = FakeWorker(), FakeWorker(cache=3)
    hand_out([[12]], [big, other], gate)
    assert other.told == ["empty"] and big.told == []
    other.cache_emptied(other.cache)
    todo = [[12]]
    hand_out(todo, [big, other], gate)
    assert [12] in big.told + other.told and todo == []
    # nothing left to do: idle workers retire
    pool = [FakeWorker(), FakeWorker(chunk=[1])]
    hand_out([], pool, gate)
    assert len(pool) == 1 and pool[0].chunk == [1]


def test_rows_say_where_the_time_went(tmp_path):
    rows = run(tmp_path, "phases", suite_cases(tmp_path, 1)[:2], "torch", workers=0)
    assert rows   # timings were dropped from these; read them from the file
    for row in read_rows(tmp_path / "phases.jsonl"):
        assert set(row["phase_ms"]) == {"inputs", "kernel", "oracle", "compare"}
        assert all(ms > 0 for ms in row["phase_ms"].values())


@pytest.mark.parametrize("spec", ["torch", "mutant:read_past_seqlen"])
def test_rows_do_not_depend_on_chunks_when_calls_share_oracle_blocks(tmp_path, spec, one_thread, monkeypatch):
    """On a GPU the oracle computes short requests of many cases in shared blocks; forced on here."""
    from reference import batched
    monkeypatch.setattr(batched, "shares_blocks", lambda device: True)
    cases = suite_cases(tmp_path, 3)
    # both paths: cases whose oracle runs right after the kernel (no short request) and cases whose oracle
    # waits for the chunk (a short one)
    short = [any(0 < n <= batched.SHARED_MAX_KEYS for n in cache_seqlens_for(c, draw_seq_lens(c))) for c in cases]
    assert any(short) and not all(short)
    one_at_a_time = run(tmp_path, "serial", cases, spec, workers=0)
    chunked = run(tmp_path, "chunked", cases[::-1], spec, workers=0, chunk_cases=16)
    for case_id, row in one_at_a_time.items():
        assert chunked[case_id] == row, case_id

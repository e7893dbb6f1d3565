"""Backends side by side at the seams (``overlap``): each starts once the one before has handed out its last
chunk, the workers stay within the run's count, and the rows are those of backends run one after another."""

import json
import os
import signal
import threading
import time

import pytest
from helpers import run_cli

from harness.backends import BUILTIN, builtin_class, launch_order
from harness.errors import InputError
from harness.planning.cases import load_suite
from harness.running import isolation, overlap
from harness.running.chunk import run_chunk
from harness.running.worker_pool import WorkerPool


def test_each_task_starts_only_once_the_one_before_is_drained():
    events, lock = [], threading.Lock()
    release_first = threading.Event()

    def task(name, wait_for=None):
        def run(drained, halt):
            with lock:
                events.append(f"{name} start")
            drained()
            if wait_for is not None:
                assert wait_for.wait(5)
            with lock:
                events.append(f"{name} end")
        return run

    def second(drained, halt):
        with lock:
            events.append("b start")
        release_first.set()           # a runs on until b has started: they overlap
        with lock:
            events.append("b end")

    overlap.one_after_another([task("a", release_first), second, task("c")])
    assert events.index("a start") < events.index("b start") < events.index("a end")
    assert events.index("b start") < events.index("c start")
    assert len(events) == 6


def test_a_task_that_never_says_drained_lets_the_next_start_when_it_returns():
    order = []
    overlap.one_after_another([lambda d, h: order.append(1), lambda d, h: order.append(2)])
    assert order == [1, 2]


def test_an_error_halts_the_others_and_is_raised_and_no_later_task_starts():
    started, halted = [], threading.Event()

    def runs_until_halted(drained, halt):
        started.append("long")
        drained()
        assert halt.wait(5)          # told to stop by the next task's error
        halted.set()
        raise KeyboardInterrupt      # as ``isolation.run_isolated`` ends on ``halt``

    def fails(drained, halt):
        started.append("fails")
        time.sleep(0.05)
        raise InputError("bad input in the second backend")

    with pytest.raises(InputError, match="second backend"):
        overlap.one_after_another([runs_until_halted, fails, lambda d, h: started.append("never")])
    assert halted.is_set() and started == ["long", "fails"]


def _two_backends(limit):
    """torch then reference over smoke's first cases in chunks of one, two workers, the pool's ``limit``;
    the rows, the processes started, and the most workers at work at once."""
    cases = load_suite("smoke").cases[:6]
    rows, most = [], [0]
    with WorkerPool(carry_over=True) as pool:
        pool.limit = limit
        clock_in = pool.clock_in

        def counted(worker):
            clock_in(worker)
            most[0] = max(most[0], len(pool.working))
        pool.clock_in = counted

        def backend(spec):
            def run(drained, halt):
                isolation.run_isolated([[c] for c in cases], spec, "cpu", rows.append, None, run_chunk, workers=2,
                                       pool=pool, drained=drained, halt=halt)
            return run
        if limit is None:
            for spec in ("torch", "reference"):
                backend(spec)(lambda: None, None)
        else:
            overlap.one_after_another([backend("torch"), backend("reference")])
        started = len(pool.started)
    return rows, started, most[0]


def test_side_by_side_backends_keep_within_the_limit_reuse_the_workers_and_give_the_same_rows():
    side_rows, side_started, side_most = _two_backends(limit=2)
    seq_rows, seq_started, _ = _two_backends(limit=None)
    assert side_most <= 2 and side_started == seq_started == 2     # the second backend took the first's workers

    def key(row):
        return row["backend"], row["case_id"], row["status"], row["metrics"]
    assert sorted(map(key, side_rows), key=str) == sorted(map(key, seq_rows), key=str)
    assert len(side_rows) == 12


def _sigint_held(pid: int) -> bool:
    """Whether SIGINT is blocked or ignored in process ``pid`` (its /proc status masks)."""
    masks = {}
    for line in open(f"/proc/{pid}/status"):
        key, _, value = line.partition(":")
        if key in ("SigBlk", "SigIgn"):
            masks[key] = int(value, 16)
    bit = 1 << (signal.SIGINT - 1)
    return bool(masks["SigBlk"] & bit or masks["SigIgn"] & bit)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads a process's signal masks in /proc")
def test_a_worker_started_from_a_backends_thread_cannot_take_a_ctrl_c_while_it_starts():
    """Only the main thread may set SIGINT's disposition; a backend's thread blocks it instead, and the
    worker starts with it blocked, before its own code could ignore it."""
    with WorkerPool() as pool:
        started, after = [], []

        def spawn():
            started.append(pool.spawn())
            after.append(signal.pthread_sigmask(signal.SIG_BLOCK, set()))     # the thread's mask, unchanged
        thread = threading.Thread(target=spawn)
        thread.start()
        thread.join()
        assert _sigint_held(started[0].proc.pid)
    assert signal.SIGINT not in after[0]       # the thread's own mask is as it was


def test_a_kernel_with_a_long_first_build_starts_first_side_by_side():
    assert launch_order(["flashmla", "torch", "flashinfer-fa2", "plugin.py:Mine", "sglang-q8kv8"]) == [
        "sglang-q8kv8", "flashinfer-fa2", "flashmla", "torch", "plugin.py:Mine"]
    slow = [name for name in BUILTIN if builtin_class(name).first_build_s > 0]
    assert set(slow) == {"sglang-q8kv8", "flashinfer-fa3", "flashinfer-fa2"}


@pytest.mark.parametrize("workers, first", [("0", "torch"), ("1", "sglang-q8kv8")])
def test_the_run_starts_the_long_build_first_only_where_backends_run_side_by_side(tmp_path, workers, first):
    out = tmp_path / "r.jsonl"
    code, _, err = run_cli(["run", "--suite", "smoke", "--case", "smoke/decode-bf16/0", "--backend",
                            "torch,sglang-q8kv8", "--device", "cpu", "--workers", workers, "--no-progress",
                            "--out", out])
    assert code == 0, err
    assert json.loads(out.read_text().splitlines()[0])["backend"] == first

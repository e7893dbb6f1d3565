"""The pieces crash isolation is made of, and the light command line.

The memory gate is a pure function, tested on numbers; a worker's state is one ``State``, moved by
what the event loop hears; ``run`` parses with argparse and starts its spares before torch is imported.
"""

import subprocess
import sys
import textwrap

from harness.running.memory_gate import LOOKAHEAD, next_chunk
from harness.running.worker import State, WorkerState
from harness.running.worker_process import EMPTY_CACHE


def test_the_memory_gate_admits_what_fits_beside_what_the_others_hold():
    size = lambda chunk: chunk       # noqa: E731   a chunk is its size here
    assert next_chunk([9, 1], size, budget=10, others=2) == 1            # 9 waits, the small one behind goes
    assert next_chunk([9, 1], size, budget=10, others=2, alone=True) == 0
    assert next_chunk([9, 12], size, budget=10, others=2) is None         # nothing fits: wait for memory
    assert next_chunk([2], size, budget=10, others=2, own_cache=7) is None
    assert next_chunk([1], size, budget=10, others=2, own_cache=7) == 0
    assert next_chunk([9], None, budget=0, others=5) == 0                  # no gate: first come
    assert next_chunk([1, 2], size, budget=10, others=0, allowed=lambda c: c != 1) == 1
    assert next_chunk([1], size, budget=10, others=0, allowed=lambda c: False) is None


def test_the_memory_gate_looks_only_so_far_past_a_chunk_that_must_wait():
    todo = [100] * LOOKAHEAD + [1]
    assert next_chunk(todo, lambda c: c, budget=10, others=0) is None
    assert next_chunk(todo[1:], lambda c: c, budget=10, others=0) == LOOKAHEAD - 1


class Recorded(WorkerState):
    def __init__(self):
        super().__init__()
        self.posted = []

    def post(self, message):
        self.posted.append(message)


def test_a_worker_moves_through_one_state_at_a_time():
    w = Recorded()
    assert w.state is State.STARTING and not w.idle() and not w.may_hand_back()
    w.started()
    assert w.state is State.IDLE and w.idle() and not w.may_hand_back()
    w.send(["a"], holds=5)
    assert w.state is State.BUSY and not w.idle() and w.may_hand_back() and w.footprint() == 5
    w.chunk_done(cache=3)
    assert w.state is State.CACHED and w.idle() and w.may_hand_back() and w.footprint() == 3 and w.chunk is None
    w.empty_cache()
    assert w.state is State.EMPTYING and not w.idle() and w.may_hand_back()
    w.cache_emptied(0)
    assert w.state is State.IDLE and w.footprint() == 0
    w.retire()
    assert w.state is State.RETIRING and not w.idle()
    assert w.posted == [["a"], EMPTY_CACHE, None]


def _python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_parsing_run_imports_no_torch():
    out = _python("""
        import sys
        from harness import cli
        args = cli.parse(["run", "--suite", "smoke", "--workers", "2", "--chunk", "4"])
        print(args.workers, args.chunk, "torch" in sys.modules)
    """)
    assert out.split() == ["2", "4", "False"]


def test_run_starts_its_spares_before_it_imports_torch():
    out = _python("""
        import sys
        from harness import cli
        from harness.commands import run_cmd
        from harness.running.worker_pool import WorkerPool
        WorkerPool.start_spares = lambda self, count, **how: print("spares", count, "torch" in sys.modules)
        run_cmd.run = lambda args, pool, at_start: print("run", "torch" in sys.modules) or 0
        sys.exit(cli.main(["run", "--suite", "smoke", "--device", "cpu", "--workers", "1"]))
    """)
    assert out.split() == ["spares", "1", "False", "run", "False"]


def test_runs_chunk_default_is_the_chunk_modules(tmp_path, monkeypatch):
    """``run`` without ``--chunk`` hands the runner ``chunk.CHUNK_CASES``, read when it runs (parsing stays light)."""
    from harness.cli import main, parse
    from harness.running import chunk, runner
    assert parse(["run", "--suite", "smoke"]).chunk is None
    seen = []
    monkeypatch.setattr(chunk, "CHUNK_CASES", 5)
    monkeypatch.setattr(runner, "run_cases", lambda *a, chunk_cases, **how: seen.append(chunk_cases))
    for flags in ([], ["--chunk", "2"]):
        main(["run", "--suite", "smoke", "--backend", "torch", "--device", "cpu", "--workers", "0", "--no-progress",
              "--out", str(tmp_path / f"r{len(seen)}.jsonl"), *flags])
    assert seen == [5, 2]


def test_argparse_names_the_command_whose_module_alone_is_imported():
    from harness.cli import command_named
    assert command_named(["run", "--suite", "report"]) == "run"       # an option's value is not a command
    assert command_named(["report", "run"]) == "report"
    assert command_named(["run", "--backend=list"]) == "run"
    for names_none in ([], ["-h"], ["nosuch"], ["--suite", "x", "run"]):
        assert command_named(names_none) is None                      # the full parser says what is wrong

"""The circuit breaker: after N timeouts in a row a backend's remaining cases are recorded as
``timeout`` without being run, so a kernel that hangs on everything costs N timeouts, not one per case."""

import json
import textwrap

import pytest
from helpers import run_cli

from harness.planning.cases import load_suite
from harness.running import runner
from harness.running.runner import CircuitBreaker

SMOKE = load_suite("smoke").cases

HANGING = textwrap.dedent('''
    import time
    from pathlib import Path
    from harness.backends.torch_backend import TorchBackend

    CALLS = Path(__file__).with_suffix(".calls")

    class Hanging(TorchBackend):
        """Notes each call in a file beside this one, then hangs far past any --timeout of the test."""
        name = "hanging"

        def run(self, inputs):
            with CALLS.open("a") as f:
                f.write("call\\n")
            time.sleep(60)
            return super().run(inputs)
''')


def rows_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def hanging_plugin(tmp_path):
    plugin = tmp_path / "hanging.py"
    plugin.write_text(HANGING)
    return plugin, plugin.with_suffix(".calls")


def test_three_timeouts_in_a_row_stop_the_backend_in_a_worker(tmp_path):
    plugin, calls = hanging_plugin(tmp_path)
    out = tmp_path / "r.jsonl"
    code, _, err = run_cli(["run", "--suite", "smoke", "--backend", f"{plugin}:Hanging", "--out", out,
                            "--workers", "1", "--chunk", "1", "--timeout", "0.5", "--no-progress"])
    assert code == 1, err
    rows = rows_of(out)
    assert sorted(r["case_id"] for r in rows) == sorted(c.id for c in SMOKE)     # every case has its row
    assert {r["status"] for r in rows} == {"timeout"}
    not_run = [r for r in rows if r["reason"].startswith("not run:")]
    assert len(not_run) == len(SMOKE) - 3
    assert not_run[0]["reason"] == "not run: 3 consecutive timeouts on this backend, --max-timeouts 3"
    assert not_run[0]["failed_checks"] == ["timeout"]
    assert len(calls.read_text().splitlines()) == 3          # the kernel was called three times, no more


def test_max_timeouts_sets_the_count(tmp_path):
    plugin, calls = hanging_plugin(tmp_path)
    out = tmp_path / "r.jsonl"
    code, _, err = run_cli(["run", "--suite", "smoke", "--backend", f"{plugin}:Hanging", "--out", out,
                            "--workers", "1", "--chunk", "1", "--timeout", "0.5", "--max-timeouts", "1",
                            "--no-progress"])
    assert code == 1, err
    reasons = [r["reason"] for r in rows_of(out)]
    assert sum(r.startswith("not run: 1 consecutive timeouts") for r in reasons) == len(SMOKE) - 1
    assert len(calls.read_text().splitlines()) == 1


@pytest.mark.parametrize("value", ["-1", "two"])
def test_a_bad_max_timeouts_is_one_line_and_exit_2(tmp_path, value):
    out = tmp_path / "r.jsonl"
    code, stdout, err = run_cli(["run", "--suite", "smoke", "--backend", "torch", "--out", out,
                                 "--workers", "0", "--max-timeouts", value, "--no-progress"])
    assert code == 2
    assert err.count("\n") == 1 and "--max-timeouts" in err and "Traceback" not in err
    assert not out.exists()                  # refused before the results file was opened


# ---- the breaker's rule, and the in-process path, without hanging anything ------------------------

def row(status):
    return {"status": status}


def test_the_breaker_counts_only_timeouts_in_a_row_and_stays_tripped():
    breaker = CircuitBreaker(3)
    for status in ["timeout", "timeout", "pass", "timeout", "timeout"]:
        breaker.see(row(status))
    assert not breaker.tripped                       # the pass broke the run of timeouts
    breaker.see(row("timeout"))
    assert breaker.tripped
    breaker.see(row("pass"))                         # a case already in flight that passed
    assert breaker.tripped


def test_zero_never_trips():
    breaker = CircuitBreaker(0)
    for _ in range(100):
        breaker.see(row("timeout"))
    assert not breaker.tripped


class _Writer:
    def __init__(self):
        self.rows = []

    def write(self, r):
        self.rows.append(r)


@pytest.mark.parametrize("max_timeouts, ran", [(2, 2), (0, 5)])
def test_in_process_the_breaker_stops_the_chunks_not_yet_run(monkeypatch, max_timeouts, ran):
    """In this process no case times out today (there is nobody to kill it); should one report a timeout,
    the same rule applies.  ``run_chunk`` is replaced by one whose every case times out."""
    from harness.backends.torch_backend import TorchBackend
    cases = [c for c in SMOKE if c.dtype == "bf16"][:5]
    assert len(cases) == 5
    started = []

    def timing_out(chunk, backend, spec, device):
        started.extend(c.id for c in chunk)
        return [{"case_id": c.id, "status": "timeout", "reason": "no result"} for c in chunk]

    monkeypatch.setattr(runner, "run_chunk", timing_out)
    writer = _Writer()
    runner.run_cases(cases, TorchBackend(), "torch", "cpu", writer, progress=False, workers=0, chunk_cases=1,
                     max_timeouts=max_timeouts)
    assert len(started) == ran
    assert len(writer.rows) == 5 and {r["status"] for r in writer.rows} == {"timeout"}
    skipped = [r for r in writer.rows if r["reason"].startswith("not run:")]
    assert len(skipped) == 5 - ran
    assert {r["case_id"] for r in skipped}.isdisjoint(started)

"""Compile once (``running/warm_up``): the first case of each kernel variant runs before the rest, each
alone, spread over the workers, and each other case waits until its own variant's first case is done."""

import dataclasses
import json
import textwrap

import pytest
from helpers import heads_keyed_suite

from harness.backends import KERNELS
from harness.planning.cases import CASE_FIELDS, Case, load_suite
from harness.recording.results import ResultsWriter
from harness.recording.summary import time_line
from harness.running import overlap, warm_up
from harness.running.backend_loader import load_backend
from harness.running.built_variants import Memo
from harness.running.run_summary import RunSummary
from harness.running.runner import run_cases
from harness.running.worker_pool import WorkerPool

# case g/i has HEADS[i] heads; the plug-in's "compiler" keys on heads, so 4, 5 and 6 are its variants
HEADS = [4, 5, 4, 6, 5, 4, 6, 4]

PLUGIN = textwrap.dedent('''
    import json, os, time
    from harness.backends.torch_backend import TorchBackend

    class Compiling(TorchBackend):
        """Notes when each call starts and ends; a variant seen for the first time in this process
        "compiles" for 0.3 s (2 s for SLOW_HEADS heads, or, with SLOW_UNTIL set to "FILE BACKEND", until FILE
        holds a row of BACKEND, for at most 30 s); with CRASH_HEADS set, the first call with that many heads
        kills its worker."""
        name = "compiling"
        compiled_per = ("heads",)
        built = set()

        def run(self, inputs):
            heads = inputs.q.shape[2]
            start = time.monotonic()
            crash = os.environ.get("CRASH_HEADS")
            mark = os.path.join(os.environ["NOTES_DIR"], "crashed")
            if crash and heads == int(crash) and not os.path.exists(mark):
                open(mark, "w").close()
                os.kill(os.getpid(), 9)
            waited_out = False
            if heads not in self.built:
                waited_out = self.build(heads)
                self.built.add(heads)
            with open(os.path.join(os.environ["NOTES_DIR"], f"calls-{os.getpid()}"), "a") as f:
                f.write(json.dumps({"heads": heads, "start": start, "end": time.monotonic(),
                                    "waited_out": waited_out}) + "\\n")
            return super().run(inputs)

        @staticmethod
        def build(heads) -> bool:
            """True where a SLOW_UNTIL build gave up waiting."""
            if os.environ.get("SLOW_HEADS") != str(heads):
                time.sleep(0.3)
                return False
            if not os.environ.get("SLOW_UNTIL"):
                time.sleep(2.0)
                return False
            path, backend = os.environ["SLOW_UNTIL"].split()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if os.path.exists(path) and any(json.loads(line)["backend"] == backend
                                                for line in open(path).read().splitlines()):
                    return False
                time.sleep(0.05)
            return True
''')


def _compiling(tmp_path, monkeypatch, heads=HEADS, crash_heads=None, slow_heads=None):
    """The suite's cases (case g/i with ``heads[i]`` heads) and the ``Compiling`` plug-in's spec, its notes
    going to ``tmp_path/notes`` (``_calls``)."""
    notes = tmp_path / "notes"
    notes.mkdir(parents=True)
    monkeypatch.setenv("NOTES_DIR", str(notes))
    if crash_heads is not None:
        monkeypatch.setenv("CRASH_HEADS", str(crash_heads))
    if slow_heads is not None:
        monkeypatch.setenv("SLOW_HEADS", str(slow_heads))
    suite_file = tmp_path / "w.toml"
    suite_file.write_text(heads_keyed_suite(seed=3, drafts=2, heads=heads))
    plugin = tmp_path / "compiling.py"
    plugin.write_text(PLUGIN)
    return load_suite(str(suite_file)).cases, f"{plugin}:Compiling"


def _calls(tmp_path) -> list[dict]:
    """Every call the plug-in noted, in any worker."""
    return [json.loads(line) for p in (tmp_path / "notes").glob("calls-*") for line in p.read_text().splitlines()]


def _run(tmp_path, monkeypatch, workers: int, warm: bool = True, crash_heads=None, heads=HEADS, slow_heads=None,
         built=None):
    cases, spec = _compiling(tmp_path, monkeypatch, heads, crash_heads, slow_heads)
    summary = RunSummary()
    with ResultsWriter(str(tmp_path / "r.jsonl")) as writer:
        run_cases(cases, load_backend(spec), spec, "cpu", writer, progress=False, workers=workers,
                  summary=summary, warm=warm, built=built)
    return summary, _calls(tmp_path)


def test_the_first_case_of_each_variant_is_first_and_the_rest_keep_their_order():
    cases = [Case(id=f"s/g/{i}", seed=i, heads=h) for i, h in enumerate(HEADS)]
    first, rest = warm_up.first_of_each(cases, ("heads",))
    assert [c.id for c in first] == ["s/g/0", "s/g/1", "s/g/3"]
    assert [c.id for c in rest] == ["s/g/2", "s/g/4", "s/g/5", "s/g/6", "s/g/7"]
    assert warm_up.first_of_each(cases, ()) == ([], cases)          # built ahead of time: no warm-up
    fp8 = [dataclasses.replace(c, dtype="fp8_e4m3") for c in cases]
    assert len(warm_up.first_of_each(cases + fp8, ("heads", "dtype"))[0]) == 6


def test_every_kernel_names_case_fields_it_is_compiled_per():
    for name in KERNELS:
        fields = load_backend(name).compiled_per
        assert set(fields) <= set(CASE_FIELDS), (name, set(fields) - set(CASE_FIELDS))
    assert load_backend("sglang-triton").compiled_per and not load_backend("flashmla").compiled_per


@pytest.fixture(scope="module")
def warmed(tmp_path_factory):
    """A warm-up run over two workers: its summary and every call's notes."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _run(tmp_path_factory.mktemp("warmed"), monkeypatch, workers=2)


def _firsts_and_rest(calls):
    """The first call of each variant (by heads) and every later call."""
    first, rest = {}, []
    for call in sorted(calls, key=lambda c: c["start"]):
        if call["heads"] in first:
            rest.append(call)
        else:
            first[call["heads"]] = call
    return first, rest


def test_no_held_back_case_starts_before_its_variant_is_built(warmed):
    summary, calls = warmed
    assert len(summary.rows) == len(HEADS) and {r["status"] for r in summary.rows} == {"pass"}
    warm = [r for r in summary.rows if r.get("warm_up")]
    assert sorted(r["heads"] for r in warm) == [4, 5, 6] and summary.warm_up_cases == 3
    first, rest = _firsts_and_rest(calls)
    assert sorted(first) == [4, 5, 6] and len(rest) == len(HEADS) - 3
    assert all(call["start"] >= first[call["heads"]]["end"] for call in rest)
    assert 0 < summary.warm_up_seconds < summary.seconds
    assert "s of it the warm-up of 3 kernel variant(s), their kernel phase" in time_line(summary)


def test_the_variants_built_keep_a_worker_busy_while_a_slow_one_builds(tmp_path, monkeypatch):
    summary, calls = _run(tmp_path, monkeypatch, workers=2, slow_heads=6)
    first, rest = _firsts_and_rest(calls)
    assert {r["status"] for r in summary.rows} == {"pass"} and sorted(first) == [4, 5, 6]
    assert all(call["start"] >= first[call["heads"]]["end"] for call in rest)
    # the 4- and 5-head cases did not wait for the 6-head build (2 s)
    assert any(call["start"] < first[6]["end"] for call in rest if call["heads"] != 6)
    assert summary.warm_up_seconds >= 2.0


def test_without_the_warm_up_no_row_says_warm_up_and_the_rows_are_the_same(warmed, tmp_path, monkeypatch):
    warmed, _ = warmed
    cold, _ = _run(tmp_path, monkeypatch, workers=2, warm=False)
    assert not any("warm_up" in r for r in cold.rows) and cold.warm_up_cases == 0
    assert "warm-up" not in time_line(cold)

    def key(row):
        return row["case_id"], row["status"], row["metrics"]
    assert sorted(map(key, warmed.rows)) == sorted(map(key, cold.rows))


def test_a_worker_lost_in_the_warm_up_costs_its_case_and_the_rest_still_run(tmp_path, monkeypatch):
    summary, calls = _run(tmp_path, monkeypatch, workers=2, crash_heads=5)
    status = {r["case_id"]: r["status"] for r in summary.rows}
    assert len(status) == len(HEADS)
    assert status["w/g/1"] == "crash"                    # the first 5-head case, run alone: charged
    assert [status[f"w/g/{i}"] for i in range(len(HEADS)) if i != 1] == ["pass"] * (len(HEADS) - 1)


def test_in_this_process_the_variants_run_first_too(tmp_path, monkeypatch):
    summary, calls = _run(tmp_path, monkeypatch, workers=0)
    assert [c["heads"] for c in calls][:3] == [4, 5, 6]
    assert sorted(r["case_id"] for r in summary.rows if r.get("warm_up")) == ["w/g/0", "w/g/1", "w/g/3"]


def test_a_run_whose_every_case_is_a_first_is_all_warm_up(tmp_path, monkeypatch):
    summary, _ = _run(tmp_path, monkeypatch, workers=2, heads=[4, 5, 6])
    assert [r.get("warm_up") for r in summary.rows] == [True] * 3
    assert summary.warm_up_cases == 3 and 0 < summary.warm_up_seconds <= summary.seconds


def test_the_time_line_says_how_busy_the_workers_were(warmed):
    rows = [{"case_id": f"s/g/{k}", "wall_s": 1.5, "phase_ms": {"kernel": 1.0}} for k in range(4)]
    rows.append({"case_id": "s/g/9", "status": "unsupported", "phase_ms": {}})     # never ran: no share
    assert ", busy 25% of it;" in time_line(RunSummary(rows=rows, workers=3, seconds=8.0))
    assert "busy" not in time_line(RunSummary(rows=rows, workers=0, seconds=8.0))  # in this process
    summary, _ = warmed
    share = float(time_line(summary).split(", busy ")[1].split("%")[0])
    assert 0 < share <= 100


def test_side_by_side_the_next_backend_takes_the_workers_a_slow_build_leaves_idle(tmp_path, monkeypatch):
    """Two backends on 2 workers (``overlap``): while the first builds its slow variant with its other cases of
    that variant held, the second runs in the idle worker; no held case starts before its build.  The build lasts
    until a torch row is written: where held cases hold the next backend back, it waits out its 30 s instead."""
    cases, compiling = _compiling(tmp_path, monkeypatch, heads=[6, 6, 6, 6], slow_heads=6)
    monkeypatch.setenv("SLOW_UNTIL", f"{tmp_path / 'r.jsonl'} torch")
    summary = RunSummary()
    with ResultsWriter(str(tmp_path / "r.jsonl")) as writer, WorkerPool(carry_over=True) as pool:
        pool.limit = 2

        def backend(spec):
            def run(drained, halt):
                run_cases(cases, load_backend(spec), spec, "cpu", writer, progress=False, workers=2,
                          summary=summary, pool=pool, warm=True, drained=drained, halt=halt)
            return run
        overlap.one_after_another([backend(compiling), backend("torch")])
    assert len(summary.rows) == 8 and {r["status"] for r in summary.rows} == {"pass"}
    first, rest = _firsts_and_rest(_calls(tmp_path))
    assert all(call["start"] >= first[6]["end"] for call in rest)          # the build came first
    assert not first[6]["waited_out"]


def test_a_second_run_on_the_cache_root_skips_the_warm_up_of_what_the_first_built(tmp_path, monkeypatch):
    memo = Memo(tmp_path / "root")
    first, _ = _run(tmp_path / "a", monkeypatch, workers=2, built=memo)
    assert first.warm_up_cases == 3
    noted = json.loads((tmp_path / "root" / "built-variants.json").read_text())
    assert [sorted(keys) for keys in noted.values()] == [["[4]", "[5]", "[6]"]]
    second, calls = _run(tmp_path / "b", monkeypatch, workers=2, built=memo)
    assert second.warm_up_cases == 0 and not any(r.get("warm_up") for r in second.rows)
    assert len(calls) == len(HEADS)                      # every case still ran its kernel
    rows = {r["case_id"]: (r["status"], r["metrics"]) for r in first.rows}
    assert {r["case_id"]: (r["status"], r["metrics"]) for r in second.rows} == rows


def test_where_the_root_holds_some_variants_built_only_the_others_warm_up(tmp_path, monkeypatch):
    """A chunk mixing a built variant's cases with a held one's waits on the held one's first case only."""
    memo = Memo(tmp_path / "root")
    _, spec = _compiling(tmp_path / "earlier", monkeypatch)      # the same plug-in, as an earlier run had it
    backend = load_backend(spec)
    memo.note(backend, {"[4]"})
    summary, calls = _run(tmp_path, monkeypatch, workers=2, built=memo)
    assert {r["status"] for r in summary.rows} == {"pass"} and len(summary.rows) == len(HEADS)
    assert sorted(r["heads"] for r in summary.rows if r.get("warm_up")) == [5, 6]
    first, rest = _firsts_and_rest(calls)
    assert all(call["start"] >= first[call["heads"]]["end"] for call in rest if call["heads"] != 4)
    assert memo.built(backend) == {"[4]", "[5]", "[6]"}


def test_a_variant_whose_first_case_crashed_is_not_noted_as_built(tmp_path, monkeypatch):
    memo = Memo(tmp_path / "root")
    summary, _ = _run(tmp_path, monkeypatch, workers=2, crash_heads=5, built=memo)
    assert "crash" in {r["status"] for r in summary.rows}
    backend = load_backend(f"{tmp_path / 'compiling.py'}:Compiling")
    assert memo.built(backend) == {"[4]", "[6]"}
    cases = [Case(id=f"s/g/{i}", seed=i, heads=h) for i, h in enumerate([4, 5, 6, 4])]
    assert [c.heads for c in warm_up.first_of_each(cases, ("heads",), memo.built(backend))[0]] == [5]


def test_the_notes_are_per_backend_and_package_and_an_unreadable_file_is_a_cold_root(tmp_path):
    memo = Memo(tmp_path)
    torch_backend, reference = load_backend("torch"), load_backend("reference")
    memo.note(torch_backend, {"[1]"})
    memo.note(torch_backend, {"[2]"})
    assert memo.built(torch_backend) == {"[1]", "[2]"} and memo.built(reference) == set()
    info = torch_backend.info()
    torch_backend.info = lambda: {**info, "jit_build_s": {"bf16/bf16": 20.1}}    # a timing names no other code
    assert memo.built(torch_backend) == {"[1]", "[2]"}
    torch_backend.info = lambda: {**info, "version": "another"}                   # a new wheel: a new entry
    assert memo.built(torch_backend) == set()
    (tmp_path / "built-variants.json").write_text("{not json")
    assert memo.built(reference) == set()

"""``mla-verify fuzz``: drawn cases, shrinking and the corpus (tests/planning/test_fuzz.py is hypothesis on the loader).

- the draw: one seed, one sequence; another seed, another; every case valid, within its bounds, and the
  draws together reach every value of the space the suites use;
- shrinking, against a stand-in rerun whose failure needs exactly known sizes: it stops at them;
- the corpus file: written, loaded back by ``load_suite`` as the very case (seed included);
- campaigns on the CPU: the clean torch backend finds nothing; shipped mutants are found, shrunk to at most
  two requests, and their printed rerun command fails with the same signature; the corpus is replayed first;
- bad input: one line, exit 2.
"""

import re
import shlex
import time
from pathlib import Path

import pytest
from helpers import run_cli

from harness.backends import BUILTIN
from harness.fuzz import candidates, corpus
from harness.fuzz.campaign import ROUND_CASES, Campaign, Settings
from harness.fuzz.draw import draw_case
from harness.fuzz.profiles import round_specs, spec_for_round
from harness.fuzz.shrink import shrink
from harness.fuzz.signature import describe, signature
from harness.fuzz.space import Bounds
from harness.planning.case import DTYPES, INDEX_PATTERNS, LAYOUTS, PADDINGS, SINKS, VALUES, VERIFY_ROWS
from harness.planning.case_lengths import draw_seq_lens
from harness.planning.cases import load_suite, scenario_names, validate_case
from harness.recording.results import read_rows

DRAWS = 400


def drawn(seed: int, count: int = DRAWS, bounds: Bounds | None = None, **kw) -> list:
    return [draw_case(seed, i, bounds or Bounds(), **kw) for i in range(count)]


# ---- the draw ------------------------------------------------------------------------------------

def test_one_seed_draws_one_sequence_and_another_seed_another():
    first, again, other = drawn(11, 60), drawn(11, 60), drawn(12, 60)
    assert first == again
    assert sum(a != b for a, b in zip(first, other)) >= 55
    # case i does not hang on the cases before it
    assert draw_case(11, 37) == first[37]


def test_every_drawn_case_is_valid_and_within_its_bounds():
    for bounds in (Bounds(), Bounds(max_batch=5, max_context=300)):
        for case in drawn(3, bounds=bounds):
            assert validate_case(case, "drawn") == case
            assert 1 <= case.batch_size <= bounds.max_batch
            assert max(draw_seq_lens(case)) <= bounds.max_context


def test_the_draws_reach_the_whole_space_the_suites_use():
    cases = drawn(5)
    seen = {key: {getattr(c, key) for c in cases} for key in ("dtype", "scenario", "padding", "sink",
                                                               "index_pattern", "verify_rows", "kv_format")}
    assert seen["dtype"] == set(DTYPES)
    assert seen["scenario"] == set(scenario_names())
    assert seen["padding"] == set(PADDINGS)
    assert seen["sink"] == set(SINKS) and seen["index_pattern"] == set(INDEX_PATTERNS)
    assert seen["verify_rows"] == set(VERIFY_ROWS) and seen["kv_format"] == {"v32", "v4"}
    assert {c.seqlen.split(":")[0] for c in cases} == {"uniform", "longtail", "equal", "boundary", "normal", "list"}
    assert {c.draft_tokens for c in cases if c.mode == "verify"} == set(range(1, 9))
    assert {c.kv_heads for c in cases} == {1, 2, 3, 8} and {c.d_qk for c in cases} == {16, 512, 576}
    assert any(c.pool_pages for c in cases) and any(c.shared_prefix for c in cases)
    assert any(c.k_scale for c in cases) and any(not c.causal for c in cases)
    assert {c.page_size for c in cases if c.scenario == "sparse"} == {2, 53, 61, 64, 69, 256, 576}
    # the inputs' axes, q and KV apart, on dense and sparse cases alike
    assert {c.q_values for c in cases} == {c.kv_values for c in cases} == set(VALUES)
    assert {c.layout for c in cases} == set(LAYOUTS)
    assert {c.kv_values for c in cases if c.scenario == "sparse"} > {"normal"}


def test_a_refused_case_is_drawn_again_from_its_own_generator():
    no_sparse = drawn(6, 80, refused=lambda c: "sparse refused" if c.scenario == "sparse" else None)
    assert not any(c.scenario == "sparse" for c in no_sparse)
    assert no_sparse == drawn(6, 80, refused=lambda c: "sparse refused" if c.scenario == "sparse" else None)
    assert all(c.scenario == "sparse" for c in drawn(6, 40, dense=False))


def test_a_backend_with_engine_profiles_draws_one_each_round():
    flashmla = BUILTIN["flashmla"]()
    specs = round_specs("flashmla", flashmla)
    assert specs == ["flashmla@seed", "flashmla@sglang-0.5.23"]
    rounds = [spec_for_round(specs, 1, r) for r in range(20)]
    assert set(rounds) == set(specs) and rounds == [spec_for_round(specs, 1, r) for r in range(20)]
    assert round_specs("flashmla@sglang-0.5.23", flashmla) == ["flashmla@sglang-0.5.23"]
    assert round_specs("torch", BUILTIN["torch"]()) == ["torch"]


def test_rounds_drawn_ahead_are_the_draws_in_order_and_stop_at_the_count():
    settings = Settings("torch", "cpu", seed=3, cases=70, seconds=None, bounds=Bounds(), corpus_dir="unused",
                        workers=1, sets=[], timeout_s=1.0, chunk_cases=ROUND_CASES)
    campaign = Campaign(settings, BUILTIN["torch"](), pool=None, memory=None)
    rounds = list(campaign.rounds([], time.perf_counter()))
    assert [len(r.cases) for r in rounds] == [ROUND_CASES, ROUND_CASES, 70 - 2 * ROUND_CASES]
    assert [c for r in rounds for c in r.cases] == drawn(3, 70)
    assert campaign.drawn == 70 and rounds[2].reruns[rounds[2].cases[-1].id][0] == 69


@pytest.mark.parametrize("workers", [1, 3])
def test_a_round_is_a_chunk_a_worker_of_blocks_of_one_profile(workers):
    """Blocks merge into rounds of ``workers`` chunks of ``chunk_cases``; each block keeps its index's profile,
    so the cases and the profile each runs on are the seed's whatever the workers."""
    settings = Settings("flashmla", "cpu", seed=5, cases=40 * ROUND_CASES, seconds=None, bounds=Bounds(),
                        corpus_dir="unused", workers=workers, sets=[], timeout_s=1.0, chunk_cases=2 * ROUND_CASES)
    flashmla = BUILTIN["flashmla"]()
    campaign = Campaign(settings, flashmla, pool=None, memory=None, refused=lambda case: None)
    assert campaign.blocks_per_round == 2 * workers
    rounds = list(campaign.rounds([], time.perf_counter()))
    specs = round_specs("flashmla", flashmla)
    index = {c.id: r.reruns[c.id][0] for r in rounds for c in r.cases}
    assert sorted(index.values()) == list(range(40 * ROUND_CASES))
    for r in rounds:
        assert len(r.cases) <= 2 * workers * ROUND_CASES
        assert {spec_for_round(specs, 5, index[c.id] // ROUND_CASES) for c in r.cases} == {r.spec}
    assert max(len(r.cases) for r in rounds) == 2 * workers * ROUND_CASES      # some runs of one profile fill one


# ---- shrinking and the corpus file, without a kernel --------------------------------------------

def stand_in(needs):
    """A rerun whose cases fail ``out.element`` when ``needs(case)``, pass otherwise; it counts calls."""
    calls = []

    def rerun(cases):
        calls.append(len(cases))
        return [{"status": "fail", "failed_checks": ["out.element"]} if needs(c) else {"status": "pass"}
                for c in cases]
    return rerun, calls


def test_shrinking_stops_at_the_sizes_the_failure_needs():
    case = next(c for c in drawn(7, 200) if c.scenario == "call" and c.mode == "verify" and c.batch_size >= 5
                and c.heads >= 16 and c.draft_tokens >= 4 and max(draw_seq_lens(c)) >= 100)
    # fails with at least 3 requests, one of them of 40+ keys, 4+ heads and 3+ drafts
    rerun, calls = stand_in(lambda c: c.batch_size >= 3 and max(draw_seq_lens(c)) >= 40 and c.heads >= 4
                            and c.mode == "verify" and c.draft_tokens >= 3)
    out = shrink(case, {"status": "fail", "failed_checks": ["out.element"]}, rerun)
    small = out.case
    assert (small.batch_size, small.heads, small.draft_tokens) == (3, 4, 3)
    assert sorted(draw_seq_lens(small)) == [0, 0, 40]
    assert small.extra_pages == 0 and small.dtype == "bf16" and small.padding == "minus_one"
    assert out.reruns == sum(calls) and len(calls) <= 40


def test_shrinking_stops_at_the_deadline_with_the_case_as_small_as_it_got():
    """``fuzz --time``'s end bounds the shrinking too: each rerun here takes 'a second' of a pretend clock, and
    the time runs out after three calls; what was taken by then is kept, and it says it stopped."""
    case = next(c for c in drawn(7, 200) if c.scenario == "call" and c.batch_size >= 5 and c.heads >= 16)
    failed = {"status": "fail", "failed_checks": ["out.element"]}
    clock = [0.0]
    rerun, calls = stand_in(lambda c: c.heads >= 2)

    def slow(cases):
        clock[0] += 1.0
        return rerun(cases)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("harness.fuzz.shrink.time.perf_counter", lambda: clock[0])
        out = shrink(case, failed, slow, deadline=3.0)
    assert out.stopped and len(calls) == 3 and clock[0] == 3.0    # no call started after the deadline
    assert candidates.size_key(out.case) < candidates.size_key(case) and out.steps
    whole = shrink(case, failed, rerun)
    assert not whole.stopped and whole.case.heads == 2 and len(calls) > 3 + 2
    assert candidates.size_key(whole.case) < candidates.size_key(out.case)


def test_a_crash_is_a_signature_that_shrinks_too():
    case = next(c for c in drawn(8, 200) if c.scenario == "call" and c.batch_size >= 4)
    crash = {"status": "crash", "reason": "worker died (signal 11) in case 3", "failed_checks": ["crash"]}
    out = shrink(case, crash, lambda cases: [crash if c.heads >= 2 else {"status": "pass"} for c in cases])
    assert signature(out.row) == signature(crash) and out.case.heads == 2 and out.case.batch_size == 1


def test_a_failure_that_does_not_come_back_as_a_suite_file_is_not_kept():
    case = drawn(9, 1)[0]
    passing = lambda cases: [{"status": "pass"}] * len(cases)      # noqa: E731
    out = shrink(case, {"status": "fail", "failed_checks": ["lse.element"]}, passing)
    assert out.case is None and out.reruns == 8


def test_the_corpus_file_loads_as_the_very_case(tmp_path):
    sig = ("fail", "out", "bound", "")
    for case in drawn(10, 60):
        kept = corpus.suite_case(candidates.explicit(case), sig, 3)
        loaded, existed = corpus.keep(tmp_path, kept, 3, f"fuzz: {describe(sig)}", ["a note"])
        assert not existed and loaded.suite_file == str(corpus.path_of(tmp_path, kept))
        assert (loaded.id, loaded.seed, loaded.to_dict() | {"suite_file": ""}) == (kept.id, kept.seed, kept.to_dict())
        assert draw_seq_lens(loaded) == draw_seq_lens(case)
    assert corpus.keep(tmp_path, kept, 3, "again", [])[1] is True
    assert len(corpus.replay_cases(tmp_path)) == len(corpus.files(tmp_path)) == 60


# ---- campaigns -----------------------------------------------------------------------------------

def fuzz(tmp_path, *argv, name="r"):
    out = tmp_path / f"{name}.jsonl"
    code, stdout, stderr = run_cli(["fuzz", "--device", "cpu", "--corpus", tmp_path / "corpus", "--out", out,
                                    *argv])
    return code, stdout, stderr, out


def test_the_clean_torch_backend_finds_nothing(tmp_path):
    code, stdout, stderr, out = fuzz(tmp_path, "--backend", "torch", "--cases", 24, "--seed", 3)
    assert code == 0, stdout + stderr
    rows = read_rows(out)
    assert len(rows) == 24 and {r["status"] for r in rows} <= {"pass", "unsupported"}
    assert any(r["status"] == "pass" for r in rows)
    assert "FOUND" not in stdout and "verdict: PASSED (exit 0)" in stdout
    assert "fuzz: 24 case(s)" in stderr and "0 failure(s)" in stderr
    assert not (tmp_path / "corpus").exists()
    assert rows[0]["rerun"].startswith("mla-verify fuzz --backend torch --device cpu --seed 3 --cases ")


def found_blocks(stdout: str) -> list[tuple[str, str, str]]:
    """(described signature, kept file, rerun command) of each FOUND block that kept a file."""
    blocks, lines = [], stdout.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("  kept: "):
            described = next(f for f in reversed(lines[:i]) if f.startswith("FOUND ")).split(" on ")[0][6:]
            blocks.append((described, line.split()[1], lines[i + 1].removeprefix("  rerun: ")))
    return blocks


# The command whole, its rerun lines included: lse_base2 (any case) through worker processes, contiguous_q (a q
# drawn as a strided view, the layout axis) in this process.  Finding and shrinking every shipped mutant, in
# this process: tests/fuzz/test_fuzz_zoo.py.
MUTANTS = ["lse_base2", "contiguous_q"]


@pytest.mark.parametrize("mutant", MUTANTS)
def test_a_shipped_mutant_is_found_shrunk_and_its_rerun_fails_alike(tmp_path, mutant):
    workers = [] if mutant == "lse_base2" else ["--workers", 0]     # one campaign through worker processes
    code, stdout, stderr, out = fuzz(tmp_path, "--backend", f"mutant:{mutant}", "--cases", 12, "--seed", 1,
                                     "--max-context", 512, *workers)
    assert code == 1, stdout + stderr
    blocks = found_blocks(stdout)
    assert blocks, stdout
    for described, path, command in blocks:
        case, = load_suite(path).cases
        assert case.batch_size <= 2, (path, case)
        argv = shlex.split(command)
        assert argv[:2] == ["mla-verify", "run"] and argv[argv.index("--suite") + 1] == path
        assert argv[argv.index("--backend") + 1] == f"mutant:{mutant}"
        again = tmp_path / "again.jsonl"
        code, rerun_out, rerun_err = run_cli(argv[1:] + ["--out", again, "--no-progress"])
        assert code == 1, rerun_out + rerun_err
        row, = read_rows(again)
        assert describe(signature(row)) == described
    assert re.search(r"shrunk in \d+ step\(s\).*: batch \d+ -> [12], heads \d+ -> \d+, drafts", stdout)


def test_the_corpus_is_replayed_first_on_the_next_campaign(tmp_path):
    code, stdout, _, _ = fuzz(tmp_path, "--backend", "mutant:lse_base2", "--cases", 6, "--seed", 1,
                              "--max-context", 256, "--workers", 0)
    (described, path, _), = found_blocks(stdout)
    kept = sorted((tmp_path / "corpus").iterdir())
    assert code == 1 and [str(p) for p in kept] == [path]
    code, stdout, stderr, out = fuzz(tmp_path, "--backend", "mutant:lse_base2", "--cases", 3, "--seed", 2,
                                     "--workers", 0, name="next")
    rows = read_rows(out)
    assert code == 1 and len(rows) == 4
    assert rows[0]["case_id"] == load_suite(path).cases[0].id and rows[0]["case"]["suite_file"] == path
    assert describe(signature(rows[0])) == described
    assert all(r["case_id"].startswith("fuzz/") for r in rows[1:])
    assert f"FOUND {described} on mutant:lse_base2" in stdout and "replayed from the corpus" in stdout
    assert "1 case(s) replayed first" in stderr and "kept:" not in stdout
    assert sorted((tmp_path / "corpus").iterdir()) == kept


@pytest.mark.parametrize("argv, says", [
    (["--backend", "torch", "--cases", "0"], "--cases: must be 1 or more, got 0"),
    (["--backend", "torch", "--time", "bad"], "--time: 'bad' is not a positive duration"),
    (["--backend", "nosuch", "--cases", "2"], "unknown backend 'nosuch'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, argv, says):
    code, stdout, stderr, out = fuzz(tmp_path, *argv)
    assert code == 2 and stdout == ""
    assert stderr.count("\n") == 1 and stderr.startswith("mla-verify: error: ") and says in stderr, stderr
    assert not Path(out).exists() and not (tmp_path / "corpus").exists()

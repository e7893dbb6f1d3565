"""``report``'s exit code is one rule, sharded or not: the verdict of the rows it reads (0 passed, 1 failed,
5 nothing verified), 2 when the files are not one whole sharded run; and degenerate inputs (an empty
results file, a shard that got no case) are said in words.

The rows come from a real one-case run on the torch backend; the failing and unsupported files are the
same row with its status changed, so only the status decides the exit code.
"""

import json

import pytest
from helpers import run_cli

from harness.planning.cases import load_suite
from harness.recording.results import read_rows

ONE_CASE = load_suite("smoke").cases[0].id
STATUS_AND_CODE = [("pass", 0), ("fail", 1), ("unsupported", 5)]


@pytest.fixture(scope="module")
def row(tmp_path_factory):
    path = tmp_path_factory.mktemp("exit") / "one.jsonl"
    code, _, err = run_cli(["run", "--suite", "smoke", "--backend", "torch", "--case", ONE_CASE, "--device", "cpu",
                            "--workers", "0", "--no-progress", "--out", path])
    assert code == 0, err
    (found,) = read_rows(path)
    return found


def results_file(path, row, status: str, sharded: bool):
    """The run's row with ``status``; as the one shard of a ``--shard 1/1`` run, or unsharded."""
    changed = dict(row, status=status)
    if status == "unsupported":
        changed["reason"] = "needs a CUDA device (none in use here)"
    if sharded:
        changed.update(shard="1/1", shard_of=1)
    path.write_text(json.dumps(changed) + "\n")
    return path


@pytest.mark.parametrize("sharded", [False, True], ids=["unsharded", "shard-1-of-1"])
@pytest.mark.parametrize("status, code", STATUS_AND_CODE)
def test_the_exit_code_is_the_rows_verdict_sharded_or_not(tmp_path, row, status, code, sharded):
    path = results_file(tmp_path / "r.jsonl", row, status, sharded)
    got, out, err = run_cli(["report", path, "-o", tmp_path / "r.html"])
    assert got == code, err
    assert out.strip() == str(tmp_path / "r.html") and err == ""      # the report is written either way


def test_the_regression_gate_still_fails_a_passing_run(tmp_path, row):
    base = results_file(tmp_path / "base.jsonl", row, "pass", False)
    now = results_file(tmp_path / "now.jsonl", row, "unsupported", False)
    argv = ["report", now, "--baseline", base, "-o", tmp_path / "r.html"]
    assert run_cli(argv)[0] == 5                                       # the verdict: nothing verified
    code, out, _ = run_cli([*argv, "--fail-on-regression"])
    assert code == 1 and f"regression: {ONE_CASE} [torch] passed in the baseline, now unsupported" in out


def test_an_absent_shard_is_still_exit_2_whatever_the_rows_say(tmp_path, row):
    path = tmp_path / "half.jsonl"
    path.write_text(json.dumps(dict(row, status="fail", shard="1/2", shard_of=2)) + "\n")
    code, _, err = run_cli(["report", path, "-o", tmp_path / "r.html"])
    assert code == 2 and err.strip() == "mla-verify: report: shard 2 of 2 absent"


def test_an_empty_results_file_is_one_line_and_exit_5(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, out, err = run_cli(["report", empty, "-o", tmp_path / "r.html"])
    assert code == 5
    assert err.count("\n") == 1 and err.startswith(f"mla-verify: report: {empty}: no rows"), err
    assert "Traceback" not in err
    page = (tmp_path / "r.html").read_text()                          # a report all the same: it says why
    assert 'id="verdict">NOTHING VERIFIED<' in page and "the results hold no row" in page


def test_an_empty_shard_file_beside_whole_shards_is_said_and_the_verdict_stands(tmp_path, row):
    """Two cases over three shards: shard 3 got none, and its file is empty."""
    files = []
    for k, case_id in ((1, f"{ONE_CASE}"), (2, f"{ONE_CASE}-twin")):
        f = tmp_path / f"s{k}.jsonl"
        f.write_text(json.dumps(dict(row, case_id=case_id, shard=f"{k}/3", shard_of=2)) + "\n")
        files.append(f)
    empty = tmp_path / "s3.jsonl"
    empty.write_text("")
    code, _, err = run_cli(["report", *files, empty, "-o", tmp_path / "r.html"])
    assert code == 0, err
    assert err.strip() == (f"mla-verify: report: {empty}: no rows (an empty results file: the run was given "
                           f"no case, or stopped before its first row)")


def test_a_shard_that_got_no_case_says_so(tmp_path):
    """One case over two shards: shard 2 runs nothing, and its summary must not blame unsupported cases."""
    code, out, err = run_cli(["run", "--suite", "smoke", "--backend", "torch", "--case", ONE_CASE, "--shard", "2/2",
                              "--device", "cpu", "--workers", "0", "--no-progress", "--out", tmp_path / "s2.jsonl"])
    assert code == 5, err
    assert "every case was unsupported" not in out
    assert "no case was verified against a kernel: this run was given no case, so nothing ran" in out
    assert "verdict: NOTHING VERIFIED (exit 5)" in out
    assert (tmp_path / "s2.jsonl").read_text() == ""                  # an empty file, for the merge to name

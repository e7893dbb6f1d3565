"""A verdict a CI gate can trust: each of the eight ways the exit code used to lie, reproduced.

Every case asserts the exit code and that no traceback was printed.
"""

import errno
import json
import re
import shlex
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from helpers import REPO

from harness.cli import main
from harness.recording import results
from harness.recording.results import read_rows
from harness.recording.status import EXIT_CODES, Status, verdict_of
from harness.scenarios import _common as steps

OFFBYONE = str(REPO / "examples/offbyone_verify.py") + ":OffByOneVerify"


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, out + err
    return code, out, err


def run(capsys, *argv):
    return cli(capsys, "run", *argv, "--workers", "0", "--no-progress")


def plugin(tmp_path, body: str, name="plug.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


# 1. a resumed run covers every row of the file -----------------------------------------------------

def test_resume_after_an_interruption_keeps_the_recorded_failures(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    code, _, _ = run(capsys, "--suite", "smoke", "--backend", OFFBYONE, "--out", path)
    assert code == 1
    rows = path.read_text().splitlines()
    failed = [json.loads(r)["case_id"] for r in rows if json.loads(r)["status"] == "fail"]
    assert failed
    # the run was "interrupted" right after its last failure: resume runs the rest
    last_fail = max(i for i, r in enumerate(rows) if json.loads(r)["status"] == "fail")
    path.write_text("\n".join(rows[:last_fail + 1]) + "\n")
    code, out, err = run(capsys, "--suite", "smoke", "--backend", OFFBYONE, "--resume", path)
    assert code == 1 and "verdict: FAILED" in out
    assert f"{last_fail + 1} kept" in err
    scoreboard = [line for line in out.splitlines() if line.startswith("offbyone-verify ")]
    assert len(scoreboard) == 1 and f", {len(failed)} fail," in scoreboard[0]         # the kept failures count
    assert sum(map(int, re.findall(r"^FAIL .*: (\d+) cases? \(", out, re.M))) == len(failed)   # and are found
    # resuming the finished, failing file runs nothing and still fails
    code, out, _ = run(capsys, "--suite", "smoke", "--backend", OFFBYONE, "--resume", path)
    assert code == 1 and "verdict: FAILED" in out and "0 case(s) run" in out


def test_resume_runs_recorded_crashes_again_and_the_new_row_supersedes(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    case = "smoke/decode-bf16/0"
    assert run(capsys, "--suite", "smoke", "--backend", "torch", "--case", case, "--out", path)[0] == 0
    row = read_rows(path)[0]
    path.write_text(json.dumps(dict(row, status="crash", reason="worker killed by signal SIGKILL")) + "\n")
    code, out, err = run(capsys, "--suite", "smoke", "--backend", "torch", "--case", case, "--resume", path)
    assert code == 0 and "verdict: PASSED" in out and "1 crash/timeout/error row(s) run again" in err
    assert [r["status"] for r in read_rows(path)] == ["crash", "pass"]


def test_resume_matches_rows_by_the_resolved_backend_not_its_spelling(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    case = "smoke/decode-bf16/0"
    assert run(capsys, "--suite", "smoke", "--backend", "auto", "--case", case, "--out", path,
               "--device", "cpu")[0] == 0
    code, out, _ = run(capsys, "--suite", "smoke", "--backend", "torch", "--case", case, "--resume", path)
    assert code == 0 and "0 case(s) run" in out and len(read_rows(path)) == 1


# 2. nothing verified is not a pass ---------------------------------------------------------------

@pytest.mark.skipif(torch.cuda.is_available(),
                    reason="a CUDA device is present: the flashmla case may run; this checks it unsupported without")
def test_nothing_verified_exits_5_and_the_report_agrees(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    code, out, _ = run(capsys, "--suite", "verify", "--backend", "flashmla", "--case", "verify/drafts/7",
                       "--out", path)
    assert code == 5 and "verdict: NOTHING VERIFIED" in out
    html = tmp_path / "r.html"
    assert cli(capsys, "report", path, "-o", html)[0] == 5          # the run's verdict, and its code
    assert 'id="verdict">NOTHING VERIFIED<' in html.read_text()


def test_verdicts_and_exit_codes_are_one_table():
    assert set(EXIT_CODES) == {0, 1, 2, 3, 5, 130}       # 3: mla-verify's own bug; 130: interrupted (Ctrl-C)
    assert verdict_of([]).exit_code == 5
    assert verdict_of([{"status": "unsupported"}]).name == "NOTHING VERIFIED"
    assert verdict_of([{"status": "pass"}, {"status": "unsupported"}]).exit_code == 0
    for bad in ("fail", "error", "crash", "timeout", "harness_error", "a-status-from-the-future"):
        assert verdict_of([{"status": "pass"}, {"status": bad}]).exit_code == 1, bad
    oom = {"status": "harness_error", "cannot_hold": True}
    assert verdict_of([oom]).exit_code == 2
    assert verdict_of([oom, {"status": "fail"}]).exit_code == 1
    assert [s.value for s in Status if not s.gates] == ["pass", "unsupported"]
    readme = (REPO / "README.md").read_text()
    for code in EXIT_CODES:
        assert f"| {code} |" in readme, f"the README's exit-code table lacks {code}"


# 3. auto says what it chose, and --require-kernel fails without a kernel ---------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: this checks the CPU-only behaviour")
def test_auto_says_what_it_verifies_and_require_kernel_refuses_torch(tmp_path, capsys):
    code, out, err = run(capsys, "--suite", "smoke", "--backend", "auto", "--case", "smoke/decode-bf16/0",
                         "--out", tmp_path / "a.jsonl")
    assert code == 0
    kernel_lines = [line for line in err.splitlines() if "needs a CUDA device" in line]
    assert len(kernel_lines) == 1 and "auto: flashmla, flashmla-sparse" in kernel_lines[0], err   # said once
    assert "not a kernel" in err
    assert out.startswith("  auto: ") and "needs a CUDA device" not in out     # not said again
    assert any(line.startswith("torch  1 pass") for line in out.splitlines())
    assert [line for line in out.splitlines() if "auto: " in line] == [
        "  auto: no real kernel runs here: auto verifies the pure-PyTorch 'torch' backend, which checks the "
        "harness, not a kernel"]
    code, out, err = run(capsys, "--suite", "smoke", "--backend", "auto", "--require-kernel",
                         "--out", tmp_path / "b.jsonl")
    assert code == 2 and err.strip().splitlines()[-1].startswith("mla-verify: error: --require-kernel:")
    assert not (tmp_path / "b.jsonl").exists()


# 4. a torn results file loses no complete row ----------------------------------------------------

def test_resume_repairs_a_torn_last_line_and_reruns_that_case(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    assert run(capsys, "--suite", "smoke", "--backend", "torch", "--out", path)[0] == 0
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    torn_id = json.loads(lines[-1])["case_id"]
    path.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    code, out, err = run(capsys, "--suite", "smoke", "--backend", "torch", "--resume", path)
    assert code == 0 and "verdict: PASSED" in out
    assert "dropped a torn last line" in err and torn_id in err
    rows = read_rows(path)       # readable, one row per case again
    assert sorted(r["case_id"] for r in rows) == sorted(json.loads(x)["case_id"] for x in lines)
    # a second resume finds nothing to do and nothing broken
    code, out, err = run(capsys, "--suite", "smoke", "--backend", "torch", "--resume", path)
    assert code == 0 and "0 case(s) run" in out and "warning" not in err


def test_a_reader_recovers_a_row_glued_after_a_fragment(tmp_path, capsys):
    rows = [{"case_id": f"s/g/{i}", "status": "pass", "metrics": {"out": {"x": i}}} for i in range(3)]
    text = [json.dumps(r) for r in rows]
    glued = text[1][:25] + text[2]                      # what an older writer left behind
    path = tmp_path / "glued.jsonl"
    path.write_text(text[0] + "\n" + glued + "\n")
    got = read_rows(path)
    assert [r["case_id"] for r in got] == ["s/g/0", "s/g/2"]
    assert "s/g/1" in capsys.readouterr().err


# 5. the wrong dtype fails --------------------------------------------------------------------------

WRONG_DTYPE = """
    from harness.backends.torch_backend import TorchBackend

    class WrongDtype(TorchBackend):
        name = "wrong-dtype"

        def run(self, inputs):
            out, lse = super().run(inputs)
            return out.float(), lse.double()      # the right values, in dtypes no engine accepts
"""


def test_right_values_in_the_wrong_dtype_fail_with_one_line(tmp_path, capsys):
    spec = plugin(tmp_path, WRONG_DTYPE) + ":WrongDtype"
    path = tmp_path / "r.jsonl"
    code, out, _ = run(capsys, "--suite", "smoke", "--backend", spec, "--case", "smoke/decode-bf16/0",
                       "--out", path)
    assert code == 1
    row = read_rows(path)[0]
    assert row["status"] == "fail" and set(row["failed_checks"]) == {"out.dtype", "lse.dtype"}
    assert row["messages"] == ["smoke/decode-bf16/0: out has dtype float32, expected bfloat16",
                               "smoke/decode-bf16/0: lse has dtype float64, expected float32"]
    assert "     smoke/decode-bf16/0: out has dtype float32, expected bfloat16" in out     # the finding's example


# 6. a rerun command that runs ----------------------------------------------------------------------

def test_rerun_of_a_suite_given_as_a_path_reruns_that_file(tmp_path, capsys):
    suite = tmp_path / "my dir" / "my.toml"
    suite.parent.mkdir()
    suite.write_text('[[group]]\nname = "g"\nbatch_size = 2\nheads = 4\nseqlen = "uniform:5:90"\n')
    path = tmp_path / "r.jsonl"
    spec = plugin(tmp_path, WRONG_DTYPE) + ":WrongDtype"
    assert run(capsys, "--suite", suite, "--backend", spec, "--out", path)[0] == 1
    rerun = read_rows(path)[0]["rerun"]
    assert shlex.quote(str(suite)) in rerun
    argv = shlex.split(rerun)[2:]      # past "mla-verify run"
    code, out, err = run(capsys, *argv, "--out", tmp_path / "again.jsonl")
    assert code == 1 and "unknown suite" not in err, err


# 7. the phase that failed --------------------------------------------------------------------------

def test_a_harness_fault_is_not_the_kernels_error(tmp_path, capsys, monkeypatch):
    def no_memory(case, device):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
    monkeypatch.setattr(steps, "generate", no_memory)
    path = tmp_path / "r.jsonl"
    code, out, _ = run(capsys, "--suite", "smoke", "--backend", "torch", "--case", "smoke/decode-bf16/0",
                       "--out", path)
    row = read_rows(path)[0]
    assert row["status"] == "harness_error" and row["phase"] == "inputs" and row["cannot_hold"]
    assert code == 2 and "cannot hold" in out

    def oracle_bug(calls, compute_dtype=torch.float64):
        raise IndexError("an oracle bug")
    monkeypatch.undo()
    monkeypatch.setattr(steps.oracle, "expected_many", oracle_bug)
    code, _, _ = run(capsys, "--suite", "smoke", "--backend", "torch", "--case", "smoke/decode-bf16/0",
                     "--out", path)
    row = read_rows(path)[0]
    assert code == 1 and row["status"] == "harness_error" and row["phase"] == "oracle" and not row["cannot_hold"]


def test_a_kernel_exception_keeps_the_plugins_line(tmp_path, capsys):
    spec = plugin(tmp_path, """
        from harness.backends.torch_backend import TorchBackend

        class Raises(TorchBackend):
            name = "raises"

            def run(self, inputs):
                raise ValueError("bad block size")
    """, name="raising_plugin.py") + ":Raises"
    path = tmp_path / "r.jsonl"
    code, out, _ = run(capsys, "--suite", "smoke", "--backend", spec, "--case", "smoke/decode-bf16/0",
                       "--out", path)
    row = read_rows(path)[0]
    assert code == 1 and row["status"] == "error" and row["phase"] == "kernel"
    source = Path(spec.rpartition(":")[0]).read_text().splitlines()
    line = next(n for n, text in enumerate(source, 1) if "raise ValueError" in text)
    where = f"raising_plugin.py:{line} in run"
    assert row["traceback"][-1].endswith(where), row["traceback"]
    assert where in out


# 8. no traceback from an unwritable report ---------------------------------------------------------

def test_report_into_a_read_only_filesystem_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    path = tmp_path / "r.jsonl"
    assert run(capsys, "--suite", "smoke", "--backend", "torch", "--case", "smoke/decode-bf16/0",
               "--out", path)[0] == 0

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(Path, "write_text", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)     # the cleanup is refused too
    code, out, err = cli(capsys, "report", path, "-o", tmp_path / "ro" / "r.html")
    assert code == 2 and err.count("\n") == 1 and "Read-only file system" in err


def test_report_into_an_unwritable_place_as_a_user_runs_it(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"case_id": "s/g/0", "status": "pass"}) + "\n")
    p = subprocess.run([sys.executable, "-m", "harness.cli", "report", str(path), "-o", "/sys/mla-verify.html"],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


# CI outputs ---------------------------------------------------------------------------------------

def test_junit_xml_has_one_testcase_per_case_and_the_failures(tmp_path, capsys):
    path, xml = tmp_path / "r.jsonl", tmp_path / "junit.xml"
    code, _, _ = run(capsys, "--suite", "smoke", "--backend", OFFBYONE, "--out", path, "--junit-xml", xml)
    assert code == 1
    rows = read_rows(path)
    suites = ET.parse(xml).getroot()
    cases = list(suites.iter("testcase"))
    assert sorted(c.get("name") for c in cases) == sorted(r["case_id"] for r in rows)
    failing = [c for c in cases if c.find("failure") is not None]
    assert len(failing) == sum(r["status"] == "fail" for r in rows) > 0
    suite = suites.find("testsuite")
    assert int(suite.get("failures")) == len(failing) and int(suite.get("tests")) == len(rows)
    assert failing[0].find("failure").get("message").startswith(failing[0].get("name"))


def test_junit_xml_into_an_unwritable_place_fails_before_the_run(tmp_path, capsys):
    code, _, err = run(capsys, "--suite", "smoke", "--backend", "torch", "--out", tmp_path / "r.jsonl",
                       "--junit-xml", "/sys/junit.xml")
    assert code == 2 and "--junit-xml" in err and not (tmp_path / "r.jsonl").exists()


def test_fail_on_regression_and_the_baseline_flag_leaves_results_alone(tmp_path, capsys):
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    assert run(capsys, "--suite", "smoke", "--backend", "torch", "--out", old)[0] == 0
    rows = read_rows(old)
    broken = [dict(r, status="fail") if i == 0 else r for i, r in enumerate(rows)]
    new.write_text("".join(json.dumps(r) + "\n" for r in broken))
    # --baseline OLD NEW would once have swallowed NEW as a second baseline
    code, out, _ = cli(capsys, "report", "--baseline", old, new, "-o", tmp_path / "a.html")
    assert code == 1 and "a.html" in out          # the new file fails a case: the report gates on it
    code, out, _ = cli(capsys, "report", "--baseline", old, new, "-o", tmp_path / "b.html", "--fail-on-regression")
    assert code == 1 and f"regression: {rows[0]['case_id']} [torch] passed in the baseline, now fail" in out
    code, _, _ = cli(capsys, "report", "--baseline", old, old, "-o", tmp_path / "c.html", "--fail-on-regression")
    assert code == 0


def test_results_load_is_a_dataframe_of_the_rows(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    run(capsys, "--suite", "smoke", "--backend", "torch", "--case", "smoke/decode-bf16/0", "--out", path)
    df = results.load(path)
    assert list(df["status"]) == ["pass"] and "conventions.lse_base" in df.columns


def test_a_bug_in_mla_verify_exits_3_not_as_a_kernels_failure(tmp_path, capsys, monkeypatch):
    from harness.commands import run_cmd

    def broken(*args, **kwargs):
        raise KeyError("a key the harness lost")
    monkeypatch.setattr(run_cmd, "run", broken)
    code = main(["run", "--suite", "smoke", "--backend", "torch", "--workers", "0", "--out", str(tmp_path / "r.jsonl")])
    err = capsys.readouterr().err
    assert code == 3 and code != verdict_of([{"status": "fail"}]).exit_code
    assert "Traceback" in err
    assert err.strip().splitlines()[-1].startswith("mla-verify: internal error, a bug in mla-verify and not a finding: "
                                                   "KeyError: 'a key the harness lost'")

"""The end of ``run`` on the console leads with what is wrong, in this order: a line per backend, the
findings (clustered as the report clusters them), the time, the results file, the verdict.

Rows are real ones (a run of the LSE base-2 mutant and of torch), copied under other backends, suites
and statuses where a test needs more of them than a CPU run makes.
"""

import io
import re

import pytest
from helpers import run_cli

from harness.recording.console import REASONS_ON_ITS_LINE, SHOWN_FINDINGS, SHOWN_WARNINGS
from harness.recording.findings import finding_record, size
from harness.recording.results import read_rows
from harness.recording.summary import print_summary
from harness.running.run_summary import RunSummary

MUTANT = "mutant:lse_base2"


@pytest.fixture(scope="module")
def run_output(tmp_path_factory):
    """The smoke suite on the mutant and on torch: (stdout, rows)."""
    path = tmp_path_factory.mktemp("console") / "r.jsonl"
    code, out, err = run_cli(["run", "--suite", "smoke", "--backend", f"{MUTANT},torch", "--device", "cpu",
                              "--workers", "0", "--no-progress", "--out", path])
    assert code == 1, err
    return out, read_rows(path)


@pytest.fixture(scope="module")
def templates(run_output):
    """A failing row (LSE over its bound) and a passing one."""
    rows = run_output[1]
    return (next(r for r in rows if r["status"] == "fail"), next(r for r in rows if r["status"] == "pass"))


def like(row: dict, backend: str, case_id: str, **changes) -> dict:
    """``row`` as if ``backend`` had made it on case ``case_id``."""
    messages = [m.replace(row["case_id"], case_id, 1) for m in row.get("messages") or []] or None
    return dict(row, backend=backend, backend_spec=backend, case_id=case_id, suite=case_id.split("/")[0],
                rerun=f"mla-verify run --suite {case_id.split('/')[0]} --backend {backend} --case {case_id}",
                **{"messages": messages, **changes})


def unsupported(row: dict, backend: str, case_id: str, reason: str) -> dict:
    return like(row, backend, case_id, status="unsupported", reason=reason, messages=None, metrics=None,
                failed_checks=None, warnings=None)


def summary_text(rows, **kwargs) -> list[str]:
    out = io.StringIO()
    print_summary(RunSummary(rows=rows), "r.jsonl", out=out, **kwargs)
    return out.getvalue().splitlines()


def first(lines: list[str], pattern: str) -> int:
    return next(i for i, line in enumerate(lines) if re.match(pattern, line))


def test_sections_come_in_order_what_is_wrong_first(templates):
    fail, ok = templates
    rows = ([like(ok, "torch", f"smoke/g/{k}") for k in range(3)]
            + [like(fail, MUTANT, f"smoke/g/{k}") for k in range(2)]
            + [unsupported(ok, "flashmla", f"smoke/g/{k}", "FlashMLA needs a CUDA device (none here)")
               for k in range(3)])
    lines = summary_text(rows)
    sections = (r"torch +3 pass, 0 fail", r"mutant:lse_base2 +0 pass, 2 fail",
                r"flashmla +all 3 unsupported", r"FAIL mutant:lse_base2: ", r"time: ",
                r"\d+ case\(s\) run .*; results: r\.jsonl$", r"verdict: FAILED")
    order = [first(lines, p) for p in sections]
    assert order == sorted(order), "\n".join(lines)
    assert lines[-1] == "verdict: FAILED (exit 1)"
    # what each backend that ran something called, on its line
    assert [line.split("  (")[-1] for line in lines if line.startswith(("torch ", MUTANT))] == [
        called(ok), called(fail)]
    assert not any(line.startswith("verified:") for line in lines)      # said only when nothing was


def called(row) -> str:
    info = row["backend_info"]
    return f"{info['package']} {info['version']}, {info['api']})"


def test_a_backend_with_every_case_unsupported_is_one_line_saying_why(templates):
    _, ok = templates
    reasons = ([f"too large for a CPU run: {n}e+08 cached KV elements" for n in (1.9, 2.5, 7.0, 7.0)]
               + ["fp8 KV needs sm_90"] * 3 + ["page size 16 is not supported"] * 2 + ["no kernel for 5 heads"])
    rows = [like(ok, "torch", "smoke/g/0")] + [unsupported(ok, "flashinfer", f"smoke/g/{k}", reason)
                                               for k, reason in enumerate(reasons)]
    lines = summary_text(rows)
    mine = [line for line in lines if "flashinfer" in line]
    assert len(mine) == 1, "\n".join(lines)
    head, why = mine[0].split(": ", 1)
    assert head.split() == ["flashinfer", "all", str(len(reasons)), "unsupported"]
    # the largest groups with their case counts, the numbers that differ set aside; the rest counted
    assert why == ("too large for a CPU run: N cached KV elements (4); fp8 KV needs sm_90 (3) "
                   "... and 2 more reason(s) (3 cases)")
    assert len(why.split(" ... ")[0].split("; ")) == REASONS_ON_ITS_LINE
    assert not any(line.startswith("  unsupported (") for line in lines)


def test_a_failing_mutants_finding_shows_its_smallest_case_and_its_rerun_command(run_output):
    out, rows = run_output
    lines = out.splitlines()
    failing = [r for r in rows if r["status"] == "fail"]
    (at,) = [i for i, line in enumerate(lines) if line.startswith("FAIL ")]       # one bug: one finding
    assert lines[at].startswith(f"FAIL {MUTANT}: LSE over its bound by ") and f": {len(failing)} cases (" in lines[at]
    smallest = min(failing, key=lambda r: size(finding_record(r)))
    example, rerun = lines[at + 1].strip(), lines[at + 2].strip()
    assert example.startswith(f"{smallest['case_id']}: lse: ") and "worst at index [" in example
    assert rerun == f"rerun: {smallest['rerun']}"
    assert rerun == f"rerun: mla-verify run --suite smoke --backend {MUTANT} --device cpu --case {smallest['case_id']}"
    assert any(line.startswith(f"{MUTANT}  0 pass, {len(failing)} fail, 0 error/crash/timeout, 0 unsupported  (")
               for line in lines)


def test_table_prints_the_counts_per_suite_mode_and_dtype_only_when_asked(tmp_path):
    argv = ["run", "--suite", "smoke", "--backend", "torch", "--case", "smoke/decode-bf16/0", "--device", "cpu",
            "--workers", "0", "--no-progress"]
    code, plain, err = run_cli([*argv, "--out", tmp_path / "a.jsonl"])
    assert code == 0, err
    code, table, err = run_cli([*argv, "--out", tmp_path / "b.jsonl", "--table"])
    assert code == 0, err
    called_words = [line for line in table.splitlines() if line.startswith("torch ")][-1].split()[9:]
    assert called_words[0].startswith("(torch")      # the scoreboard line ends with what the backend called
    header = [line for line in table.splitlines() if line.split()[:4] == ["backend", "suite", "mode", "dtype"]]
    assert len(header) == 1 and header[0].split()[4:] == ["pass", "fail", "unsupported", "error", "crash",
                                                          "timeout", "harness_error"]
    assert [line.split() for line in table.splitlines() if line.startswith(("torch ", "total "))] == [
        ["torch", "smoke", "decode", "bf16", "1", "0", "0", "0", "0", "0", "0"],      # the table, above
        ["total", "1", "0", "0", "0", "0", "0", "0"],
        ["torch", "1", "pass,", "0", "fail,", "0", "error/crash/timeout,", "0", "unsupported", *called_words]]
    assert "harness_error" not in plain and not any(line.startswith("total ") for line in plain.splitlines())


SUITES = ("smoke", "decode", "verify", "fp8", "edge", "scale", "graph", "sparse")
NOT_HERE = {        # kernels not installed on the box: every case unsupported, one or two reasons each
    "flashinfer": ["flashinfer is not installed (pip install flashinfer-python)"],
    "flashinfer-graph": ["flashinfer is not installed (pip install flashinfer-python)"],
    "flashmla-sparse": ["sparse attention needs sm_90 or newer, this GPU is sm_80", "fp8 KV needs sm_90"],
    "flashmla-graph": ["CUDA graphs need a CUDA device"],
    "sglang-triton": ["sglang 0.5.23 is not installed (make triton-cpu)"],
    "flaggems": ["flag_gems is not installed", "page size 64 is not supported (1 only)"],
    "triton-graph": ["triton is not installed"],
}


def gpu_box_rows(fail: dict, ok: dict) -> list[dict]:
    """A GPU box's `make verify` over 9 backends x 8 suites x 2 modes x 2 dtypes, two cases each: torch
    passes where it is not too large, one kernel fails six ways, the other seven are not installed."""
    rows = []
    for suite in SUITES:
        for mode in ("decode", "verify"):
            for dtype in ("bf16", "fp8_e4m3"):
                for k in range(2):
                    case = f"{suite}/{mode}-{dtype}/{k}"
                    cell = {"mode": mode, "dtype": dtype}
                    rows.append(unsupported(ok, "torch", case, f"too large for a CPU run: {k + 2}.5e+08 elements")
                                if suite == "scale" else like(ok, "torch", case, **cell))
                    rows.append(kernel_row(fail, ok, suite, case, cell, k))
                    for backend, reasons in NOT_HERE.items():
                        rows.append(dict(unsupported(ok, backend, case, reasons[k % len(reasons)]), **cell))
    return rows


def kernel_row(fail: dict, ok: dict, suite: str, case: str, cell: dict, k: int) -> dict:
    """flashmla's row: a pass, or one of six ways to fail (each its own finding)."""
    bad = {"edge": dict(fail),
           "fp8": dict(ok, status="crash", reason="worker killed by signal SIGSEGV", messages=None),
           "graph": dict(ok, status="error", reason=f"RuntimeError: graph capture failed at batch {k + 3}",
                         messages=None),
           "sparse": dict(ok, status="timeout", reason="no result within 300 s; worker killed", messages=None),
           "scale": dict(ok, status="harness_error", reason="oracle: out of memory", messages=None),
           "decode": dict(fail, failed_checks=["out.nonfinite"])}
    row = like(bad.get(suite, ok), "flashmla", case, **cell)
    if cell["dtype"] == "fp8_e4m3" and suite == "verify":
        row["warnings"] = [f"{case}: lse_end_to_end: 3 element(s) out of bounds"]
    return row


def test_nine_backends_over_eight_suites_fit_in_under_40_lines(templates):
    rows = gpu_box_rows(*templates)
    lines = summary_text(rows)
    assert len(lines) < 40, f"{len(lines)} lines:\n" + "\n".join(lines)
    backends = ["torch", "flashmla", *NOT_HERE]
    assert [line.split()[0] for line in lines if line.split()[0] in backends] == backends     # a line each
    findings = [line for line in lines if line.startswith("FAIL ")]
    assert len(findings) == SHOWN_FINDINGS
    assert lines.count("... and 2 more finding(s) (16 cases) in r.jsonl") == 1               # six findings
    assert sum(line.startswith("warning (not gating) ") for line in lines) == SHOWN_WARNINGS
    table = summary_text(rows, table=True)
    assert len(table) - len(lines) > 9 * len(SUITES) * 2 * 2          # the table behind --table: a row each


def test_eleven_backends_that_each_ran_some_cases_fit_in_under_40_lines(templates):
    """The H200's make verify: every backend runs some cases and refuses others for reasons of its own,
    and one fails six ways; each backend is still one line, the reasons behind ``--table``."""
    fail, ok = templates
    rows = gpu_box_rows(fail, ok)
    for r in rows:
        if r["backend"] in NOT_HERE and r["case_id"].endswith("/0"):
            r.update(status="pass", reason=None)
    lines = summary_text(rows)
    assert len(lines) < 40, f"{len(lines)} lines:\n" + "\n".join(lines)
    assert not any("unsupported (" in line for line in lines)
    backends = ["torch", "flashmla", *NOT_HERE]
    assert [line.split()[0] for line in lines if line.split()[0] in backends] == backends
    table = summary_text(rows, table=True)
    assert sum(" unsupported (" in line for line in table) >= len(NOT_HERE)     # each one's reasons, asked for


@pytest.mark.parametrize("workers, order", [("0", "one backend after another"),
                                            ("1", "each starting as the one before hands out its last case")])
def test_a_run_of_several_backends_says_so_once_at_its_start(tmp_path, workers, order):
    code, out, err = run_cli(["run", "--suite", "smoke", "--backend", "torch,reference", "--case",
                              "smoke/decode-bf16/0", "--device", "cpu", "--workers", workers, "--no-progress",
                              "--out", tmp_path / "r.jsonl"])
    assert code == 0, err
    starts = [line for line in err.splitlines() if "case(s) from smoke" in line]
    assert starts == [f"mla-verify: 1 case(s) from smoke on each of 2 backends (cpu), {order}; "
                      f"results -> {tmp_path / 'r.jsonl'}"]

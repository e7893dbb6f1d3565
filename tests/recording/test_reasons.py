"""Unsupported reasons are grouped with their numbers set aside, and a cut list says what it left out,
in the console summary and in the report alike (``harness.recording.reasons``).

The reasons are the real ones: ``resources.too_large_reason`` for cases of the scale suite too large
for a CPU run, each carrying its own size, beside reasons that differ in words.
"""

import io
import json
import random
import re

import pytest
from helpers import run_cli

from harness.planning.cases import load_suite
from harness.recording.console import SHOWN_REASONS
from harness.recording.reasons import blank_numbers, group_reasons
from harness.recording.results import read_rows
from harness.recording.summary import print_summary
from harness.report import write_report
from harness.report.build import SHOWN_REASONS as REPORT_SHOWN
from harness.running.resources import too_large_reason
from harness.running.run_summary import RunSummary

ONE_CASE = load_suite("smoke").cases[0].id


def scale_reasons() -> list[str]:
    """The too-large reason of every scale case a CPU run with 4 GiB refuses: each names its own sizes."""
    found = [too_large_reason(c, "cpu", 4 * 2**30) for c in load_suite("scale").cases]
    return [r for r in found if r]


def test_reasons_that_differ_only_in_numbers_are_one_group():
    reasons = scale_reasons()
    assert len(set(reasons)) > SHOWN_REASONS          # as written, each case its own line
    grouped = group_reasons(reasons, top=SHOWN_REASONS)
    kinds = {r.split(":")[0] for r in reasons}       # "too large for a CPU run", "... for this machine"
    assert len(grouped.shown) == len(kinds) == 2 and grouped.more_groups == 0
    assert {g.text.split(":")[0] for g in grouped.shown} == kinds
    for group in grouped.shown:
        mine = [r for r in reasons if r.startswith(group.text.split(":")[0])]
        assert group.cases == len(mine) and group.variants == len(set(mine))
        # the numbers every reason of the group shares stay; those that differ read N
        shared = set.intersection(*(set(re.findall(r"\d[\d.e+]*", r)) for r in mine))
        assert shared and all(n in group.text for n in shared)
        assert " N " in group.text and blank_numbers(group.text) == blank_numbers(mine[0])


def test_names_with_digits_are_not_numbers():
    assert blank_numbers("fp8_e5m2 on sm_90 (bf16), batch 4x128, 1.5 GiB of 2,048") == \
        "fp8_e5m2 on sm_90 (bf16), batch NxN, N GiB of N"
    grouped = group_reasons(["dtype fp8_e5m2 is not supported", "dtype fp8_e4m3 is not supported"], top=5)
    assert len(grouped.shown) == 2                      # two dtypes are two reasons, not one


def test_a_cut_list_counts_what_it_left_out():
    rng = random.Random(11)
    reasons = [f"reason {word}" for word in "abcdefgh" for _ in range(rng.randint(1, 4))] + [None]
    grouped = group_reasons(reasons, top=3)
    assert len(grouped.shown) == 3 and grouped.more_groups == 9 - 3
    assert sum(g.cases for g in grouped.shown) + grouped.more_cases == len(reasons) == grouped.cases
    assert grouped.more_text() == f"... and 6 more reason(s) ({grouped.more_cases} cases)"
    assert group_reasons(reasons, top=20).more_text() is None


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """A real row made unsupported many times over: the scale suite's reasons and eight worded ones."""
    path = tmp_path_factory.mktemp("reasons") / "one.jsonl"
    code, _, err = run_cli(["run", "--suite", "smoke", "--backend", "torch", "--case", ONE_CASE, "--device", "cpu",
                            "--workers", "0", "--no-progress", "--out", path])
    assert code == 0, err
    (row,) = read_rows(path)
    reasons = scale_reasons() + [f"the kernel lacks feature {w}" for w in ("alpha", "beta", "gamma", "delta",
                                                                            "epsilon", "zeta", "eta", "theta")]
    return [dict(row, case_id=f"smoke/unsupported/{k}", status="unsupported", reason=reason)
            for k, reason in enumerate(reasons)]


def test_table_lists_a_backends_reasons_and_ends_a_cut_list_with_a_count(rows):
    """A backend that verified some cases and not others: with ``--table`` its reasons, the rest counted;
    without, its scoreboard line alone."""
    verified = dict(rows[0], case_id="smoke/verified/0", status="pass", reason=None)
    out, plain = io.StringIO(), io.StringIO()
    print_summary(RunSummary(rows=[verified, *rows]), "r.jsonl", out=out, table=True)
    print_summary(RunSummary(rows=[verified, *rows]), "r.jsonl", out=plain)
    text = out.getvalue()
    assert "unsupported (" not in plain.getvalue() and f"1 pass, 0 fail, 0 error/crash/timeout, {len(rows)} " \
        "unsupported" in plain.getvalue()
    listed = re.findall(r"^torch unsupported \((\d+)\): (.*)$", text, re.M)
    more = re.search(r"^  \.\.\. and (\d+) more reason\(s\) \((\d+) cases?\) in r\.jsonl$", text, re.M)
    assert len(listed) == SHOWN_REASONS and more, text
    assert sum(int(n) for n, _ in listed) + int(more.group(2)) == len(rows)     # every case accounted for
    assert int(more.group(1)) == len({blank_numbers(r["reason"]) for r in rows}) - SHOWN_REASONS
    sizes = scale_reasons()
    assert sorted(int(n) for n, _ in listed[:2]) == sorted(sum(r.startswith(k) for r in sizes)      # one line
                                                           for k in {r.split(":")[0] for r in sizes})   # a kind


def test_the_report_lists_the_same_groups_and_the_rest_counted(rows, tmp_path):
    path = tmp_path / "u.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, data = write_report([path], tmp_path / "u.html")
    html = out.read_text(encoding="utf-8")
    table = html[html.index('id="unsupported"'):html.index("</table>", html.index('id="unsupported"'))]
    cells = re.findall(r"<td class='n'>([\d,]+)<td>", table)
    assert len(cells) == REPORT_SHOWN
    more = re.search(r"\.\.\. and (\d+) more reason\(s\) \((\d+) cases?\)", table)
    assert more and sum(int(n) for n in cells) + int(more.group(2)) == len(rows)
    console = group_reasons((r["reason"] for r in rows), SHOWN_REASONS).shown
    assert [g.text for g in data.unsupported.shown[:SHOWN_REASONS]] == [g.text for g in console]


def test_an_error_whose_message_runs_on_keeps_its_last_line_in_the_reason_and_all_of_it_in_the_details():
    from harness.recording.outcome import Outcome
    # the shape of Triton's CompilationError: where, the source, a caret, then what is wrong
    error = RuntimeError("at 128:21:\n        if TDP > 0:\n            qk += tl.dot(q_tail, kv_tail)\n"
                         "                     ^\nAssertionError('All non-batch values in both first input shape')")
    outcome = Outcome.raised("kernel", error)
    assert outcome.reason == ("RuntimeError: at 128:21: … "
                              "AssertionError('All non-batch values in both first input shape')")
    assert outcome.details["message"].splitlines()[2].strip() == "qk += tl.dot(q_tail, kv_tail)"
    one_line = Outcome.raised("kernel", RuntimeError("CUDA error: an illegal memory access"))
    assert one_line.reason == "RuntimeError: CUDA error: an illegal memory access" and "message" not in one_line.details
    # torch's CUDA errors run on with advice: the first line says what happened, and stays alone in the reason
    cuda = Outcome.raised("kernel", RuntimeError("CUDA error: an illegal memory access was encountered\n"
                                                 "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."))
    assert cuda.reason == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert cuda.details["message"].endswith("device-side assertions.")

"""The report's case x backend matrix and the kernel-against-kernel comparison."""

import math
import re

from helpers import REPO

from harness.cli import main
from harness.recording.results import read_rows
from harness.report.matrix import spread

OFFBYONE = str(REPO / "examples/offbyone_verify.py") + ":OffByOneVerify"


def row(backend, values, status="pass", dtype="bf16"):
    return {"case_id": "s/g/0", "backend": backend, "status": status, "dtype": dtype,
            "metrics": {"out_sample": {"positions": list(range(len(values))), "values": values}}}


def test_spread_finds_the_kernel_that_leaves_the_others():
    base = [0.5, -1.0, 2.0, 0.0]
    rows = [row("a", base), row("b", [v + 1e-4 for v in base]), row("c", [v + 0.2 for v in base])]
    dev = spread(rows)
    assert dev["c"] > 1 > dev["a"] and dev["b"] < 1
    nan = row("d", [math.nan, *base[1:]])
    assert math.isinf(spread([row("a", base), row("b", base), nan])["d"])
    assert spread([row("a", base)]) == {}                                   # one kernel: nothing to compare
    assert spread([row("a", base), row("b", base, status="unsupported")]) == {}


def test_two_backends_in_one_file_make_a_matrix_with_the_disagreements(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    code = main(["run", "--suite", "smoke", "--backend", f"torch,{OFFBYONE}", "--out", str(path),
                 "--workers", "0", "--no-progress"])
    assert code == 1
    rows = read_rows(path)
    assert {r["backend"] for r in rows} == {"torch", "offbyone-verify"}
    assert all(len(r["metrics"]["out_sample"]["values"]) == 64 for r in rows if r.get("metrics"))
    by = {}
    for r in rows:
        by.setdefault(r["case_id"], {})[r["backend"]] = r["status"]
    expected = sorted(c for c, s in by.items() if len(set(s.values())) > 1)
    assert expected                                                        # the verify cases
    html = tmp_path / "r.html"
    assert main(["report", str(path), "-o", str(html)]) == 1       # a backend fails: the verdict gates
    page = html.read_text()
    matrix = page[page.index('id="matrix"'):page.index("</table>", page.index('id="matrix"'))]
    flagged = sorted(re.findall(r'data-dis="1"><td>([^<]+)<', matrix))
    assert set(expected) <= set(flagged)
    assert f"{len(flagged)} where the backends disagree" in matrix
    capsys.readouterr()

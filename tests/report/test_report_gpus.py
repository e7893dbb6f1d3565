"""The report with rows from two GPU models: the kernel x GPU model table, a case that
fails on one model only as a finding naming both, the matrix's columns per model, and nothing new with one
model.  Rows are a real CPU run's, stamped as if run on an H100 and an H200 (old rows: env.gpu alone)."""

import json
import re

import pytest

from harness.cli import main as cli
from harness.recording.summary import time_line
from harness.report import write_report
from harness.report.rows import gpu_model
from harness.running.run_summary import RunSummary

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
KERNEL = "kern"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The smoke suite on torch (all pass) and on the LSE mutant (fails), by case id."""
    path = tmp_path_factory.mktemp("gpus") / "base.jsonl"
    assert cli(["run", "--suite", "smoke", "--backend", "torch,mutant:lse_base2", "--workers", "0",
                "--no-progress", "--out", str(path)]) == 1
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    good = {r["case_id"]: r for r in rows if r["backend"] == "torch"}
    bad = {r["case_id"]: r for r in rows if r["backend"] != "torch" and r["status"] == "fail"}
    return good, bad


def on_gpu(row: dict, name: str, index: int, placement: bool = True) -> dict:
    """``row`` as if kernel KERNEL ran it on GPU ``name``; without ``placement``, as rows before it existed."""
    row = dict(row, backend=KERNEL, backend_spec=KERNEL, env={**row["env"], "gpu": name})
    row.pop("placement", None)          # the base run's own, where it ran on a GPU box
    if placement:
        row["placement"] = {"gpu": index, "name": name, "uuid": f"GPU-{index}"}
    return row


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def two_models(base, tmp_path, failing_on_h200, placement_on_h100=True):
    good, bad = base
    h100 = [on_gpu(r, H100, 0, placement_on_h100) for r in good.values()]
    h200 = [on_gpu(bad[c] if c in failing_on_h200 else r, H200, 1) for c, r in good.items()]
    return [write(tmp_path / "h100.jsonl", h100), write(tmp_path / "h200.jsonl", h200)]


def table_line(html: str, gpu: str) -> dict[str, str]:
    table = html[html.index('id="gpu-table"'):html.index("</table>", html.index('id="gpu-table"'))]
    line = re.search(rf'<tr data-backend="{KERNEL}" data-gpu="{re.escape(gpu)}">(.*?)</tr>', table).group(1)
    return dict(re.findall(r'data-k="([^"]+)"[^>]*>([^<]*)', line))


def test_a_case_failing_on_one_model_is_a_finding_naming_both(base, tmp_path):
    good, bad = base
    failing = sorted(set(bad) & set(good))[:2]
    assert len(failing) == 2
    out, data = write_report(two_models(base, tmp_path, failing), tmp_path / "r.html")
    html = out.read_text()
    assert len(data.df) == 2 * len(good)               # each model keeps its own row of a case
    h = table_line(html, H100)
    assert (h["pass"], h["fail"], h["other"], h["differ"]) == (str(len(good)), "0", "0", "2")
    g = table_line(html, H200)
    assert (g["pass"], g["fail"], g["differ"]) == (str(len(good) - 2), "2", "2")
    assert float(g["lse_ratio"].rstrip("×").replace(",", "")) > 1 > float(h["lse_ratio"].rstrip("×"))
    split = [f for f in data.findings if f.gpus]
    assert len(split) == 1 and split[0].cases == 2 and split[0].backend == KERNEL
    assert split[0].gpus == (H200, ((H100, "pass"),))
    assert f"fail on {H200}, pass on {H100}" in split[0].evidence
    assert split[0].smallest["rerun"] in html and f"on a {H200}" in html
    assert data.findings == split                      # no second, plain finding of the same rows
    # the finding is on the first screen, the table below it
    assert html.index('id="findings"') < html.index('id="gpus"') < html.index('id="matrix"')
    matrix = html[html.index('id="matrix"'):]
    marked = re.findall(r'data-gdis="1"><td>([^<]+)<', matrix)
    assert sorted(marked) == failing
    assert f"<th>{KERNEL}<small>{H100}</small><th>{KERNEL}<small>{H200}</small>" in matrix
    assert 'id="only-gdis"' in matrix


def test_one_model_shows_no_table_and_supersedes_as_before(base, tmp_path):
    good, bad = base
    failing = sorted(set(bad) & set(good))[:1]
    first = write(tmp_path / "a.jsonl", [on_gpu(r, H200, 0) for r in good.values()])
    again = write(tmp_path / "b.jsonl", [on_gpu(bad[c], H200, 1) for c in failing])
    out, data = write_report([first, again], tmp_path / "r.html")
    html = out.read_text()
    assert 'id="gpu-table"' not in html and 'id="gpus"' not in html and "data-gdis" not in html
    assert len(data.df) == len(good) and data.superseded == 1
    assert not any(f.gpus for f in data.findings) and data.findings


def test_rows_without_placement_still_load_by_their_environment(base, tmp_path):
    good, bad = base
    failing = sorted(set(bad) & set(good))[:1]
    paths = two_models(base, tmp_path, failing, placement_on_h100=False)
    old = json.loads(paths[0].read_text().splitlines()[0])
    assert "placement" not in old and gpu_model(old) == H100
    out, data = write_report(paths, tmp_path / "r.html")
    html = out.read_text()
    assert table_line(html, H100)["pass"] == str(len(good))
    assert [f.gpus for f in data.findings] == [(H200, ((H100, "pass"),))]


def test_a_cpu_run_beside_one_gpu_model_is_one_model(base, tmp_path):
    good, _ = base
    # a CPU run's rows whatever machine ran the base run (on a GPU box its env names that box's GPU)
    cpu_rows = [dict(r, backend=KERNEL, env={**r["env"], "gpu": None}) for r in good.values()]
    cpu = write(tmp_path / "cpu.jsonl", [{k: v for k, v in r.items() if k != "placement"} for r in cpu_rows])
    gpu = write(tmp_path / "gpu.jsonl", [on_gpu(r, H200, 0) for r in good.values()])
    _, data = write_report([cpu, gpu], tmp_path / "r.html")
    assert len(data.df) == len(good) and data.superseded == len(good)    # the later (GPU) rows win


def test_the_console_summary_names_the_gpus_the_run_used():
    rows = [{"case_id": f"s/g/{k}", "phase_ms": {}, "placement": {"gpu": k % 3, "name": name, "uuid": f"GPU-{k % 3}"}}
            for k, name in enumerate([H100, H200, H200] * 2)]
    line = time_line(RunSummary(rows=rows, workers=6))
    assert f"6 worker process(es) on 3 GPUs: {H100} (0); 2x {H200} (1, 2);" in line
    one = time_line(RunSummary(rows=[dict(r, placement=rows[0]["placement"]) for r in rows], workers=2))
    assert "2 worker process(es);" in one and "GPU" not in one        # one GPU: as before
    eight = [{"phase_ms": {}, "placement": {"gpu": k, "name": H200, "uuid": f"GPU-{k}"}} for k in range(8)]
    assert "on 8 GPUs: 8x NVIDIA H200 (0-7);" in time_line(RunSummary(rows=eight, workers=8))


def test_the_baseline_matches_each_gpu_models_own_rows(base, tmp_path):
    good, bad = base
    case = sorted(set(bad) & set(good))[0]
    old = tmp_path / "old"
    old.mkdir()
    h100, h200 = two_models(base, old, [])          # the baseline: the case failed on the H100 only
    rows = [json.loads(line) for line in h100.read_text().splitlines()]
    write(h100, [on_gpu(bad[case], H100, 0) if r["case_id"] == case else r for r in rows])
    _, data = write_report(two_models(base, tmp_path, []), tmp_path / "r.html", baselines=[h100, h200])
    marks = {(r["gpu"], r["mark"]) for r in data.df.to_dict("records") if r["case_id"] == case}
    assert marks == {(H100, "fixed"), (H200, "")}

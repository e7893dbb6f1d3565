"""The report's first screen, from real runs: the smoke suite on the torch backend and shipped mutants
(a failing multi-backend file), and on the torch backend alone (a CPU-only file).

Checked on the HTML's text (no browser): the verdict, scoreboard and findings come before the tables;
each finding clusters its rows and reruns its smallest case; the scoreboard's counts match the rows;
a run with no real kernel gets the neutral badge; the matrix opens on the disagreements; time is labelled.
A headless Chromium, where installed, checks that the scoreboard and first finding are on the first screen.
"""

import json
import random
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from harness.cli import main as cli
from harness.recording.findings import size
from harness.recording.results import read_rows
from harness.report import write_report
from harness.report.text import seconds

MUTANTS = ("lse_base2", "causal_plus_one")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("lead")
    multi, cpu = d / "multi.jsonl", d / "cpu.jsonl"
    backends = ",".join(["torch", *(f"mutant:{m}" for m in MUTANTS)])
    for spec, path, want in ((backends, multi, 1), ("torch", cpu, 0)):
        code = cli(["run", "--suite", "smoke", "--backend", spec, "--workers", "0", "--no-progress",
                    "--out", str(path)])
        assert code == want, spec
    reports = {}
    for name, path in (("multi", multi), ("cpu", cpu)):
        out, data = write_report([path], d / f"{name}.html")
        reports[name] = (path, out.read_text(encoding="utf-8"), data)
    return d, reports


def position(html: str, element_id: str) -> int:
    at = html.find(f'id="{element_id}"')
    assert at >= 0, f"no element #{element_id}"
    return at


@pytest.mark.parametrize("name", ["multi", "cpu"])
def test_verdict_scoreboard_and_findings_come_before_the_tables(files, name):
    _, reports = files
    _, html, _ = reports[name]
    lead = [position(html, i) for i in ("verdict", "runtime", "scoreboard", "findings")]
    assert lead == sorted(lead)
    tables = [position(html, i) for i in ("totals", "counts", "env", "cases-t")]
    if name == "multi":
        lead.append(position(html, "f0"))               # the first finding itself
        tables.append(position(html, "matrix"))
    assert max(lead) < min(tables)


def test_findings_cluster_the_failing_rows_and_rerun_the_smallest(files):
    _, reports = files
    path, html, data = reports["multi"]
    rows = read_rows(path)
    failing = [r for r in rows if r["status"] != "pass"]
    assert failing
    assert sum(f.cases for f in data.findings) == len(failing)          # every failing row is in one finding
    for f in data.findings:
        assert f.backend.startswith("mutant:")                           # the torch backend passes
        mine = [r for r in data.df.to_dict("records") if r["backend"] == f.backend and r["status"] != "pass"]
        assert size(f.smallest) == min(size(r) for r in mine)
        assert f.smallest["rerun"] and f.smallest["rerun"] in html
    lse = [f for f in data.findings if f.backend == "mutant:lse_base2"]
    assert len(lse) == 1 and lse[0].cases == sum(r["backend"] == "mutant:lse_base2" for r in failing)
    assert re.search(r"LSE over its bound by [\d.,]+-[\d.,]+x", lse[0].evidence)
    assert html.count('class="copy"') == len(data.findings)


def test_scoreboard_counts_match_the_rows(files):
    _, reports = files
    path, _, data = reports["multi"]
    rows = read_rows(path)
    for line in data.scoreboard:
        got = Counter(r["status"] for r in rows if r["backend"] == line.backend)
        assert line.counts["pass"] == got["pass"] and line.counts["fail"] == got["fail"]
        assert line.counts["unsupported"] == got["unsupported"]
        assert line.findings == sum(f.backend == line.backend for f in data.findings)
        info = next(r["backend_info"] for r in rows if r["backend"] == line.backend)
        assert line.kernel == f"{info['package']} {info['version']}"
        assert line.harness_only


def test_no_real_kernel_gets_a_neutral_badge(files):
    d, reports = files
    path, html, _ = reports["cpu"]
    assert re.search(r'class="verdict v-HARNESS" id="verdict"[^>]*>PASSED: harness only, no kernel verified<', html)
    assert 'class="verdict v-PASSED"' not in html
    _, multi, _ = reports["multi"]
    assert 'id="verdict">FAILED<' in multi and 'id="harness-only"' in multi
    # the same rows under a kernel's name: a plain green PASSED
    renamed = d / "kernel.jsonl"
    renamed.write_text("".join(json.dumps(dict(r, backend="my-kernel")) + "\n" for r in read_rows(path)))
    out, data = write_report([renamed], d / "kernel.html")
    assert not data.no_kernel
    assert 'class="verdict v-PASSED" id="verdict">PASSED<' in out.read_text(encoding="utf-8")


def test_the_matrix_opens_on_the_disagreements(files):
    d, reports = files
    path, _, _ = reports["multi"]
    # without lse_base2 (it fails every case) some cases agree: causal_plus_one fails only on verify
    some = d / "some.jsonl"
    some.write_text("".join(json.dumps(r) + "\n" for r in read_rows(path) if r["backend"] != "mutant:lse_base2"))
    out, _ = write_report([some], d / "some.html")
    html = out.read_text(encoding="utf-8")
    matrix = html[position(html, "matrix"):html.index("</table>", position(html, "matrix"))]
    assert re.search(r'id="only-dis"[^>]* checked', matrix)
    lines = re.findall(r"<tr([^>]*)>", matrix)[1:]                       # after the header
    agreeing = [a for a in lines if 'data-dis="0"' in a]
    assert agreeing and all("hidden" in a for a in agreeing)
    assert any('data-dis="1"' in a and "hidden" not in a for a in lines)
    assert 'id="matrix"' not in reports["cpu"][1]                         # one backend: no matrix


def test_wall_clock_and_summed_time_each_have_their_label(files):
    d, reports = files
    path, html, data = reports["cpu"]
    assert "wall clock: not recorded" not in html and "summed case time" in html     # run stamps its rows
    assert data.timing["stamped"] == data.timing["cases"] > 0 and data.timing["wall_s"] > 0
    rng = random.Random(29)
    rows = read_rows(path)
    unstamped = d / "unstamped.jsonl"          # rows written before run stamped them
    unstamped.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "finished_at"}) + "\n"
                                 for r in rows))
    assert "wall clock: not recorded" in write_report([unstamped], d / "unstamped.html")[0].read_text()
    start = 1.7e9 + rng.uniform(0, 1e6)
    stamped = []
    for r in rows:
        begin = start + rng.uniform(0, 30)
        stamped.append(dict(r, started_at=begin, finished_at=begin + rng.uniform(0.1, 5)))
    f = d / "stamped.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in stamped))
    out, data = write_report([f], d / "stamped.html")
    wall = max(r["finished_at"] for r in stamped) - min(r["started_at"] for r in stamped)
    assert data.timing["wall_s"] == pytest.approx(wall)
    text = out.read_text(encoding="utf-8")
    assert f"<b>{seconds(wall)}</b> wall clock, first case start to last case end" in text
    assert f"<b>{seconds(sum(r['wall_s'] for r in rows))}</b> summed case time" in text


def test_the_warm_ups_kernel_time_is_given_apart(files):
    """Rows a run's warm-up ran first (``running/warm_up``) carry ``warm_up``: their kernel time, which holds
    each variant's build, is named beside the summed kernel time; a report without them says nothing of it."""
    d, reports = files
    path, html, _ = reports["cpu"]
    assert "warm-up" not in html
    rows = read_rows(path)
    marked = [dict(r, warm_up=True, kernel_ms=1500.0) if i < 3 else r for i, r in enumerate(rows)]
    f = d / "warmed.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in marked))
    out, data = write_report([f], d / "warmed.html")
    assert data.timing["warm_up_cases"] == 3 and data.timing["warm_up_kernel_s"] == pytest.approx(4.5)
    assert ("(4.5 s of it in the warm-up: the first case of each of 3 kernel variants, which built them)"
            in out.read_text(encoding="utf-8"))


def test_the_wall_clock_is_read_from_finish_stamps_and_case_times(files):
    """A row that records when it finished (``finished_at``) started its ``wall_s`` before."""
    d, reports = files
    path, _, _ = reports["multi"]
    rng = random.Random(31)
    rows = read_rows(path)
    end = 1.7e9 + rng.uniform(0, 1e6)
    stamped = [dict(r, finished_at=end + rng.uniform(0, 60)) for r in rows]
    f = d / "finished.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in stamped))
    out, data = write_report([f], d / "finished.html")
    wall = max(r["finished_at"] for r in stamped) - min(r["finished_at"] - r["wall_s"] for r in stamped)
    assert data.timing["wall_s"] == pytest.approx(wall) and data.timing["stamped"] == len(rows)
    text = out.read_text(encoding="utf-8")
    assert f"<b>{seconds(wall)}</b> wall clock, first case start to last case end" in text
    assert "not recorded" not in text


def first_screen_text(html: str) -> str:
    """The page's text above the scoreboard, tags and attributes (tooltips) stripped."""
    return re.sub(r"<[^>]+>", "", html[:position(html, "scoreboard")])


def test_why_no_kernel_was_verified_is_said_in_words_on_the_first_screen(tmp_path):
    """An auto run on the CPU: every kernel auto skipped, and why, in plain text above the scoreboard."""
    path = tmp_path / "auto.jsonl"
    code = cli(["run", "--suite", "smoke", "--case", "smoke/decode-bf16/0", "--backend", "auto", "--device", "cpu",
                "--workers", "0", "--no-progress", "--out", str(path)])
    assert code == 0
    rows = read_rows(path)
    skipped = [n.split(": ", 1) for n in rows[0]["selection"] if ": " in n and not n.endswith("runs here")]
    assert skipped and {r["backend"] for r in rows} == {"torch"}
    out, _ = write_report([path], tmp_path / "auto.html")
    text = first_screen_text(out.read_text(encoding="utf-8"))
    assert "No kernel was verified: only the pure-PyTorch torch backend ran, which checks the harness" in text
    for kernel, reason in skipped:
        if not kernel.startswith("no real kernel"):
            assert reason in text, reason
    gpu = rows[0]["env"]["gpu"]              # a GPU box's, where this runs there with --device cpu
    assert ("the rows ran on cpu, " + (f"not on the {gpu} there" if gpu else "with no GPU")) in text
    on_a_gpu_box = tmp_path / "gpu-box.jsonl"       # --device cpu where a GPU was: said, so it is not missed
    on_a_gpu_box.write_text("".join(json.dumps(dict(r, env=dict(r["env"], gpu="NVIDIA H200"))) + "\n" for r in rows))
    out, _ = write_report([on_a_gpu_box], tmp_path / "gpu-box.html")
    assert "the rows ran on cpu, not on the NVIDIA H200 there" in first_screen_text(out.read_text(encoding="utf-8"))
    renamed = tmp_path / "kernel.jsonl"          # the same rows under a kernel's name: nothing to explain
    renamed.write_text("".join(json.dumps(dict(r, backend="my-kernel")) + "\n" for r in rows))
    out, _ = write_report([renamed], tmp_path / "kernel.html")
    assert 'id="no-kernel"' not in out.read_text(encoding="utf-8")


def test_long_tables_fold(tmp_path, files):
    _, reports = files
    path, _, _ = reports["multi"]
    rows = read_rows(path)
    big = tmp_path / "big.jsonl"
    with big.open("w") as f:
        for k in range(600):
            r = rows[k % len(rows)]
            f.write(json.dumps(dict(r, case_id=f"{r['case_id']}#{k // len(rows)}", suite=f"s{k % 40}")) + "\n")
    out, _ = write_report([big], tmp_path / "big.html")
    html = out.read_text(encoding="utf-8")
    counts = html[position(html, "counts"):html.index("</table>", position(html, "counts"))]
    lines = re.findall(r"<tr( hidden)? data-g=", counts)
    assert len(lines) > 30 and sum(not h for h in lines) == 30           # 30 shown, the rest one click away
    assert "show all" in html[position(html, "counts"):position(html, "cases-t")]


def title_after_load(stem: Path, html: str, script: str):
    """The page with ``script`` added, rendered by headless Chromium at 1400 x 900: the JSON its script leaves
    in the title once the page has loaded."""
    page = stem.with_name(stem.name + ".html")
    page.write_text(html.replace("</body>", script + "</body>"), encoding="utf-8")
    proc = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={stem.with_name(stem.name + '-profile')}", "--window-size=1400,900",
                           "--hide-scrollbars", "--dump-dom", f"file://{page}"],
                          capture_output=True, text=True, timeout=120)
    found = re.search(r"<title>([\[{].*?)</title>", proc.stdout)        # the script's JSON, not the report's title
    assert found, proc.stderr[-2000:]
    return json.loads(found.group(1))


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="Debian chromium is not installed (apt-get install -y chromium)")
@pytest.mark.parametrize("name", ["multi", "cpu"])
def test_scoreboard_and_first_finding_are_on_the_first_screen(files, name):
    """At 1400 x 900 in headless Chromium: the bottoms of the scoreboard and the first finding are above 900."""
    d, reports = files
    _, html, _ = reports[name]
    first = "f0" if name == "multi" else "findings"                    # no failure: the findings' "nothing" line
    probe = ("<script>addEventListener('load',()=>{const b=i=>document.getElementById(i).getBoundingClientRect()"
             f".bottom;document.title=JSON.stringify({{board:b('scoreboard'),first:b('{first}')}});}});</script>")
    box = title_after_load(d / f"{name}-probe", html, probe)
    assert 0 < box["board"] <= 900 and 0 < box["first"] <= 900, box


# Every element that shows on the first screen: one whose content is wider than its box where the box does
# not let it out (overflow other than visible) is clipped, and so is one that ends past the window's right.
CLIPPED = ("<script>addEventListener('load',()=>{const out=[],W=document.documentElement.clientWidth;"
           "for(const el of document.querySelectorAll('main *')){const r=el.getBoundingClientRect();"
           "if(r.top>=900||r.bottom<=0||!r.width)continue;const name=el.tagName+'#'+el.id+'.'+el.className;"
           "if(getComputedStyle(el).overflowX!=='visible'&&el.scrollWidth>el.clientWidth+1)"
           "out.push(name+' holds '+el.scrollWidth+' px in '+el.clientWidth);"
           "if(r.right>W+1)out.push(name+' ends at '+r.right+' px');}"
           "document.title=JSON.stringify(out);});</script>")


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="Debian chromium is not installed (apt-get install -y chromium)")
@pytest.mark.parametrize("name", ["multi", "cpu"])
def test_nothing_on_the_first_screen_is_clipped(files, name):
    """At 1400 x 900: no table, bar or panel in the first 900 pixels is cut off at its right (the counts
    table's bar column was, in its panel)."""
    d, reports = files
    _, html, _ = reports[name]
    assert title_after_load(d / f"{name}-clip", html, CLIPPED) == []


def test_the_scoreboard_gives_each_backends_worst_error_over_its_floor_passing_rows_too(files):
    """Every compared row carries its noise floor, so a backend whose every row passes still has a worst
    error over its floor, read from its rows: the clean torch backend near 1x, the mutants far beyond."""
    _, reports = files
    path, html, data = reports["multi"]
    rows = read_rows(path)
    for line in data.scoreboard:
        mine = [r["metrics"]["noise_floor"] for r in rows if r["backend"] == line.backend and r["status"] == "pass"]
        ratios = [t["over_floor"] for f in mine for name, t in f.items() if name != "emulation" and t["over_floor"]]
        if line.backend == "torch":
            assert mine and line.counts["fail"] == 0 and line.over_floor == max(ratios) < 10
        else:
            assert line.over_floor > 100, (line.backend, line.over_floor)
    assert html.count("×</tr>") >= len(data.scoreboard)       # each line's last cell, the floor: filled, not "–"

"""The HTML report, built from real runs: the torch kernel (a baseline, all passing) and a plug-in
with planted bugs (failures, an error, an unsupported case), on fresh random inputs each session.

The page is parsed with the stdlib's html.parser into a small tree, and checked for its structure,
counts that match the results file, drill-downs for failing cases, baseline marks and the absence
of any external URL.
"""

import json
import random
import re
import shutil
import subprocess
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.cli import main as cli
from harness.planning.cases import load_suite, select
from harness.recording.results import ResultsWriter, read_rows
from harness.report import write_report
from harness.report.page import PAGE
from harness.running.backend_loader import load_backend
from harness.running.runner import run_cases

ROOT = Path(__file__).resolve().parents[2]

SUITE = """
[suite]
description = "report tests"
seed = {seed}

[defaults]
batch_size = 2
heads = 8
seqlen = "uniform:1:150"

[[group]]
name = "decode"
draws = 2

[[group]]
name = "verify"
mode = "verify"
draft_tokens = 3
draws = 2

[[group]]
name = "fp8"
dtype = "fp8_e4m3"

[[group]]
name = "e5m2"
dtype = "fp8_e5m2"

[[group]]
name = "raises"
batch_size = 5
"""

# The same kernel name as the baseline, so rows match by case id and backend.
PLUGIN = '''
from harness.backends.base import Capabilities
from harness.backends.torch_backend import TorchBackend


class Broken(TorchBackend):
    name = "torch"
    capabilities = Capabilities(dtypes=("bf16", "fp16", "fp8_e4m3"))      # e5m2: unsupported

    def visible(self, pos, seq, s_q, causal):       # verify: each draft token sees the next one too
        return super().visible(pos, seq + 1, s_q, causal)

    def finalize(self, inputs, out, lse):
        if inputs.batch_size == 5:
            raise RuntimeError("simulated launch failure; see https://example.invalid/help\\n"
                               "  the kernel's line 12\\nsimulated detail")    # a message that runs on
        if inputs.is_fp8:
            out = out * 1.1                          # a wrong scale: fails the cosine bound
        return super().finalize(inputs, out, lse)
'''

EXPECTED = {"decode": "pass", "verify": "fail", "fp8": "fail", "e5m2": "unsupported", "raises": "error"}
VOID = {"meta", "br", "input", "img", "link", "hr", "col", "source", "wbr"}


class Node:
    def __init__(self, tag, attrs, parent=None):
        self.tag, self.attrs, self.parent, self.children, self.text = tag, dict(attrs), parent, [], []

    def all(self, tag=None, **attrs):
        """Descendants with this tag whose attributes contain these values (class matches a word)."""
        for c in self.children:
            ok = tag in (None, c.tag) and all(
                (v in (c.attrs.get("class") or "").split()) if k == "cls" else c.attrs.get(k) == v
                for k, v in attrs.items())
            if ok:
                yield c
            yield from c.all(tag, **attrs)

    def one(self, tag=None, **attrs):
        found = list(self.all(tag, **attrs))
        assert len(found) == 1, f"expected one <{tag} {attrs}>, found {len(found)}"
        return found[0]

    def content(self) -> str:
        return "".join(self.text) + "".join(c.content() for c in self.children)


class Tree(HTMLParser):
    """A forgiving tree builder: it closes the cells, rows and items the page leaves implicit."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.root = self.cur = Node("#root", {})
        self.attr_values = []
        self.feed(text)

    def _close(self, tags):
        while self.cur.tag in tags:
            self.cur = self.cur.parent

    def handle_starttag(self, tag, attrs):
        self.attr_values.extend((tag, k, v or "") for k, v in attrs)
        if tag in ("td", "th"):
            self._close({"td", "th"})
        elif tag == "tr":
            self._close({"td", "th", "tr"})
        elif tag == "li":
            self._close({"li"})
        node = Node(tag, attrs, self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.attr_values.extend((tag, k, v or "") for k, v in attrs)
        self.cur.children.append(Node(tag, attrs, self.cur))

    def handle_endtag(self, tag):
        node = self.cur
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None:
            self.cur = node.parent

    def handle_data(self, data):
        self.cur.text.append(data)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two real runs of one freshly seeded suite: the torch kernel, then the broken plug-in."""
    d = tmp_path_factory.mktemp("report")
    seed = random.SystemRandom().randrange(2**31)
    print(f"suite seed {seed}")
    suite = d / "rpt.toml"
    suite.write_text(SUITE.format(seed=seed))
    plugin = d / "broken.py"
    plugin.write_text(PLUGIN)
    base, new = d / "base.jsonl", d / "new.jsonl"
    cases = select([load_suite(str(suite))], None)
    for spec, path in (("torch", base), (f"{plugin}:Broken", new)):   # the runner itself, no console summary
        with ResultsWriter(path) as writer:
            run_cases(cases, load_backend(spec), spec, "cpu", writer, progress=False)
    return {"dir": d, "base": base, "new": new, "seed": seed}


def report(runs, name, *extra, capsys=None):
    out = runs["dir"] / name
    code = cli(["report", str(runs["new"]), "-o", str(out), *map(str, extra)])
    assert code == 1                 # the planted bugs fail: report exits with the rows' verdict, as run does
    if capsys is not None:
        assert capsys.readouterr().out.strip() == str(out)       # it prints the report's path
    return Tree(out.read_text(encoding="utf-8")), out


def case_rows(tree):
    """Every case row: the laid-out first page and the rest waiting in the template."""
    rows = list(tree.root.one("table", id="cases-t").all("tr")) + list(
        t for tpl in tree.root.all("template", id="rest") for t in tpl.all("tr"))
    return [r for r in rows if "data-s" in r.attrs]


def test_the_planted_bugs_give_every_status(runs):
    got = {r["group"]: r["status"] for r in read_rows(runs["new"])}
    assert got == EXPECTED, f"seed {runs['seed']}"


def test_structure_and_counts_match_the_results(runs, capsys):
    tree, _ = report(runs, "plain.html", capsys=capsys)
    rows = read_rows(runs["new"])
    root = tree.root
    assert root.one("head").one("title").content().startswith("mla-verify report")
    assert root.one(id="verdict").content() == "FAILED"
    for section in ("totals", "counts", "env", "cases", "cases-t", "failures"):
        root.one(id=section)
    cards = {c.attrs["data-s"]: int(c.attrs["data-n"]) for c in root.one(id="totals").all("div", cls="card")
             if "data-s" in c.attrs}
    statuses = Counter(r["status"] for r in rows)
    assert cards.pop("total") == len(rows)
    assert {s: n for s, n in cards.items() if n} == dict(statuses)
    by_group = Counter((r["suite"], r["backend"], r["mode"], r["dtype"], r["status"]) for r in rows)
    shown = Counter()
    for tr in root.one("table", id="counts").all("tr"):
        if "data-g" not in tr.attrs:
            continue
        key = tuple(tr.attrs["data-g"].split("|"))
        for td in tr.all("td"):
            if "data-s" in td.attrs and td.content() != "·":
                shown[(*key, td.attrs["data-s"])] += int(td.content())
    assert shown == by_group
    table = case_rows(tree)
    assert len(table) == len(rows)
    by_id = {r["case_id"]: r for r in rows}
    for tr in table:
        text = tr.content()
        row = by_id[next(cid for cid in by_id if cid in text)]
        assert tr.attrs["data-s"] == row["status"]
        code = next(tr.all("code")).content()
        assert code == row["rerun"]                     # each line reruns its case alone
    env = {tr.attrs["data-k"]: tr.content() for tr in root.one("table", id="env").all("tr")}
    assert rows[0]["env"]["torch"] in env["torch"]
    assert rows[0]["backend_info"]["package"] in env["kernel"]
    times = root.one(id="runtime").content()
    assert "summed case time" in times and "wall clock, first case start to last case end" in times   # rows are stamped


def test_failing_cases_get_drilldowns(runs):
    tree, _ = report(runs, "drill.html")
    rows = read_rows(runs["new"])
    sections = {s.attrs["id"]: s for s in tree.root.all("section", cls="dd")}
    bad = [r for r in rows if r["status"] in ("fail", "error")]
    assert len(sections) == len(bad)
    links = {a.attrs["href"] for a in tree.root.one("table", id="cases-t").all("a")}
    assert links == {f"#{k}" for k in sections}
    for sec in sections.values():
        text = sec.content()
        row = next(r for r in bad if r["case_id"] in sec.one("h3").content())
        assert row["rerun"] in text
        if row["status"] == "error":
            assert "simulated launch failure" in text and "simulated detail" not in row["reason"]
            assert sec.one("pre", cls="msg").content().splitlines()[-1] == "simulated detail"   # all of it here
            continue
        assert len(list(sec.all("svg", cls="hm"))) == 2            # out and LSE, heads x query tokens
        assert "error along KV position" in text
        assert text.count("elements by error / bound") == 2        # out and LSE histograms
        worst = sec.one("table", cls="worst")
        assert len(list(worst.all("tr"))) == 1 + len(row["diagnostics"]["worst_elements"])
        checks = [th.content() for th in sec.one("table", cls="checks").all("th") if th.parent.tag == "tr"]
        assert any(c.startswith("LSE") for c in checks)
        if row["dtype"].startswith("fp8"):                          # kernel error beside end to end
            assert any(c.startswith("out, end to end") for c in checks)
            assert any(c.startswith("out|err|") for c in checks)
        hm = next(sec.all("svg", cls="hm"))
        grid = [r.split(",") for r in hm.attrs["data-m"].split(";")]
        assert len(grid) == row["s_q"] and len(grid[0]) == row["heads"]


def test_no_external_urls(runs):
    _, path = report(runs, "urls.html")
    text = path.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text       # even the error message's link
    assert not re.search(r"url\(\s*['\"]?(?!data:|#)", text)
    assert "@import" not in text
    for tag, attr, value in Tree(text).attr_values:
        if attr in ("src", "href", "action", "xlink:href", "srcset", "poster"):
            assert value.startswith(("#", "data:")), f"<{tag} {attr}={value!r}>"
    assert not re.search(r"<(link|iframe|object|embed|img)\b", text)


def test_baseline_marks(runs):
    """Edit a copy of the baseline so that each mark has a known case."""
    rows = read_rows(runs["base"])
    by_group = {}
    for r in rows:
        by_group.setdefault(r["group"], []).append(r)
    dec0, dec1 = by_group["decode"]
    dec0["metrics"]["out"]["worst_ratio"] = dec0["metrics"]["out"]["worst_ratio"] / 10   # grew 10x since
    dec1["metrics"]["out"]["worst_ratio"] = dec1["metrics"]["out"]["worst_ratio"] / 1.5  # noise, not a trend
    by_group["verify"][1]["status"] = "fail"          # failed then, fails now: still failing
    rows.remove(by_group["raises"][0])                # not in the baseline: a new case
    gone = dict(dec0, case_id="rpt/removed/0")
    rows.append(gone)
    base = runs["dir"] / "edited-base.jsonl"
    base.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # and a current row that passes where the baseline failed: fixed
    cur = read_rows(runs["new"])
    old_fail = next(r for r in cur if r["group"] == "decode")
    fixed_base = runs["dir"] / "fixed-base.jsonl"
    fixed_base.write_text(json.dumps(dict(old_fail, status="fail")) + "\n")

    tree, _ = report(runs, "diff.html", "--baseline", base, "--baseline", fixed_base)
    marks = {}
    for tr in case_rows(tree):
        cid = next(c for c in (r["case_id"] for r in cur) if c in tr.content())
        marks[cid] = tr.attrs.get("data-m")
    ids = {r["group"] + str(i): r["case_id"] for g in ("decode", "verify")
           for i, r in enumerate(x for x in cur if x["group"] == g)}
    assert marks[ids["verify0"]] == "new failure"
    assert marks[ids["verify1"]] == "still failing"
    assert marks[next(r["case_id"] for r in cur if r["group"] == "fp8")] == "new failure"
    assert marks[next(r["case_id"] for r in cur if r["group"] == "raises")] == "new case"
    # decode/0 is in both baseline files; the later file (fixed-base) supersedes: fixed
    assert marks[ids["decode0"]] == "fixed"
    assert marks[ids["decode1"]] == ""                # grown 1.5x only
    panel = tree.root.one(id="baseline")
    counts = {s.attrs["data-mark"]: int(s.attrs["data-n"]) for s in panel.all("span", cls="mk")}
    assert counts["new failure"] == 2 and counts["fixed"] == 1 and counts["new case"] == 1
    assert "rpt/removed/0" in panel.content()         # gone

    # the regression itself: only the 10x-grown passing case is marked
    tree, _ = report(runs, "regress.html", "--baseline", base, "--regression-floor", 0)
    regressed = [tr for tr in case_rows(tree) if tr.attrs.get("data-m") == "regressed"]
    assert len(regressed) == 1 and ids["decode0"] in regressed[0].content()
    assert "out |err|/bound" in regressed[0].content()


def test_drilldowns_are_capped_with_a_note(runs):
    tree, _ = report(runs, "capped.html", "--max-drilldowns", 1)
    assert len(list(tree.root.all("section", cls="dd"))) == 1
    assert "Showing 1 of 4 failing cases" in tree.root.one(id="drill-cap").content()


def test_large_results_stay_lean(runs, tmp_path):
    """2,000 rows: the first page is laid out, the rest sit in a template; one lean line per row."""
    rows = read_rows(runs["new"])
    path = tmp_path / "big.jsonl"
    with path.open("w") as f:
        for k in range(2000):
            f.write(json.dumps(dict(rows[k % len(rows)], case_id=f"big/{k % 7}/{k}")) + "\n")
    out, _ = write_report([path], tmp_path / "big.html")
    tree = Tree(out.read_text(encoding="utf-8"))
    laid_out = [r for r in tree.root.one("table", id="cases-t").all("tr") if "data-s" in r.attrs]
    assert len(laid_out) == PAGE and len(case_rows(tree)) == 2000
    assert len(list(tree.root.all("section", cls="dd"))) == 50
    assert out.stat().st_size < 2000 * 700 + 50 * 40_000


def test_bad_input_is_one_line_and_exit_2(runs, tmp_path, capsys):
    cases = [
        [str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "r.html")],
        [str(runs["new"]), "-o", str(runs["new"]) + "/r.html"],        # under a file: cannot write
        [str(runs["new"]), "-o", str(tmp_path)],                      # a directory
        [str(runs["new"]), "--baseline", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "r.html")],
        [str(runs["new"]), "--max-drilldowns", "-1"],
    ]
    other = tmp_path / "other.jsonl"
    other.write_text('{"hello": 1}\n')
    cases.append([str(other), "-o", str(tmp_path / "r.html")])
    for argv in cases:
        assert cli(["report", *argv]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("mla-verify: error: ") and "\n" not in err, err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="Debian chromium is not installed (apt-get install -y chromium)")
def test_a_real_browser_renders_it(tmp_path):
    png = tmp_path / "shot.png"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "screenshot_report.sh"), str(png)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000     # a real, non-blank page

"""The docs are a reference, not a diary.

- docs/gpu-runs.md is short (at most 200 lines) and laid out for new figures: its Environment, How to run and
  Figures sections, each Figures row a claim with its figure, command, date and commit;
- its history lives whole in docs/archive/gpu-runs-history.md, which says it is superseded;
- nothing else in the tree (code, tests, scripts, docs, suites, README, Makefile) narrates this project's
  work periods or its own issue numbers, or points at a path outside the repository: a fact is stated as
  itself, with its public source where it comes from elsewhere, written in full (``owner/repo#N``).
"""

import re

from helpers import REPO

GPU_RUNS = REPO / "docs" / "gpu-runs.md"
ARCHIVE = REPO / "docs" / "archive"
HISTORY = ARCHIVE / "gpu-runs-history.md"
CHECKED = ["harness", "reference", "tests", "scripts", "docs", "cases", "README.md", "Makefile"]
MAX_LINES = 200
ORDINALS = "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth"
RULES = [
    ("a numbered work period", re.compile(rf"\b(?:{ORDINALS}) session\b", re.I)),
    ("a work period's call", re.compile(r"\bcall \d+ of\b", re.I)),
    ("this project's issue number", re.compile(r"\bissues? #?\d+", re.I)),
    ("an issue's item", re.compile(r"\bitems? \d+ of\b", re.I)),
    # a bare #NN; another project's is written in full (owner/repo#NN), an HTML entity (&#47;) is not one
    ("this project's issue number", re.compile(r"(?<![&\w/.-])#\d{2}\b")),
    ("a path outside the repository", re.compile(r"\.\./shared\b")),
]


def broken_rules(text: str) -> list[str]:
    """``line N: what (the words)`` for every rule the text breaks."""
    found = []
    for what, rule in RULES:
        for m in rule.finditer(text):
            found.append(f"line {text.count(chr(10), 0, m.start()) + 1}: {what} ({m.group(0)!r})")
    return found


def checked_files():
    for name in CHECKED:
        top = REPO / name
        for path in sorted([top] if top.is_file() else top.rglob("*")):
            if path.is_file() and ARCHIVE not in path.parents and "__pycache__" not in path.parts:
                try:
                    yield path, path.read_text(encoding="utf-8")
                except UnicodeDecodeError:          # a picture, a binary
                    continue


def test_no_work_periods_issue_numbers_or_outside_paths_outside_the_archive():
    found = [f"{path.relative_to(REPO)} {b}" for path, text in checked_files() for b in broken_rules(text)]
    assert not found, "\n".join(found)


def test_the_rules_catch_a_diary_and_let_a_public_reference_be():
    space = " "
    planted = [f"the seventh{space}session", f"Sixth{space}session", f"(issue{space}27, item 2)",
               f"issue{space}#{25}", f"issues{space}25 and 27", f"call 6{space}of the speed work",
               f"item 3{space}of the list", f"..{'/'}shared/notes/kernels.md", f"the trust work (#{25}, #{31})"]
    assert all(broken_rules(text) for text in planted), [text for text in planted if not broken_rules(text)]
    public = ["deepseek-ai/FlashMLA#56", "vllm-project/vllm#57716", ":&#47;&#47;", "color:#888;", "finding 6",
              "FlagGems' graph session", "a CUDA-graph session's buffers", "call 1 built the buffers"]
    assert [broken_rules(text) for text in public] == [[]] * len(public)


def test_gpu_runs_is_a_short_reference():
    lines = GPU_RUNS.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"docs/gpu-runs.md has {len(lines)} lines; history goes to {HISTORY.name}"
    sections = [line for line in lines if line.startswith("## ")]
    assert sections == ["## Environment", "## How to run on a GPU box", "## Figures"], sections


def figure_rows(text: str) -> list[list[str]]:
    """The Figures table's rows, each as its cells (the header and the rule line left out)."""
    section = text.split("\n## Figures\n", 1)[1]
    table = re.search(r"^\| claim \|.*?\n(?:\|.*\n)+", section, re.M).group(0).splitlines()
    return [[c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]] for row in table[2:]]


def test_every_figure_says_its_command_date_and_commit():
    rows = figure_rows(GPU_RUNS.read_text())
    assert len(rows) >= 10
    for claim, figure, command, date, commit in rows:
        assert figure and re.search(r"\d", figure), claim
        assert re.search(r"`(?:mla-verify|make|bash|python3|OUT=|SUITE=|\. scripts)[^`]*`", command), claim
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date), (claim, date)
        assert re.search(r"`[0-9a-f]{7,40}`", commit), (claim, commit)


def test_the_history_is_kept_and_says_what_supersedes_it():
    opening = HISTORY.read_text().split("\n\n", 2)[:2]
    assert "history" in opening[0] and "superseded by" in opening[1] and "docs/gpu-runs.md" in opening[1]
    assert "archive/gpu-runs-history.md" in GPU_RUNS.read_text()

"""The docs stay true to the suites: every case count they quote is what ``mla-verify list`` gives.

A count is checked where the docs tie it to a suite or a group by name:
- a table row whose first cell is a suite and whose second is a number (the README's suite table);
- "`smoke` (12 cases", "`cases/graph.toml`, 10 cases", "2328-case matrix (`flashmla-upstream`)";
- "the 8 cases of `decode/scale-1-over-sqrt-576`", "the scale suite's 40 cases";
- "--suite smoke,decode,... ..., 172 cases" (the sum of those suites).
A record of an older run that quotes a count the suites no longer have should say "rows", or name no suite.
"""

import re

import pytest
from helpers import REPO

from harness.cli import main
from harness.planning.cases import load_suite, suite_names

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
NUM = r"(\d[\d,]*)"
NAME = r"`(?:cases/)?([\w-]+?)(?:\.toml)?`"
PATTERNS = [            # (regex, group of the name, group of the count)
    (re.compile(rf"^\|\s*`([\w-]+)`\s*\|\s*{NUM}\s*\|", re.M), 1, 2),
    (re.compile(rf"{NAME}[,:]?\s*\(?{NUM}[ -]cases?\b"), 1, 2),
    (re.compile(rf"\b{NUM}-case\b[^`\n]{{0,40}}\({NAME}"), 2, 1),
    (re.compile(rf"\b{NUM} cases of `([\w-]+/[\w-]+)`"), 2, 1),
    (re.compile(rf"\b`?([\w-]+)`? suite's {NUM} cases\b"), 1, 2),
    (re.compile(rf"--suite ([\w-]+(?:,[\w-]+)+)\b[^()\n]*?\s{NUM} cases\b"), 1, 2),
]


def listed_counts() -> dict[str, int]:
    """Each suite's count as ``mla-verify list --suite NAME`` prints it."""
    return {name: len(load_suite(name).cases) for name in suite_names()}


def count_of(name: str, suites: dict[str, int]) -> int | None:
    """The number of cases a quoted name stands for: a suite, suite/group, or a comma-separated list of suites."""
    if "," in name:
        parts = name.split(",")
        return sum(suites[p] for p in parts) if all(p in suites for p in parts) else None
    if "/" in name:
        suite, group = name.split("/", 1)
        if suite not in suites:
            return None
        n = sum(1 for c in load_suite(suite).cases if c.group == group)
        return n or None
    return suites.get(name)


def quoted_counts(text: str, suites: dict[str, int]):
    """(line, name, quoted, actual) for every count the text quotes for a known suite, group or list of suites."""
    for rx, name_group, count_group in PATTERNS:
        for m in rx.finditer(text):
            name = m.group(name_group)
            actual = count_of(name, suites)
            if actual is not None:
                yield text.count("\n", 0, m.start()) + 1, name, int(m.group(count_group).replace(",", "")), actual


@pytest.fixture(scope="module")
def suites():
    return listed_counts()


def test_the_counts_are_the_ones_mla_verify_list_prints(suites, capsys):
    for name, n in suites.items():
        assert main(["list", "--suite", name]) == 0
        first = capsys.readouterr().out.splitlines()[0]
        assert first.startswith(f"{name}: {n} cases"), first


def test_every_case_count_the_docs_quote_is_right(suites):
    wrong, seen = [], 0
    for path in DOCS:
        for line, name, quoted, actual in quoted_counts(path.read_text(), suites):
            seen += 1
            if quoted != actual:
                wrong.append(f"{path.relative_to(REPO)}:{line}: {name} quoted as {quoted} cases, has {actual}")
    assert not wrong, "\n".join(wrong)
    assert seen >= len(suites)


def test_the_readme_table_lists_every_suite(suites):
    table = {name for _, name, _, _ in quoted_counts((REPO / "README.md").read_text(), suites)}
    assert set(suites) <= table, f"suites missing from the README's table: {sorted(set(suites) - table)}"


def test_a_wrong_count_is_caught(suites):
    """Each pattern finds a count that is off by one (so a stale number cannot slip past the checker)."""
    smoke, graph = suites["smoke"], suites["graph"]
    text = "\n".join([
        f"| `smoke` | {smoke + 1} | seconds on a CPU |",
        f"see `cases/graph.toml`, {graph + 1} cases, and `smoke` ({smoke + 1} cases)",
        f"the {suites['flashmla-upstream'] + 1}-case matrix (`flashmla-upstream`)",
        f"the {suites['scale'] + 1} cases of `scale/pool`, the scale suite's {suites['scale'] + 1} cases",
        f"(`mla-verify run --suite smoke,graph --backend torch`, {smoke + graph + 1} cases)",
    ])
    found = [(name, quoted, actual) for _, name, quoted, actual in quoted_counts(text, suites)]
    assert {name for name, _, _ in found} == {"smoke", "graph", "flashmla-upstream", "scale/pool", "scale",
                                              "smoke,graph"}
    assert all(quoted != actual for _, quoted, actual in found), found


def test_the_readme_is_short():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 150, f"the README has {len(lines)} lines; move details to docs/"


LINK = re.compile(r"\]\(([^)#\s]+)[^)]*\)")
BARE = re.compile(r"(?<![\w/.(])((?:docs|examples|scripts|cases|reports/examples)/"
                  r"[\w./-]+\.(?:md|png|py|sh|toml|html|jsonl))")


def test_the_docs_link_to_files_that_exist():
    missing = []
    for path in DOCS:
        text = path.read_text()
        for m in LINK.finditer(text):
            if "://" not in m.group(1) and not (path.parent / m.group(1)).exists():
                missing.append(f"{path.relative_to(REPO)}: ({m.group(1)})")
        for m in BARE.finditer(text):
            if not (REPO / m.group(1).rstrip(".")).exists():
                missing.append(f"{path.relative_to(REPO)}: {m.group(1)}")
    assert not missing, "\n".join(missing)


def test_the_plugin_example_names_only_inputs_that_exist():
    """The example's docstring lists ``Inputs``' fields; each must be one (``inputs.case`` was not, once)."""
    import dataclasses

    from harness.building.inputs import Inputs
    from harness.judging.checks import INPUTS_UNCHANGED

    fields = {f.name for f in dataclasses.fields(Inputs)} | {n for n in dir(Inputs) if not n.startswith("_")}
    text = (REPO / "examples" / "plugin_backend.py").read_text() + (REPO / "README.md").read_text()
    used = set(re.findall(r"(?<![\w.])inputs\.([a-z_]\w*)", text.replace(INPUTS_UNCHANGED, "the check")))
    assert used, "no inputs.<field> found"
    assert used <= fields, f"not fields of Inputs: {sorted(used - fields)}"


# The mutant counts the docs quote as the current ones (dated records are left alone: docs/archive/,
# and "24 mutants, 12 cases, at `49fec4c`"): "holds 31 broken backends", "(24 dense, 7 sparse)",
# "31 mutants plus the clean backend", "31/31 mutants killed".
MUTANT_COUNTS = [
    (re.compile(r"holds (\d+) broken backends"), ("all",)),
    (re.compile(r"\((\d+) dense, (\d+) sparse\)"), ("dense", "sparse")),
    (re.compile(r"\b(\d+) mutants plus the clean backend"), ("all",)),
    (re.compile(r"\b(\d+)/(\d+) mutants killed"), ("all", "all")),
]


def mutant_counts() -> dict[str, int]:
    """How many mutants ``mla-verify selfcheck`` runs, and how many of them break the sparse path."""
    from harness.mutants import MUTANTS
    sparse = sum(cls.needs == "sparse" for cls in MUTANTS.values())
    return {"all": len(MUTANTS), "sparse": sparse, "dense": len(MUTANTS) - sparse}


def quoted_mutant_counts(text: str):
    """(line, what, quoted) for every mutant count the text quotes."""
    for rx, whats in MUTANT_COUNTS:
        for m in rx.finditer(text):
            for what, quoted in zip(whats, m.groups()):
                yield text.count("\n", 0, m.start()) + 1, what, int(quoted)


def test_every_mutant_count_the_docs_quote_is_the_registrys():
    counts, seen, wrong = mutant_counts(), 0, []
    for path in DOCS:
        for line, what, quoted in quoted_mutant_counts(path.read_text()):
            seen += 1
            if quoted != counts[what]:
                wrong.append(f"{path.relative_to(REPO)}:{line}: {quoted} {what} mutants quoted, {counts[what]} "
                             "registered")
    assert not wrong, "\n".join(wrong)
    assert seen >= 4                      # architecture.md and mutants.md quote them


def test_a_wrong_mutant_count_is_caught():
    n = mutant_counts()
    text = (f"holds {n['all'] + 1} broken backends ({n['dense']} dense, {n['sparse'] - 1} sparse); "
            f"{n['all'] - 1} mutants plus the clean backend; {n['all']}/{n['all'] + 2} mutants killed")
    found = list(quoted_mutant_counts(text))
    assert len(found) == 6
    assert [quoted != n[what] for _, what, quoted in found] == [True, False, True, True, False, True]

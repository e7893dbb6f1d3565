"""``run --shard K/N`` and merging shards with ``report``."""

import functools
import json
import random
from dataclasses import dataclass

import pytest
from helpers import run_cli
from hypothesis import given
from hypothesis import strategies as st

from harness.errors import InputError
from harness.planning.cases import load_suite
from harness.running import shards


@dataclass(frozen=True)
class Item:
    id: str
    size: int


items = st.lists(st.builds(Item, st.text("abcdef/0123", min_size=1, max_size=8), st.integers(1, 10**9)),
                 max_size=60, unique_by=lambda c: c.id)


@given(items, st.integers(1, 12), st.randoms(use_true_random=False))
def test_every_case_is_in_exactly_one_shard_and_the_loads_are_balanced(cases, n, rnd):
    weight = lambda c: c.size                   # noqa: E731
    parts = [shards.take(cases, k, n, weight) for k in range(1, n + 1)]
    taken = [c.id for part in parts for c in part]
    assert sorted(taken) == sorted(c.id for c in cases)                  # each exactly once
    for part in parts:                                                   # each keeps the suite's order
        assert [cases.index(c) for c in part] == sorted(cases.index(c) for c in part)
    loads = [sum(map(weight, part)) for part in parts]
    if cases:                                                            # the largest-first rule's bound
        assert max(loads) - min(loads) <= max(map(weight, cases))
    assert all(parts[k] for k in range(min(n, len(cases))))             # the first min(N, cases) hold some
    shuffled = list(cases)
    rnd.shuffle(shuffled)                       # the deal depends on the cases, not on the order given
    again = {c.id: s for c, s in zip(shuffled, shards.deal(shuffled, n, weight))}
    assert again == {c.id: s for c, s in zip(cases, shards.deal(cases, n, weight))}


SUITES = ["smoke", "decode", "verify", "fp8", "edge", "graph", "scale", "models", "flashmla-upstream"]


@given(st.lists(st.sampled_from(SUITES), min_size=1, max_size=3, unique=True), st.integers(1, 9))
def test_real_suites_split_whole_and_balanced_by_size_not_count(names, n):
    cases = [c for name in names for c in _suite(name)]
    parts = [shards.take(cases, k, n) for k in range(1, n + 1)]
    ids = [c.id for part in parts for c in part]
    assert sorted(ids) == sorted(c.id for c in cases) and len(set(ids)) == len(ids)
    loads = [sum(map(shards.work, part)) for part in parts]
    assert max(loads) - min(loads) <= max(map(shards.work, cases))


@functools.cache
def _suite(name):
    return load_suite(name).cases


def test_a_count_split_would_be_unbalanced_where_sizes_differ():
    """Four large cases and many small ones: dealing by size puts one large case in each shard."""
    cases = [Item(f"big{i}", 1000) for i in range(4)] + [Item(f"s{i}", 1) for i in range(40)]
    random.Random(3).shuffle(cases)
    parts = [shards.take(cases, k, 4, lambda c: c.size) for k in range(1, 5)]
    assert [sum(c.size for c in part) for part in parts] == [1010] * 4


@pytest.mark.parametrize("text", ["0/4", "5/4", "1/0", "a/b", "3", "", "-1/2", "1/2/3"])
def test_bad_shard_values_are_bad_input(text):
    with pytest.raises(InputError, match="expected K/N"):
        shards.parse(text)
    assert shards.parse(" 2/4 ") == (2, 4)


def test_a_bad_shard_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    code, _, err = run_cli(["run", "--suite", "smoke", "--backend", "torch", "--shard", "5/4",
                            "--out", str(tmp_path / "r.jsonl"), "--workers", "0"])
    assert code == 2 and err.strip() == "mla-verify: error: --shard 5/4: expected K/N with 1 <= K <= N, such as 2/4"
    assert not (tmp_path / "r.jsonl").exists()


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def shard_files(tmp_path_factory):
    """The smoke suite in two shards on the torch backend, run as a CI matrix would."""
    d = tmp_path_factory.mktemp("shards")
    paths = []
    for k in (1, 2):
        path = d / f"shard{k}.jsonl"
        code, _, err = run_cli(["run", "--suite", "smoke", "--backend", "torch", "--shard", f"{k}/2",
                                "--out", str(path), "--workers", "0", "--no-progress"])
        assert code == 0, err
        assert f"shard {k}/2: " in err
        paths.append(path)
    return d, paths


def test_shards_run_every_case_once_and_rows_say_their_shard(shard_files):
    _, paths = shard_files
    rows = [r for p in paths for r in _rows(p)]
    assert sorted(r["case_id"] for r in rows) == sorted(c.id for c in load_suite("smoke").cases)
    for k, p in enumerate(paths, 1):
        assert {(r["shard"], r["shard_of"]) for r in _rows(p)} == {(f"{k}/2", len(load_suite("smoke").cases))}


def test_report_merges_whole_shards_with_the_merged_verdict(shard_files):
    d, paths = shard_files
    code, out, err = run_cli(["report", *map(str, paths), "-o", str(d / "whole.html")])
    assert code == 0 and "shard" not in err, err
    assert 'id="shards"' not in (d / "whole.html").read_text()


def test_report_names_an_absent_shard_on_stderr_and_first_screen_and_exits_2(shard_files):
    d, paths = shard_files
    code, _, err = run_cli(["report", str(paths[0]), "-o", str(d / "half.html")])
    assert code == 2
    assert err.strip() == "mla-verify: report: shard 2 of 2 absent"
    page = (d / "half.html").read_text()
    first_screen = page[:page.index('id="findings"') + 2000]
    assert 'id="shards"' in first_screen and "shard 2 of 2 absent" in first_screen


def test_report_names_a_case_from_two_shards(shard_files):
    d, paths = shard_files
    row = _rows(paths[0])[0]
    stray = d / "stray.jsonl"                  # the same case, recorded as shard 2's too
    stray.write_text(json.dumps({**row, "shard": "2/2"}) + "\n")
    code, _, err = run_cli(["report", *map(str, paths), str(stray), "-o", str(d / "twice.html")])
    assert code == 2
    assert f"mla-verify: report: case {row['case_id']} [torch] from shards 1/2 and 2/2" in err.splitlines()
    assert "from shards 1/2 and 2/2" in (d / "twice.html").read_text()


def test_report_names_mixed_splits_and_their_absent_shards(shard_files):
    d, paths = shard_files
    row = _rows(paths[0])[0]
    other = d / "other.jsonl"
    other.write_text(json.dumps({**row, "case_id": "smoke/x/0", "shard": "1/3"}) + "\n")
    code, _, err = run_cli(["report", *map(str, paths), str(other), "-o", str(d / "mixed.html")])
    lines = err.strip().splitlines()
    assert code == 2
    assert "mla-verify: report: rows of different splits: N=2, N=3 (each run of one suite should use one N)" in lines
    assert "mla-verify: report: shard 2 of 3 absent" in lines and "mla-verify: report: shard 3 of 3 absent" in lines


def test_merged_failing_shards_exit_with_the_failed_verdict(shard_files):
    d, paths = shard_files
    rows = _rows(paths[1])
    failing = d / "failing.jsonl"
    failing.write_text("".join(json.dumps({**r, "status": "fail"} if i == 0 else r) + "\n"
                               for i, r in enumerate(rows)))
    code, _, err = run_cli(["report", str(paths[0]), str(failing), "-o", str(d / "failing.html")])
    assert code == 1 and "shard" not in err, err

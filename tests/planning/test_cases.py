"""The case loader (TOML suites -> Cases) and the seq-len distributions."""

import subprocess
import sys
import textwrap
from collections import Counter

import pytest
import torch
from helpers import REPO

from harness.errors import InputError
from harness.planning import cases as C
from harness.planning import seqlens


def write_suite(tmp_path, text, name="mine"):
    path = tmp_path / f"{name}.toml"
    path.write_text(textwrap.dedent(text))
    return path


GRID = """
    [suite]
    description = "a grid"
    seed = 7

    [defaults]
    batch_size = 3
    seqlen = "uniform:1:100"
    d_qk = 40
    d_v = 32

    [[group]]
    name = "grid"
    mode = "verify"
    heads = [16, 128]
    draft_tokens = [2, 4, 8]
    draws = 2

    [[group]]
    name = "single"
    heads = 8
    batch_size = 5
    tags = ["a", "b"]

    [[group]]
    name = "modes"
    mode = ["decode", "verify"]
    dtype = ["bf16", "fp8_e4m3"]
    seqlen = "boundary"
"""


def test_grid_expansion_counts_ids_and_order(tmp_path):
    suite = C.load_suite(str(write_suite(tmp_path, GRID)))
    assert suite.name == "mine" and suite.description == "a grid"
    groups = Counter(c.group for c in suite.cases)
    assert groups == {"grid": 2 * 3 * 2, "single": 1, "modes": 2 * 2}
    grid = [c for c in suite.cases if c.group == "grid"]
    assert [c.id for c in grid] == [f"mine/grid/{i}" for i in range(12)]
    # axes in file order, draws innermost
    assert [(c.heads, c.draft_tokens) for c in grid[:6]] == [(16, 2), (16, 2), (16, 4), (16, 4), (16, 8), (16, 8)]
    assert all(c.heads == 128 for c in grid[6:])
    assert {(c.mode, c.dtype) for c in suite.cases if c.group == "modes"} == \
        {("decode", "bf16"), ("decode", "fp8_e4m3"), ("verify", "bf16"), ("verify", "fp8_e4m3")}
    assert all(c.suite == "mine" for c in suite.cases)
    assert len({c.id for c in suite.cases}) == len(suite.cases)


def test_defaults_layering(tmp_path):
    suite = C.load_suite(str(write_suite(tmp_path, GRID)))
    single = next(c for c in suite.cases if c.group == "single")
    # from the group, then [defaults], then Case's own defaults
    assert single.batch_size == 5 and single.heads == 8 and single.tags == ("a", "b")
    assert single.seqlen == "uniform:1:100" and single.d_qk == 40 and single.d_v == 32
    assert (single.mode, single.dtype, single.page_size, single.padding, single.kv_heads, single.causal,
            single.scenario, single.draft_tokens, single.extra_pages) == \
        ("decode", "bf16", 64, "minus_one", 1, True, "call", 1, 4)
    assert single.softmax_scale == pytest.approx(192 ** -0.5)
    grid = next(c for c in suite.cases if c.group == "grid")
    assert grid.batch_size == 3 and grid.s_q == 2


def test_seeds_stable_across_loads_and_distinct(tmp_path):
    path = str(write_suite(tmp_path, GRID))
    a, b = C.load_suite(path), C.load_suite(path)
    assert [(c.id, c.seed) for c in a.cases] == [(c.id, c.seed) for c in b.cases]
    assert len({c.seed for c in a.cases}) == len(a.cases)
    assert all(0 <= c.seed < 2**31 for c in a.cases)
    # another suite seed gives other seeds; a group seed overrides the suite's
    other = C.load_suite(str(write_suite(tmp_path, GRID.replace("seed = 7", "seed = 8"), name="mine2")))
    assert not {c.seed for c in a.cases} & {c.seed for c in other.cases}
    grouped = C.load_suite(str(write_suite(tmp_path, GRID.replace('name = "single"', 'name = "single"\nseed = 3'),
                                           name="mine")))
    s_a = next(c for c in a.cases if c.group == "single")
    s_g = next(c for c in grouped.cases if c.group == "single")
    assert s_a.seed != s_g.seed == C.case_seed(s_g.id, 3)


def test_seeds_do_not_depend_on_the_process(tmp_path):
    """Seeds come from the id, not Python's randomised hash: another process gets the same ones."""
    path = write_suite(tmp_path, GRID)
    code = f"from harness.planning.cases import load_suite; print([c.seed for c in load_suite({str(path)!r}).cases])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == str([c.seed for c in C.load_suite(str(path)).cases])


def test_one_case_selectable_by_id(tmp_path):
    suite = C.load_suite(str(write_suite(tmp_path, GRID)))
    chosen = C.select([suite], "mine/grid/7")
    assert [c.id for c in chosen] == ["mine/grid/7"]
    assert chosen[0] == suite.cases[7]
    assert C.select([suite], None) == suite.cases
    with pytest.raises(InputError, match=r"--case: no case or group 'mine/grid/99' in suite\(s\) mine"):
        C.select([suite], "mine/grid/99")
    assert C.select([suite], "mine/grid/7,mine/grid/2,mine/grid/7") == [suite.cases[7], suite.cases[2]]
    grid = [c for c in suite.cases if c.id.startswith("mine/grid/")]
    assert len(grid) == 12 and C.select([suite], "mine/grid") == grid     # a group: every case of it, in order


def test_case_is_rebuilt_from_id_and_seed(tmp_path):
    suite = C.load_suite(str(write_suite(tmp_path, GRID)))
    c = suite.cases[3]
    d = c.to_dict()
    assert C.Case(**{**d, "tags": tuple(d["tags"])}) == c
    assert c.seed == C.case_seed(c.id, 7)


@pytest.mark.parametrize("name", C.suite_names())
def test_every_shipped_suite_loads_and_validates(name):
    suite = C.load_suite(name)
    assert suite.cases, f"{name} has no cases"
    assert suite.description, f"{name} has no description"
    ids = [c.id for c in suite.cases]
    assert len(set(ids)) == len(ids)
    for c in suite.cases:
        assert c.id.startswith(f"{name}/")
        assert C.validate_case(c, c.id) is c
        assert c.max_cache_seqlen() >= 0
    assert {c.id: c.seed for c in C.load_suite(name).cases} == {c.id: c.seed for c in suite.cases}


def test_smoke_is_shipped():
    assert "smoke" in C.suite_names()
    assert (REPO / "cases" / "smoke.toml").is_file()


@pytest.mark.parametrize("change,message", [
    ('heads = 8\ncolour = "red"', "group 'single': unknown key 'colour'"),
    ('dtype = "fp4"', "group 'single': dtype: unknown dtype 'fp4'"),
    ('mode = "prefill"', "group 'single': mode: unknown mode 'prefill'"),
    ('padding = "twice"', "group 'single': padding: unknown padding policy 'twice'"),
    ('heads = 10\nkv_heads = 3', "group 'single': heads: 10 query heads are not divisible by 3 kv heads"),
    ('mode = "verify"\ndraft_tokens = 9', "group 'single': draft_tokens: verify takes 1 to 8 draft tokens, got 9"),
    ('draft_tokens = 2', "group 'single': draft_tokens: decode has exactly one query token"),
    ('heads = []', "group 'single': heads: an empty list gives no cases"),
    ('heads = "many"', "group 'single': heads: expected int, got str 'many'"),
    ('seqlen = "zipf:1:2"', "group 'single': seqlen: unknown seqlen distribution 'zipf'"),
    ('d_v = 64', "group 'single': d_v: d_v 64 is larger than d_qk 40"),
    ('draws = 0', "group 'single': draws: must be a positive integer"),
    ('heads = 8\nkv_heads = 0', "group 'single': kv_heads: must be at least 1, got 0"),
])
def test_bad_suites_are_refused_naming_file_group_and_key(tmp_path, change, message):
    text = GRID.replace('    heads = 8\n', "    " + change.replace("\n", "\n    ") + "\n")
    path = write_suite(tmp_path, text)
    with pytest.raises(InputError) as e:
        C.load_suite(str(path))
    assert str(e.value).startswith(str(path)) and message in str(e.value), str(e.value)


@pytest.mark.parametrize("text,message", [
    ("[suite\n", "not valid TOML"),
    ('[suite]\nseed = 1\n', "no [[group]] tables"),
    ('[[group]]\nname = "a"\n[[group]]\nname = "a"\n', "group 'a': name: duplicate group name"),
    ('[[group]]\nmode = "decode"\n', "group 0: name: every group needs a name"),
    ('[[group]]\nname = "a/b"\n', "name: every group needs a name without '/'"),
    ('[other]\n[[group]]\nname = "a"\n', "unknown top-level key 'other'"),
    ('[suite]\ncolour = 1\n[[group]]\nname = "a"\n', "[suite]: unknown key 'colour'"),
])
def test_bad_suite_structure_is_refused(tmp_path, text, message):
    path = write_suite(tmp_path, text)
    with pytest.raises(InputError) as e:
        C.load_suite(str(path))
    assert message in str(e.value), str(e.value)


def test_unknown_suite_names_the_known_ones(tmp_path):
    with pytest.raises(InputError, match=r"unknown suite 'nosuch' \(known: .*smoke"):
        C.load_suite("nosuch")
    with pytest.raises(InputError, match="suite file not found"):
        C.load_suite(str(tmp_path / "missing.toml"))


def test_cases_dir_follows_the_environment(tmp_path, monkeypatch):
    write_suite(tmp_path, GRID, name="elsewhere")
    monkeypatch.setenv("MLA_VERIFY_CASES", str(tmp_path))
    assert C.suite_names() == ["elsewhere"]
    assert len(C.load_suite("elsewhere").cases) == 17


# ---- seq-len distributions ------------------------------------------------------------------

def draws(spec, n=2000, page_size=64, seed=0):
    return seqlens.draw(spec, n, page_size, torch.Generator().manual_seed(seed))


def test_uniform_bounds_and_both_ends():
    vals = draws("uniform:5:8")
    assert set(vals) == {5, 6, 7, 8}
    vals = draws("uniform:1:512")
    assert min(vals) >= 1 and max(vals) <= 512 and len(set(vals)) > 300


def test_longtail_bounds_and_skew():
    vals = draws("longtail:1:10000")
    assert min(vals) >= 1 and max(vals) <= 10000
    assert sorted(vals)[len(vals) // 2] < 1000, "log-uniform: the median is far below the midpoint"
    assert max(vals) > 5000, "a few long requests"
    assert set(draws("longtail:7:7", 50)) == {7}


def test_equal_and_list():
    assert draws("equal:37", 5) == [37] * 5
    assert draws("equal:0", 3) == [0, 0, 0]
    assert draws("list:3,0,5", 7) == [3, 0, 5, 3, 0, 5, 3]


@pytest.mark.parametrize("page_size", [64, 16])
def test_boundary_hits_every_page_boundary(page_size):
    vals = draws("boundary", 500, page_size)
    P = page_size
    assert set(vals) == {1, P - 1, P, P + 1, 2 * P - 1, 2 * P, 2 * P + 1}
    if P == 64:
        assert {63, 64, 65} <= set(vals)


def test_normal_is_clipped():
    vals = draws("normal:100:10")
    assert min(vals) >= 1 and max(vals) <= 140
    assert abs(sum(vals) / len(vals) - 100) < 2
    assert min(draws("normal:2:5")) == 1


def test_draws_are_seeded():
    assert draws("uniform:1:1000", 50, seed=3) == draws("uniform:1:1000", 50, seed=3)
    assert draws("uniform:1:1000", 50, seed=3) != draws("uniform:1:1000", 50, seed=4)


@pytest.mark.parametrize("spec,longest", [("uniform:1:300", 300), ("longtail:2:32768", 32768), ("equal:65", 65),
                                          ("boundary", 129), ("normal:100:10", 140), ("list:1,900,3", 900)])
def test_max_length(spec, longest):
    assert seqlens.max_length(spec, 64) == longest
    assert max(draws(spec, 300)) <= longest


def test_max_cache_seqlen_adds_the_drafts():
    assert C.Case(id="s/g/0", seed=0, seqlen="equal:65").max_cache_seqlen() == 65
    assert C.Case(id="s/g/0", seed=0, seqlen="equal:65", mode="verify", draft_tokens=4).max_cache_seqlen() == 69


@pytest.mark.parametrize("spec,message", [
    ("zipf:1:2", "unknown seqlen distribution 'zipf'"),
    ("uniform:1", "needs 2 number(s)"),
    ("uniform:a:2", "non-integer"),
    ("uniform:9:2", "LO is greater than HI"),
    ("equal:-1", "negative length"),
    ("longtail:0:10", "longtail needs LO >= 1"),
    ("list:", "lists no lengths"),
    ("", "non-empty string"),
    ("boundary:3", "needs 0 number(s)"),
])
def test_bad_specs_are_refused(spec, message):
    with pytest.raises(InputError) as e:
        seqlens.parse(spec)
    assert message in str(e.value)

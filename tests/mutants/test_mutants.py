"""The mutant zoo: every shipped mutant dies on the selfcheck suite, the clean backend passes.

One selfcheck run is shared by the module; each mutant then gets its own test,
so a survivor is named in the test id.
"""

import json

import pytest
import torch

from harness.backends.torch_backend import TorchBackend
from harness.building.inputs import generate
from harness.cli import main
from harness.errors import InputError
from harness.mutants import MUTANTS, NEEDS, names
from harness.mutants.registry import mutant
from harness.planning.cases import load_suite
from harness.running.backend_loader import load_backend
from harness.scenarios import _common as steps
from harness.selfcheck import killing_checks, run_selfcheck

# Where each targeted bug may show: a kill anywhere else means the mutant is cruder than its story.
ONLY_IN_GROUPS = {
    "causal_plus_one": {"verify", "fp8-fixed-scale", "determinism"},
    "causal_minus_one": {"verify", "fp8-fixed-scale", "determinism"},
    "no_causal_mask": {"verify", "fp8-fixed-scale", "determinism"},
    "no_descale_k": {"fp8", "fp8-fixed-scale"},
    "no_descale_q": {"fp8", "fp8-fixed-scale"},
    "bf16_accumulation": {"long-context"},
    "nan_empty_rows": {"empty-rows"},
    "nondeterministic": {"determinism"},
    "loads_padded_pages": {"padding"},
    "page_id_16bit": {"spread-pool"},
    **{name: {"sparse", "sparse-v4"} for name in names("sparse")},    # their steps run only on the sparse path
    # DeepSeek V4's: the second cache and the lengths exist only in the V4 group
    **{name: {"sparse-v4"} for name in ("topk_length_ignored", "extra_topk_length_ignored",
                                        "extra_page_size_from_main", "softmax_per_cache", "extra_cache_dropped")},
}


class _Discard:
    def write(self, row):
        pass


@pytest.fixture(scope="module")
def selfcheck():
    cases = load_suite("selfcheck").cases
    return run_selfcheck(cases, names(), "cpu", _Discard())


def test_zoo_is_large_and_described():
    assert len(MUTANTS) >= 16
    for name, cls in MUTANTS.items():
        assert issubclass(cls, TorchBackend) and cls is not TorchBackend
        assert cls.name == f"mutant:{name}"
        assert cls.bug and len(cls.bug.splitlines()) == 1
        assert cls.caught_by, f"{name} declares no check expected to catch it"


def test_clean_backend_passes_every_case(selfcheck):
    rows = selfcheck.clean.summary.rows
    assert rows and all(r["status"] == "pass" for r in rows), \
        [(r["case_id"], r["status"], r.get("reason")) for r in rows if r["status"] != "pass"]


@pytest.mark.parametrize("name", names())
def test_mutant_is_killed_by_an_expected_check(selfcheck, name):
    verdict = next(m for m in selfcheck.mutants if m.spec == f"mutant:{name}")
    assert verdict.killed, f"{name} survived the selfcheck suite ({verdict.bug})"
    assert verdict.expected_hit, (f"{name} was killed by {dict(verdict.kills)}, none of the "
                                  f"expected {verdict.caught_by}")


@pytest.mark.parametrize("name", sorted(ONLY_IN_GROUPS))
def test_targeted_mutant_passes_cases_outside_its_bug(selfcheck, name):
    verdict = next(m for m in selfcheck.mutants if m.spec == f"mutant:{name}")
    killed_groups = {r["group"] for r in verdict.summary.rows if killing_checks(r)}
    assert killed_groups and killed_groups <= ONLY_IN_GROUPS[name], killed_groups


def test_dense_mutants_pass_the_sparse_case_as_the_clean_backend_does(selfcheck):
    """A dense-only bug never reaches the sparse path: its sparse rows pass, none crash or go unsupported."""
    for verdict in selfcheck.mutants:
        if MUTANTS[verdict.spec.removeprefix("mutant:")].needs == "sparse":
            continue
        sparse_rows = [r for r in verdict.summary.rows if r["group"] in ("sparse", "sparse-v4")]
        assert sparse_rows and all(r["status"] == "pass" for r in sparse_rows), (verdict.spec, sparse_rows)


SPARSE_STEPS = ("run_sparse", "sparse_records", "sparse_keys", "sparse_valid", "sparse_attend", "sparse_sink",
                "sparse_scopes", "sparse_main_length", "sparse_extra_length", "sparse_attend_scopes")


@pytest.mark.parametrize("name", names())
def test_each_mutant_needs_the_cases_of_the_path_it_breaks(name):
    """One registry for dense and sparse mutants: each declares the cases it needs, and a sparse one is
    exactly one that overrides a step of the sparse path (``torch_sparse.py``), a dense one none of them."""
    cls = MUTANTS[name]
    overrides = {step for step in SPARSE_STEPS if getattr(cls, step) is not getattr(TorchBackend, step)}
    assert cls.needs in NEEDS and (cls.needs == "sparse") == bool(overrides), (name, cls.needs, overrides)


def test_the_registry_takes_only_the_cases_it_knows():
    with pytest.raises(ValueError, match="needs 'both' \\(known: dense, sparse\\)"):
        mutant("both_paths", "one line", ("out.element",), needs="both")
    assert names("sparse") and set(names("sparse")) | set(names("dense")) == set(MUTANTS) == set(names())


def test_selfcheck_verdict(selfcheck):
    assert selfcheck.ok and not selfcheck.survivors


def test_mutant_backend_spec_loads_a_fresh_instance():
    a, b = load_backend("mutant:stale_seqlens"), load_backend("mutant:stale_seqlens")
    assert isinstance(a, MUTANTS["stale_seqlens"]) and a is not b
    with pytest.raises(InputError, match="unknown mutant 'nope'"):
        load_backend("mutant:nope")


def _case(suite_case_id):
    return next(c for c in load_suite("selfcheck").cases if c.id == suite_case_id)


def test_nondeterministic_mutant_differs_between_identical_calls():
    inputs = generate(_case("selfcheck/determinism/0"))
    for spec, same in (("torch", True), ("mutant:nondeterministic", False)):
        backend = load_backend(spec)
        first, second = steps.launch(backend, inputs), steps.launch(backend, inputs)
        assert (torch.equal(first.out, second.out) and torch.equal(first.lse, second.lse)) is same, spec


def test_stale_seqlens_mutant_is_right_on_its_first_call_only():
    first, second = generate(_case("selfcheck/decode/0")), generate(_case("selfcheck/decode/1"))
    assert first.cache_seqlens.tolist() != second.cache_seqlens.tolist()
    clean, stale = load_backend("torch"), load_backend("mutant:stale_seqlens")
    assert torch.equal(stale.run(first)[1], clean.run(first)[1])
    assert not torch.equal(stale.run(second)[1], clean.run(second)[1])


# ---- the command ------------------------------------------------------------------------------

TINY = """
[suite]
seed = 3
[[group]]
name = "decode"
mode = "decode"
batch_size = 2
heads = 8
seqlen = "uniform:10:100"
"""


@pytest.fixture
def tiny_suite(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


def test_selfcheck_command_passes_when_every_chosen_mutant_dies(tiny_suite, tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    code = main(["selfcheck", "--suite", str(tiny_suite), "--mutant", "lse_base2",
                 "--mutant", "v_wrong_dims", "--out", str(out), "--no-progress"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "2/2 mutants killed" in text and "verdict: PASSED" in text
    matrix = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert matrix["lse_base2"].endswith("killed") and matrix["v_wrong_dims"].endswith("killed")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted({r["backend_spec"] for r in rows}) == ["mutant:lse_base2", "mutant:v_wrong_dims", "torch"]
    assert len(rows) == 3


def test_selfcheck_command_fails_on_a_survivor(tiny_suite, capsys):
    # the tiny suite has no empty row, so the NaN-from-empty-rows mutant lives
    code = main(["selfcheck", "--suite", str(tiny_suite), "--mutant", "nan_empty_rows", "--no-progress"])
    text = capsys.readouterr().out
    assert code == 1
    assert "SURVIVED mutant:nan_empty_rows" in text and "verdict: FAILED" in text


def test_a_survivor_whose_suite_has_none_of_the_cases_it_needs_is_told_so(tiny_suite, capsys):
    code = main(["selfcheck", "--suite", str(tiny_suite), "--mutant", "sink_ignored", "--no-progress"])
    text = capsys.readouterr().out
    assert code == 1
    assert ("SURVIVED mutant:sink_ignored: attn_sink not applied (the kernel called without it); expected to be "
            "caught by out.element, out.cosine; it needs sparse cases (the sparse scenario), and the suite has "
            "none") in text


def test_selfcheck_command_fails_when_the_clean_backend_fails(tiny_suite, capsys, monkeypatch):
    monkeypatch.setattr("harness.selfcheck.CLEAN_SPEC", "mutant:lse_base2")
    code = main(["selfcheck", "--suite", str(tiny_suite), "--mutant", "v_wrong_dims", "--no-progress"])
    text = capsys.readouterr().out
    assert code == 1
    assert "CLEAN FAIL" in text and "clean backend FAILED" in text


def test_selfcheck_markdown_lists_every_chosen_mutant(tiny_suite, capsys):
    code = main(["selfcheck", "--suite", str(tiny_suite), "--mutant", "wrong_softmax_scale", "--markdown",
                 "--no-progress"])
    text = capsys.readouterr().out
    assert code == 0
    table = [line for line in text.splitlines() if line.startswith("| `")]
    assert [line.split("`")[1] for line in table] == ["torch (clean)", "wrong_softmax_scale"]


def test_every_mutant_names_checks_the_table_defines():
    from harness.judging.checks import known
    from harness.mutants import MUTANTS
    for name, factory in MUTANTS.items():
        caught_by = factory().caught_by
        assert caught_by and all(known(c) for c in caught_by), (name, caught_by)
    assert not known("out.elemnt") and not known("determinsm")


def test_selfcheck_without_bars_says_how_far_it_is_after_each_backend(capsys):
    """A log (``make test``'s selfcheck) gets a line per backend as it finishes, not one line for minutes."""
    code = main(["selfcheck", "--mutant", "lse_base2", "--mutant", "read_past_seqlen", "--no-progress"])
    lines = [line for line in capsys.readouterr().err.splitlines() if "selfcheck [" in line]
    assert code == 0
    assert [line.split(":")[1].strip() for line in lines] == [
        "selfcheck [1/3] torch (clean)", "selfcheck [2/3] lse_base2", "selfcheck [3/3] read_past_seqlen"]
    assert "torch (clean): passed, 0/" in lines[0] and "lse_base2: killed" in lines[1]

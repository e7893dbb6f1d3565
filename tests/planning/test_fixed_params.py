"""A kernel that fixes a parameter: every case runs at the kernel's value, as data.

FlagGems' ``flash_mla`` has no softmax-scale argument and computes ``1 / math.sqrt(d)``.  A backend
declares that in ``Capabilities.fixed_softmax_scale``; the oracle then computes at it, the row records
the case as it ran, and ``unsupported`` is left for what the API cannot take.  The fakes here are the
torch backend with the scale it computes at pinned; every run is in-process on the CPU.
"""

import dataclasses
import json
import math
import textwrap

import pytest
import torch

from harness.backends.base import Capabilities
from harness.backends.flaggems_mla import FlagGemsMLABackend
from harness.building.inputs import generate
from harness.cli import main
from harness.judging.conventions import kernel_view
from harness.judging.oracle import expected
from harness.planning.cases import DEEPSEEK_SOFTMAX_SCALE, Case, load_suite
from harness.planning.fixed_params import (
    SCALE_RULES,
    as_run,
    describe_fixed,
    fixed_by_kernel,
    fixed_scale,
    hashed_definition,
)
from harness.recording.results import case_hash, read_rows
from harness.report import write_report

SUITES = "smoke,edge"        # every scenario that runs whole (padding, determinism, batch invariance) is in edge
FLAGGEMS_SCALE = 1 / 24      # 1 / sqrt(576)


def fakes(tmp_path) -> str:
    """``Fixed`` declares FlagGems' rule and computes at it; ``Liar`` declares it but computes at the case's
    scale (it reads ``inputs.softmax_scale``, the engine's value, which a fixed-scale kernel is never given);
    ``Sixteenth`` (the name ``Fixed`` has, same info) declares and computes at 1/16."""
    path = tmp_path / "fixed_kernels.py"
    path.write_text(textwrap.dedent("""
        import dataclasses
        from harness.backends.base import Capabilities
        from harness.backends.torch_backend import TorchBackend

        class Fixed(TorchBackend):
            name = "fixed-scale"
            capabilities = Capabilities(fixed_softmax_scale="1/sqrt(d_qk)")

            def info(self):
                return {"package": "fixed-kernel", "version": "1", "api": "no scale argument"}

            def run(self, inputs):
                return super().run(dataclasses.replace(inputs, softmax_scale=inputs.q.shape[-1] ** -0.5))

        class Liar(Fixed):
            name = "liar"

            def run(self, inputs):
                return TorchBackend.run(self, inputs)

        class Sixteenth(Fixed):
            capabilities = Capabilities(fixed_softmax_scale=1 / 16)

            def run(self, inputs):
                return TorchBackend.run(self, dataclasses.replace(inputs, softmax_scale=1 / 16))
    """))
    return str(path)


def run(capsys, *argv):
    code = main([str(a) for a in argv] + ["--device", "cpu", "--workers", "0", "--no-progress"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, out + err
    return code, out, err


@pytest.fixture(scope="module")
def fixed_rows(tmp_path_factory):
    """smoke and edge on ``Fixed`` and ``Liar``: their rows, by backend."""
    tmp = tmp_path_factory.mktemp("fixed")
    module, path = fakes(tmp), tmp / "r.jsonl"
    code = main(["run", "--suite", SUITES, "--backend", f"{module}:Fixed,{module}:Liar", "--out", str(path),
                 "--device", "cpu", "--workers", "0", "--no-progress"])
    rows = read_rows(path)
    return code, path, {b: [r for r in rows if r["backend"] == b] for b in ("fixed-scale", "liar")}


def suite_cases():
    return {c.id: c for s in SUITES.split(",") for c in load_suite(s).cases}


def test_a_kernel_at_its_fixed_scale_passes_every_case_scenarios_included(fixed_rows):
    code, _, rows = fixed_rows
    fixed = rows["fixed-scale"]
    assert len(fixed) == len(suite_cases())
    assert {r["status"] for r in fixed} == {"pass"}, [r["reason"] for r in fixed if r["status"] != "pass"]
    assert {"padding", "determinism", "batch_invariance", "call"} <= {r["scenario"] for r in fixed}
    assert code == 1       # the liar's rows fail the run


def test_a_kernel_that_declares_a_fixed_scale_but_takes_the_cases_fails_where_they_differ(fixed_rows):
    _, _, rows = fixed_rows
    cases = suite_cases()
    differ = [r for r in rows["liar"] if cases[r["case_id"]].softmax_scale != FLAGGEMS_SCALE]
    same = [r for r in rows["liar"] if cases[r["case_id"]].softmax_scale == FLAGGEMS_SCALE]
    assert differ and same       # smoke has a group written at 1/sqrt(576)
    # a batch whose rows see no key has no logit to scale: the one case the liar cannot get wrong
    no_keys = {r["case_id"] for r in differ if not any(r["cache_seqlens"])}
    assert no_keys == {"edge/all-empty/0"}
    wrong = [r for r in differ if r["case_id"] not in no_keys]
    assert {r["status"] for r in wrong} == {"fail"}
    assert all(any(c.startswith(("out.", "lse.")) for c in r["failed_checks"]) for r in wrong)
    assert {r["status"] for r in same} == {"pass"}


def test_the_row_records_the_case_as_it_ran_and_the_change(fixed_rows):
    _, _, rows = fixed_rows
    cases = suite_cases()
    for row in rows["fixed-scale"]:
        case = cases[row["case_id"]]
        assert row["case"]["softmax_scale"] == FLAGGEMS_SCALE
        # the hash is of what ran, and of what the kernel fixes; --resume finds it with hashed_definition
        assert row["case_hash"] == case_hash({**row["case"], "fixed_softmax_scale": "1/sqrt(d_qk)"})
        assert row["case_hash"] == case_hash(hashed_definition(case, "1/sqrt(d_qk)"))
        assert row["conventions"]["fixed_softmax_scale"] == "1/sqrt(d_qk)"
        if case.softmax_scale == FLAGGEMS_SCALE:
            assert "fixed_by_kernel" not in row and row["case"] == json.loads(json.dumps(case.to_dict()))
        else:
            assert row["fixed_by_kernel"] == {"softmax_scale": [case.softmax_scale, FLAGGEMS_SCALE]}
            assert row["case_hash"] != case_hash(case.to_dict())
            assert describe_fixed(row["fixed_by_kernel"]) == [
                f"softmax_scale {case.softmax_scale:.3g} -> 0.0417 (fixed by the kernel)"]
    assert describe_fixed({"softmax_scale": [DEEPSEEK_SOFTMAX_SCALE, FLAGGEMS_SCALE]}) == [
        "softmax_scale 0.0722 -> 0.0417 (fixed by the kernel)"]


def test_the_report_shows_the_change_and_keeps_the_kernel_out_of_the_cross_kernel_spread(fixed_rows, tmp_path):
    _, path, _ = fixed_rows
    html = tmp_path / "report.html"
    write_report([path], html, max_drilldowns=1000)
    page = html.read_text()
    assert "softmax_scale 0.0722 -&gt; 0.0417 (fixed by the kernel); the oracle computed at it too" in page
    assert "<small>softmax_scale 0.0722 -&gt; 0.0417 (fixed by the kernel)</small>" in page   # the matrix
    from harness.report.rows import sample
    assert all(sample(r) is None for r in read_rows(path) if r.get("fixed_by_kernel"))
    assert any(sample(r) is not None for r in read_rows(path) if not r.get("fixed_by_kernel"))


def test_resume_never_keeps_a_row_run_at_another_fixed_scale(tmp_path, capsys):
    module, path = fakes(tmp_path), tmp_path / "r.jsonl"
    code, _, _ = run(capsys, "run", "--suite", "smoke", "--backend", f"{module}:Fixed", "--out", path)
    assert code == 0
    code, _, err = run(capsys, "run", "--suite", "smoke", "--backend", f"{module}:Sixteenth", "--resume", path)
    assert code == 0 and "case definition changed" in err
    latest = {r["case_id"]: r for r in read_rows(path)}
    # the case written at 1/sqrt(576) too: it ran unchanged at 1/24, and would run at 1/16 now
    assert {r["case"]["softmax_scale"] for r in latest.values()} == {1 / 16}


def test_torch_and_reference_rows_keep_their_definition_hash_and_keys(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    code, _, _ = run(capsys, "run", "--suite", "smoke", "--backend", "torch,reference", "--out", path)
    assert code == 0
    cases = {c.id: c for c in load_suite("smoke").cases}
    for row in read_rows(path):
        assert "fixed_by_kernel" not in row and "fixed_softmax_scale" not in row["conventions"]
        assert row["case"] == json.loads(json.dumps(cases[row["case_id"]].to_dict()))
        assert row["case_hash"] == case_hash(cases[row["case_id"]].to_dict())


def test_the_oracle_computes_at_the_fixed_scale_and_fp8_end_to_end_too():
    case = Case(id="t/fixed/0", seed=3, batch_size=2, heads=4, seqlen="uniform:1:70", dtype="bf16")
    inputs = generate(case, "cpu")
    caps = Capabilities(fixed_softmax_scale=0.05)
    view = kernel_view(inputs, caps)
    assert view.softmax_scale == 0.05 and inputs.softmax_scale == case.softmax_scale
    at = expected(dataclasses.replace(inputs, softmax_scale=0.05))
    assert all(torch.equal(a, b) for a, b in zip(expected(view), at, strict=True))
    assert not torch.allclose(expected(inputs)[0], at[0])       # the scale changes the answer
    assert kernel_view(inputs, Capabilities()) is inputs         # no fixed parameter: the inputs themselves
    fp8 = generate(dataclasses.replace(case, dtype="fp8_e4m3"), "cpu")
    for convention in ("quantized_k_scale", "model_dtype", "cast_in_kernel"):
        assert kernel_view(fp8, Capabilities(fixed_softmax_scale=0.05, fp8_q=convention)).softmax_scale == 0.05


def test_flaggems_declares_its_sources_scale_and_runs_every_decode_case():
    source_rule = SCALE_RULES[FlagGemsMLABackend.capabilities.fixed_softmax_scale]
    assert source_rule(576) == 1 / math.sqrt(576) == FLAGGEMS_SCALE
    caps = FlagGemsMLABackend.capabilities
    cases = [c for s in ("smoke", "decode", "edge") for c in load_suite(s).cases]
    decode = [c for c in cases if c.mode == "decode" and c.dtype in ("bf16", "fp16") and c.causal]
    assert decode and all(caps.reason_unsupported(c, "cuda") is None for c in decode)
    assert any(fixed_by_kernel(c, caps.fixed_softmax_scale) for c in decode)


@pytest.mark.parametrize("change, quoted", [
    ({"mode": "verify", "draft_tokens": 2}, "one program per request reads one query row"),
    ({"dtype": "fp8_e4m3"}, "has no descale (k_scale) argument"),
    ({"causal": False}, 'it asserts causal ("causal False not supported")'),
])
def test_flaggems_still_refuses_what_its_api_cannot_take_quoting_it(change, quoted):
    case = dataclasses.replace(Case(id="t/flaggems/0", seed=1), **change)
    reason = FlagGemsMLABackend.capabilities.reason_unsupported(case, "cuda")
    assert reason and quoted in reason


@pytest.mark.parametrize("declared", ["1/d", -0.1, math.nan, True, "0.05"])
def test_a_bad_declaration_fails_when_declared(declared):
    with pytest.raises(ValueError, match="fixed_softmax_scale"):
        Capabilities(fixed_softmax_scale=declared)


def test_as_run_changes_only_the_fixed_parameter():
    case = Case(id="t/as-run/0", seed=5)
    assert as_run(case, {}) is case
    ran = as_run(case, fixed_by_kernel(case, "1/sqrt(d_qk)"))
    assert dataclasses.replace(ran, softmax_scale=case.softmax_scale) == case and ran.softmax_scale == FLAGGEMS_SCALE
    assert fixed_scale(None, 576) is None and fixed_by_kernel(ran, "1/sqrt(d_qk)") == {}

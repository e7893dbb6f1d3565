"""The gate of a sparse call (harness/building/sparse_gate.py) and the case checks of DeepSeek V4's fields: each
bad input is one line and exit 2, and no kernel is launched."""

import dataclasses

import pytest

from harness.backends import TorchBackend
from harness.building.sparse_inputs import build, index_stats
from harness.errors import InputError
from harness.planning.cases import Case, validate_case
from harness.scenarios import sparse as scenario
from tests.helpers import run_cli

V4 = dict(id="sparse-v4/t/0", seed=3, scenario="sparse", topk=64, heads=16, batch_size=3, seqlen="list:40,200,90",
          d_qk=512, kv_format="v4", kv_scales="ue8m0", topk_length="random", extra_topk=64, extra_page_size=2,
          extra_seqlen="list:30,0,100", extra_topk_length="random")


def v4_case(**kw) -> Case:
    return validate_case(Case(**{**V4, **kw}), "test")


class Recorder(TorchBackend):
    name = "recorder"
    called = False

    def run_sparse(self, inputs):
        Recorder.called = True
        return super().run_sparse(inputs)


def _doctored(built, **inputs_changes):
    """``built`` with some inputs replaced, and its stats taken again from the new tensors (as the build takes
    them), so the gate judges what the kernel would be given."""
    inputs = dataclasses.replace(built.inputs, **inputs_changes)
    extra = None
    if inputs.extra_indices is not None:
        extra = index_stats(inputs.extra_indices, _fitting(inputs.extra_topk_length, inputs.extra_indices))
    return dataclasses.replace(built, inputs=inputs, extra_stats=extra,
                               index_stats=index_stats(inputs.indices, _fitting(inputs.topk_length, inputs.indices)))


def _fitting(lengths, indices):
    """The lengths where they are one per kernel row (else none: the stats cannot count by them)."""
    return lengths if lengths is not None and lengths.shape == indices.shape[:1] else None


def _bad_inputs(built):
    """Each gate item: a name, the doctored case, and words its one line must hold."""
    i = built.inputs
    far = i.extra_indices.clone()
    far[1, 0, 0] = i.extra_num_slots
    long_length, negative = i.topk_length.clone(), i.extra_topk_length.clone()
    long_length[2] = i.topk + 1
    negative[0] = -1
    return {
        "length past the width": (_doctored(built, topk_length=long_length), "topk_length of kernel row 2 is 65"),
        "negative extra length": (_doctored(built, extra_topk_length=negative), "extra_topk_length of kernel row 0"),
        "length of the wrong shape": (_doctored(built, topk_length=i.topk_length[:2]), "must be int32 of shape (3,)"),
        "extra index outside the extra pool": (_doctored(built, extra_indices=far), "outside the extra cache's"),
        "extra indices without an extra cache": (
            _doctored(built, extra_kv_pool=None, extra_topk_length=None), "extra_indices given without an extra cache"),
        "extra length without an extra cache": (
            _doctored(built, extra_kv_pool=None, extra_indices=None), "extra_topk_length given without an extra cache"),
        "an extra cache without extra indices": (
            _doctored(built, extra_indices=None, extra_topk_length=None), "an extra cache given without extra indices"),
        "an undeclared format pair": (_doctored(built, extra_kv_format="v32"), "v4+v32 are not a pair"),
    }


CASES = sorted(_bad_inputs(build(v4_case(), "cpu")))


@pytest.mark.parametrize("name", CASES)
def test_each_bad_input_is_one_line_before_any_launch(name):
    doctored, words = _bad_inputs(build(v4_case(), "cpu"))[name]
    Recorder.called = False
    with pytest.raises(InputError) as e:
        scenario.launch(Recorder(), doctored)
    assert not Recorder.called
    assert "\n" not in str(e.value) and words in str(e.value), str(e.value)


@pytest.mark.parametrize("name", CASES)
def test_the_run_exits_2_with_the_gates_line_and_no_kernel(name, tmp_path, monkeypatch):
    real_build = scenario.build
    monkeypatch.setattr(scenario, "build", lambda case, device: _bad_inputs(real_build(case, device))[name][0])
    suite = tmp_path / "v4.toml"
    fields = "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in V4.items() if k not in ("id", "seed"))
    suite.write_text(f"[suite]\nseed = 3\n\n[[group]]\nname = \"g\"\n{fields}\n".replace("True", "true"))
    monkeypatch.setattr("harness.backends.TorchBackend.run_sparse", _never_called)
    code, out, err = run_cli(["run", "--suite", suite, "--backend", "torch", "--out", tmp_path / "r.jsonl",
                              "--workers", "0", "--no-progress"])      # in this process: the build doctored
    assert code == 2, out + err
    errors = [line for line in err.splitlines() if line.startswith("mla-verify: error:")]
    words = _bad_inputs(real_build(v4_case(), "cpu"))[name][1]
    assert len(errors) == 1 and words in errors[0] and "Traceback" not in err, err


def _never_called(self, inputs):
    raise AssertionError("a kernel was launched on inputs the gate must refuse")


def test_good_v4_inputs_pass_the_gate_and_the_torch_backend():
    outcome = scenario.run(v4_case(), TorchBackend(), "cpu")
    assert outcome.status.value == "pass", outcome.messages
    extra = outcome.metrics["sparse"]["extra"]
    assert extra["valid_entries"] > 0 and extra["page_size"] == 2 and extra["kv_format"] == "v4"


@pytest.mark.parametrize("fields,words", [
    (dict(extra_topk=0, extra_page_size=64, extra_seqlen="", extra_topk_length="random"),
     "extra_topk_length: applies to an extra cache only"),
    (dict(extra_topk=0, extra_page_size=2, extra_seqlen="", extra_topk_length="none"),
     "extra_page_size: applies to an extra cache only"),
    (dict(topk_length="sometimes"), "unknown length 'sometimes'"),
    (dict(extra_seqlen="ratio:0"), "'ratio:N' takes a whole N >= 1"),
    (dict(extra_seqlen="ratio:x"), "'ratio:N' takes a whole N >= 1"),
    (dict(extra_seqlen="wobbly:3"), "unknown seqlen distribution 'wobbly'"),
    (dict(extra_kv_format="v32"), "one softmax needs keys of one width"),
    (dict(extra_kv_format="v9"), "unknown record format 'v9'"),
    (dict(extra_index_pattern="sideways"), "unknown index pattern 'sideways'"),
    (dict(extra_topk=-64), "extra_topk: must be 0"),
])
def test_case_checks_refuse_bad_v4_fields_in_one_line(fields, words):
    with pytest.raises(InputError) as e:
        v4_case(**fields)
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_suite_with_a_bad_v4_field_exits_2_in_one_line(tmp_path):
    suite = tmp_path / "bad.toml"
    suite.write_text('[suite]\nseed = 1\n\n[[group]]\nname = "g"\nscenario = "sparse"\ntopk = 64\n'
                     'extra_topk_length = "random"\n')
    code, out, err = run_cli(["run", "--suite", suite, "--backend", "torch", "--out", tmp_path / "r.jsonl"])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "extra_topk_length: applies to an extra cache" in err


def test_lengths_of_the_wrong_dtype_are_refused():
    built = build(v4_case(), "cpu")
    doctored = _doctored(built, topk_length=built.inputs.topk_length.long())
    Recorder.called = False
    with pytest.raises(InputError, match="must be int32"):
        scenario.launch(Recorder(), doctored)
    assert not Recorder.called

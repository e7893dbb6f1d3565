"""The kernel backends beyond FlashMLA on a machine without their packages or a GPU.

What can be checked here: the conventions each one declares, that each one is
listed with whether it imports and why not, that GPU-only backends are recorded
as unsupported (never error, never pass) with the reason, the ``Unsupported``
mechanism, FlashInfer's plan-time refusal, and judging a kernel with no LSE.
"""

import dataclasses
import math
import sys
import types

import pytest
import torch
from helpers import run_cli

from harness.backends import BUILTIN, KERNELS, builtin_class
from harness.backends.base import Backend, Capabilities, Feature, Unsupported
from harness.backends.torch_backend import TorchBackend
from harness.building.inputs import generate
from harness.planning.cases import Case, case_seed
from harness.running.backend_loader import load_backend
from harness.running.runner import run_case

# the kernels with a dense call that runs on CUDA alone, as their classes declare
GPU_ONLY = [name for name in KERNELS if Feature.DENSE in builtin_class(name).features
            and "cpu" not in builtin_class(name).capabilities.devices]
no_cuda = pytest.mark.skipif(torch.cuda.is_available(),
                             reason="a CUDA device is present: this checks the CPU-only behaviour")


def small(mode="decode", dtype="bf16", s_q=1, **kw):
    case_id = f"kb/{mode}-{dtype}-{s_q}/0"
    return Case(id=case_id, seed=case_seed(case_id, 7), mode=mode, batch_size=3, heads=4,
                draft_tokens=s_q, dtype=dtype, seqlen="list:5,70,130", **kw)


def test_every_registered_backend_loads_under_its_name():
    for name in BUILTIN:
        assert load_backend(name).name == name      # constructing never needs the package


@pytest.mark.parametrize("name, expected", [
    ("flashinfer-fa3", dict(lse_base="2", empty_row_lse=-math.inf, has_lse=True, fp8_q="model_dtype",
                            index_format="page_table", modes=("decode", "verify"))),
    ("flashinfer-fa2", dict(lse_base="2", empty_row_lse=-math.inf, has_lse=True, fp8_q="model_dtype")),
    ("sglang-triton", dict(lse_base="e", empty_row_lse=-math.inf, has_lse=True, fp8_q="cast_in_kernel",
                           index_format="token_slots", non_causal=True)),
    ("sglang-verify-mla", dict(has_lse=False, modes=("verify",), fp8_q="cast_in_kernel",
                               index_format="token_slots")),
    ("flaggems", dict(has_lse=False, modes=("decode", "verify"), max_draft_tokens=1, dtypes=("bf16", "fp16"),
                      non_causal=False)),
])
def test_declared_conventions(name, expected):
    caps = load_backend(name).capabilities
    for field, value in expected.items():
        assert getattr(caps, field) == value, field
    assert caps.engine != "mla-verify"              # each says whose convention it reproduces


def test_list_shows_every_backend_with_availability():
    code, out, _ = run_cli(["list", "--json"])
    assert code == 0
    lines = out.splitlines()
    for name in KERNELS:
        at = next(i for i, line in enumerate(lines) if line.strip().startswith(name + " "))
        note = lines[at + (3 if Feature.SPARSE in builtin_class(name).features else 2)].strip()
        assert note.startswith(("available:", "unavailable:")), (name, note)
        if note.startswith("unavailable:"):
            assert "import" in note or "device" in note.lower() or "TRITON_INTERPRET" in note


@no_cuda
@pytest.mark.parametrize("name", GPU_ONLY)
def test_gpu_only_backends_are_unsupported_on_cpu_with_a_reason(name):
    backend = load_backend(name)
    assert not backend.available()
    case = small()
    reason = backend.unsupported_reason(case, "cpu")
    assert reason and "CUDA" in reason
    row = run_case(case, backend, name, "cpu")
    assert row["status"] == "unsupported" and row["reason"] == reason


@no_cuda
def test_sglang_triton_without_interpreter_says_so(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    backend = load_backend("sglang-triton")
    reason = backend.unsupported_reason(small(dtype="fp16"), "cpu")
    assert reason and ("TRITON_INTERPRET" in reason or "do not import" in reason)


class Refuses(TorchBackend):
    name = "refuses"

    def run(self, inputs):
        raise Unsupported("plan() refused: too many work items (quoted)")


def test_unsupported_raised_at_call_time_is_recorded_with_its_reason():
    row = run_case(small(), Refuses(), "refuses", "cpu")
    assert row["status"] == "unsupported"
    assert row["reason"] == "plan() refused: too many work items (quoted)"


def test_flashinfer_plan_valueerror_becomes_unsupported(monkeypatch):
    """FlashInfer's plan-time ValueError is the kernel refusing the input: quoted, not an error."""
    from harness.backends.flashinfer_mla import FlashInferMLABackend

    contracts = types.ModuleType("flashinfer.mla._batch_mla")
    contracts.MLAPlanMetadata = types.SimpleNamespace(dense=lambda *a, **k: ("dense", a, k))
    for name in ("flashinfer", "flashinfer.mla"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "flashinfer.mla._batch_mla", contracts)

    class Wrapper:
        def plan(self, **kwargs):
            assert kwargs["lse_mode"] == "base2" and kwargs["causal"] is True
            raise ValueError("causal tile bound exceeded for this shape")

    backend = FlashInferMLABackend("fa3")
    backend._wrapper = Wrapper()
    inputs = generate(small("verify", s_q=2), "cpu")
    with pytest.raises(Unsupported, match="FlashInfer fa3 plan\\(\\) refused: causal tile bound"):
        backend.run(inputs)


def test_flashinfer_fp8_plans_bf16_q_with_kv_scales(monkeypatch):
    from harness.backends.flashinfer_mla import FlashInferMLABackend

    contracts = types.ModuleType("flashinfer.mla._batch_mla")
    contracts.MLAPlanMetadata = types.SimpleNamespace(dense=lambda *a, **k: ("dense", a, k))
    monkeypatch.setitem(sys.modules, "flashinfer.mla._batch_mla", contracts)
    seen = {}

    class Wrapper:
        def plan(self, **kwargs):
            seen["plan"] = kwargs
            seen["plans"] = seen.get("plans", 0) + 1

        def run(self, **kwargs):
            seen["run"] = kwargs
            q = kwargs["query"]
            return torch.zeros(*q.shape[:2], 512, dtype=q.dtype), torch.zeros(q.shape[:2])

    backend = FlashInferMLABackend("fa2")
    backend._wrapper = Wrapper()
    inputs = generate(small("decode", dtype="fp8_e4m3"), "cpu")
    backend.run(inputs)
    k_scale = float(inputs.descale_k[0])
    assert seen["plan"]["q_data_type"] == torch.bfloat16 and seen["plan"]["kv_data_type"] == torch.float8_e4m3fn
    assert seen["plan"]["scale_mode"] == "kv-per-tensor"
    assert seen["run"]["ckv_scale"] == k_scale == seen["run"]["kpe_scale"]
    assert seen["run"]["query"].dtype == torch.bfloat16               # q is not quantised
    assert backend.info()["jit_cache"] and backend.info()["jit_build_s"] == {}
    backend.prepare(inputs)                       # the first plan of a dtype pair is timed, once
    backend.prepare(inputs)
    assert list(backend.info()["jit_build_s"]) == ["bfloat16/float8_e4m3fn"] and seen["plans"] == 2


class NoLse(TorchBackend):
    """The torch kernel with its LSE dropped, declaring so."""

    name = "no-lse"
    capabilities = dataclasses.replace(TorchBackend.capabilities, has_lse=False)

    def run(self, inputs):
        return super().run(inputs)[0], None


class NoLseWrongOut(NoLse):
    def run(self, inputs):
        out, _ = super().run(inputs)
        return out * 1.05, None


def test_no_lse_passes_on_out_alone_and_says_lse_was_not_produced():
    row = run_case(small("verify", s_q=2), NoLse(), "no-lse", "cpu")
    assert row["status"] == "pass"
    assert row["lse_produced"] is False and "lse" not in row["metrics"]


@pytest.mark.parametrize("seqlen", ["list:5,70,130", "list:0,17,64"])   # diagnostics also with empty rows
def test_no_lse_still_fails_a_wrong_output(seqlen):
    row = run_case(dataclasses.replace(small(), seqlen=seqlen), NoLseWrongOut(), "no-lse", "cpu")
    assert row["status"] == "fail" and any(c.startswith("out.") for c in row["failed_checks"])


@pytest.mark.parametrize("scenario", ["determinism", "padding", "batch_invariance"])
def test_no_lse_runs_every_scenario(scenario):
    row = run_case(dataclasses.replace(small(), scenario=scenario), NoLse(), "no-lse", "cpu")
    assert row["status"] == "pass", row.get("messages")


class Base2(TorchBackend):
    name = "base2"
    capabilities = dataclasses.replace(TorchBackend.capabilities, lse_base="2", empty_row_lse=-math.inf)

    def run(self, inputs):
        out, lse = super().run(inputs)
        lse = torch.where(torch.isposinf(lse), torch.full_like(lse, -math.inf), lse)
        return out, lse / math.log(2)


def test_base2_lse_with_minus_inf_empty_rows_passes():
    case = dataclasses.replace(small(), seqlen="list:0,17,64")
    assert run_case(case, Base2(), "base2", "cpu")["status"] == "pass"


def test_backend_subclass_contract():
    for name in BUILTIN:
        backend = load_backend(name)
        assert isinstance(backend, Backend) and isinstance(backend.capabilities, Capabilities)
        assert set(backend.info()) >= {"package", "version", "api"}

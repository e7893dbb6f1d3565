"""SGLang's Triton DeepSeek V4 sparse decode (harness/backends/sglang_v4_triton.py): what its declarations
refuse, the sink-in-LSE convention the verdict applies, and on CPU the kernel itself under
``TRITON_INTERPRET=1`` through the sparse scenario against the oracle."""

import math
import os

import torch

# read when the kernels are defined, so before any import; a CUDA box runs the compiled kernel instead
ON_CUDA = torch.cuda.is_available()
if not ON_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import dataclasses  # noqa: E402

import pytest  # noqa: E402

from harness.backends import BUILTIN, builtin_class  # noqa: E402
from harness.backends.base import Unsupported  # noqa: E402
from harness.backends.capabilities import SparseSupport  # noqa: E402
from harness.backends.sglang_v4_triton import SGLangV4TritonBackend  # noqa: E402
from harness.building.sparse_inputs import build  # noqa: E402
from harness.planning.cases import Case, validate_case  # noqa: E402
from harness.recording.status import Status  # noqa: E402
from harness.scenarios import sparse as scenario  # noqa: E402

V4 = dict(id="sparse-v4/t/0", seed=3, scenario="sparse", topk=64, heads=4, batch_size=3, seqlen="list:40,200,90",
          d_qk=512, kv_format="v4", kv_scales="ue8m0", topk_length="random", extra_topk=64, extra_page_size=2,
          extra_seqlen="list:30,0,100", extra_topk_length="random", sink="random")
SPARSE = SGLangV4TritonBackend.capabilities.sparse


def v4_case(**kw) -> Case:
    return validate_case(Case(**{**V4, **kw}), "test")


# ---- what the declarations refuse, on any machine ---------------------------------------------------------

def test_v32_records_are_refused():
    case = validate_case(Case(id="sparse/t/0", seed=1, scenario="sparse", topk=64, heads=16), "test")
    assert SPARSE.reason_unsupported(case, "cuda") == "kv_format v32 not supported (reads v4)"


def test_a_non_v4_extra_cache_is_refused_quoting_the_record_layout():
    case = Case(**{**V4, "extra_kv_format": "v32"})            # not validated: the layer above refuses it too
    reason = SPARSE.reason_unsupported(case, "cuda")
    assert reason.startswith("a v32 extra cache beside a v4 main cache:") and "_TOKEN_DATA_STRIDE = 576" in reason
    assert SPARSE.pairs() == [["v4", "v4"]]


def test_a_per_request_row_of_several_tokens_is_refused_quoting_the_kernel():
    backend = SGLangV4TritonBackend()
    grouped = v4_case(mode="verify", draft_tokens=3, verify_rows="per_request")
    for device in ("cpu", "cuda"):
        reason = backend.unsupported_reason(grouped, device)
        assert reason.startswith("3 query tokens per kernel row: s_q must be 1") and "q3 = q.squeeze(1)" in reason
    flattened = dataclasses.replace(grouped, verify_rows="flattened")       # SGLang's rows: one token each
    assert SPARSE.reason_unsupported(flattened, "cuda") is None
    with pytest.raises(Unsupported, match=r"q3 = q\.squeeze\(1\)"):          # and at the call, before the kernel
        backend.run_sparse(build(grouped, "cpu").inputs)


def test_widths_off_sglangs_multiple_of_64_and_dense_cases_are_refused():
    for fields, words in ((dict(topk=96), "topk 96 is not a multiple of 64: "),
                          (dict(extra_topk=32), "extra_topk 32 is not a multiple of 64: ")):
        reason = SPARSE.reason_unsupported(v4_case(**fields), "cuda")
        assert reason.startswith(words) and '"last dimension is not aligned to 64"' in reason, reason
    dense = Case(id="d/t/0", seed=1, heads=16)
    assert "sparse scenario only" in SGLangV4TritonBackend().unsupported_reason(dense, "cuda")


def test_only_this_backend_declares_that_its_lse_includes_the_sink():
    assert SPARSE.lse_includes_sink is True and SPARSE.empty_row_lse == -math.inf and SPARSE.kv_dequant == "exact"
    for name in BUILTIN:
        sparse = builtin_class(name).capabilities.sparse
        if sparse is not None and name != "sglang-v4-triton":
            assert sparse.lse_includes_sink is False, name
            assert "lse_includes_sink" not in sparse.conventions(), name       # rows keep their keys


# ---- the kernel under Triton's CPU interpreter ------------------------------------------------------------

def _runnable_here() -> str | None:
    if ON_CUDA:
        return "a CUDA device is here: the interpreter lane is for CPU (the GPU lane runs the compiled kernel)"
    error = SGLangV4TritonBackend().import_error()
    return f"SGLang's Triton V4 sparse decode does not import here (make triton-cpu): {error}" if error else None


needs_interpreter = pytest.mark.skipif(_runnable_here() is not None, reason=str(_runnable_here()))


class SinkLeftOut(SGLangV4TritonBackend):
    """The same kernel, declared as if its LSE held the keys alone."""

    name = "sglang-v4-triton-sink-left-out"
    capabilities = dataclasses.replace(SGLangV4TritonBackend.capabilities,
                                       sparse=dataclasses.replace(SPARSE, lse_includes_sink=False))


@needs_interpreter
@pytest.mark.parametrize("fields", [
    {}, dict(mode="verify", draft_tokens=2, sink="inf", index_pattern="random"),
    # the last third of the requests with every entry -1 in both caches: the LSE is the sink's, +-inf or not
    dict(batch_size=6, seqlen="list:40,200,90,7,300,64", extra_seqlen="list:30,0,100,5,60,9", sink="inf",
         index_pattern="padded", extra_index_pattern="padded"),
], ids=["decode-random-sink", "verify-inf-sinks", "empty-rows-inf-sinks"])
def test_a_v4_case_with_an_extra_cache_and_lengths_matches_the_oracle(fields):
    case = v4_case(**fields)
    outcome = scenario.run(case, SGLangV4TritonBackend(), "cpu")
    assert outcome.status is Status.PASS, (outcome.reason, outcome.messages[:2])
    counts = outcome.metrics["sparse"]
    assert counts["valid_entries"] > 0 and counts["extra"]["valid_entries"] > 0
    if fields.get("index_pattern") == "padded":
        assert counts["empty_rows"] == 2 and counts["extra"]["empty_rows"] >= 2


@needs_interpreter
def test_its_lse_holds_the_sink_so_the_convention_is_needed():
    outcome = scenario.run(v4_case(), SinkLeftOut(), "cpu")
    assert outcome.status is Status.FAIL
    assert not outcome.metrics["lse"]["passed"] and outcome.metrics["out"]["passed"]


def test_sparse_support_keeps_the_keys_alone_by_default():
    assert SparseSupport().lse_includes_sink is False

"""SGLang's Triton sparse MLA decode adapter: what it declares and refuses, and its call's form, checked on the
CPU with a stand-in for the kernel module that asserts the form and answers with float64 attention; the kernel
itself on a CUDA device (skipped elsewhere, with the reason the CPU is refused)."""

from types import SimpleNamespace

import pytest
import torch

from harness.backends.sglang_sparse_triton import MODULE, NO_CPU, SGLangSparseTritonBackend
from harness.building.sparse_inputs import build
from harness.judging.compare import check_tensor
from harness.judging.sparse_oracle import expected
from harness.judging.tolerances import TOLERANCES
from harness.planning.cases import Case, validate_case
from harness.scenarios import sparse
from reference.sparse import sparse_attention


def case(**kw):
    fields = dict(id="sparse/t/0", seed=4, scenario="sparse", topk=128, heads=16, batch_size=3,
                  seqlen="uniform:0:300")
    return validate_case(Case(**{**fields, **kw}), "test")


def assert_out_matches_oracle(scase, out):
    exp_out, _ = expected(scase, "bf16_product")
    assert check_tensor("out", out, exp_out, TOLERANCES["bf16"].out, expected_dtype=torch.bfloat16).passed


def test_declares_a_v32_bf16_product_call_without_sink_lse_or_second_cache():
    caps = SGLangSparseTritonBackend.capabilities
    s = caps.sparse
    assert s.formats() == ("v32",) and s.kv_dequant == "bf16_product" and s.devices == ("cuda",)
    assert s.head_padding == () and s.topk_multiple == 1 and not s.sink
    assert s.extra_pairs == () and s.length_formats == () and s.index_format == "token_slots"
    assert not caps.has_lse and caps.d_qk == (576,)


V4 = dict(kv_format="v4", d_qk=512, kv_scales="ue8m0")


@pytest.mark.parametrize("kw, words", [
    (V4, "rope tail read at d_v"),
    (dict(sink="random"), "Learnable attention sinks require flashmla_sparse"),
    (dict(extra_topk=64, extra_seqlen="ratio:4"), "takes no extra cache"),
    (dict(topk_length="random"), "per-row lengths with a v32 cache"),
])
def test_refuses_what_the_kernel_cannot_take_with_its_reason(kw, words):
    reason = SGLangSparseTritonBackend().unsupported_reason(case(**kw), "cuda")
    assert reason is not None and words in reason


def test_the_sparse_scenario_refuses_the_same_cases_from_the_declarations_alone():
    for kw in (V4, dict(sink="random"), dict(extra_topk=64, extra_seqlen="ratio:4")):
        assert sparse.refusal(case(**kw), SGLangSparseTritonBackend(), "cuda") is not None, kw
    assert sparse.refusal(case(), SGLangSparseTritonBackend(), "cuda") is None


def test_a_dense_case_is_refused():
    dense = validate_case(Case(id="call/t/0", seed=1, heads=16), "test")
    assert "sparse scenario only" in SGLangSparseTritonBackend().unsupported_reason(dense, "cuda")


def test_cpu_is_refused_by_the_backend_and_by_the_sparse_scenario():
    c = case()
    assert SGLangSparseTritonBackend().unsupported_reason(c, "cpu") == NO_CPU
    outcome = sparse.run(c, SGLangSparseTritonBackend(), "cpu")
    assert outcome.status == "unsupported" and "device cpu not supported" in outcome.reason


def test_the_cpu_reason_holds_triton_interpreter_multiplies_bf16_bit_patterns():
    """The refusal's reason as a fact of the installed Triton: 1.0 times 1.0 in bf16 is not 1 in its
    interpreter's ``tl.dot``.  Should Triton fix it, this fails, and the CPU may be declared again."""
    np = pytest.importorskip("numpy")
    pytest.importorskip("triton", reason="Triton is not installed here (make triton-cpu installs it)")
    import triton.language as tl
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle
    one = TensorHandle(torch.ones(1, 1, dtype=torch.bfloat16).view(torch.int16).numpy().view(np.uint16), tl.bfloat16)
    acc = TensorHandle(np.zeros((1, 1), np.float32), tl.float32)
    product = float(InterpreterBuilder().create_dot(one, one, acc, None, None).data[0, 0])
    assert product == 0x3F80 ** 2            # the bit pattern of bf16 1.0, squared


class FakeKernels:
    """``triton_sparse_mla_decode``'s launcher, as the adapter must call it."""

    def __init__(self):
        self.seen = []
        self._cu_count = lambda device=None: 132

    def triton_sparse_mla_decode_splitk(self, q_nope, q_rope, kv, indices, sm_scale, d_v, workspace):
        rows, heads, _ = q_nope.shape
        assert q_nope.dtype == q_rope.dtype == kv.dtype == torch.bfloat16 and indices.dtype == torch.int32
        assert q_rope.shape == (rows, heads, 64) and kv.shape[1:] == (1, 576) and kv.is_contiguous()
        assert q_rope.data_ptr() - q_nope.data_ptr() == d_v * 2    # two views of one concatenated q
        assert indices.shape == (rows, 1, indices.shape[-1]) and workspace == []
        self.seen.append(SimpleNamespace(rows=rows, cores=self._cu_count()))
        q = torch.cat([q_nope, q_rope], dim=-1)
        out, _ = sparse_attention(q.double(), kv[:, 0].double(), indices[:, 0], sm_scale, d_v, None)
        return out.to(torch.bfloat16).unsqueeze(0)


def with_fake(backend):
    fake = FakeKernels()
    backend._loaded, backend._import_error = {"triton": None, MODULE: fake}, None
    return fake


@pytest.mark.parametrize("kw, rows", [
    (dict(), 3),
    (dict(mode="verify", draft_tokens=2), 6),
    (dict(mode="verify", draft_tokens=2, verify_rows="per_request"), 6),
])
def test_each_query_token_is_a_kernel_row_of_its_own(kw, rows):
    scase = build(case(**kw), "cpu")
    backend = SGLangSparseTritonBackend()
    fake = with_fake(backend)
    out, lse = backend.run_sparse(scase.inputs)
    assert lse is None and fake.seen[0].rows == rows
    assert out.shape == (*scase.inputs.q.shape[:3], 512)
    assert_out_matches_oracle(scase, out)


def test_device_cores_is_what_the_split_policy_sees_for_the_call_alone():
    scase = build(case(), "cpu")
    backend = SGLangSparseTritonBackend()
    fake = with_fake(backend)
    backend.run_sparse(scase.inputs)
    backend.device_cores = 1
    backend.run_sparse(scase.inputs)
    assert [s.cores for s in fake.seen] == [132, 1] and fake._cu_count() == 132


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CPU)
def test_a_small_v32_case_matches_the_oracle_on_cuda():
    backend = SGLangSparseTritonBackend()
    if backend.import_error():
        pytest.skip(backend.import_error())
    scase = build(case(mode="verify", draft_tokens=2), "cuda")
    for cores in (None, 1):                     # SGLang's split-K for a small batch, then its fused kernel
        backend.device_cores = cores
        out, lse = backend.run_sparse(scase.inputs)
        assert lse is None
        assert_out_matches_oracle(scase, out)

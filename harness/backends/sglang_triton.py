"""SGLang's Triton MLA kernels, called as SGLang 0.5.23's ``TritonAttnBackend`` calls them.

- decode: ``decode_attention_fwd`` over token slots.  ``kv_indptr`` is the
  cumulative ``seq_lens`` and ``kv_indices`` every token's slot from
  ``req_to_token`` (``_fill_kv_indptr_and_indices``); the KV buffer is the pool
  viewed as token slots ``(-1, 1, 576)`` with V its first 512 values, and
  ``page_size`` is passed as SGLang passes ``self.page_size``.  The split count
  follows ``TritonAttnBackend.get_num_kv_splits``: ``get_num_kv_splits_triton``
  on a GPU (SM count, ``max_kv_splits`` from ``_mla_decode_kv_splits_cap``), a
  static ``max_kv_splits`` fill where SGLang sees no device cores (CPU).
- target verify (topk = 1): ``extend_attention_fwd`` with ``kv_indptr`` /
  ``kv_indices`` covering only the committed prefix, and the draft tokens'
  latents passed as ``k_extend`` (``v_extend`` its first 512 values), read from
  the pool slots the drafts were written to; ``is_causal=True``, no custom mask.
- fp8: the kernels are handed q in the model dtype and cast it themselves
  (``Capabilities.fp8_q = "cast_in_kernel"``, see harness/judging/conventions.py), with
  ``k_scale = v_scale = layer.k_scale``; the drafts' ``k_extend`` is the
  model-precision ``k`` SGLang has in hand when it calls the kernel.

LSE: the decode kernel leaves one natural-log LSE per KV split (``attn_lse``,
pre-filled with -inf so a split that does not run adds nothing); the row's LSE
is their logsumexp, as SGLang's context-parallel merge does.  The extend kernel
writes ``lse_extend`` (natural log, -inf for a row with no key).

On CPU the kernels run under ``TRITON_INTERPRET=1`` in fp16; the interpreter
mishandles bf16 (tests/backends/test_triton_cpu.py).
"""

import math
import os

import torch

from .base import TRITON_DENSE_VARIANT, Backend, Capabilities, Feature
from .optional import LazyKernel, dist_version
from .sglang_calls import (
    draft_latents,
    mla_decode_max_kv_splits,
    model_q,
    next_power_of_2,
    scales,
    token_slots,
    token_view,
)

INSTALL = "make triton-cpu  (triton 3.7.1, sglang 0.5.23 --no-deps and the few wheels its kernels import)"


class TritonKernels(LazyKernel):
    """Shared by the SGLang Triton backends: import checks and where they can run."""

    modules = ("triton", "sglang.kernels.ops.attention.decode_attention",
               "sglang.kernels.ops.attention.extend_attention", "sglang.kernels.ops.attention.metadata")
    needs_cuda = False

    def device_reason(self) -> str | None:
        if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
            return None
        return "no CUDA device, and TRITON_INTERPRET=1 is not set for Triton's CPU interpreter"

    def reason_for(self, case, device) -> str | None:
        error = self.import_error()
        if error:
            return f"SGLang's Triton kernels do not import here: {error}"
        if device == "cuda" and not torch.cuda.is_available():
            return "no CUDA device here"
        if device == "cpu":
            if os.environ.get("TRITON_INTERPRET") != "1":
                return "Triton kernels run on CPU only under TRITON_INTERPRET=1 (not set)"
            if case.dtype != "fp16":
                return (f"{case.dtype} on CPU: Triton's interpreter mishandles bf16, and fp8 cases carry a "
                        "bf16 q; the CPU lane runs fp16")
        return None

    def package_info(self, api: str) -> dict:
        triton_version = getattr(self._loaded.get("triton"), "__version__", None) if self._load() else None
        return {"package": "sglang", "version": dist_version("sglang"), "api": api,
                "triton": triton_version, "lse": "natural log", "index_format": "token slots (req_to_token)"}


def extend_call_args(inputs):
    """The arguments ``forward_extend`` hands the extend/verify kernels for target-verify (topk = 1)."""
    q = model_q(inputs)
    b, s_q, h, d = q.shape
    d_v = inputs.d_v
    k_buffer = token_view(inputs.kv_pool)
    k_extend = draft_latents(inputs)
    qo_indptr = torch.arange(0, (b + 1) * s_q, s_q, dtype=torch.int32, device=q.device)
    kv_indptr, kv_indices = token_slots(inputs, inputs.seq_lens)
    mask_indptr = torch.zeros(b + 1, dtype=torch.int64, device=q.device)
    mask_indptr[1:] = torch.cumsum(s_q * (inputs.seq_lens.long() + s_q), 0)
    k_scale, v_scale = scales(inputs)
    o = torch.empty(b * s_q, h, d_v, dtype=q.dtype, device=q.device)
    args = (q.reshape(b * s_q, h, d), k_extend, k_extend[..., :d_v].contiguous(), o,
            k_buffer, k_buffer[..., :d_v], qo_indptr, kv_indptr, kv_indices,
            None, inputs.causal, mask_indptr, s_q, k_scale, v_scale)
    return args, o


class SGLangTritonBackend(TritonKernels, Backend):
    name = "sglang-triton"
    capabilities = Capabilities(
        modes=("decode", "verify"), dtypes=("bf16", "fp16", "fp8_e4m3", "fp8_e5m2"), devices=("cuda", "cpu"),
        kv_heads=(1,), d_qk=(576,), d_v=(512,), max_draft_tokens=8,
        non_causal=True,    # verify passes is_causal through; decode (s_q = 1) sees every key either way
        lse_base="e", empty_row_lse=-math.inf, has_lse=True,
        index_format="token_slots", fp8_q="cast_in_kernel", engine="sglang:triton",
        quoted_limits=(("layout", "`decode_attention_fwd(q, k_buffer, v_buffer, o, ...)` and "
                                  "`extend_attention_fwd(q_extend, k_extend, v_extend, o_extend, ...)` take q as one "
                                  "tensor"),),
    )

    features = frozenset({Feature.DENSE, Feature.GRAPH})
    compiled_per = TRITON_DENSE_VARIANT
    packages = (("sglang.kernels.ops.attention.decode_attention", "sglang"),)
    install = INSTALL

    device_cores = None    # None: as SGLang sees the device; a number exercises the GPU split policy anywhere

    def unsupported_reason(self, case, device):
        return self.reason_for(case, device) or super().unsupported_reason(case, device)

    def info(self):
        return {**self.package_info("decode_attention_fwd (decode), extend_attention_fwd (target verify)"),
                "num_kv_splits": "SGLang get_num_kv_splits (GPU) / static max_kv_splits (CPU)"}

    def run(self, inputs):
        return self.decode(inputs) if inputs.mode == "decode" else self.verify(inputs)

    def device_core_count(self, device: torch.device) -> int:
        """``get_device_core_count``: the SM count on CUDA, 0 elsewhere (or ``device_cores`` when set)."""
        if self.device_cores is not None:
            return self.device_cores
        return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 0

    def split_counts(self, seq_lens: torch.Tensor, num_heads: int, out: torch.Tensor | None = None,
                     uneven: torch.Tensor | None = None):
        """``(num_kv_splits, max_kv_splits, uneven_batch)`` as ``TritonAttnBackend.get_num_kv_splits``;
        into ``out`` / ``uneven`` when given (the CUDA-graph buffers), else into fresh tensors."""
        device = seq_lens.device
        b = seq_lens.shape[0]
        cores = self.device_core_count(device)
        max_splits = mla_decode_max_kv_splits(cores)
        num_kv_splits = torch.empty(b, dtype=torch.int32, device=device) if out is None else out
        if uneven is None:
            uneven = torch.zeros(1, dtype=torch.int32, device=device)
        if cores <= 0:                         # SGLang: device_core_count <= 0 -> static splits
            num_kv_splits.fill_(max_splits)
            return num_kv_splits, max_splits, uneven
        metadata = self._load()["sglang.kernels.ops.attention.metadata"]
        metadata.get_num_kv_splits_triton[(1,)](
            num_kv_splits, seq_lens, b, 1, num_heads, 1, max_splits, cores,
            MAX_NUM_SEQ=256 if b < 256 else next_power_of_2(b), uneven_batch_ptr=uneven)
        return num_kv_splits, max_splits, uneven

    def graph_session(self, max_bs, max_context_len, inputs):
        """``TritonAttnBackend``'s CUDA-graph path (triton_graph.py)."""
        from .triton_graph import TritonGraphSession
        return TritonGraphSession(self, max_bs, max_context_len, inputs)

    def decode(self, inputs):
        fwd = self._load()["sglang.kernels.ops.attention.decode_attention"].decode_attention_fwd
        q = model_q(inputs)
        b, _, h, d = q.shape
        d_v = inputs.d_v
        k_buffer = token_view(inputs.kv_pool)
        kv_indptr, kv_indices = token_slots(inputs, inputs.seq_lens)
        num_kv_splits, max_splits, uneven = self.split_counts(inputs.seq_lens.to(q.device), h)
        attn_logits = torch.empty(b, h, max_splits, d_v, dtype=torch.float32, device=q.device)
        attn_lse = torch.full((b, h, max_splits), -math.inf, dtype=torch.float32, device=q.device)
        o = torch.empty(b, h, d_v, dtype=q.dtype, device=q.device)
        k_scale, v_scale = scales(inputs)
        fwd(q.reshape(b, h, d), k_buffer, k_buffer[..., :d_v], o, kv_indptr, kv_indices, attn_logits, attn_lse,
            num_kv_splits, max_splits, inputs.softmax_scale, k_scale, v_scale,
            has_mla=True, page_size=inputs.kv_pool.shape[1], uneven_batch=uneven)
        lse = torch.logsumexp(attn_lse, dim=-1)                  # (b, h); all -inf -> -inf
        return o.reshape(b, 1, h, d_v), lse.reshape(b, h, 1)

    def verify(self, inputs):
        fwd = self._load()["sglang.kernels.ops.attention.extend_attention"].extend_attention_fwd
        args, o = extend_call_args(inputs)
        b, s_q, h, _ = inputs.q.shape
        lse = torch.empty(b * s_q, h, dtype=torch.float32, device=o.device)
        fwd(*args, sm_scale=inputs.softmax_scale, lse_extend=lse, page_size=inputs.kv_pool.shape[1])
        return o.reshape(b, s_q, h, -1), lse.reshape(b, s_q, h).transpose(1, 2)

"""SGLang 0.5.23's Triton DeepSeek V4 sparse decode (``flash_mla_sparse_decode_triton``, module
``sglang.kernels.ops.attention.flash_mla_sm120_triton``), a second opinion beside FlashMLA, called as SGLang
calls it: ``DeepseekV4AttnBackend`` on SM120 hands ``flash_mla_with_kvcache_sm120`` its kwargs, which with
``SGLANG_SM120_FLASHMLA_BACKEND=triton`` passes them on positionally (``flash_mla_sm120.py``):

- q ``(tokens, 1, heads, 512)`` bf16: every query token a row of its own (``q.unsqueeze(1)`` of a
  ``(tokens, heads, 512)`` q), so target verify is flattened and s_q is 1;
- each cache viewed ``(pages, page_size, 1, 584)`` over its page stride, indices ``(tokens, 1, topk)`` int32
  token slots (a negative entry is invalid), lengths ``(tokens,)`` int32, ``attn_sink`` ``(heads,)`` float32;
- ``head_dim_v`` and ``softmax_scale`` as given; the output is q's width (512) whatever ``head_dim_v`` says.

The kernel (``_tiled_sparse_decode_kernel``, one program per row and head) dequantizes a record in float32 as
``fp32(e4m3) * exp2(scale_byte - 127)``: exact for ue8m0 scales, the oracle's ``exact`` view.  It runs the
main cache and the extra cache as two passes, each out rounded to bf16, merges them by LSE, then applies the
sink, whose term the returned LSE keeps (``logaddexp(lse, sink)``); a row with no key has LSE -inf before the
sink (so the sink's value after it).

SGLang pads q heads to 64 (or the model's heads) only at attention TP > 1; each program here reads one head,
so padding cannot change a real head's numbers and the call takes the model's heads.

On CPU it runs under ``TRITON_INTERPRET=1``: the interpreter has no benchmarker for the kernel's
``triton.autotune``, so each config is given the same time and the autotuner keeps its first, SGLang's
``BLOCK_T=16`` (on CUDA it benchmarks its three as usual).
"""

import math
import os
from contextlib import contextmanager

import torch

from ..errors import Unsupported
from .base import TRITON_SPARSE_VARIANT, Backend, Capabilities, Feature, SparseSupport
from .sglang_triton import INSTALL, TritonKernels

MODULE = "sglang.kernels.ops.attention.flash_mla_sm120_triton"
ALIGNED_64 = ('"last dimension is not aligned to 64": SGLang asserts it of both index widths before the call '
              "(deepseek_v4_backend.py)")
# s_q > 1 is read as one row of s_q * topk entries with q's first token only: no assert says so, its shapes do
ONE_QUERY_TOKEN = ('s_q must be 1: the kernel takes "q: [B, 1, H, D]" and runs "q3 = q.squeeze(1)" '
                   "(flash_mla_sm120_triton.py, _run_triton_sparse_decode); SGLang flattens verify drafts into "
                   "rows (deepseek_v4_backend.py: q.unsqueeze(1))")


class SGLangV4TritonBackend(TritonKernels, Backend):
    name = "sglang-v4-triton"
    # the dense interface's capabilities: this backend runs the sparse scenario only (unsupported_reason)
    capabilities = Capabilities(
        dtypes=("bf16",), devices=("cuda", "cpu"), d_qk=(512,), d_v=(512,), lse_base="e",
        empty_row_lse=-math.inf, index_format="token_slots", engine="sglang deepseek_v4_backend sm120 triton",
        sparse=SparseSupport(
            kv_formats=("v4",), kv_dequant="exact", devices=("cuda", "cpu"),
            # SGLang asserts both widths a multiple of 64 before the call (the kernel takes any width)
            topk_multiple=64, extra_topk_multiple=64, sink=True, lse_base="e",
            empty_row_lse=-math.inf, lse_includes_sink=True, index_format="token_slots",
            engine="sglang 0.5.23 deepseek_v4_backend sm120 (flash_mla_sparse_decode_triton)",
            extra_pairs=(("v4", "v4"),), length_formats=("v4",),
            refusals=(("topk", ALIGNED_64), ("extra_topk", ALIGNED_64),
                      ("extra_cache", "the kernel reads V4's 584-byte records only (flash_mla_sm120_triton.py: "
                                      "_TOKEN_DATA_STRIDE = 576, _SCALE_STRIDE = 8)"))))
    features = frozenset({Feature.SPARSE})      # no run(): unsupported_reason refuses every dense case
    compiled_per = TRITON_SPARSE_VARIANT
    modules = ("triton", MODULE)
    packages = ((MODULE, "sglang"),)
    install = INSTALL

    def unsupported_reason(self, case, device):
        if case.scenario != "sparse":
            return f"{self.name} is SGLang's Triton V4 sparse decode: it runs the sparse scenario only"
        if case.mode == "verify" and case.verify_rows == "per_request" and case.draft_tokens > 1:
            return f"{case.draft_tokens} query tokens per kernel row: {ONE_QUERY_TOKEN}"
        reason = self.capabilities.sparse.reason_unsupported(case, device)
        if reason:
            return reason
        if self.import_error():
            return f"SGLang's Triton V4 sparse decode does not import here: {self.import_error()}"
        if device == "cuda" and not torch.cuda.is_available():
            return "no CUDA device here"
        if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            return "Triton kernels run on CPU only under TRITON_INTERPRET=1 (not set)"
        return None

    def info(self):
        return self.package_info("flash_mla_sparse_decode_triton (as flash_mla_with_kvcache_sm120 calls it)")

    def run_sparse(self, inputs):
        if inputs.q.shape[1] != 1:
            raise Unsupported(f"{inputs.q.shape[1]} query tokens per kernel row: {ONE_QUERY_TOKEN}")
        module = self._load()[MODULE]
        with _first_config_under_interpreter(module._tiled_sparse_decode_kernel):
            out, lse = module.flash_mla_sparse_decode_triton(
                inputs.q, inputs.kv_pool, inputs.indices, inputs.topk_length, inputs.attn_sink, inputs.d_v,
                inputs.softmax_scale, inputs.extra_kv_pool, inputs.extra_indices, inputs.extra_topk_length)
        return out, lse                                     # (n, 1, heads, 512) bf16, (n, heads, 1) float32


@contextmanager
def _first_config_under_interpreter(autotuner):
    """Under ``TRITON_INTERPRET=1`` there is no driver to time configs with ("0 active drivers"): every
    config gets the same time, so the autotuner keeps its first.  Elsewhere nothing changes."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        yield
        return
    held = vars(autotuner).get("do_bench")
    autotuner.do_bench = lambda kernel_call, quantiles: [0.0] * len(quantiles)
    try:
        yield
    finally:
        if held is None:
            del autotuner.do_bench
        else:
            autotuner.do_bench = held

"""FlagGems' Triton ``flash_mla`` (flag-gems 5.0.2), decode only.

    from flag_gems.fused import flash_mla      # the name is the function
    out = flash_mla(q, block_table, blocked_k, max_seqlen_pad, block_size,
                    b, s_q, cache_seqlens, h_q, h_kv, d, dv, causal)

It takes FlashMLA-style inputs (page table, ``(pages, page_size, 1, 576)`` cache)
but has no softmax-scale argument: it fixes ``sm_scale = 1 / sqrt(d)``.  It has
no LSE and no fp8, asserts ``causal``, and launches one program per request and
head block, so only ``s_q = 1`` is meaningful.  Importing it needs a CUDA device
(and SQLAlchemy).
"""

import math

import torch

from .base import Backend, Capabilities
from .optional import LazyKernel, dist_version

SIGNATURE = ("flash_mla(q, block_table, blocked_k, max_seqlen_pad, block_size, b, s_q, cache_seqlens, "
             "h_q, h_kv, d, dv, causal)")


class FlagGemsMLABackend(LazyKernel, Backend):
    name = "flaggems"
    modules = ("flag_gems.fused",)
    capabilities = Capabilities(
        modes=("decode",), dtypes=("bf16", "fp16"), devices=("cuda",),
        kv_heads=(1,), d_qk=(576,), d_v=(512,), max_draft_tokens=1, non_causal=False,
        lse_base="e", empty_row_lse=-math.inf, has_lse=False,
        index_format="page_table", fp8_q="quantized_k_scale", engine="flaggems:flash_mla",
    )

    def unsupported_reason(self, case, device):
        if device != "cuda" or not torch.cuda.is_available():
            return "FlagGems' flash_mla needs a CUDA device (its import does)" + (
                "" if torch.cuda.is_available() else " (none here)")
        if self.import_error():
            return f"flag_gems does not import here: {self.import_error()}"
        return self.scale_reason(case) or super().unsupported_reason(case, device)

    @staticmethod
    def scale_reason(case) -> str | None:
        """The kernel has no softmax-scale argument: any other scale than its fixed one is out."""
        fixed = 1 / math.sqrt(case.d_qk)
        if math.isclose(case.softmax_scale, fixed, rel_tol=1e-12):
            return None
        return (f"softmax_scale {case.softmax_scale:.6g}: FlagGems' {SIGNATURE} has no scale argument "
                f"and fixes 1/sqrt(d) = {fixed:.6g}")

    def info(self):
        return {"package": "flag-gems", "version": dist_version("flag-gems"), "api": SIGNATURE,
                "softmax_scale": "fixed 1/sqrt(d)", "lse": None}

    def run(self, inputs):
        flash_mla = self._load()["flag_gems.fused"].flash_mla
        q, pool, table = inputs.q, inputs.kv_pool, inputs.block_table
        b, s_q, h, d = q.shape
        out = flash_mla(q, table, pool, table.shape[1] * pool.shape[1], pool.shape[1], b, s_q,
                        inputs.cache_seqlens, h, pool.shape[2], d, inputs.d_v, True)
        return out.reshape(b, s_q, h, inputs.d_v), None

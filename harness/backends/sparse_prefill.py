"""Second opinions on sparse decode: the sparse *prefill* kernels, which read a flat bf16 KV.

    out, max_logits, lse = flash_mla_sparse_fwd(q[s_q, h_q, d], kv[s_kv, 1, d], indices[s_q, 1, topk],
                                                sm_scale, d_v, attn_sink)

- ``flashmla-sparse-prefill``: FlashMLA's (``flash_mla`` from ``sgl-flash-mla``, ``use_legacy=True``, the
  SM90 kernel); SGLang calls it for a bf16 cache (``_forward_flashmla_sparse`` in ``dsa_backend.py``),
  heads zero-padded to 64 or 128.
- ``flaggems-sparse``: FlagGems' Triton ``flag_gems.fused.flash_mla_sparse_fwd`` (flag-gems 5.0.2), the
  same call.

Each query row of the decode batch is one of the prefill's ``s_q`` query tokens, and its indices are the
same slots: the KV is the whole pool, one row per slot, dequantized as FlashMLA's SM90 decode kernel
dequantizes it (``bf16(e4m3 * bf16(scale))``, ``sparse_cache.dequantize``), so the oracle's view is
``bf16_product``.  An unwritten (poisoned) record is a NaN row of that KV, read by no valid index.
"""

import dataclasses

import torch

from ..building.sparse_cache import dequantize_pool
from .base import TRITON_SPARSE_VARIANT, Backend, Capabilities, Feature, SparseSupport
from .flaggems_mla import INSTALL as FLAG_GEMS_INSTALL
from .flashmla import INSTALL as FLASH_MLA_INSTALL
from .optional import LazyKernel, dist_version

HEAD_PADDING = (64, 128)
CALL = "flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v, attn_sink)"


def bf16_kv(inputs) -> torch.Tensor:
    """The pool as a flat bf16 KV ``(slots, 1, d_qk)``, dequantized as the SM90 decode kernel does."""
    return dequantize_pool(inputs.kv_pool, inputs.fmt, "bf16_product", torch.bfloat16).unsqueeze(1)


class SparsePrefillForm(LazyKernel, Backend):
    """The call both prefill kernels take, with SGLang's head padding around it.  Each kernel's capabilities
    are these dense ones with its own sparse section."""

    capabilities = Capabilities(dtypes=("bf16",), devices=("cuda",), d_qk=(576, 512), d_v=(512,))

    def kernel(self):
        raise NotImplementedError

    def unsupported_reason(self, case, device):
        if case.scenario != "sparse":
            return f"{self.name} is a sparse kernel: it runs the sparse scenario only"
        if device != "cuda" or not torch.cuda.is_available():
            return f"{self.name} needs a CUDA device" + ("" if torch.cuda.is_available() else " (none here)")
        if self.import_error():
            return f"{self.modules[0]} does not import here: {self.import_error()}"
        return None

    def run_sparse(self, inputs):
        n, s_q, heads, d = inputs.q.shape
        padded = self.capabilities.sparse.padded_heads(heads)
        q = inputs.q.new_zeros(n * s_q, padded, d)
        q[:, :heads] = inputs.q.reshape(n * s_q, heads, d)
        sink = inputs.attn_sink
        if sink is not None and padded != heads:          # the padded heads' outputs are dropped
            sink = torch.cat([sink, sink.new_full((padded - heads,), float("-inf"))])
        indices = inputs.indices.reshape(n * s_q, 1, -1)
        out, _, lse = self.kernel()(q, bf16_kv(inputs), indices, inputs.softmax_scale, inputs.d_v, sink)
        out = out[:, :heads].reshape(n, s_q, heads, inputs.d_v)
        return out, lse[:, :heads].reshape(n, s_q, heads).transpose(1, 2)


class FlashMLASparsePrefillBackend(SparsePrefillForm):
    name = "flashmla-sparse-prefill"
    modules = ("flash_mla",)
    features = frozenset({Feature.SPARSE})      # no run(): unsupported_reason refuses every dense case
    packages = (("flash_mla", "sgl-flash-mla"),)
    install = FLASH_MLA_INSTALL
    capabilities = dataclasses.replace(SparsePrefillForm.capabilities, sparse=SparseSupport(
        kv_formats=("v32", "v4"), kv_dequant="bf16_product", devices=("cuda",), head_padding=HEAD_PADDING,
        topk_multiple=128, sink=True, lse_base="e", empty_row_lse=float("inf"),
        refusals=(("topk", '"KU_ASSERT(params.topk % (2*B_TOPK) == 0)" with B_TOPK = 64 (FlashMLA 9241ae3, '
                           'csrc/sm90/prefill/sparse/phase1.cuh, config.h)'),),
        engine="sglang dsa_backend flashmla_sparse (flash_mla.flash_mla_sparse_fwd, use_legacy=True) over the "
               "records dequantized as the SM90 decode kernel does"))

    def kernel(self):
        fwd = self._load()["flash_mla"].flash_mla_sparse_fwd
        return lambda *args: fwd(*args, use_legacy=True)

    def info(self):
        return {"package": "flash_mla", "version": dist_version("sgl-flash-mla"), "api": CALL + ", use_legacy=True"}


class FlagGemsSparseBackend(SparsePrefillForm):
    name = "flaggems-sparse"
    modules = ("flag_gems.fused",)
    features = frozenset({Feature.SPARSE})
    compiled_per = TRITON_SPARSE_VARIANT
    packages = (("flag_gems.fused", "flag-gems"),)
    install = FLAG_GEMS_INSTALL
    capabilities = dataclasses.replace(SparsePrefillForm.capabilities, sparse=SparseSupport(
        kv_formats=("v32", "v4"), kv_dequant="bf16_product", devices=("cuda",), head_padding=HEAD_PADDING,
        sink=True, lse_base="e", empty_row_lse=float("inf"), layouts=("contiguous", "offset"),
        refusals=(("layout", '"assert q.is_contiguous() and kv.is_contiguous() and indices.is_contiguous()" '
                             "(flag-gems 5.0.2, flag_gems/fused/flashmla_sparse.py)"),),
        engine="flag_gems.fused.flash_mla_sparse_fwd (Triton) over the records dequantized as FlashMLA's SM90 "
               "decode kernel does"))

    def kernel(self):
        return self._load()["flag_gems.fused"].flash_mla_sparse_fwd

    def info(self):
        return {"package": "flag-gems", "version": dist_version("flag-gems"), "api": CALL}

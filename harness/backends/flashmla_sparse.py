"""FlashMLA's sparse decode (``flash_mla`` from ``sgl-flash-mla``), called as SGLang 0.5.23's DSA backend
calls it for an fp8 cache on Hopper (``flashmla_kv`` in ``dsa_backend.py``, through sglang's
``flash_mla_interface.py``, which reaches the legacy SM90 kernel ``sparse_decode_fwd``):

- q ``(n, 1, h, 576)`` bf16 with heads zero-padded to 64 or 128, sliced back after the call;
- the cache viewed ``(-1, 64, 1, 656)`` uint8; indices ``(n, 1, topk)`` int32 slots, -1 invalid
  (V4: ``(-1, 64, 1, 584)`` with FlashMLA's tests' page stride; vLLM's verify shape: ``(n, 1 + k, topk)``);
- an empty ``(n, 0)`` block table, ``cache_seqlens = min(seq_len, topk)``;
- metadata from ``get_mla_decoding_metadata(cache_seqlens, s_q * h, 1, h, is_fp8_kvcache=True,
  topk=topk, use_legacy=True)`` put on a fresh ``FlashMLASchedMeta``;
- ``causal=False``, ``is_fp8_kvcache=True``, ``use_legacy=True``; no sink from SGLang (FlashMLA's
  own tests pass one, so a case with a sink passes it too).

DeepSeek V4's compressed layers (an extra cache, per-row ``topk_length`` / ``extra_topk_length``) are called
as FlashMLA's own test calls them (``tests/lib.py``, ``run_flash_mla_decode``): no block table or
cache_seqlens, an empty ``FlashMLASchedMeta`` the kernel fills on its first call, ``extra_k_cache``,
``extra_indices_in_kvcache`` and both lengths, with ``use_legacy=True`` (the wheel's SM90 build).

The kernel dequantizes a record as ``bf16(e4m3 * bf16(scale))`` (the wheel's SM90 source, noted in
docs/sparse.md): the oracle's ``bf16_product`` view.
"""

import importlib

import torch

from .base import Backend, Capabilities, Feature, SparseSupport
from .flashmla import INSTALL
from .optional import dist_version

HEAD_PADDING = (64, 128)


def _import_flash_mla():
    try:
        return importlib.import_module("flash_mla"), None
    except Exception as e:     # a wheel built for another torch fails on import
        return None, f"flash_mla: {type(e).__name__}: {str(e).splitlines()[0][:160]}"


class FlashMLASparseBackend(Backend):
    name = "flashmla-sparse"
    # the dense interface's capabilities: this backend runs the sparse scenario only (unsupported_reason)
    capabilities = Capabilities(
        dtypes=("bf16",), devices=("cuda",), d_qk=(576, 512), d_v=(512,), lse_base="e",
        index_format="token_slots", engine="sglang dsa_backend flashmla_kv", sparse=SparseSupport(
            # V4's 584-byte records: the wheel tells the formats apart by bytes per token (its docstring: "The
            # format is detected from `bytes_per_token`"); FlashMLA's own V4 cases ran with use_legacy=True
            kv_formats=("v32", "v4"), kv_dequant="bf16_product", devices=("cuda",), head_padding=HEAD_PADDING,
            topk_multiple=64, sink=True, lse_base="e", empty_row_lse=float("inf"), index_format="token_slots",
            engine="sglang 0.5.23 dsa_backend flashmla_kv (flash_mla.flash_mla_with_kvcache, use_legacy=True)",
            # DeepSeek V4's second cache and per-row lengths are MODEL1 (d_qk 512) features; its docstring:
            # extra_k_cache's "format requirements are the same as k_cache"
            extra_pairs=(("v4", "v4"),), extra_topk_multiple=64, length_formats=("v4",),
            refusals=(("topk", '"On SM90, topk must be a multiple of 64" (the sgl-flash-mla 1.0.0 wheel)'),
                      ("extra_topk", '"extra_topk mod 64 must be 0" (the sgl-flash-mla 1.0.0 wheel\'s legacy build)'),
                      ("extra_cache", '"V3.2 does not support extra KV cache" (FlashMLA 9241ae3, '
                                      'csrc/sm90/decode/sparse_fp8/splitkv_mla.cuh)'),
                      ("topk_length", '"V3.2 does not support dynamic topk length" (FlashMLA 9241ae3, '
                                      'csrc/sm90/decode/sparse_fp8/splitkv_mla.cuh)'))))
    features = frozenset({Feature.SPARSE})      # no run(): unsupported_reason refuses every dense case
    packages = (("flash_mla", "sgl-flash-mla"),)
    install = INSTALL

    def __init__(self):
        self.m, self.import_error = _import_flash_mla()

    def available(self) -> bool:
        return self.m is not None and torch.cuda.is_available()

    def availability(self) -> str:
        if not torch.cuda.is_available():
            return "unavailable: no CUDA device"
        if self.m is None:
            return f"unavailable: {self.import_error}"
        return "available: flash_mla (sparse decode, use_legacy=True)"

    def unsupported_reason(self, case, device):
        if case.scenario != "sparse":
            return "flashmla-sparse is FlashMLA's sparse decode: it runs the sparse scenario only"
        if not torch.cuda.is_available() or device != "cuda":
            return "FlashMLA needs a CUDA device" + ("" if torch.cuda.is_available() else " (none here)")
        if self.m is None:
            return f"flash_mla does not import: {self.import_error}"
        major, minor = torch.cuda.get_device_capability()
        if major != 9:
            return f"the legacy sparse decode kernel is built for SM90; this GPU is SM{major}{minor}"
        return None

    def info(self):
        return {"package": "flash_mla" if self.m else None, "version": dist_version("sgl-flash-mla"),
                "api": "flash_mla_with_kvcache(indices=..., use_legacy=True)"}

    def run_sparse(self, inputs):
        n, s_q, heads, d = inputs.q.shape
        padded = self.capabilities.sparse.padded_heads(heads)
        q = inputs.q
        if padded != heads:                       # SGLang: q_all.new_zeros(...) then copy the real heads
            q = inputs.q.new_zeros(n, s_q, padded, d)
            q[:, :, :heads] = inputs.q
        sink = inputs.attn_sink
        if sink is not None and padded != heads:  # padded heads' outputs are dropped: -inf is no sink
            sink = torch.cat([sink, sink.new_full((padded - heads,), float("-inf"))])
        if _v4_call(inputs):
            out, lse = self._run_v4(q, inputs, sink)
        else:
            tile, splits = self.m.get_mla_decoding_metadata(inputs.cache_seqlens, s_q * padded, 1, padded,
                                                            is_fp8_kvcache=True, topk=inputs.topk, use_legacy=True)
            sched, _ = self.m.get_mla_metadata()
            sched.tile_scheduler_metadata, sched.num_splits = tile, splits
            block_table = torch.empty((n, 0), dtype=torch.int32, device=q.device)
            out, lse = self.m.flash_mla_with_kvcache(
                q, inputs.kv_pool, block_table, inputs.cache_seqlens, inputs.d_v, sched, None,
                softmax_scale=inputs.softmax_scale, causal=False, is_fp8_kvcache=True, indices=inputs.indices,
                attn_sink=sink, use_legacy=True)
        return out[:, :, :heads], lse[:, :heads, :]

    def _run_v4(self, q, inputs, sink):
        """DeepSeek V4's call, as FlashMLA's own test makes it (``lib.run_flash_mla_decode``) and the engines
        do: no block table or cache_seqlens, a fresh schedule the kernel fills from the lengths on its
        first call, the extra cache and both lengths."""
        sched, _ = self.m.get_mla_metadata()
        return self.m.flash_mla_with_kvcache(
            q, inputs.kv_pool, None, None, inputs.d_v, sched, None, softmax_scale=inputs.softmax_scale,
            causal=False, is_fp8_kvcache=True, indices=inputs.indices, attn_sink=sink,
            extra_k_cache=inputs.extra_kv_pool, extra_indices_in_kvcache=inputs.extra_indices,
            topk_length=inputs.topk_length, extra_topk_length=inputs.extra_topk_length, use_legacy=True)


def _v4_call(inputs) -> bool:
    """Whether the call carries V4's second cache or per-row lengths."""
    return inputs.extra_kv_pool is not None or inputs.topk_length is not None

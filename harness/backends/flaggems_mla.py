"""FlagGems' Triton ``flash_mla`` (flag-gems 5.0.2), decode only.

    from flag_gems.fused import flash_mla      # the name is the function
    out = flash_mla(q, block_table, blocked_k, max_seqlen_pad, block_size,
                    b, s_q, cache_seqlens, h_q, h_kv, d, dv, causal)

It takes FlashMLA-style inputs (page table, ``(pages, page_size, 1, 576)`` cache)
but has no softmax-scale argument: it computes ``sm_scale = 1 / math.sqrt(d)``
with ``d`` from ``q.shape`` (flag_gems/fused/flash_mla.py, 5.0.2).  That is
declared as data (``fixed_softmax_scale``): every case runs, at that scale, and
the oracle computes at it (harness/judging/conventions.py).  It has no LSE, no descale
arguments (so no fp8), asserts ``causal``, and launches one program per request
and head block, so only ``s_q = 1`` is computed (a verify of one draft token runs:
its one row sees every key, as a decode row does); those stay ``unsupported``,
quoting its source (``SOURCE``).  Its graph cases run through ``graph_session``
(flaggems_graph.py), and its sparse kernel is the ``flaggems-sparse`` backend
(``sparse_backend``; docs/kernel-backends.md, "FlagGems coverage").  Importing it
needs a CUDA device (and SQLAlchemy).
"""

import math

import torch

from .base import TRITON_DENSE_VARIANT, Backend, Capabilities, Feature
from .optional import LazyKernel, dist_version

SIGNATURE = ("flash_mla(q, block_table, blocked_k, max_seqlen_pad, block_size, b, s_q, cache_seqlens, "
             "h_q, h_kv, d, dv, causal)")
# Lines of flag_gems/fused/flash_mla.py (5.0.2) its limits are quoted from; tests/backends/test_flaggems_coverage.py
# finds each in the installed source (whitespace aside) where flag_gems is installed.
SOURCE = {
    "shape": "batch_size, s_q, head_num, d = list(q.shape)",
    "grid": "grid = (triton.cdiv(head_num, BLOCK_H), batch_size,)",
    "scale": "sm_scale = 1 / math.sqrt(d)",
    "causal": 'assert causal, "causal False not supported"',
    "one_kv_head": "blocked_k = blocked_k.view([-1, d]).contiguous()",
}
INSTALL = "pip install --no-deps flag-gems==5.0.2"
ONE_ROW = (f"`{SOURCE['grid']}` after `{SOURCE['shape']}`: one program per request reads one query row")


class FlagGemsMLABackend(LazyKernel, Backend):
    name = "flaggems"
    modules = ("flag_gems.fused",)
    capabilities = Capabilities(
        modes=("decode", "verify"), dtypes=("bf16", "fp16"), devices=("cuda",),
        kv_heads=(1,), d_qk=(576,), d_v=(512,), max_draft_tokens=1, non_causal=False,
        lse_base="e", empty_row_lse=-math.inf, has_lse=False,
        index_format="page_table", fp8_q="quantized_k_scale", engine="flaggems:flash_mla",
        fixed_softmax_scale="1/sqrt(d_qk)",          # its source: sm_scale = 1 / math.sqrt(d), d = q.shape[-1]
        quoted_limits=(
            ("s_q", f"{ONE_ROW}, so a verify's later draft tokens are not computed"),
            ("dtype", f"{SIGNATURE} has no descale (k_scale) argument, so an fp8 cache cannot be read"),
            ("non_causal", f'it asserts causal ("causal False not supported"): `{SOURCE["causal"]}`'),
            ("kv_heads", f"`{SOURCE['one_kv_head']}` reads the cache as one KV head"),
            ("layout", f"`{SIGNATURE}` takes q as one tensor"),
        ),
    )
    sparse_backend = "flaggems-sparse"     # flash_mla_sparse_fwd, sparse_prefill.py
    features = frozenset({Feature.DENSE, Feature.GRAPH})
    compiled_per = TRITON_DENSE_VARIANT
    packages = (("flag_gems.fused", "flag-gems"),)
    install = INSTALL

    def unsupported_reason(self, case, device):
        if device != "cuda" or not torch.cuda.is_available():
            return "FlagGems' flash_mla needs a CUDA device (its import does)" + (
                "" if torch.cuda.is_available() else " (none here)")
        if self.import_error():
            return f"flag_gems does not import here: {self.import_error()}"
        return super().unsupported_reason(case, device)

    def info(self):
        return {"package": "flag-gems", "version": dist_version("flag-gems"), "api": SIGNATURE,
                "softmax_scale": "fixed 1/sqrt(d_qk)", "lse": None}

    def flash_mla(self):
        return self._load()["flag_gems.fused"].flash_mla

    def graph_session(self, max_bs, max_context_len, inputs):
        from .flaggems_graph import FlagGemsGraphSession
        return FlagGemsGraphSession(self, max_bs, max_context_len, inputs)

    def run(self, inputs):
        flash_mla = self.flash_mla()
        q, pool, table = inputs.q, inputs.kv_pool, inputs.block_table
        b, s_q, h, d = q.shape
        out = flash_mla(q, table, pool, table.shape[1] * pool.shape[1], pool.shape[1], b, s_q,
                        inputs.cache_seqlens, h, pool.shape[2], d, inputs.d_v, True)
        return out.reshape(b, s_q, h, inputs.d_v), None

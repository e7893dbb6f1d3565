"""SGLang 0.5.23's FP8 sparse prefill on SM90 (``sparse_mla_q8kv8_prefill_fwd``, module
``sglang.kernels.ops.attention.sparse_mla_q8kv8_prefill_sm90``), the DeepSeek V4 attention SGLang runs with
``flashmla_sparse_q8``, a second opinion beside FlashMLA.  Called as ``DeepseekV4AttnBackend.
_forward_prefill_sparse_q8kv8`` calls it (``deepseek_v4_backend.py``), each decode query row one of its
``s_q`` tokens:

- q cast to e4m3 with no scale (``cast_q_fp8_for_q8kv8_prefill``: a plain ``copy_``), heads zero-padded to
  64 or 128, the sink padded with zeros, both scales 1;
- the KV a flat e4m3 workspace ``(rows, 1, 512)``: the extra pool's records, then the main pool's, each
  dequantized (``e4m3 * 2^(byte - 127)`` in float32) and cast back to e4m3 saturating, as
  ``gather_dequant_requant_fp8_paged_dsv4`` writes the rows SGLang lists, then one row of zeros;
- per query row one index row (SGLang's ``combined_indices``): its counted extra entries, then its counted
  main entries, valid ones first, then the zero row's index, the width ``extra_topk + topk`` rounded up to
  128; ``topk_length`` the valid count (``combined_lens``).  SGLang's indexer writes -1 only past a row's
  valid count, so nothing valid is dropped by putting the valid entries first.

The kernel reads q and K as e4m3, so the oracle's view is ``e4m3`` (``sparse_oracle``).  It casts P to e4m3
before P.V while its denominator sums P in float32 (``kernel.cuh``): a weight moves by up to 2^-4 of itself,
the fp8 error model's (``tolerances``: ``fp8_e4m3``), so its rows are judged under that model.  Its LSE is
natural, leaves the sink out, and is +inf for a row with no key, out zeros.
"""

import importlib.util
import math

import torch

from reference.sparse import counted

from ..building.sparse_cache import as_e4m3, dequantize_pool
from .base import Backend, Capabilities, Feature, SparseSupport
from .optional import LazyKernel, dist_version

MODULE = "sglang.kernels.ops.attention.sparse_mla_q8kv8_prefill_sm90"
CALL = ("sparse_mla_q8kv8_prefill_fwd(q, kv, indices, sm_scale, q_scale, kv_scale, d_v, attn_sink, "
        "topk_length)")
WIDTH = 128             # "topk width must be a positive multiple of 128" (its Python checks)
V4_ONLY = ('"assert token_to_kv_pool.get_swa_key_layout() is KVLayout.V4": the Q8KV8 gather reads the 584-byte '
           "V4 layout only (deepseek_v4_backend.py, _forward_prefill_sparse_q8kv8)")
HEAD_LIMIT = ('"DeepSeek-V4 Q8KV8 sparse prefill supports at most 128 local query heads" '
              "(sparse_mla_q8kv8_prefill_sm90.py, q8kv8_padded_num_heads)")


class SGLangQ8KV8Backend(LazyKernel, Backend):
    name = "sglang-q8kv8"
    # the dense interface's capabilities: this backend runs the sparse scenario only (unsupported_reason)
    capabilities = Capabilities(
        dtypes=("bf16",), devices=("cuda",), d_qk=(512,), d_v=(512,), lse_base="e",
        engine="sglang deepseek_v4_backend flashmla_sparse_q8",
        sparse=SparseSupport(
            kv_formats=("v4",), kv_dequant="e4m3", tolerance="fp8_e4m3", devices=("cuda",),
            head_padding=(64, 128), sink=True, lse_base="e", empty_row_lse=math.inf,
            extra_pairs=(("v4", "v4"),), length_formats=("v4",),
            refusals=(("extra_cache", V4_ONLY), ("heads", HEAD_LIMIT)),
            engine="sglang 0.5.23 deepseek_v4_backend _forward_prefill_sparse_q8kv8 "
                   "(sparse_mla_q8kv8_prefill_fwd over the records gathered and cast to e4m3)"))
    features = frozenset({Feature.SPARSE})      # no run(): unsupported_reason refuses every dense case
    compiled_per = ("scenario", "kv_format")    # one tvm-ffi module, built on the first call
    first_build_s = 94.3        # that build in make verify on a fresh H200 (docs/gpu-runs.md)
    modules = (MODULE,)
    packages = ((MODULE, "sglang"),)
    install = ("pip install --no-deps sglang==0.5.23 flashinfer-python==0.7.2.post1 apache-tvm-ffi==0.1.11 "
               "(an SM90 box with nvcc: its JIT builds with FlashInfer's CUTLASS headers)")

    def unsupported_reason(self, case, device):
        if case.scenario != "sparse":
            return f"{self.name} is SGLang's FP8 sparse prefill: it runs the sparse scenario only"
        if case.kv_format != "v4":
            return f"kv_format {case.kv_format}: {V4_ONLY}"
        reason = self.capabilities.sparse.reason_unsupported(case, device)
        if reason:
            return reason
        if not torch.cuda.is_available():
            return "no CUDA device here"
        if torch.cuda.get_device_capability() != (9, 0):
            return ("SM90 only: its device code is built for sm_90a and traps elsewhere (kernel.cuh), and "
                    "SGLang refuses it off SM90 (\"flashmla_sparse_q8 prefill requires SM90 CUDA GPUs\")")
        if importlib.util.find_spec("flashinfer") is None:
            return ("its JIT includes the CUTLASS headers of flashinfer-python (sglang jit_kernel deps.py: "
                    "\"Cannot find CUTLASS headers required for JIT compilation\"), not installed here")
        if self.import_error():
            return f"SGLang's FP8 sparse prefill does not import here: {self.import_error()}"
        return None

    def info(self):
        return {"package": "sglang", "version": dist_version("sglang"), "api": CALL}

    def run_sparse(self, inputs):
        n, s_q, heads, d = inputs.q.shape
        padded = self.capabilities.sparse.padded_heads(heads)
        q = torch.zeros(n * s_q, padded, d, dtype=torch.float8_e4m3fn, device=inputs.device)
        q[:, :heads].copy_(inputs.q.reshape(n * s_q, heads, d))
        sink = inputs.attn_sink
        if sink is not None:
            sink = torch.cat([sink, sink.new_zeros(padded - heads)])     # SGLang's zeros; their rows dropped
        kv, extra_rows = workspace(inputs)
        indices, lengths = combined_indices(inputs, extra_rows, sentinel=kv.shape[0] - 1)
        one = torch.ones((), dtype=torch.float32, device=inputs.device)
        fwd = self._load()[MODULE].sparse_mla_q8kv8_prefill_fwd
        out, _, lse = fwd(q, kv, indices.unsqueeze(1), inputs.softmax_scale, one, one, d_v=inputs.d_v,
                          attn_sink=sink, topk_length=lengths)
        out = out[:, :heads].reshape(n, s_q, heads, inputs.d_v)
        return out, lse[:, :heads].reshape(n, s_q, heads).transpose(1, 2)


def workspace(inputs) -> tuple[torch.Tensor, int]:
    """The flat e4m3 KV ``(rows, 1, d_qk)``: every record of the extra pool, then of the main pool,
    dequantized and cast to e4m3, then a row of zeros; and how many rows the extra pool took."""
    main = as_e4m3(dequantize_pool(inputs.kv_pool, inputs.fmt, "exact", torch.float32))
    extra = main[:0] if inputs.extra_kv_pool is None else \
        as_e4m3(dequantize_pool(inputs.extra_kv_pool, inputs.extra_fmt, "exact", torch.float32))
    zero = torch.zeros_like(main[:1])
    return torch.cat([extra, main, zero]).unsqueeze(1), extra.shape[0]


def combined_indices(inputs, extra_rows: int, sentinel: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per flattened query row its workspace rows (int32, the width ``extra_topk + topk`` rounded up to
    ``WIDTH``): the counted extra entries, then the counted main entries moved past the extra rows, valid
    ones first in their order, ``sentinel`` after; and the valid count (int32)."""
    n, s_q = inputs.q.shape[:2]
    parts = []
    if inputs.extra_kv_pool is not None:
        parts.append(counted(inputs.extra_indices, inputs.extra_topk_length).reshape(n * s_q, -1).long())
    main = counted(inputs.indices, inputs.topk_length).reshape(n * s_q, -1).long()
    parts.append(torch.where(main >= 0, main + extra_rows, main))
    entries = torch.cat(parts, dim=1)
    valid = entries >= 0
    entries = entries.gather(1, torch.argsort((~valid).to(torch.int8), dim=1, stable=True))
    width = -(-entries.shape[1] // WIDTH) * WIDTH
    rows = entries.new_full((n * s_q, width), sentinel)
    rows[:, :entries.shape[1]] = torch.where(entries >= 0, entries, sentinel)
    return rows.int(), valid.sum(1, dtype=torch.int32)

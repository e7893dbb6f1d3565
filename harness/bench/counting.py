"""What a paged MLA call does and moves, counted the way FlashMLA's benchmark counts it.

- ``FLOPs = b * h_q * s_q * 2 * L_mean * (d_qk + d_v)``: two matmuls per query row over the
  keys it attends (QK^T over d_qk, PV over d_v), L_mean the mean of the kernel's
  ``cache_seqlens`` (verify's lengths include the drafts).  The causal mask is ignored,
  as FlashMLA's count ignores it.
- ``bytes = sum(L) * h_kv * d_qk * kv_bytes + b * s_q * h_q * (d_qk * q_bytes + d_v * out_bytes)``:
  the KV is read once per KV head (V is the first d_v of the same latent, not read again), plus
  q read and out written once.  The LSE (4 bytes a row) is left out, as FlashMLA leaves it out.

A sparse call (``count_sparse``) is counted as FlashMLA's sparse-decoding test counts it
(``lib.count_flop_and_mem_vol_for_decode``, 9241ae3): ``FLOPs = 2 * b * s_q * h_q * topk * (d_qk + d_v)``
(every listed entry attended, -1 included, as upstream); ``bytes = distinct slots listed * row bytes
+ q + out`` in bf16, a token's row its format's ``RecordFormat.row_bytes``: 656 (V3.2) or 576 (V4: upstream's
figure, ``kv_token_size``, without the 8 scale bytes a slot keeps after its page's rows).  Upstream's
``indices.unique()`` also counts -1 as one token; here -1 is not read.

A result is memory-bound when its intensity (FLOP/byte) is below the ridge point
(matmul rate / copy bandwidth), compute-bound otherwise; its % of ceiling is taken
against the ceiling that bounds it.
"""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Work:
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP per byte."""
        return self.flops / self.bytes if self.bytes else math.nan


def count(batch: int, heads: int, kv_heads: int, s_q: int, seqlens_total: int, d_qk: int, d_v: int,
          kv_bytes: int, q_bytes: int, out_bytes: int) -> Work:
    """FLOPs and bytes of one call; ``seqlens_total`` is ``sum(cache_seqlens)`` (= b * L_mean)."""
    flops = heads * s_q * 2 * seqlens_total * (d_qk + d_v)
    kv = seqlens_total * kv_heads * d_qk * kv_bytes
    q = batch * s_q * heads * d_qk * q_bytes
    out = batch * s_q * heads * d_v * out_bytes
    return Work(flops=float(flops), bytes=float(kv + q + out))


def q_element_bytes(inputs, capabilities) -> int:
    """Bytes of one q element as the kernel reads it: fp8 only when the engine quantises q itself."""
    if inputs.is_fp8 and getattr(capabilities, "fp8_q", "quantized_k_scale") != "quantized_k_scale":
        return inputs.q_model.element_size()      # bf16 q (FlashInfer), or cast inside the kernel
    return inputs.q.element_size()


def out_element_bytes(inputs, capabilities) -> int:
    """Bytes of one out element: the backend's declared out dtype, else the model dtype (bf16 for fp8).

    Taken from the declaration, not from the tensor a backend returns, so one case has one
    intensity on every backend (the float64 reference would otherwise count 8-byte outputs).
    """
    import torch

    from ..building.inputs import TORCH_DTYPES
    name = getattr(capabilities, "out_dtype", None)
    if name in TORCH_DTYPES:
        return torch.empty((), dtype=TORCH_DTYPES[name]).element_size()
    return torch.empty((), dtype=inputs.model_dtype).element_size()


def count_inputs(inputs, capabilities) -> Work:
    return count(batch=inputs.batch_size, heads=inputs.q.shape[2], kv_heads=inputs.kv_pool.shape[2], s_q=inputs.s_q,
                 seqlens_total=int(inputs.cache_seqlens.sum()), d_qk=inputs.q.shape[3], d_v=inputs.d_v,
                 kv_bytes=inputs.kv_pool.element_size(), q_bytes=q_element_bytes(inputs, capabilities),
                 out_bytes=out_element_bytes(inputs, capabilities))


def count_sparse(inputs, indices) -> Work:
    """One sparse call: ``inputs`` a ``SparseInputs`` (q as the model's heads), ``indices`` its index tensor.
    With DeepSeek V4's extra cache its entries count too, and the distinct extra records read."""
    n, s_q, heads, d_qk = inputs.q.shape
    flops = 2 * n * s_q * heads * (inputs.topk + inputs.extra_topk) * (d_qk + inputs.d_v)
    records = int(indices[indices >= 0].unique().numel()) * inputs.fmt.row_bytes
    if inputs.extra_indices is not None:
        extra = inputs.extra_indices
        records += int(extra[extra >= 0].unique().numel()) * inputs.extra_fmt.row_bytes
    q, out = n * s_q * heads * d_qk * 2, n * s_q * heads * inputs.d_v * 2
    return Work(flops=float(flops), bytes=float(records + q + out))


def ridge(copy_bytes_per_s: float, matmul_flop_per_s: float) -> float:
    """The intensity where the two ceilings meet."""
    return matmul_flop_per_s / copy_bytes_per_s


def bound(intensity: float, ridge_point: float) -> str:
    return "memory" if intensity < ridge_point else "compute"


def roofline(work: Work, seconds: float, copy_bytes_per_s: float, matmul_flop_per_s: float) -> dict:
    """Achieved rates at ``seconds`` a call, the bound, and the % of each ceiling."""
    bytes_per_s = work.bytes / seconds
    flop_per_s = work.flops / seconds
    r = ridge(copy_bytes_per_s, matmul_flop_per_s)
    which = bound(work.intensity, r)
    pct_bw = 100 * bytes_per_s / copy_bytes_per_s
    pct_mm = 100 * flop_per_s / matmul_flop_per_s
    return {
        "flops": work.flops, "bytes": work.bytes, "intensity": work.intensity,
        "bytes_per_s": bytes_per_s, "flop_per_s": flop_per_s,
        "ridge": r, "bound": which,
        "pct_bandwidth": pct_bw, "pct_matmul": pct_mm,
        "pct_of_ceiling": pct_bw if which == "memory" else pct_mm,
    }

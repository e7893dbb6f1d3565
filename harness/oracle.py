"""The reference, called on a case's inputs: what every backend is compared with."""

import torch

from reference import mla_attention_batched

from .inputs import host_cache_seqlens


def descale_value(t: torch.Tensor | None) -> float | None:
    return None if t is None else float(t.reshape(-1)[0])


def expected(inputs, compute_dtype=torch.float64):
    """The oracle on exactly the kernel's inputs (for fp8: the quantised q and KV)."""
    return mla_attention_batched(
        inputs.q, inputs.kv_pool, inputs.block_table, inputs.cache_seqlens,
        inputs.softmax_scale, inputs.d_v, causal=inputs.causal,
        descale_q=descale_value(inputs.descale_q), descale_k=descale_value(inputs.descale_k),
        compute_dtype=compute_dtype, host_lengths=host_cache_seqlens(inputs))


def expected_model_precision(inputs, compute_dtype=torch.float64):
    """fp8 only: the oracle on the unquantised q and KV, for the end-to-end error."""
    return mla_attention_batched(
        inputs.q_model, inputs.kv_pool_model, inputs.block_table, inputs.cache_seqlens,
        inputs.softmax_scale, inputs.d_v, causal=inputs.causal, compute_dtype=compute_dtype,
        host_lengths=host_cache_seqlens(inputs))

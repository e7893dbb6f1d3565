"""How SGLang 0.5.23's ``TritonAttnBackend`` hands its MLA kernels their inputs: split-count policy,
token slots, q, scales.  Shared by the eager adapter (sglang_triton.py) and its CUDA-graph session
(triton_graph.py)."""

import torch

from reference import descale_scalar

BASE_MAX_KV_SPLITS = 8            # ServerArgs.triton_attention_num_kv_splits default
MLA_DECODE_MIN_BLOCK_KV = 32      # triton_backend._MLA_DECODE_MIN_BLOCK_KV
MODEL_CONTEXT_LEN = 163840        # DeepSeek-V3's context_len: SGLang sizes max_kv_splits from it


def next_power_of_2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def mla_decode_max_kv_splits(sm_count: int, context_len: int = MODEL_CONTEXT_LEN) -> int:
    """``triton_backend._mla_decode_kv_splits_cap(8, sm_count, context_len)``."""
    if sm_count <= 0:
        return BASE_MAX_KV_SPLITS
    ctx_cap = next_power_of_2(-(-context_len // MLA_DECODE_MIN_BLOCK_KV))
    return max(BASE_MAX_KV_SPLITS, min(next_power_of_2(sm_count), ctx_cap))


def token_slots(inputs, lengths: torch.Tensor):
    """``(kv_indptr int32, kv_indices int64)`` of the first ``lengths[r]`` tokens of each request."""
    device = inputs.device
    lengths = lengths.long().to(inputs.req_to_token.device)
    indptr = torch.zeros(len(lengths) + 1, dtype=torch.int32, device=device)
    indptr[1:] = torch.cumsum(lengths, 0).to(torch.int32).to(device)
    from ..building.pool import token_index
    request, t = token_index(lengths, inputs.req_to_token.device)
    rows = inputs.req_pool_indices.long().to(inputs.req_to_token.device)[request]
    indices = inputs.req_to_token[rows, t].long().to(device)
    return indptr, indices


def model_q(inputs) -> torch.Tensor:
    """q as SGLang's Triton path is given it: the model dtype (fp8 cases: unquantised)."""
    return inputs.q_model if inputs.is_fp8 else inputs.q


def scales(inputs) -> tuple[float, float]:
    """``k_scale, v_scale`` as ``layer.k_scale_float`` (1.0 without an fp8 cache)."""
    k = descale_scalar(inputs.descale_k) if inputs.is_fp8 else 1.0
    return k, k


def token_view(pool: torch.Tensor) -> torch.Tensor:
    """The page pool as SGLang's token-slot KV buffer ``(slots, h_kv, d)``."""
    return pool.reshape(pool.shape[0] * pool.shape[1], *pool.shape[2:])


def draft_latents(inputs) -> torch.Tensor:
    """``(b * s_q, h_kv, d)`` the drafts' latents from the slots they were written to, in q's dtype."""
    source = inputs.kv_pool_model if inputs.is_fp8 else inputs.kv_pool
    b, s_q = inputs.q.shape[:2]
    prefix = inputs.seq_lens.long().to(inputs.req_to_token.device)
    rows = inputs.req_pool_indices.long().to(inputs.req_to_token.device)
    pos = prefix[:, None] + torch.arange(s_q, device=prefix.device)[None, :]
    slots = inputs.req_to_token[rows[:, None], pos].long().reshape(-1).to(inputs.device)
    return token_view(source)[slots].to(model_q(inputs).dtype).contiguous()

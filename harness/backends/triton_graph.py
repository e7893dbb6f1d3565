"""SGLang's Triton MLA kernels in a CUDA graph, as SGLang 0.5.23's ``TritonAttnBackend`` captures them.

From ``srt/layers/attention/triton_backend.py``:

- ``init_cuda_graph_state``: ``cuda_graph_attn_logits (max_num_tokens, h, max_kv_splits, 512)`` and
  ``cuda_graph_attn_lse (max_num_tokens, h, max_kv_splits)`` float32 zeros, ``cuda_graph_num_kv_splits``
  filled with ``max_kv_splits``, ``cuda_graph_uneven_batch`` zeros(1), ``cuda_graph_kv_indices`` int64
  zeros; ``kv_indptr`` / ``qo_indptr`` / ``mask_indptr`` are the backend's own buffers.
- capture and replay (``init_forward_metadata_out_graph`` -> ``_apply_cuda_graph_metadata``):
  decode: ``_update_decode_kv_buffers`` (``_fill_kv_indptr_and_indices``: ``kv_indptr[1:bs + 1] =
  cumsum(seq_lens)``, the token slots into ``cuda_graph_kv_indices``) then ``get_num_kv_splits`` into
  ``cuda_graph_num_kv_splits[:bs]``; target verify: ``_update_target_verify_buffers``
  (``qo_indptr = arange * draft``, ``kv_indptr`` / ``kv_indices`` over the committed prefix,
  ``mask_indptr[1:bs + 1] = cumsum(draft * (seq_lens + draft))``).  The graph holds only
  ``decode_attention_fwd`` / ``extend_attention_fwd`` on views of those buffers.

The drafts' latents (``k_extend``) are an input buffer here, filled before each replay from the
slots the drafts were written to; in SGLang they come from the model's forward inside the graph.
LSE (the harness's, SGLang reads none here): decode's per-split LSE scratch is not reset between
steps, so a row's LSE is the logsumexp over only the splits that ran for it (``active_splits``,
the kernel's own ``split_kv_end > split_kv_start``); verify passes a captured ``lse_extend`` buffer.
"""

import math

import torch

from .csr_graph import TokenGraphSession, draft_slots
from .sglang_calls import MLA_DECODE_MIN_BLOCK_KV, mla_decode_max_kv_splits, model_q, scales, token_view


def _cdiv(a, b):
    return -(-a // b)


def active_splits(seq_lens: torch.Tensor, num_kv_splits: torch.Tensor, max_splits: int,
                  min_block_kv: int = MLA_DECODE_MIN_BLOCK_KV) -> torch.Tensor:
    """``(b, max_splits)`` bool: split ``i`` of row ``r`` covered some keys, as stage 1 and 2 decide it
    (``kv_len_per_split = cdiv(cdiv(L, splits), MIN_BLOCK_KV) * MIN_BLOCK_KV``)."""
    seq = seq_lens.long()[:, None]
    splits = num_kv_splits.long()[:, None].clamp_min(1)
    per_split = _cdiv(_cdiv(seq, splits), min_block_kv) * min_block_kv
    start = per_split * torch.arange(max_splits, device=seq.device)[None, :]
    end = torch.minimum(start + per_split, seq)
    return end > start


def merged_lse(attn_lse: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """``(b, h)`` natural-log LSE from ``(b, h, splits)`` partials, the inactive splits left out."""
    return torch.logsumexp(attn_lse.masked_fill(~active[:, None, :], -math.inf), dim=-1)


class TritonGraphSession(TokenGraphSession):
    def __init__(self, backend, max_bs, max_context_len, inputs):
        super().__init__(backend, max_bs, max_context_len, inputs)
        self.KV_COVERS = "prefix" if self.verify else "cache"    # verify: drafts go in as k_extend
        dev = inputs.device
        self.mods = backend._load()
        self.d_v = inputs.d_v
        self.k_buffer = token_view(inputs.kv_pool)
        self.k_scale, self.v_scale = scales(inputs)
        self.kv_indptr = torch.zeros(max_bs + 1, dtype=torch.int32, device=dev)
        self.kv_indices = torch.zeros(self.kv_capacity, dtype=torch.int64, device=dev)
        if self.verify:
            self.qo_indptr = torch.zeros(max_bs + 1, dtype=torch.int32, device=dev)
            self.mask_indptr = torch.zeros(max_bs + 1, dtype=torch.int64, device=dev)
            self.k_extend = torch.zeros(max_bs * self.s_q, 1, self.d_qk, dtype=model_q(inputs).dtype, device=dev)
        else:
            self.max_splits = mla_decode_max_kv_splits(backend.device_core_count(dev))
            self.attn_logits = torch.zeros(max_bs, self.h_q, self.max_splits, self.d_v, dtype=torch.float32,
                                           device=dev)
            self.attn_lse = torch.zeros(max_bs, self.h_q, self.max_splits, dtype=torch.float32, device=dev)
            self.num_kv_splits = torch.full((max_bs,), self.max_splits, dtype=torch.int32, device=dev)
            self.uneven = torch.zeros(1, dtype=torch.int32, device=dev)

    def fill(self, capture: bool):
        bs = self.bs
        indptr, slots = self.stream()
        self.kv_indptr[:bs + 1].copy_(indptr)
        self.kv_indices[:slots.numel()].copy_(slots)
        if not self.verify:
            self.backend.split_counts(self.seq_lens[:bs], self.h_q, out=self.num_kv_splits[:bs], uneven=self.uneven)
            return
        s_q, dev = self.s_q, self.kv_indptr.device
        self.qo_indptr[:bs + 1].copy_(torch.arange(0, (bs + 1) * s_q, s_q, dtype=torch.int32))
        mask_len = s_q * (self.seq_lens_cpu[:bs].long() + s_q)
        self.mask_indptr[1:bs + 1].copy_(torch.cumsum(mask_len, 0))
        source = self.template.kv_pool_model if self.template.is_fp8 else self.template.kv_pool
        drafts = draft_slots(self.template.req_to_token, self.rows[:bs], self.seq_lens_cpu[:bs], s_q).to(dev)
        self.k_extend[:bs * s_q].copy_(token_view(source)[drafts].to(self.k_extend.dtype))

    def forward(self):
        bs, h, d = self.bs, self.h_q, self.d_qk
        q = self.q_buf[:bs]
        scale = self.template.softmax_scale
        page = self.template.page_size
        if not self.verify:
            fwd = self.mods["sglang.kernels.ops.attention.decode_attention"].decode_attention_fwd
            o = torch.empty(bs, h, self.d_v, dtype=q.dtype, device=q.device)
            fwd(q.reshape(bs, h, d), self.k_buffer, self.k_buffer[..., :self.d_v], o, self.kv_indptr[:bs + 1],
                self.kv_indices, self.attn_logits, self.attn_lse, self.num_kv_splits, self.max_splits, scale,
                self.k_scale, self.v_scale, has_mla=True, page_size=page, uneven_batch=self.uneven)
            return o
        fwd = self.mods["sglang.kernels.ops.attention.extend_attention"].extend_attention_fwd
        n = bs * self.s_q
        o = torch.empty(n, h, self.d_v, dtype=q.dtype, device=q.device)
        lse = torch.empty(n, h, dtype=torch.float32, device=q.device)
        k_ext = self.k_extend[:n]
        fwd(q.reshape(n, h, d), k_ext, k_ext[..., :self.d_v], o, self.k_buffer, self.k_buffer[..., :self.d_v],
            self.qo_indptr[:bs + 1], self.kv_indptr[:bs + 1], self.kv_indices, None, self.template.causal,
            self.mask_indptr[:bs + 1], self.s_q, self.k_scale, self.v_scale, sm_scale=scale, lse_extend=lse,
            page_size=page)
        return o, lse

    def finish(self, raw):
        bs, h = self.bs, self.h_q
        if self.verify:
            o, lse = raw
            return o.reshape(bs, self.s_q, h, -1), lse.reshape(bs, self.s_q, h).transpose(1, 2)
        seq = (self.kv_indptr[1:bs + 1] - self.kv_indptr[:bs])        # what the kernel reads as L
        active = active_splits(seq, self.num_kv_splits[:bs], self.max_splits)
        lse = merged_lse(self.attn_lse[:bs], active)
        return raw.reshape(bs, 1, h, self.d_v), lse.reshape(bs, h, 1)

    def index_stream(self):
        return self.kv_indptr[:self.bs + 1], self.kv_indices

    def addresses(self) -> dict:
        names = ["kv_indptr", "kv_indices"] + (["qo_indptr", "mask_indptr", "k_extend"] if self.verify else
                                               ["attn_logits", "attn_lse", "num_kv_splits", "uneven"])
        return {name: getattr(self, name).data_ptr() for name in names}

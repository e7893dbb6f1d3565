"""FlashInfer's MLA wrapper (fa3 / fa2) in a CUDA graph, as SGLang 0.5.23's ``FlashInferMLAAttnBackend`` drives it.

From ``srt/layers/attention/flashinfer_mla_backend.py``:

- ``init_cuda_graph_state``: reserved ``cuda_graph_kv_indices`` (int32, ``max_bs * max_context_len``),
  ``cuda_graph_qo_indptr`` (a clone of ``arange(max_bs + 1)``), ``cuda_graph_kv_indptr`` (zeros) and
  ``cuda_graph_kv_lens`` (ones).
- capture (``init_forward_metadata_out_graph(in_capture=True)``): a wrapper built with
  ``use_cuda_graph=True`` and those buffers' ``[:bs + 1]`` / ``[:bs]`` views; a full ``plan()`` on
  the fill-value batch (decode: ``FlashInferMLAIndicesUpdaterDecode.call_begin_forward``, a fresh
  ``kv_indices``; verify: ``generate_attn_arg_prefill``, causal), then the replay-time plan once
  more (``_apply_cuda_graph_metadata``), then ``run`` captured.  Only ``run`` is in the graph.
- replay (``_apply_cuda_graph_metadata``): host ``qo_indptr`` / ``kv_indptr`` / ``kv_len_arr`` built
  from ``seq_lens_cpu``; decode writes the step's token slots into the reserved ``kv_indices`` in
  place and plans with ``fast_mla_decode_plan`` (``_cached_module.plan`` on the host arrays: the
  reserved indptr / length buffers are not rewritten; FA's ``run`` reads only ``kv_indices`` and the
  plan's int workspace); verify plans with ``fast_mla_prefill_plan``, which also copies all four
  arrays into the reserved buffers.

The KV is indexed by token slot with ``page_size = 1`` (the plan's page size in SGLang), the pool
viewed as ``(slots, 1, 576)``.  Differences from SGLang, each for the harness's checks: the canonical
``plan(metadata=MLAPlanMetadata.csr(...), lse_mode="base2")`` / ``run(query=, kv_cache=, return_lse=True)``
keywords instead of the deprecated positional form (same plan, and an LSE to judge); the backend is
the case's ``fa3`` / ``fa2`` rather than ``"auto"``; fp8 follows the eager adapter (fp8 KV with
``ckv_scale = kpe_scale = k_scale``, bf16 q) where SGLang casts the cache to q's dtype first.
"""

import torch

from reference import descale_scalar

from .base import Unsupported
from .csr_graph import TokenGraphSession

WORKSPACE_BYTES = 128 << 20


def host_plan_arrays(kv_lengths: torch.Tensor, s_q: int):
    """``(qo_indptr, kv_indptr, kv_len_arr)`` int32 on the host, as ``_apply_cuda_graph_metadata`` builds them."""
    lens = kv_lengths.to("cpu", torch.int32)
    bs = lens.shape[0]
    qo = torch.arange(0, (bs + 1) * s_q, s_q, dtype=torch.int32)
    kv = torch.zeros(bs + 1, dtype=torch.int32)
    kv[1:] = torch.cumsum(lens, 0).to(torch.int32)
    return qo, kv, lens.clone()


def fast_plan(wrapper, qo_cpu, kv_indptr_cpu, kv_len_cpu, kv_indices, num_heads: int, head_dim_ckv: int,
              causal: bool, copy_buffers: bool):
    """SGLang's ``fast_mla_decode_plan`` (``copy_buffers=False``) / ``fast_mla_prefill_plan`` (True)."""
    if copy_buffers:
        wrapper._qo_indptr_buf.copy_(qo_cpu, non_blocking=True)
        wrapper._kv_indptr_buf.copy_(kv_indptr_cpu, non_blocking=True)
        wrapper._kv_indices_buf[:len(kv_indices)].copy_(kv_indices, non_blocking=True)
        wrapper._kv_len_arr_buf.copy_(kv_len_cpu, non_blocking=True)
    wrapper._cached_module.plan(wrapper._float_workspace_buffer, wrapper._int_workspace_buffer,
                                wrapper._pin_memory_int_workspace_buffer, qo_cpu, kv_indptr_cpu, kv_len_cpu,
                                num_heads, head_dim_ckv, causal)


class FlashInferGraphSession(TokenGraphSession):
    KV_COVERS = "cache"       # verify: generate_attn_arg_prefill's lengths are seq_lens + draft_token_num

    def __init__(self, backend, max_bs, max_context_len, inputs):
        super().__init__(backend, max_bs, max_context_len, inputs)
        dev = inputs.device
        self.flashinfer = backend._load()["flashinfer"]
        self.workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
        self.cg_kv_indices = torch.zeros(self.kv_capacity, dtype=torch.int32, device=dev)
        self.cg_qo_indptr = torch.arange(0, max_bs + 1, dtype=torch.int32, device=dev)
        self.cg_kv_indptr = torch.zeros(max_bs + 1, dtype=torch.int32, device=dev)
        self.cg_kv_lens = torch.ones(max_bs, dtype=torch.int32, device=dev)
        self.kv_indptr = torch.zeros(max_bs + 1, dtype=torch.int32, device=dev)   # the backend's own
        self.causal = inputs.causal if self.verify else False       # decode plans causal=False
        self.d_v = inputs.d_v
        self.q_dtype, self.kv_dtype = inputs.model_dtype, inputs.kv_pool.dtype
        pool = inputs.kv_pool
        self.kv_cache = pool.view(pool.shape[0] * pool.shape[1], 1, pool.shape[-1])   # token slots, page 1
        self.scale = {}
        if inputs.is_fp8:
            k_scale = descale_scalar(inputs.descale_k)      # read now: no host read inside capture
            self.scale = {"ckv_scale": k_scale, "kpe_scale": k_scale}
        self.wrapper = None
        self.last_stream = None

    @staticmethod
    def metadata_cls():
        from flashinfer.mla._batch_mla import MLAPlanMetadata
        return MLAPlanMetadata

    def full_plan(self, qo, kv_indptr, kv_indices, kv_lens):
        kwargs = dict(metadata=self.metadata_cls().csr(qo, kv_indptr, kv_indices, kv_lens), num_heads=self.h_q,
                      head_dim_ckv=self.d_v, head_dim_kpe=self.d_qk - self.d_v, page_size=1, causal=self.causal,
                      sm_scale=self.template.softmax_scale, q_data_type=self.q_dtype, kv_data_type=self.kv_dtype,
                      lse_mode="base2")
        if self.scale:
            kwargs["scale_mode"] = "kv-per-tensor"
        try:
            self.wrapper.plan(**kwargs)
        except ValueError as e:          # FlashInfer's own refusal of the shape
            raise Unsupported(f"FlashInfer {self.backend.kind} plan() refused the graph batch: {e}") from None

    def fill(self, capture: bool):
        bs, dev = self.bs, self.q_buf.device
        qo, kv_indptr, kv_len = host_plan_arrays(self.kv_lengths(), self.s_q)
        _, slots = self.stream()
        self.last_stream = kv_indptr                       # what the plan hands the kernel
        if capture:
            self.wrapper = self.flashinfer.BatchMLAPagedAttentionWrapper(
                self.workspace, use_cuda_graph=True, qo_indptr=self.cg_qo_indptr[:bs + 1],
                kv_indptr=self.cg_kv_indptr[:bs + 1], kv_indices=self.cg_kv_indices,
                kv_len_arr=self.cg_kv_lens[:bs], backend=self.backend.kind)
            self.kv_indptr[:bs + 1].copy_(kv_indptr)
            # decode: call_begin_forward's fresh kv_indices; verify: generate_attn_arg_prefill's
            self.full_plan(qo.to(dev), self.kv_indptr[:bs + 1], slots.to(dev, torch.int32), kv_len.to(dev))
            if self.verify:
                return                   # verify's plan becomes fast_mla_prefill_plan only after capture
        if self.verify:                  # fast_mla_prefill_plan: the four arrays copied into the buffers
            fast_plan(self.wrapper, qo, kv_indptr, kv_len, slots.to(dev, torch.int32), self.h_q, self.d_v,
                      self.causal, copy_buffers=True)
        else:                            # pack_read_stream into the reserved kv_indices, in place
            self.kv_indptr[:bs + 1].copy_(kv_indptr)
            self.cg_kv_indices[:slots.numel()].copy_(slots)
            fast_plan(self.wrapper, qo, kv_indptr, kv_len, self.cg_kv_indices, self.h_q, self.d_v, self.causal,
                      copy_buffers=False)

    def forward(self):
        bs = self.bs
        q = self.q_buf[:bs].reshape(bs * self.s_q, self.h_q, self.d_qk)
        return self.wrapper.run(query=q, kv_cache=self.kv_cache, return_lse=True, **self.scale)

    def finish(self, raw):
        out, lse = raw
        bs = self.bs
        return (out.reshape(bs, self.s_q, self.h_q, -1),
                lse.reshape(bs, self.s_q, self.h_q).transpose(1, 2))

    def index_stream(self):
        return self.last_stream, self.wrapper._kv_indices_buf

    def addresses(self) -> dict:
        w = self.wrapper
        return {"kv_indices": w._kv_indices_buf.data_ptr(), "qo_indptr": w._qo_indptr_buf.data_ptr(),
                "kv_indptr": w._kv_indptr_buf.data_ptr(), "kv_len_arr": w._kv_len_arr_buf.data_ptr(),
                "float_workspace": w._float_workspace_buffer.data_ptr(),
                "int_workspace": w._int_workspace_buffer.data_ptr()}

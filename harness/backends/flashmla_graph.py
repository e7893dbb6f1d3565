"""SGLang's CUDA-graph path for FlashMLA, reproduced step by step.

- ``init_cuda_graph_state``: a block-table buffer of ``max_bs`` rows and
  ``(max_context_len + 64) // 64`` columns filled with **1**, and metadata
  computed from ``torch.ones(max_bs)`` seq lens.
- capture (``init_forward_metadata_capture_cuda_graph``): rows get seq len 1 (the
  fill value), the table is written from ``req_to_token``, fresh metadata is
  copied into the buffers, and the kernel is captured on views
  ``table[:bs, :max_seqlen_pad]`` and ``num_splits[:bs + 1]``.
- replay (``init_forward_metadata_replay_cuda_graph``): the table rows are
  rewritten for the new seq lens (entries past them keep whatever earlier steps
  left), fresh metadata is copied into the *same* buffers, and the graph replays.

Engine profile ``sglang-0.5.23`` (``flashmla_profiles``): the metadata buffers are preallocated as
``torch.empty((num_sms, 8))`` and ``torch.empty(max_bs + 1)``; fresh metadata is copied into
``[:num_sm_parts]`` and ``[:bs + 1]`` and those views are bound (the tile view kept from capture unless
its row count changes, as SGLang keeps it); the captured table view spans the buffer's full width.

The q buffer holds the model dtype; fp8 quantisation of q with K's scale happens
inside the graph, as ``scaled_fp8_quant`` does in the seed's forward.
"""

import torch

from reference import descale_scalar, quantize_fp8

from ..building.pool import pages_for
from .graph_capture import captured


def write_needed_entries(table: torch.Tensor, rows_pages: list[torch.Tensor]):
    """Each row's pages into the captured block table, only as many entries as the row needs: the entries
    past them keep what earlier steps left, as an engine's kv-indices fill leaves them."""
    for r, pages in enumerate(rows_pages):
        table[r, :len(pages)] = pages.to(table.device)


class FlashMLAGraphSession:
    SEQ_LEN_FILL = 1   # get_cuda_graph_seq_len_fill_value

    def __init__(self, backend, max_bs, max_context_len, inputs):
        self.backend, self.api = backend, backend.api
        self.template = inputs
        dev = inputs.device
        self.s_q, self.h_q, self.h_kv = inputs.s_q, inputs.q.shape[2], inputs.kv_pool.shape[2]
        self.fp8 = inputs.is_fp8
        # read once here: a device-to-host read inside graph capture is an error
        self.k_scale = descale_scalar(inputs.descale_k) if self.fp8 else None
        self.max_bs = max_bs
        self.page_size = inputs.page_size
        self.table = torch.full((max_bs, (max_context_len + self.page_size) // self.page_size), 1, dtype=torch.int32,
                                device=dev)
        self.views = backend.profile.graph_metadata == "num_sms_views"
        self.full_width = backend.profile.graph_table_full_width
        if self.views:     # init_cuda_graph_state, sglang 0.5.23: unwritten until the first copy
            sms = torch.cuda.get_device_properties(dev).multi_processor_count
            self.tile = torch.empty((sms, 8), dtype=torch.int32, device=dev)
            self.splits = torch.empty(max_bs + 1, dtype=torch.int32, device=dev)
        else:
            meta = self.api.metadata(torch.ones(max_bs, dtype=torch.int32, device=dev), self.q_tokens, self.h_kv,
                                     self.fp8)
            self.tile, self.splits = self.api.buffers(meta)
        self.tile_view = self.tile
        model_dtype = inputs.q.dtype if not self.fp8 else inputs.q_model.dtype
        self.q_buf = torch.zeros(max_bs, self.s_q, self.h_q, inputs.q.shape[3], dtype=model_dtype, device=dev)
        self.seq_buf = torch.full((max_bs,), self.SEQ_LEN_FILL, dtype=torch.int32, device=dev)
        self.graph = None

    @property
    def q_tokens(self) -> int:
        return self.s_q * self.h_q // self.h_kv

    def addresses(self) -> dict:
        return {"tile_scheduler_metadata": self.tile.data_ptr(), "num_splits": self.splits.data_ptr(),
                "block_table": self.table.data_ptr()}

    def write_table(self, rows_pages: list[torch.Tensor]):
        """create_flashmla_kv_indices into the buffer: only each row's needed entries are written."""
        write_needed_entries(self.table, rows_pages)

    def refresh_metadata(self, bs: int):
        cache = self.cache_seqlens(bs)
        fresh = self.api.buffers(self.api.metadata(cache, self.q_tokens, self.h_kv, self.fp8))
        if self.views:
            parts = fresh[0].shape[0]
            if parts > self.tile.shape[0]:
                raise RuntimeError(f"num_sm_parts {parts} exceeds preallocated max {self.tile.shape[0]}")
            if self.tile_view is self.tile or self.tile_view.shape[0] != parts:
                self.tile_view = self.tile[:parts]
            self.tile[:parts].copy_(fresh[0])
        else:
            self.tile.copy_(fresh[0])
        self.splits[: bs + 1].copy_(fresh[1])

    def cache_seqlens(self, bs: int) -> torch.Tensor:
        seq = self.seq_buf[:bs]
        return seq + self.s_q if self.template.mode == "verify" else seq

    def forward(self, bs: int, width: int):
        q = self.q_buf[:bs]
        if self.fp8:
            q = quantize_fp8(q, self.k_scale, self.template.kv_pool.dtype)
        meta = self.api.from_buffers(self.tile_view, self.splits[: bs + 1])
        return self.api.call(q, self.template.kv_pool, self.table[:bs, :width], self.cache_seqlens(bs),
                             self.template.d_v, meta, self.template.softmax_scale, True,
                             self.template.descale_q, self.template.descale_k)

    def capture(self, bs: int, rows_pages):
        self.seq_buf[:bs].fill_(self.SEQ_LEN_FILL)
        self.write_table(rows_pages)
        self.refresh_metadata(bs)
        width = self.table.shape[1] if self.full_width else max(1, pages_for(self.SEQ_LEN_FILL + self.s_q,
                                                                                   self.page_size))
        self.graph, (self.out, self.lse) = captured(lambda: self.forward(bs, width))
        self.bs = bs

    def replay(self, q_real: torch.Tensor, seq_lens_padded: torch.Tensor, rows_pages):
        """One decode step: real rows' q, all rows' seq lens (padding rows = fill value)."""
        n = q_real.shape[0]
        self.q_buf[:n].copy_(q_real)
        self.seq_buf[: self.bs].copy_(seq_lens_padded)
        self.write_table(rows_pages)
        self.refresh_metadata(self.bs)
        self.graph.replay()
        return self.out, self.lse

    def eager_same_buffers(self, width: int):
        """The same padded batch, eagerly, from the same buffers (must equal the replay bit for bit)."""
        return self.forward(self.bs, width)

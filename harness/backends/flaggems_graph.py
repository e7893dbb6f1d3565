"""FlagGems' ``flash_mla`` in a CUDA graph, driven the way an engine drives a FlashMLA-style decode path.

``flash_mla`` takes FlashMLA's inputs (a page table and ``cache_seqlens``) and needs no scheduler
metadata, so an engine that swaps it in for ``flash_mla_with_kvcache`` keeps the FlashMLA path's
buffers and drops the metadata (the graph scenario's padding is SGLang's, flashmla_graph.py):

- buffers sized for the captured batch: a block table of ``max_bs`` rows and
  ``(max_context_len + page_size) // page_size`` columns filled with 1, ``cache_seqlens`` at the
  seq-len fill value (1), and a q buffer in the model dtype;
- capture: every row at the fill value, the table rows written from ``req_to_token``; one warm-up
  call on a side stream (Triton's JIT and the launcher's caches, outside the capture), then only the
  ``flash_mla`` call is captured, on ``table[:bs]`` (full width, so its ``.contiguous()`` copies
  nothing) and ``cache_seqlens[:bs]``;
- replay: the real rows' q copied in, all rows' seq lens (padding rows at the fill value), each row's
  needed table entries written (entries past them keep what earlier steps left), then the replay.

Nothing in flag-gems 5.0.2's ``flash_mla`` reads the device from the host: it allocates its output
(``torch.empty``, from the graph's pool while capturing), reads the device capability (a host query),
and launches one Triton kernel; ``cache_seqlens`` is read only by the kernel.  It returns no LSE, so
the session's LSE is None.
"""

import torch

from .flashmla_graph import write_needed_entries
from .graph_capture import captured

SEQ_LEN_FILL = 1     # the fill value the graph scenario pads seq lens with (SGLang's, flashmla_graph.py)


class FlagGemsGraphSession:
    SEQ_LEN_FILL = SEQ_LEN_FILL

    def __init__(self, backend, max_bs: int, max_context_len: int, inputs):
        self.backend, self.template = backend, inputs
        dev = inputs.device
        self.s_q, self.h_q, self.d_qk = inputs.q.shape[1:]
        self.h_kv, self.page_size = inputs.kv_pool.shape[2], inputs.page_size
        self.max_bs = max_bs
        self.table = torch.full((max_bs, (max_context_len + self.page_size) // self.page_size), 1,
                                dtype=torch.int32, device=dev)
        self.seq_buf = torch.full((max_bs,), SEQ_LEN_FILL, dtype=torch.int32, device=dev)
        self.q_buf = torch.zeros(max_bs, self.s_q, self.h_q, self.d_qk, dtype=inputs.q.dtype, device=dev)
        self.graph, self.bs, self.out = None, None, None

    def addresses(self) -> dict:
        return {"block_table": self.table.data_ptr(), "cache_seqlens": self.seq_buf.data_ptr(),
                "q": self.q_buf.data_ptr()}

    def write_table(self, rows_pages: list[torch.Tensor]):
        """Each row's needed entries only, as the engine's kv-indices fill writes them."""
        write_needed_entries(self.table, rows_pages)

    def cache_seqlens(self, bs: int) -> torch.Tensor:
        seq = self.seq_buf[:bs]
        return seq + self.s_q if self.template.mode == "verify" else seq

    def set_batch(self, q_real: torch.Tensor | None, seq_lens_padded, rows_pages):
        """The step's buffers: real rows' q (padding rows keep what was there), every row's seq len and
        table entries."""
        if q_real is not None:
            self.q_buf[:q_real.shape[0]].copy_(q_real)
        self.seq_buf[:len(seq_lens_padded)].copy_(torch.as_tensor(seq_lens_padded, dtype=torch.int32))
        self.write_table(rows_pages)

    def forward(self, bs: int):
        """The call flaggems_mla.run makes, on the session's buffers."""
        q, pool = self.q_buf[:bs], self.template.kv_pool
        table = self.table[:bs]
        return self.backend.flash_mla()(q, table, pool, table.shape[1] * self.page_size, self.page_size, bs,
                                        self.s_q, self.cache_seqlens(bs), self.h_q, self.h_kv, self.d_qk,
                                        self.template.d_v, True)

    def capture(self, bs: int, rows_pages):
        self.bs = bs
        self.set_batch(None, [SEQ_LEN_FILL] * bs, rows_pages)
        self.graph, self.out = captured(lambda: self.forward(bs))          # Triton's JIT runs before it

    def refresh_metadata(self, bs: int):
        """Nothing to refresh: flash_mla has no scheduler metadata (the bench's graph step calls this)."""

    def replay(self, q_real: torch.Tensor, seq_lens_padded, rows_pages):
        """One decode step: real rows' q, all rows' seq lens (padding rows at the fill value), the table."""
        self.set_batch(q_real, seq_lens_padded, rows_pages)
        self.graph.replay()
        return self.out, None

    def eager_same_buffers(self, width: int | None = None):
        """The same padded batch, eagerly, from the same buffers (the captured call reads the full width)."""
        return self.forward(self.bs), None

"""CUDA-graph sessions for kernels indexed by a CSR stream of token slots (FlashInfer MLA, SGLang Triton).

SGLang 0.5.23 drives both the same way around the graph (``srt/model_executor/runner/
decode_cuda_graph_runner.py`` and the backends' ``init_forward_metadata_out_graph``):

- the runner's input buffers are padded to the captured batch: ``seq_lens`` past the
  real rows hold the backend's fill value (``get_cuda_graph_seq_len_fill_value`` = 1,
  padding policy FILL_SENTINEL) and ``req_pool_indices`` hold 0 (an index-semantic
  buffer: ZERO policy, ``input_buffers.INDEX_SEMANTIC_BUFFERS``);
- before capture and before every replay the backend fills its captured index buffers
  on the host side of the graph: ``kv_indptr[1:bs + 1] = cumsum(lengths)`` and
  ``kv_indices[:total]`` = ``req_to_token[req_pool_indices[r], :lengths[r]]`` row after
  row (``kv_index_translator.pack_read_stream``, ``create_flashinfer_kv_indices_triton``);
  entries past ``total`` keep what earlier steps wrote (never read);
- only the attention kernel is in the graph.

The pure functions here are that host-side logic; ``TokenGraphSession`` is the skeleton
both sessions share (buffers, capture, replay).  Subclasses fill their own buffers
(``fill``) and launch their kernel (``forward``).
"""

import torch

from ..building.pool import token_index
from ..errors import InputError
from .graph_capture import captured

SEQ_LEN_FILL = 1     # FlashInferMLAAttnBackend / TritonAttnBackend.get_cuda_graph_seq_len_fill_value


def padded_rows(real_rows: torch.Tensor, bucket: int) -> torch.Tensor:
    """``req_pool_indices`` as the graph runner holds it: the real rows, then 0 (ZERO policy)."""
    rows = torch.zeros(bucket, dtype=torch.int32, device=real_rows.device)
    rows[:real_rows.shape[0]] = real_rows
    return rows


def padded_lengths(real: list[int], bucket: int, fill: int = SEQ_LEN_FILL) -> list[int]:
    """``seq_lens`` as the graph runner holds it: the real rows, then the fill value."""
    return list(real) + [fill] * (bucket - len(real))


def token_stream(req_to_token: torch.Tensor, rows: torch.Tensor, lengths: torch.Tensor):
    """``(kv_indptr int32 on the host, kv_indices int64 on req_to_token's device)``: each row's first
    ``lengths[r]`` token slots of ``req_to_token[rows[r]]``, rows one after another.

    ``lengths`` is read on the host (SGLang keeps ``seq_lens_cpu``), so a GPU build needs no sync.
    """
    lengths = lengths.to("cpu", torch.int64)
    indptr = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(lengths, 0).to(torch.int32)
    device = req_to_token.device
    request, t = token_index(lengths, device)
    indices = req_to_token[rows.to(device).long()[request], t].long()
    return indptr, indices


def draft_slots(req_to_token: torch.Tensor, rows: torch.Tensor, prefix: torch.Tensor, s_q: int) -> torch.Tensor:
    """``(b * s_q,)`` the slots the drafts of each row were written to (positions prefix .. prefix + s_q - 1)."""
    device = req_to_token.device
    pos = prefix.to(device).long()[:, None] + torch.arange(s_q, device=device)[None, :]
    return req_to_token[rows.to(device).long()[:, None], pos].reshape(-1).long()


def check_token_stream(indptr: torch.Tensor, indices: torch.Tensor, lengths: list[int], num_slots: int):
    """The gate before a replay: the stream the kernel will read has each row's length and only slots
    inside the pool.  ``indices`` holds at least ``indptr[-1]`` entries (a longer tail is never read)."""
    indptr = indptr.to("cpu", torch.int64)
    want = torch.tensor([0] + list(lengths), dtype=torch.int64).cumsum(0)
    if indptr.shape != want.shape or not torch.equal(indptr, want):
        row = int((indptr != want).nonzero()[0]) - 1 if indptr.shape == want.shape else None
        raise InputError(f"kv_indptr {indptr.tolist()[:8]}... does not give the rows' lengths "
                         f"{list(lengths)[:8]}..." + ("" if row is None else f" (first at request {row})"))
    total = int(want[-1])
    if indices.numel() < total:
        raise InputError(f"kv_indices holds {indices.numel()} entries, the rows need {total}")
    used = indices[:total].to("cpu", torch.int64)
    bad = (used < 0) | (used >= num_slots)
    if bool(bad.any()):
        k = int(bad.nonzero()[0])
        r = int(torch.searchsorted(want, torch.tensor(k), right=True)) - 1
        raise InputError(f"request {r}: kv_indices entry {k - int(want[r])} is slot {int(used[k])}, "
                         f"outside the pool's {num_slots} slots")


class TokenGraphSession:
    """Capture once at ``bs`` rows, then per step: fill the buffers for the step, check, replay.

    Same calling surface as ``FlashMLAGraphSession`` (``capture``, ``replay``, ``refresh_metadata``,
    ``eager_same_buffers``, ``addresses``, ``graph``), plus ``prepare`` / ``index_stream`` /
    ``launch`` so the scenario can check the stream between the fill and the replay.
    """

    SEQ_LEN_FILL = SEQ_LEN_FILL
    KV_COVERS = "cache"       # "cache": the stream covers the drafts too; "prefix": only the committed prefix

    def __init__(self, backend, max_bs: int, max_context_len: int, inputs):
        self.backend, self.template = backend, inputs
        dev = inputs.device
        self.verify = inputs.mode == "verify"
        self.s_q, self.h_q, self.d_qk = inputs.q.shape[1:]
        self.drafts = self.s_q if self.verify else 0
        self.max_bs = max_bs
        self.q_buf = torch.zeros(max_bs, self.s_q, self.h_q, self.d_qk, dtype=inputs.model_dtype, device=dev)
        self.seq_lens = torch.full((max_bs,), SEQ_LEN_FILL, dtype=torch.int32, device=dev)   # forward_batch.seq_lens
        self.seq_lens_cpu = torch.full((max_bs,), SEQ_LEN_FILL, dtype=torch.int32)
        self.rows = torch.zeros(max_bs, dtype=torch.int32, device=dev)                      # req_pool_indices
        self.kv_capacity = max_bs * (max_context_len + self.drafts)
        self.graph, self.bs = None, None

    # ---- the runner's input buffers ----
    def set_batch(self, bs: int, q_real: torch.Tensor | None, seq_lens_padded):
        """The runner's ``populate_from_forward_batch``: real rows copied in, padding rows at the fill."""
        seq = torch.as_tensor(seq_lens_padded).to("cpu", torch.int32)
        n = bs if q_real is None else q_real.shape[0]
        if q_real is not None:
            self.q_buf[:n].copy_(q_real)
        self.seq_lens_cpu[:bs] = seq[:bs]
        self.seq_lens[:bs].copy_(self.seq_lens_cpu[:bs])
        real = self.template.req_pool_indices[:n] if q_real is not None else self.rows[:0]
        self.rows[:bs].copy_(padded_rows(real.to(self.rows.device, torch.int32), bs))

    def kv_lengths(self) -> torch.Tensor:
        """Host lengths the kernel's stream covers for the current batch."""
        seq = self.seq_lens_cpu[:self.bs]
        return seq + self.drafts if self.KV_COVERS == "cache" else seq

    def stream(self):
        """``token_stream`` of the current batch (SGLang's ``pack_read_stream``)."""
        return token_stream(self.template.req_to_token, self.rows[:self.bs], self.kv_lengths())

    # ---- capture and replay ----
    def capture(self, bs: int, rows_pages=None):
        """``init_forward_metadata_out_graph(in_capture=True)`` then the captured forward.  SGLang
        captures with ``reset_index_buffers`` (rows 0) and every seq len at the fill value."""
        self.bs = bs
        self.set_batch(bs, None, [SEQ_LEN_FILL] * bs)
        self.fill(capture=True)
        self.graph, self.captured = captured(self.forward)               # Triton's JIT runs before it

    def prepare(self, q_real: torch.Tensor, seq_lens_padded, rows_pages=None):
        """One step's host side: input buffers, then ``init_forward_metadata_out_graph`` (replay)."""
        self.set_batch(self.bs, q_real, seq_lens_padded)
        self.fill(capture=False)

    def launch(self):
        self.graph.replay()
        return self.finish(self.captured)

    def replay(self, q_real: torch.Tensor, seq_lens_padded, rows_pages=None):
        self.prepare(q_real, seq_lens_padded)
        return self.launch()

    def refresh_metadata(self, bs: int):
        self.fill(capture=False)

    def eager_same_buffers(self, width: int | None = None):
        """The same padded batch, eagerly, from the same buffers (must equal the replay bit for bit)."""
        return self.finish(self.forward())

    # ---- for subclasses ----
    def fill(self, capture: bool):
        raise NotImplementedError

    def forward(self):
        raise NotImplementedError

    def finish(self, raw):
        """``(out (bs, s_q, h, d_v), lse (bs, h, s_q))`` from what ``forward`` returned."""
        raise NotImplementedError

    def index_stream(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(kv_indptr, kv_indices)`` exactly as the captured kernel will read them."""
        raise NotImplementedError

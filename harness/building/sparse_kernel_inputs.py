"""What a sparse backend is called with (``SparseInputs``), and what the harness knows of it on the host
(``SparseCase``, ``IndexStats``): the gate, the oracle and the row read these.  And the engine's output buffer
(``output_buffer``) and the index gate.

The index gate (``validate_indices``): every entry is -1 or a slot of the pool.  FlashMLA does not check
(only -1 is invalid; anything else is read, out of bounds or not), so a bad index is refused before any
kernel runs, with one line.
"""

from dataclasses import dataclass

import torch

from reference.sparse import counted

from ..errors import InputError
from ..planning.record_formats import RecordFormat, record_format
from .kernel_inputs import poisoned


@dataclass(frozen=True)
class SparseInputs:
    """What a sparse backend is called with.  Every tensor is the engine's state: the launch witnesses
    them all (``integrity.Witness``), and the kernel's output buffer ``out`` sits between guards."""

    q: torch.Tensor                   # (n, s_q, heads, d_qk) bf16: the model's heads (a backend pads them)
    kv_pool: torch.Tensor             # (pages, page_size, 1, bytes_per_token) uint8: the records (kv_format's)
    indices: torch.Tensor             # (n, s_q, topk) int32: KV slot or -1
    cache_seqlens: torch.Tensor       # (n,) int32: min(tokens seen, topk), a kernel row's longest
    attn_sink: torch.Tensor | None    # (heads,) float32, or None (SGLang passes none)
    req_to_token: torch.Tensor        # (max_reqs, max_context) int32: the engine's table the indices came from
    softmax_scale: float
    d_v: int
    kv_format: str
    out: torch.Tensor | None = None   # (n, s_q, heads, d_v) bf16, poisoned, guarded: a backend may write here
    # per kernel row, the main entries counted (FlashMLA's topk_length, (n,) int32): a position at or past it
    # is invalid whatever its index says; None: all topk
    topk_length: torch.Tensor | None = None
    # DeepSeek V4's extra (compressed) cache, read in the same softmax: its records (its own page size and
    # format), its indices (n, s_q, extra_topk) into them, its lengths, and the engine's table of it
    extra_kv_pool: torch.Tensor | None = None
    extra_indices: torch.Tensor | None = None
    extra_topk_length: torch.Tensor | None = None
    extra_kv_format: str = ""
    extra_req_to_token: torch.Tensor | None = None

    @property
    def device(self) -> torch.device:
        return self.q.device

    @property
    def page_size(self) -> int:
        return self.kv_pool.shape[1]

    @property
    def num_slots(self) -> int:
        return self.kv_pool.shape[0] * self.kv_pool.shape[1]

    @property
    def fmt(self) -> RecordFormat:
        return record_format(self.kv_format)

    @property
    def heads(self) -> int:
        return self.q.shape[2]

    @property
    def topk(self) -> int:
        return self.indices.shape[-1]

    @property
    def extra_fmt(self) -> RecordFormat | None:
        return record_format(self.extra_kv_format) if self.extra_kv_pool is not None else None

    @property
    def extra_page_size(self) -> int:
        return self.extra_kv_pool.shape[1] if self.extra_kv_pool is not None else 0

    @property
    def extra_num_slots(self) -> int:
        return self.extra_kv_pool.shape[0] * self.extra_kv_pool.shape[1] if self.extra_kv_pool is not None else 0

    @property
    def extra_topk(self) -> int:
        return self.extra_indices.shape[-1] if self.extra_indices is not None else 0


@dataclass(frozen=True)
class IndexStats:
    """What the gate, the oracle and the row need to know of the indices, read back in one small copy (the
    indices themselves stay on the device: a host copy of a large case's was megabytes)."""

    lowest: int                       # the smallest entry, the largest: -1 for both when there is none
    highest: int
    rows: int                         # query rows (kernel rows times query tokens a row)
    valid_entries: int                # entries counted (within the row's length) that are not -1
    empty_rows: int                   # query rows with no such entry
    shortest: int = 0                 # the rows' lengths' least and greatest: (0, topk) without lengths
    longest: int = 0


@dataclass(frozen=True)
class SparseCase:
    """The inputs and what the harness knows about them on the host (the gate and the row read these)."""

    inputs: SparseInputs
    index_stats: IndexStats
    seen: list                        # tokens each query row sees
    seq_lens: list                    # SGLang's seq_lens (the prefix, for verify)
    notes: tuple = ()                 # lines for the row where the writer, not the kernel, made the records
    #                                   unusual (``input_notes``)
    extra_stats: IndexStats | None = None   # the extra cache's indices', where there is one


def index_stats(indices: torch.Tensor, lengths: torch.Tensor | None = None) -> IndexStats:
    """``IndexStats`` of ``(n, s_q, topk)`` indices on any device, the entries counted within ``lengths``
    ``(n,)`` (all without): one read-back of four integers.  The lowest and highest are of every entry, the
    gate's."""
    rows = indices.reshape(-1, indices.shape[-1]) if indices.dim() else indices.reshape(1, 1)
    width = rows.shape[-1]
    if not rows.numel():
        return IndexStats(-1, -1, rows.shape[0], 0, rows.shape[0], 0, width)
    kept = counted(indices, lengths).reshape(rows.shape) if lengths is not None else rows
    per_row = (kept >= 0).sum(dim=-1)
    lowest, highest = torch.aminmax(rows)
    span = [lowest.long(), highest.long(), per_row.sum(), (per_row == 0).sum()]
    if lengths is not None and lengths.numel():
        span += [t.long() for t in torch.aminmax(lengths)]
    packed = torch.stack(span).tolist()
    shortest, longest = packed[4:] if len(packed) > 4 else (0, width)
    return IndexStats(packed[0], packed[1], rows.shape[0], packed[2], packed[3], shortest, longest)


def output_buffer(inputs: SparseInputs) -> torch.Tensor:
    """The engine's output buffer: poisoned bf16 between guard regions (``integrity``)."""
    n, s_q, heads, _ = inputs.q.shape
    return poisoned((n, s_q, heads, inputs.d_v), torch.bfloat16, inputs.device)


def validate_indices(indices: torch.Tensor, num_slots: int, stats: IndexStats | None = None, pool: str = "pool"):
    """Refuse, with one line, indices a kernel must not be launched on: int32 ``(n, s_q, topk)``, each
    entry -1 or a slot in ``[0, num_slots)``.  ``stats``: the indices' ``IndexStats`` when known (then
    nothing is read back unless an entry is out of range)."""
    if indices.dim() != 3 or indices.dtype != torch.int32:
        raise InputError(f"sparse indices into the {pool} must be int32 (n, s_q, topk), got {indices.dtype} "
                         f"{tuple(indices.shape)}")
    if not indices.numel():
        return
    stats = stats or index_stats(indices)
    lowest, highest = stats.lowest, stats.highest               # the mask below only to name an entry
    if lowest < -1 or highest >= num_slots:
        row, q, j = (int(x) for x in ((indices < -1) | (indices >= num_slots)).nonzero()[0])
        raise InputError(f"query row {row}, token {q}, entry {j}: index {int(indices[row, q, j])} is outside "
                         f"the {pool}'s {num_slots} slots (only -1 marks an invalid entry; FlashMLA reads any "
                         f"other value, out of bounds or not)")


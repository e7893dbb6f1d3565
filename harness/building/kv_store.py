"""The engine's KV cache for one case (``KVStore``): the poisoned pools, the engine's writes into them
(``write_slots``, ``write_kv``), and the ``Inputs`` a kernel is called with at given lengths."""

import math

import numpy as np
import torch

from reference import FP8_MAX, as_bits, quantize_fp8

from ..planning.case import Case
from ..planning.case_lengths import pinned_pages_for, shared_pages_for
from .kernel_inputs import TORCH_DTYPES, HostCopy, Inputs, poisoned
from .pool import PageLayout, allocate, build_block_table, padding_fill, pages_for
from .transfer import to_device, to_device_named


def write_slots(layout: PageLayout, first: list[int], last: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The engine's writes of tokens ``first[r] .. last[r]`` of each request (set_kv_buffer), worked
    out on the host from a CPU layout: each token's KV slot, and its index in the tokens of all
    requests back to back (request r starts at the sum of the earlier ``layout.cache_seqlens``).
    The index is None when the writes are every token, in order."""
    lengths = layout.cache_seqlens.tolist()
    rows, req_to_token = layout.req_pool_indices.numpy(), layout.req_to_token.numpy()
    spans = [(r, f, max(l, f)) for r, (f, l) in enumerate(zip(first, last))]
    slots = np.concatenate([req_to_token[rows[r], f:l] for r, f, l in spans] or [np.zeros(0, np.int32)])
    if all(f == 0 for f in first) and list(last) == lengths:
        return torch.from_numpy(slots.astype(np.int32, copy=False)), None
    starts = np.cumsum([0] + lengths[:-1])
    source = np.concatenate([np.arange(starts[r] + f, starts[r] + l, dtype=np.int32) for r, f, l in spans]
                            or [np.zeros(0, np.int32)])
    return torch.from_numpy(slots.astype(np.int32, copy=False)), torch.from_numpy(source)


def first_writes(shared_pages: list[int], page_size: int) -> list[int]:
    """Per request, the first of its tokens the engine writes.  Shared pages are written once, by the
    request sharing the most of them (the one whose prefix filled the radix cache); the others start
    past them, so no slot is written twice (a slot written twice with two values would hold either)."""
    owner = max(range(len(shared_pages)), key=lambda r: shared_pages[r]) if shared_pages else 0
    return [0 if r == owner else n * page_size for r, n in enumerate(shared_pages)]


def write_kv(pool: torch.Tensor, tokens: torch.Tensor, slots: torch.Tensor, source: torch.Tensor | None):
    """Scatter ``tokens[source]`` (every token, in order, when ``source`` is None) into pool slots.

    A token moves as one row of the widest integer its bytes divide into: the same bits, with a
    quarter of the index arithmetic of 2-byte elements (the scatter was the largest part of a long
    case's input building on the H200, docs/archive/gpu-runs-history.md).
    """
    slot_rows = _token_rows(pool.view(pool.shape[0] * pool.shape[1], math.prod(pool.shape[2:])))   # never a copy
    token_rows = _token_rows(tokens.flatten(1))
    slot_rows[slots] = token_rows if source is None else token_rows[source]


def _token_rows(rows: torch.Tensor) -> torch.Tensor:
    """``(n, width)`` rows, each viewed as integers of the widest size that divides its bytes."""
    row_bytes = rows.shape[1] * rows.element_size()
    return as_bits(rows, next(size for size in (8, 4, 2, 1) if row_bytes % size == 0))


def k_scale_for(case: Case, tokens: torch.Tensor) -> float:
    """The case's ``k_scale``, or by default the one that maps the KV's amax to the fp8 maximum."""
    if case.k_scale is not None:
        return case.k_scale
    amax = float(tokens.abs().max()) if tokens.numel() else 1.0
    return max(amax, 1e-6) / FP8_MAX[TORCH_DTYPES[case.dtype]]


def model_dtype_of(case: Case) -> torch.dtype:
    return torch.bfloat16 if case.dtype.startswith("fp8") else TORCH_DTYPES[case.dtype]


class KVStore:
    """The engine's KV cache for one case: pages allocated for every request's final length, all
    poisoned, filled by the engine's writes as requests grow (``write_up_to``).

    For fp8 it keeps both the quantised cache the kernel reads and the model-precision one the
    end-to-end oracle reads.  ``generate`` writes every token at once (``filled``: the writes and the
    lengths go to the device with the layout, in one copy); the CUDA-graph scenario writes a step's
    worth at a time.
    """

    def __init__(self, case: Case, final_lengths: list[int], tokens: torch.Tensor, device: torch.device,
                 filled: bool = False):
        self.case = case
        shared = shared_pages_for(case, final_lengths)
        # The layout is integers, built and checked on the host in a few array operations, then sent
        # in one copy; index_layout (on the CPU) works out the writes.
        self.index_layout = allocate(final_lengths, case.page_size, case.extra_pages,
                                     torch.Generator().manual_seed(case.seed + 1), padding=case.padding,
                                     pool_pages=case.pool_pages, shared_pages=shared,
                                     pinned_pages=pinned_pages_for(case))
        # ``allocate``'s layouts hold their slots by construction (property-tested: tests/planning/test_fuzz.py,
        # tests/building/test_pool.py), so none is checked again here; the block table is, at the launch gate.

        self.written = first_writes(shared, case.page_size)
        lay = self.index_layout
        layout_fields = ("req_to_token", "req_pool_indices", "block_table", "cache_seqlens", "used_pages")
        host = {name: getattr(lay, name) for name in layout_fields}
        if filled:      # every token written, and the lengths the kernel is called with
            slots, source = write_slots(lay, self.written, final_lengths)
            host_lengths = self._host_lengths(final_lengths)
            host |= {"slots": slots, "seq_lens": host_lengths[1]} | ({} if source is None else {"source": source})
        sent = to_device_named(host, device)
        self.layout = PageLayout(lay.page_size, lay.num_pages, *(sent[name] for name in layout_fields))
        shape = (self.layout.num_pages, case.page_size, case.kv_heads, case.d_qk)
        self.fp8 = case.dtype.startswith("fp8")
        self.tokens = tokens
        self.pool_model = poisoned(shape, tokens.dtype, device)
        self.k_scale = self.descale = None
        self.pool, self.stored = self.pool_model, tokens
        if self.fp8:
            fp8_dtype = TORCH_DTYPES[case.dtype]
            self.k_scale = k_scale_for(case, tokens)
            self.pool = poisoned(shape, fp8_dtype, device)
            self.stored = quantize_fp8(tokens, self.k_scale, fp8_dtype)
            self.descale = torch.tensor([self.k_scale], dtype=torch.float32, device=device)
        self.filled = None        # (host lengths, the same on the device) of the final lengths, when filled
        if filled:
            self._write(sent["slots"], sent.get("source"), final_lengths)
            self.filled = (host_lengths, (self.layout.cache_seqlens, sent["seq_lens"]))

    def _host_lengths(self, cache: list[int]) -> list[torch.Tensor]:
        """cache_seqlens and seq_lens (verify's drafts taken off) on the host, int32."""
        drafts = self.case.s_q if self.case.mode == "verify" else 0
        return [torch.tensor(cache, dtype=torch.int32), torch.tensor([n - drafts for n in cache], dtype=torch.int32)]

    def write_up_to(self, lengths: list[int]):
        """The engine's KV writes: each request's tokens up to ``lengths[r]`` (drafts included)."""
        slots, source = write_slots(self.index_layout, self.written[:len(lengths)], lengths)
        sent = to_device_named({"slots": slots} | ({} if source is None else {"source": source}), self.pool.device)
        self._write(sent["slots"], sent.get("source"), lengths)

    def _write(self, slots: torch.Tensor, source: torch.Tensor | None, lengths: list[int]):
        for pool, src in ((self.pool, self.stored), (self.pool_model, self.tokens)) if self.fp8 \
                else ((self.pool, self.stored),):
            write_kv(pool, src, slots, source)
        for r, n in enumerate(lengths):
            self.written[r] = max(self.written[r], n)

    def inputs(self, q_model: torch.Tensor, cache: list[int], table: torch.Tensor | None = None) -> Inputs:
        """The first ``len(cache)`` requests at these cache lengths, as the engine's eager path calls the kernel.

        ``table`` defaults to a fresh block table padded by the case's policy.
        """
        case, lay, bs = self.case, self.layout, len(cache)
        device = q_model.device
        if self.filled is not None and list(cache) == self.index_layout.cache_seqlens.tolist():
            host_lengths, (cache_t, seq_t) = self.filled
        else:
            host_lengths = self._host_lengths(cache)
            cache_t, seq_t = to_device(host_lengths, device)
        if table is None:
            width = max(1, max((pages_for(n, case.page_size) for n in cache), default=1))
            host_table = build_block_table(self.index_layout.req_to_token, self.index_layout.req_pool_indices[:bs],
                                           cache, case.page_size, width, padding_fill(case.padding))
            table = to_device([host_table], device)[0]
        elif table is lay.block_table:
            host_table = self.index_layout.block_table
        else:
            host_table = None             # the caller's own table: host_copy reads it back when asked
        q = quantize_fp8(q_model, self.k_scale, self.pool.dtype) if self.fp8 else q_model
        host = None if host_table is None else HostCopy(host_table, *host_lengths, (table, cache_t, seq_t))
        return Inputs(
            q=q, kv_pool=self.pool, block_table=table, cache_seqlens=cache_t, seq_lens=seq_t,
            req_to_token=lay.req_to_token, req_pool_indices=lay.req_pool_indices[:bs],
            mode=case.mode, softmax_scale=case.softmax_scale, d_v=case.d_v, causal=case.causal,
            descale_q=self.descale, descale_k=None if self.descale is None else self.descale.clone(),
            q_model=q_model if self.fp8 else None, kv_pool_model=self.pool_model if self.fp8 else None, host=host)


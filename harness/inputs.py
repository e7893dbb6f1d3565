"""Materialise a case: q, the poisoned KV page pool, block table, seq lens, scales.

Everything is drawn from generators seeded by the case's seed, so a case id and
seed rebuild the same inputs (on the same kind of device: CPU and CUDA
generators draw different streams).  Lengths and the page layout are always
drawn on the CPU, so they are the same on every device.

The pool starts as all-poison (NaN), then the engine's writes fill it: first the
cached prefix, then, for target-verify, the draft tokens (SGLang writes their KV
with ``set_kv_buffer`` before calling the kernel).  Unused pages, the reserved
page 0 and the tail of each last page stay NaN, so any read outside a request's
tokens poisons its output.
"""

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from reference import FP8_MAX, KeySets, as_bits, keysets, quantize_fp8

from . import seqlens
from .cases import Case
from .integrity import guarded
from .pool import (
    PageLayout,
    allocate,
    boundary_pages,
    build_block_table,
    padding_fill,
    pages_for,
)
from .transfer import to_device, to_device_named

TORCH_DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}


def torch_dtype(name: str) -> torch.dtype:
    """A dtype by the case's short name (``bf16``) or torch's own (``float32``)."""
    if name in TORCH_DTYPES:
        return TORCH_DTYPES[name]
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype '{name}'")
    return dtype


@dataclass(frozen=True)
class HostCopy:
    """CPU copies of the block table and lengths, as the harness built them before sending them.  The
    launch gate, the oracle and the row read these instead of waiting on the device; they are used
    only while the ``Inputs`` still hold the very tensors that were sent (``describes``)."""

    block_table: torch.Tensor
    cache_seqlens: torch.Tensor
    seq_lens: torch.Tensor
    sent: tuple                       # the device tensors (block_table, cache_seqlens, seq_lens) copied from these

    def describes(self, inputs: "Inputs") -> bool:
        return all(a is b for a, b in zip(self.sent, (inputs.block_table, inputs.cache_seqlens, inputs.seq_lens)))


@dataclass(frozen=True)
class Inputs:
    """What a backend is called with: tensors plus the few kernel parameters it needs.

    Tensors live on one device.  Everything else (batch size, page size, ...) is
    derived, so a variant built with ``dataclasses.replace`` cannot disagree with itself.
    """

    q: torch.Tensor                   # (b, s_q, h_q, d_qk), the kernel's dtype (fp8 for fp8 cases)
    kv_pool: torch.Tensor             # (num_pages, page_size, h_kv, d_qk), the cache dtype
    block_table: torch.Tensor         # (b, max_pages) int32
    cache_seqlens: torch.Tensor       # (b,) int32: seq_lens, plus the draft tokens for verify
    seq_lens: torch.Tensor            # (b,) int32: SGLang's forward_batch.seq_lens
    req_to_token: torch.Tensor        # (max_reqs, max_context) int32: each token's KV slot, as SGLang keeps it
    req_pool_indices: torch.Tensor    # (b,) int32: request r's row of req_to_token
    mode: str                         # "decode" or "verify": verify's cache_seqlens include the drafts
    softmax_scale: float
    d_v: int
    causal: bool
    descale_q: torch.Tensor | None    # (1,) float32, fp8 only
    descale_k: torch.Tensor | None
    q_model: torch.Tensor | None      # fp8 only: q before quantisation (model dtype)
    kv_pool_model: torch.Tensor | None  # fp8 only: the pool before quantisation
    host: HostCopy | None = None      # host copies of the table and lengths (see ``host_copy``)
    out: torch.Tensor | None = None   # the output buffer the engine hands the kernel (``output_buffer``), set
    #                                   by the launch: a backend may write its out there or return its own
    token_slots: torch.Tensor | None = None   # (b, s_q, k) int32: a mode where each query token reads its own
    #                                   key set, its KV slots (-1 unused); None: the dense form (``key_sets``)

    @property
    def device(self) -> torch.device:
        return self.q.device

    @property
    def batch_size(self) -> int:
        return self.q.shape[0]

    @property
    def s_q(self) -> int:
        return self.q.shape[1]

    @property
    def page_size(self) -> int:
        return self.kv_pool.shape[1]

    @property
    def num_pages(self) -> int:
        return self.kv_pool.shape[0]

    @property
    def model_dtype(self) -> torch.dtype:
        """The model's dtype: q's, or for fp8 cases the dtype q had before quantisation."""
        return (self.q if self.q_model is None else self.q_model).dtype

    @property
    def is_fp8(self) -> bool:
        return self.descale_k is not None


def host_copy(inputs: Inputs) -> HostCopy:
    """The block table and lengths of these inputs on the CPU: the copies made before they were sent,
    or read back from the device when the inputs were built some other way."""
    if inputs.host is not None and inputs.host.describes(inputs):
        return inputs.host
    return HostCopy(inputs.block_table.cpu(), inputs.cache_seqlens.cpu(), inputs.seq_lens.cpu(),
                    (inputs.block_table, inputs.cache_seqlens, inputs.seq_lens))


def key_sets(inputs: Inputs) -> KeySets:
    """What each query token reads, on the host (``reference.keysets``): the dense form from the block
    table and lengths with the causal count, or one key set per query token from ``token_slots``."""
    if inputs.token_slots is not None:
        return keysets.per_token(inputs.token_slots.cpu().reshape(-1, inputs.token_slots.shape[-1]).numpy(),
                                 inputs.page_size)
    host = host_copy(inputs)
    return keysets.dense(host.block_table.numpy(), host.cache_seqlens.tolist(), inputs.page_size, inputs.s_q,
                         inputs.causal)


def key_counts(inputs: Inputs) -> list[int]:
    """How many keys each request of ``key_sets`` has (each query token, for ``token_slots``)."""
    if inputs.token_slots is not None:
        return (inputs.token_slots >= 0).sum(-1).reshape(-1).tolist()
    return host_copy(inputs).cache_seqlens.tolist()


def draw_seq_lens(case: Case) -> list[int]:
    """SGLang's ``seq_lens`` (the prefix, for verify) of each request."""
    return list(_drawn_seq_lens(case))


@lru_cache(maxsize=4096)      # the size check, the chunk plan and the inputs all ask
def _drawn_seq_lens(case: Case) -> tuple:
    gen = torch.Generator().manual_seed(case.seed)
    drawn = seqlens.draw(case.seqlen, case.batch_size, case.page_size, gen)
    if case.seqlen_is_cache and case.mode == "verify":
        # FlashMLA's own test draws cache lengths and keeps them >= s_q; the prefix is what is left
        return tuple(max(n, case.s_q) - case.s_q for n in drawn)
    return tuple(drawn)


def cache_seqlens_for(case: Case, seq_lens: list[int]) -> list[int]:
    """What FlashMLA is given: verify adds the draft tokens (``seq_lens + num_draft_tokens``)."""
    return [n + case.s_q for n in seq_lens] if case.mode == "verify" else list(seq_lens)


def poisoned(shape, dtype, device) -> torch.Tensor:
    """A NaN-filled tensor inside NaN guard regions (``integrity.guarded``), filled in place through its
    bits: no float32 copy of a pool of many GiB."""
    return guarded(shape, dtype, device, _nan_bits(dtype))


@lru_cache(maxsize=16)
def _nan_bits(dtype: torch.dtype) -> int:
    return int(as_bits(torch.tensor([float("nan")]).to(dtype))[0])


def output_buffer(inputs: "Inputs") -> torch.Tensor:
    """The output buffer an engine hands its attention kernel: ``(b, s_q, h_q, d_v)`` in the model dtype,
    poisoned, between guard regions, so a write past its end is seen (``integrity``)."""
    return poisoned((inputs.batch_size, inputs.s_q, inputs.q.shape[2], inputs.d_v), inputs.model_dtype,
                    inputs.device)


def shared_pages_for(case: Case, cache: list[int]) -> list[int]:
    """How many of the common prefix's pages each request shares (a radix cache's matched prefix).

    Only whole pages of committed tokens are shared: the tokens this step writes (the decode
    token, the drafts) are always on the request's own pages.
    """
    P = case.page_size
    return [min(case.shared_prefix // P, max(n - case.s_q, 0) // P) for n in cache]


def pinned_pages_for(case: Case) -> list[int]:
    """In a spread pool: the pages at which page ids and element offsets wrap must be live."""
    if not case.pool_pages:
        return []
    return boundary_pages(case.pool_pages, case.page_size * case.kv_heads * case.d_qk)


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


def write_kv(pool: torch.Tensor, tokens: torch.Tensor, slots: torch.Tensor, source: torch.Tensor | None):
    """Scatter ``tokens[source]`` (every token, in order, when ``source`` is None) into pool slots.

    A token moves as one row of the widest integer its bytes divide into: the same bits, with a
    quarter of the index arithmetic of 2-byte elements (the scatter was the largest part of a long
    case's input building on the H200, docs/gpu-runs.md).
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
        # ``allocate``'s layouts hold their slots by construction (property-tested: tests/test_fuzz.py,
        # tests/test_pool.py), so none is checked again here; the block table is, at the launch gate.

        # shared pages are written once, by the request sharing the most of them (the one whose
        # prefix filled the radix cache); the others start past them, so no slot is written twice
        owner = max(range(len(shared)), key=lambda r: shared[r]) if shared else 0
        self.written = [0 if r == owner else n * case.page_size for r, n in enumerate(shared)]
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


# Past 2^31 bytes torch draws a tensor in pieces, and where the pieces start depends on the element size
FLOAT32_DRAW_IN_ONE = (2 ** 31 - 1) // 4


def draw_normal(shape: tuple, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """Standard normal draws on ``gen``'s device, rounded to ``dtype`` from float32.

    On a GPU, a draw whose float32 form would be drawn in one piece is drawn in ``dtype`` directly:
    the kernel draws in float32 and rounds as it stores, so the bits are the same without a float32
    tensor and its copy (checked bit for bit on the H200, ``scripts/gpu/draws.py``).  A larger one is
    drawn in float32, as it always was: its pieces would fall elsewhere in ``dtype``, and so its draws.
    """
    if gen.device.type == "cuda" and math.prod(shape) <= FLOAT32_DRAW_IN_ONE:
        return torch.randn(shape, generator=gen, device=gen.device, dtype=dtype)
    return torch.randn(shape, generator=gen, device=gen.device).to(dtype)


def generate(case: Case, device: str | torch.device = "cpu", seq_lens: list[int] | None = None) -> Inputs:
    """Build the inputs of one case: every request's prefix, then (verify) its drafts, written before the call."""
    device = torch.device(device)
    seq_lens = draw_seq_lens(case) if seq_lens is None else seq_lens
    cache = cache_seqlens_for(case, seq_lens)
    gen = torch.Generator(device=device).manual_seed(case.seed)
    b, s_q, h_q, d = case.batch_size, case.s_q, case.heads, case.d_qk
    model_dtype = model_dtype_of(case)
    q = draw_normal((b, s_q, h_q, d), gen, model_dtype)
    tokens = draw_normal((sum(cache), case.kv_heads, d), gen, model_dtype)
    # The engine writes the cached prefix, then (verify) the drafts, before the call; no slot is written
    # twice, so one write of every token leaves the same pool.
    store = KVStore(case, cache, tokens, device, filled=True)
    return store.inputs(q, cache, table=store.layout.block_table)

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

from dataclasses import dataclass

import torch

from reference import FP8_MAX, quantize_fp8

from . import seqlens
from .cases import Case
from .pool import PageLayout, allocate, boundary_pages, token_index, validate_block_table, validate_req_to_token

TORCH_DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}


@dataclass
class Inputs:
    """What a backend is called with.  Tensors live on ``device``."""

    case: Case
    q: torch.Tensor                   # (b, s_q, h_q, d_qk), the kernel's dtype (fp8 for fp8 cases)
    kv_pool: torch.Tensor             # (num_pages, page_size, h_kv, d_qk), the cache dtype
    block_table: torch.Tensor         # (b, max_pages) int32
    cache_seqlens: torch.Tensor       # (b,) int32: seq_lens, plus the draft tokens for verify
    seq_lens: torch.Tensor            # (b,) int32: SGLang's forward_batch.seq_lens
    layout: PageLayout                # req_to_token and friends, on the CPU
    descale_q: torch.Tensor | None    # (1,) float32, fp8 only
    descale_k: torch.Tensor | None
    q_model: torch.Tensor | None      # fp8 only: q before quantisation (model dtype)
    kv_pool_model: torch.Tensor | None  # fp8 only: the pool before quantisation

    @property
    def device(self) -> torch.device:
        return self.q.device

    @property
    def s_q(self) -> int:
        return self.q.shape[1]

    @property
    def softmax_scale(self) -> float:
        return self.case.softmax_scale

    @property
    def d_v(self) -> int:
        return self.case.d_v

    @property
    def causal(self) -> bool:
        return self.case.causal

    @property
    def is_fp8(self) -> bool:
        return self.descale_k is not None


def draw_seq_lens(case: Case) -> list[int]:
    """SGLang's ``seq_lens`` (the prefix, for verify) of each request."""
    gen = torch.Generator().manual_seed(case.seed)
    drawn = seqlens.draw(case.seqlen, case.batch_size, case.page_size, gen)
    if case.seqlen_is_cache and case.mode == "verify":
        # FlashMLA's own test draws cache lengths and keeps them >= s_q; the prefix is what is left
        return [max(n, case.s_q) - case.s_q for n in drawn]
    return drawn


def cache_seqlens_for(case: Case, seq_lens: list[int]) -> list[int]:
    """What FlashMLA is given: verify adds the draft tokens (``seq_lens + num_draft_tokens``)."""
    return [n + case.s_q for n in seq_lens] if case.mode == "verify" else list(seq_lens)


_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def poisoned(shape, dtype, device) -> torch.Tensor:
    """A NaN-filled tensor, filled in place through its bits: no float32 copy of a pool of many GiB."""
    as_int = _SAME_SIZE_INT[torch.empty((), dtype=dtype).element_size()]
    nan_bits = int(torch.tensor([float("nan")]).to(dtype).view(as_int)[0])
    out = torch.empty(shape, dtype=dtype, device=device)
    out.view(as_int).fill_(nan_bits)
    return out


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


def write_kv(pool: torch.Tensor, layout: PageLayout, tokens: torch.Tensor, first: list[int], last: list[int]):
    """Scatter tokens ``first[r] .. last[r]`` of each request into their slots (set_kv_buffer).

    ``tokens`` holds every request's tokens back to back (request r starts at the
    sum of the earlier requests' ``layout.cache_seqlens``).
    """
    dev = layout.req_to_token.device
    first_t = torch.tensor(first, dtype=torch.long)
    count = (torch.tensor(last, dtype=torch.long) - first_t).clamp(min=0)
    if not int(count.sum()):
        return
    request, i = token_index(count, dev)
    t = first_t.to(dev)[request] + i                              # position in its request
    lengths = layout.cache_seqlens.long().to(dev)
    starts = torch.cumsum(lengths, 0) - lengths
    slots = layout.req_to_token[layout.req_pool_indices.to(dev).long()[request], t].long()
    flat = pool.view(-1, *pool.shape[2:])
    flat[slots.to(pool.device)] = tokens[(starts[request] + t).to(tokens.device)]


def k_scale_for(case: Case, tokens: torch.Tensor) -> float:
    """The case's ``k_scale``, or by default the one that maps the KV's amax to the fp8 maximum."""
    if case.k_scale is not None:
        return case.k_scale
    amax = float(tokens.abs().max()) if tokens.numel() else 1.0
    return max(amax, 1e-6) / FP8_MAX[TORCH_DTYPES[case.dtype]]


def generate(case: Case, device: str | torch.device = "cpu", seq_lens: list[int] | None = None) -> Inputs:
    """Build the inputs of one case."""
    device = torch.device(device)
    seq_lens = draw_seq_lens(case) if seq_lens is None else seq_lens
    cache = cache_seqlens_for(case, seq_lens)
    shared = shared_pages_for(case, cache)
    layout = allocate(cache, case.page_size, case.extra_pages, torch.Generator().manual_seed(case.seed + 1),
                      padding=case.padding, device=device, pool_pages=case.pool_pages,
                      shared_pages=shared, pinned_pages=pinned_pages_for(case))
    validate_req_to_token(layout)
    validate_block_table(layout.block_table, layout.cache_seqlens, layout.num_pages, case.page_size)

    gen = torch.Generator(device=device).manual_seed(case.seed)
    b, s_q, h_q, h_kv, d = case.batch_size, case.s_q, case.heads, case.kv_heads, case.d_qk
    fp8 = case.dtype.startswith("fp8")
    model_dtype = torch.bfloat16 if fp8 else TORCH_DTYPES[case.dtype]
    q = torch.randn(b, s_q, h_q, d, generator=gen, device=device).to(model_dtype)
    tokens = torch.randn(sum(cache), h_kv, d, generator=gen, device=device).to(model_dtype)

    pool_shape = (layout.num_pages, case.page_size, h_kv, d)
    prefix_end = [n - (s_q if case.mode == "verify" else 0) for n in cache]
    # shared pages are written once, by the request sharing the most of them (the one whose
    # prefix filled the radix cache); the others skip them, so no slot is written twice
    owner = max(range(b), key=lambda r: shared[r]) if b else 0
    prefix_start = [0 if r == owner else shared[r] * case.page_size for r in range(b)]
    pool_model = poisoned(pool_shape, model_dtype, device)
    write_kv(pool_model, layout, tokens, prefix_start, prefix_end)   # the cached prefix
    write_kv(pool_model, layout, tokens, prefix_end, cache)          # verify: the drafts, written before the call

    descale_q = descale_k = None
    q_model = kv_model = None
    kv_pool = pool_model
    if fp8:
        fp8_dtype = TORCH_DTYPES[case.dtype]
        k_scale = k_scale_for(case, tokens)
        kv_pool = poisoned(pool_shape, fp8_dtype, device)
        qtokens = quantize_fp8(tokens, k_scale, fp8_dtype)
        write_kv(kv_pool, layout, qtokens, prefix_start, prefix_end)
        write_kv(kv_pool, layout, qtokens, prefix_end, cache)
        q_model, kv_model = q, pool_model
        q = quantize_fp8(q, k_scale, fp8_dtype)   # SGLang: q is quantised with K's scale
        descale_q = torch.tensor([k_scale], dtype=torch.float32, device=device)
        descale_k = descale_q.clone()

    return Inputs(
        case=case, q=q, kv_pool=kv_pool,
        block_table=layout.block_table, cache_seqlens=layout.cache_seqlens,
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device), layout=layout,
        descale_q=descale_q, descale_k=descale_k, q_model=q_model, kv_pool_model=kv_model,
    )

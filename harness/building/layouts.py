"""How the tensors a kernel reads lie in memory (``Case.layout``; the names are ``planning.case.LAYOUTS``).

- ``contiguous``: as the inputs are built: whole allocations (the pools inside their guard regions).
- ``strided``: each a view into a larger buffer, every dim one larger and the last ``STRIDED_SLACK`` larger,
  sliced from the start, as FlashMLA's tests hand theirs (kernelkit's ``non_contiguousify``): the last dim
  keeps stride 1, every other stride grows.  A sparse pool's records keep their bytes (the record format
  fixes them): its pages are one more and each ``STRIDED_SLACK`` bytes longer, so its page stride grows.
- ``offset``: each at a storage offset of ``OFFSET_BYTES`` into a buffer with as much slack after it, as
  an engine's arena hands tensors out.
- ``split_q``: the tensors as built, and beside them q's two parts as DeepSeek's attention hands them to a
  kernel that takes q apart (``split_q``); a kernel that takes q whole is not given this layout
  (``Capabilities.layouts``).

Relaid are the tensors a kernel reads (``DENSE_READ``, ``SPARSE_READ``); the fp8 model-precision pool, read
by the end-to-end oracle only, stays.  The slack is poison: NaN in float buffers, 0xFF bytes around the
sparse records, and 0 in integer ones (page 0 and slot 0 are reserved, all NaN), so a kernel that walks a
view with the wrong strides reads NaN.  The input witness (``judging.integrity``) fingerprints each storage
whole, slack included, so a write between the views is caught.  Relaying draws nothing: the values are the
contiguous case's bit for bit, and so is the oracle's answer.
"""

import dataclasses
import math

import torch

from reference import as_bits

from ..planning.case import Case
from .kernel_inputs import Inputs
from .sparse_cache import POISON_BYTE
from .sparse_kernel_inputs import SparseCase

STRIDED_SLACK = 128                 # elements past the last dim (bytes past a sparse page)
OFFSET_BYTES = 256                  # a multiple of every element size, and of the 16 bytes kernels align to
INT_POISON = 0
DENSE_READ = ("q", "q_model", "kv_pool", "block_table", "cache_seqlens", "seq_lens", "req_to_token",
              "req_pool_indices", "descale_q", "descale_k")
# and the pools: ``_records``.  The lengths stay whole: FlashMLA requires them contiguous
# (``KU_CHECK_CONTIGUOUS(topk_length)``, csrc/api/sparse_decode.h)
SPARSE_READ = ("q", "indices", "cache_seqlens", "attn_sink", "extra_indices")


def _poisoned(shape, like: torch.Tensor) -> torch.Tensor:
    base = torch.empty(shape, dtype=like.dtype, device=like.device)
    if like.is_floating_point():
        as_bits(base).fill_(int(as_bits(torch.tensor([float("nan")]).to(like.dtype))[0]))
    else:
        base.fill_(POISON_BYTE if like.dtype == torch.uint8 else INT_POISON)
    return base


def strided(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a view of a larger poisoned buffer: every dim one larger, the last ``STRIDED_SLACK``."""
    base = _poisoned([n + (STRIDED_SLACK if i == t.dim() - 1 else 1) for i, n in enumerate(t.shape)], t)
    view = base[tuple(slice(0, n) for n in t.shape)]
    return view.copy_(t)


def offset(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values, contiguous, ``OFFSET_BYTES`` into a poisoned buffer with as much after them."""
    skip = OFFSET_BYTES // t.element_size()
    base = _poisoned((t.numel() + 2 * skip,), t)
    return base[skip:skip + t.numel()].view(t.shape).copy_(t)


MOVES = {"strided": strided, "offset": offset}
# DeepSeek's q projection gives each head qk_nope_head_dim (128) + qk_rope_head_dim (64) values: rope is split
# off as a view of it (SGLang 0.5.23, ``forward_mla``: ``q.split([qk_nope_head_dim, qk_rope_head_dim], dim=-1)``)
PROJECTED_NOPE = 128


def split_q(q: torch.Tensor, d_v: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``q``'s nope and rope parts where DeepSeek's attention has them when it calls the kernel (SGLang
    0.5.23's ``forward_mla`` passes ``q_nope_out`` and ``q_rope=q_pe`` to the FlashInfer and DSA backends):
    nope is the absorbed ``torch.bmm(q_nope.transpose(0, 1), w_kc).transpose(0, 1)``, so its heads lie
    outermost, a token's heads ``tokens * d_v`` apart; rope is the last values of each head's projected row,
    ``PROJECTED_NOPE`` of poison before it.  Each part is a view of a poisoned buffer of its own."""
    b, s_q, h, d = q.shape
    nope = _poisoned((h, b * s_q, d_v), q).transpose(0, 1).view(b, s_q, h, d_v)
    rope = _poisoned((b, s_q, h, PROJECTED_NOPE + d - d_v), q)[..., PROJECTED_NOPE:]
    return nope.copy_(q[..., :d_v]), rope.copy_(q[..., d_v:])


def _records(pool: torch.Tensor, layout: str) -> torch.Tensor:
    """A sparse pool ``(pages, page_size, 1, bytes_per_token)`` (its page stride ``stride(0)``) relaid: the
    records' bytes as they are, the pages ``STRIDED_SLACK`` bytes further apart (one more page), or the
    whole ``OFFSET_BYTES`` into a larger buffer."""
    pages, page_bytes, used = pool.shape[0], pool.stride(0), pool[0].numel()
    if layout == "strided":
        rows = _poisoned((pages + 1, page_bytes + STRIDED_SLACK), pool)[:pages]
    else:
        flat = _poisoned((pages * page_bytes + 2 * OFFSET_BYTES,), pool)
        rows = flat[OFFSET_BYTES:OFFSET_BYTES + pages * page_bytes].view(pages, page_bytes)
    return rows[:, :used].view(pool.shape).copy_(pool)


def relaid(case: Case, inputs: Inputs) -> Inputs:
    """The dense inputs in the case's layout; the inputs themselves for ``contiguous``.  The host copies of
    the table and lengths describe the relaid tensors (their values are the same)."""
    if case.layout == "contiguous":
        return inputs
    if case.layout == "split_q":
        nope, rope = split_q(inputs.q if inputs.q_model is None else inputs.q_model, inputs.d_v)
        return dataclasses.replace(inputs, q_nope=nope, q_rope=rope)
    move = MOVES[case.layout]
    changed = {name: move(t) for name in DENSE_READ if (t := getattr(inputs, name)) is not None}
    out = dataclasses.replace(inputs, **changed)
    if inputs.host is not None and inputs.host.describes(inputs):
        sent = (out.block_table, out.cache_seqlens, out.seq_lens)
        out = dataclasses.replace(out, host=dataclasses.replace(inputs.host, sent=sent))
    return out


def relaid_sparse(case: Case, scase: SparseCase) -> SparseCase:
    """The sparse inputs in the case's layout; ``scase`` itself for ``contiguous``."""
    if case.layout == "contiguous":
        return scase
    inputs, move = scase.inputs, MOVES[case.layout]
    changed = {name: move(t) for name in SPARSE_READ if (t := getattr(inputs, name)) is not None}
    changed["kv_pool"] = _records(inputs.kv_pool, case.layout)
    if inputs.extra_kv_pool is not None:
        changed["extra_kv_pool"] = _records(inputs.extra_kv_pool, case.layout)
    return dataclasses.replace(scase, inputs=dataclasses.replace(inputs, **changed))


def relaid_bytes(case: Case, shape: tuple, element_size: int) -> int:
    """The bytes of one tensor's relaid copy in the case's layout (0 for ``contiguous``): the size estimate's."""
    if case.layout in ("contiguous", "split_q"):       # split_q leaves every tensor as built (``split_q_bytes``)
        return 0
    if case.layout == "offset":
        return math.prod(shape) * element_size + 2 * OFFSET_BYTES
    return math.prod(n + (STRIDED_SLACK if i == len(shape) - 1 else 1) for i, n in enumerate(shape)) * element_size


def split_q_bytes(case: Case, q_shape: tuple, element_size: int) -> int:
    """The bytes of q's two parts' buffers (``split_q``) beside q, for ``split_q``; else 0."""
    if case.layout != "split_q":
        return 0
    b, s_q, h, d = q_shape
    return b * s_q * h * (d + PROJECTED_NOPE) * element_size

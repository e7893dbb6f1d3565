"""The oracle's fast form: many attention problems at once, in blocks.

A *problem* is one kernel call's attention (``Problem``).  Its requests are computed in
*blocks* of requests that share a shape, and a request's bits must not depend on which
other calls were computed beside it: a case's numbers are the same run alone or in a chunk.
So the block a request lands in has a shape fixed by the request or by its own call:

- on a GPU, a short request (``SHARED_MAX_KEYS``) joins a *shared* block of its class
  (query, heads, widths, dtypes, scales), its keys padded to ``SHARED_MAX_KEYS``.  A shared
  block always has the same number of request slots; spare ones repeat a real request and
  are thrown away.  Small cases are host-bound, and this is what lets a chunk of them cost
  a few dozen launches per block instead of per case.
- any other request on a GPU goes to one of its own call's blocks: that call's requests
  shortest first, as many as fit ``max_elements`` entries, padded to the longest.
- on the CPU every request is a block of its own, padded to its own last page.  The CPU BLAS
  (MKL's dgemm) orders a product's sums by the whole matrix's shape: the scores of 64 keys
  come out in other last bits when the same keys are multiplied as the first 64 of 160, and a
  matmul's batch count changes them too.  So on the CPU no matmul or reduction has a dimension
  another request (or ``max_elements``) could change.

The arithmetic per block is the batched definition (``attention.key_set_attention_loop``):
keys gathered page by page (a dense key set) or slot by slot (``keysets``) into head-major
``(rows, h_kv, n, d)``, so both matmuls read them in place; keys past a request's length are
zeroed (their scores are masked and their weight is exactly 0, so poisoned memory never leaks in);
the softmax scale goes on q and the normalisation on the output.  Planning reads the key sets
(key counts, tables) on the host.
"""

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

from .fp8 import dequantize_fp8, is_fp8
from .keysets import KeySets

MAX_BLOCK_ELEMENTS = 2 ** 28    # on a GPU, entries of an own block's largest float64 tensor, past one request
SHARED_MAX_KEYS = 256           # on a GPU, requests up to this long share blocks with other calls' requests
SHARED_ROWS = 256               # request slots of a shared block, at most ...
SHARED_BLOCK_ELEMENTS = 2 ** 25 # ... and as many as keep its largest tensor within this


@dataclass(frozen=True)
class Problem:
    """One call's attention: q ``(b, s_q, h_q, d_qk)``, the pool ``(pages, page_size, h_kv, d_qk)``,
    and on the host, what each query token reads (``keysets.KeySets``)."""

    q: torch.Tensor
    kv_pool: torch.Tensor
    keys: KeySets
    softmax_scale: float
    d_v: int
    descale_q: float | None = None
    descale_k: float | None = None


def read_as(x: torch.Tensor, descale, dtype) -> torch.Tensor:
    """``x`` as the kernel reads it, in ``dtype``: fp8 times its descale, anything else as it is."""
    if is_fp8(x.dtype):
        return dequantize_fp8(x, 1.0 if descale is None else float(descale), dtype)
    if descale is not None:
        raise ValueError("a descale was given for a non-fp8 tensor")
    return x.to(dtype)


_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def as_bits(t: torch.Tensor, size: int | None = None) -> torch.Tensor:
    """A view of ``t``'s bits as integers of ``size`` bytes (default: its element size): filled, masked or
    moved through it, no float copy.  Another size needs its last dimension's bytes to divide by it."""
    return t.view(_SAME_SIZE_INT[size or t.element_size()])


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


class _ShapeClass(NamedTuple):
    """What requests computed in one block must share (a dict key: every field hashable)."""

    s_q: int
    h_q: int
    h_kv: int
    d_qk: int
    d_v: int
    n_keys: int                      # keys padded to whole pages
    page_size: int
    unit: int                        # slots per gathered row: a page (dense), or one slot
    q_dtype: torch.dtype
    kv_dtype: torch.dtype
    q_device: torch.device
    kv_device: torch.device
    softmax_scale: float
    descale_q: object
    descale_k: object
    compute_dtype: torch.dtype


@dataclass
class _Block:
    key: _ShapeClass
    rows: int                        # request slots
    members: list = field(default_factory=list)    # (problem index, request index), at most ``rows``

    @property
    def n_keys(self) -> int:
        return self.key.n_keys


def _shape_class(p: Problem, n_keys: int, compute_dtype) -> _ShapeClass:
    _, s_q, h_q, d_qk = p.q.shape
    return _ShapeClass(s_q, h_q, p.kv_pool.shape[2], d_qk, p.d_v, n_keys, p.kv_pool.shape[1], p.keys.unit, p.q.dtype,
                       p.kv_pool.dtype, p.q.device, p.kv_pool.device, p.softmax_scale, p.descale_q, p.descale_k,
                       compute_dtype)


def plan_blocks(problems: list[Problem], compute_dtype, max_elements: int = MAX_BLOCK_ELEMENTS) -> list[_Block]:
    """Every request with keys, in blocks, grouped by key count (``KeySets.counts``).

    On a GPU a short request goes to a *shared* block of its class: ``shared_rows`` slots, keys padded
    to ``SHARED_MAX_KEYS`` (a multiple of the page size): one class whatever the length, so a chunk's
    short requests fill few blocks.  Any other request goes to one of its own call's
    blocks: its long requests shortest first, as many as fit ``max_elements``, padded to the longest.
    The block a request lands in is fixed by the request (shared) or by its own call (own).  On the
    CPU a request is a block alone, its shape fixed by the request (the module's docstring says why).
    """
    shared, blocks = {}, []
    for pi, p in enumerate(problems):
        _, s_q, h_q, d_qk = p.q.shape
        per_key = max(s_q * h_q, p.kv_pool.shape[2] * d_qk)    # scores and keys, per key
        page_size = p.kv_pool.shape[1]
        own = []
        for r, n in enumerate(p.keys.counts):
            if n <= 0:
                continue                  # no keys: out 0, LSE +inf, and nothing read
            if not shares_blocks(p.q.device):
                blocks.append(_Block(_shape_class(p, _round_up(n, page_size), compute_dtype), 1, [(pi, r)]))
                continue
            if n > SHARED_MAX_KEYS:
                own.append(r)
                continue
            n_keys = _round_up(SHARED_MAX_KEYS, page_size)
            key = _shape_class(p, n_keys, compute_dtype)
            block = shared.get(key)
            if block is None or len(block.members) == block.rows:
                block = shared[key] = _Block(key, shared_rows(n_keys, per_key))
                blocks.append(block)
            block.members.append((pi, r))
        blocks += _own_blocks(pi, p, own, per_key, compute_dtype, max_elements)
    return blocks


def joins_shared_blocks(device: torch.device, counts) -> bool:
    """Whether a call with these key counts has a request for a shared block: its oracle gains from
    company.  A call without one is computed in its own blocks alone, with the same bits at any time."""
    return shares_blocks(device) and any(0 < n <= SHARED_MAX_KEYS for n in counts)


def shares_blocks(device: torch.device) -> bool:
    """Whether requests share blocks on this device: on a GPU, where a spare slot costs next to nothing
    and a launch costs more than a small block's arithmetic; not on the CPU, where it is the reverse
    and where a matmul's bits depend on its whole shape (each request is a block alone there)."""
    return device.type == "cuda"


def shared_rows(n_keys: int, per_key: int) -> int:
    return max(1, min(SHARED_ROWS, SHARED_BLOCK_ELEMENTS // (n_keys * per_key)))


def _own_blocks(pi, p: Problem, requests: list, per_key: int, compute_dtype, max_elements) -> list[_Block]:
    page_size = p.kv_pool.shape[1]
    counts = p.keys.counts
    by_length = sorted(requests, key=lambda r: counts[r])
    blocks, start = [], 0
    while start < len(by_length):
        end = start + 1                # sorted: a block's last request is its longest
        while end < len(by_length) and \
                (end + 1 - start) * _round_up(counts[by_length[end]], page_size) * per_key <= max_elements:
            end += 1
        members = [(pi, r) for r in by_length[start:end]]
        n_keys = _round_up(counts[by_length[end - 1]], page_size)
        blocks.append(_Block(_shape_class(p, n_keys, compute_dtype), end - start, members))
        start = end
    return blocks


def _runs(slots):
    """``(problem index, first slot, end slot)`` for each run of consecutive slots of one problem."""
    runs, start = [], 0
    for j in range(1, len(slots) + 1):
        if j == len(slots) or slots[j][0] != slots[start][0]:
            runs.append((slots[start][0], start, j))
            start = j
    return runs


def _block_indices(block: _Block, problems: list[Problem]) -> tuple[list, np.ndarray, np.ndarray]:
    """On the host: per run of one call's slots, its request rows and the pool rows (pages, or single
    slots) their keys are read from ``(k, n_keys // unit)``; and the block's key counts ``(rows,)`` and
    limits ``(rows, s_q)`` (how many keys each query token sees).  Spare slots repeat the last real request."""
    slots = block.members + [block.members[-1]] * (block.rows - len(block.members))
    unit = block.key.unit
    n_rows = block.n_keys // unit
    runs, lengths, limits = [], [], []
    for pi, start, end in _runs(slots):
        keys = problems[pi].keys
        requests = np.array([r for _, r in slots[start:end]])
        run_lengths = np.array([keys.counts[r] for r in requests])
        width = keys.table.shape[1]
        needed = -(-run_lengths // unit)
        if (needed > width).any():
            r = int(requests[np.argmax(needed > width)])
            what = "pages" if unit > 1 else "slots"
            raise ValueError(f"request {r}: {keys.counts[r]} keys need more {what} than the table's {width} columns")
        rows = keys.table[requests][:, np.minimum(np.arange(n_rows), width - 1)]
        # a row past the request's own (table padding, which may hold anything) is read as its first
        # row; the keys read there are padding, zeroed before use
        own_rows = np.arange(n_rows)[None, :] < needed[:, None]
        runs.append((pi, start, end, requests, np.where(own_rows, rows, rows[:, :1])))
        lengths.append(run_lengths)
        limits.append(keys.visible[requests])
    return runs, np.concatenate(lengths), np.concatenate(limits)


def mla_attention_many(problems: list[Problem], compute_dtype=torch.float64,
                       max_elements: int = MAX_BLOCK_ELEMENTS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each problem's out ``(b, s_q, h_q, d_v)`` and LSE ``(b, h_q, s_q)``, in ``compute_dtype``."""
    if len({p.q.device for p in problems}) > 1:
        raise ValueError("all problems must have q on one device")
    results = []
    for p in problems:
        b, s_q, h_q, _ = p.q.shape
        results.append((torch.zeros(b, s_q, h_q, p.d_v, dtype=compute_dtype, device=p.q.device),
                        torch.full((b, h_q, s_q), math.inf, dtype=compute_dtype, device=p.q.device)))
    blocks = plan_blocks(problems, compute_dtype, max_elements)
    if not blocks:
        return results
    planned = [_block_indices(block, problems) for block in blocks]
    host = [a for runs, lengths, limits in planned for a in [lengths, limits] + [x for run in runs for x in run[3:]]]
    sent = iter(_send(host, problems[0].q.device))
    for block, (runs, host_lengths, host_limits) in zip(blocks, planned):
        lengths, limits = next(sent), next(sent)
        sent_runs = [(pi, start, end, next(sent), next(sent)) for pi, start, end, _, _ in runs]
        _run_block(block, problems, results, sent_runs, lengths, limits, compute_dtype,
                   shortest=int(host_lengths.min()), fewest_seen=int(host_limits.min()))
    return results


def _send(arrays: list[np.ndarray], device) -> list[torch.Tensor]:
    """Host index arrays onto the device in one asynchronous copy, as int64 views into one buffer."""
    packed = torch.from_numpy(np.concatenate([a.reshape(-1) for a in arrays]).astype(np.int64))
    if torch.device(device).type != "cpu":
        packed = packed.pin_memory().to(device, non_blocking=True)
    return list(torch.split(packed, [a.size for a in arrays]))


def _run_block(block, problems, results, runs, lengths, limits, compute_dtype, shortest, fewest_seen):
    """Gather a block's queries and key rows (pages or slots) run by run, attend, and copy each real request's rows out.
    ``shortest`` is the fewest keys of the block's requests, ``fewest_seen`` the fewest any token sees:
    keys before them are never padding or masked, so the masking starts there."""
    k = block.key
    s_q, h_q, h_kv, d_qk, d_v, n_keys, unit = k.s_q, k.h_q, k.h_kv, k.d_qk, k.d_v, k.n_keys, k.unit
    first = problems[block.members[0][0]]
    rows, device, pool_device = block.rows, first.q.device, first.kv_pool.device
    n_rows = n_keys // unit
    q = torch.empty(rows, s_q * h_q * d_qk, dtype=first.q.dtype, device=device)
    pages = torch.empty(rows * n_rows, unit * h_kv * d_qk, dtype=first.kv_pool.dtype, device=pool_device)
    for pi, start, end, requests, run_rows in runs:
        p = problems[pi]
        pool_rows = p.kv_pool.reshape(p.kv_pool.shape[0] * k.page_size // unit, -1)    # a page or a slot a row
        torch.index_select(p.q.reshape(p.q.shape[0], -1), 0, requests, out=q[start:end])
        torch.index_select(pool_rows, 0, run_rows.view(-1).to(pool_device), out=pages[start * n_rows:end * n_rows])
    # keys past a request's length (a page's unused tail: poison) are zeroed: their weight is 0, and
    # 0 * NaN would not be.  Zeroed through their bits (+0.0 in every float dtype), before widening.
    if shortest < n_keys:
        padding = torch.arange(shortest, n_keys, device=pool_device)[None, :] >= lengths.to(pool_device)[:, None]
        as_bits(pages).view(rows, n_keys, -1)[:, shortest:].masked_fill_(padding[:, :, None], 0)
    # head-major, (rows, h_kv, n, d), so both matmuls read the keys in place; widened in the same copy
    keys = torch.empty(rows, h_kv, n_keys, d_qk, dtype=compute_dtype, device=device)
    keys.copy_(pages.to(device).view(rows, n_keys, h_kv, d_qk).permute(0, 2, 1, 3))
    if is_fp8(first.kv_pool.dtype):
        keys.mul_(1.0 if first.descale_k is None else float(first.descale_k))     # as read_as dequantises
    elif first.descale_k is not None:
        raise ValueError("a descale was given for a non-fp8 tensor")
    qf = read_as(q.view(rows, s_q, h_q, d_qk), first.descale_q, compute_dtype) * first.softmax_scale
    out, lse = attend_block(qf, keys, limits.view(rows, s_q), d_v, h_q // h_kv, first_hidden=fewest_seen)
    real = len(block.members)
    for pi, start, end, requests, _ in runs:
        if start >= real:
            break                                   # spare slots only
        end = min(end, real)
        out_p, lse_p = results[pi]
        out_p.index_copy_(0, requests[:end - start], out[start:end])
        lse_p.index_copy_(0, requests[:end - start], lse[start:end])


def attend_block(qf, keys, limit, d_v, group, first_hidden=0):
    """Attention of ``rows`` requests: q ``(rows, s_q, h_q, d)`` (scaled), keys ``(rows, h_kv, n, d)``,
    ``limit (rows, s_q)``: how many keys each query token sees (none sees fewer than ``first_hidden``).
    Out ``(rows, s_q, h_q, d_v)``, LSE ``(rows, h_q, s_q)``; a token that sees no key gets out 0 and LSE +inf."""
    rows, s_q, h_q, d_qk = qf.shape
    h_kv, n_keys = keys.shape[1], keys.shape[2]
    qf = qf.view(rows, s_q, h_kv, group, d_qk).permute(0, 2, 3, 1, 4).reshape(rows, h_kv, group * s_q, d_qk)
    scores = torch.matmul(qf, keys.transpose(-1, -2)).view(rows, h_kv, group, s_q, n_keys)
    if first_hidden < n_keys:               # masking only where some token may not see a key: one pass less
        t = torch.arange(first_hidden, n_keys, device=qf.device)
        hidden = t[None, None, :] >= limit[:, :, None]                 # (rows, s_q, keys from first_hidden)
        scores[..., first_hidden:].masked_fill_(hidden[:, None, None], -math.inf)
    top = scores.amax(dim=-1, keepdim=True)                            # (rows, h_kv, g, s_q, 1)
    empty = torch.isneginf(top)                                        # a token that sees no key
    weights = scores.sub_(torch.where(empty, 0.0, top)).exp_()
    total = weights.sum(dim=-1, keepdim=True)
    o = torch.matmul(weights.view(rows, h_kv, group * s_q, n_keys), keys[..., :d_v])
    o = (o.view(rows, h_kv, group, s_q, d_v) / total).masked_fill_(empty, 0.0)
    lse = torch.where(empty, math.inf, total.log() + top)
    return o.permute(0, 3, 1, 2, 4).reshape(rows, s_q, h_q, d_v), lse.view(rows, h_q, s_q)

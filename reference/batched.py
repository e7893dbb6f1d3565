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

The arithmetic of one block, and the gathering of its keys, is ``block_attention``.  Planning reads the
key sets (key counts, tables) on the host.  ``read_as`` and ``as_bits`` are re-exported here, where the
rest of ``reference`` imports them.
"""

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from .block_attention import as_bits, block_indices, read_as, run_block, send_indices  # noqa: F401
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


def mla_attention_many(problems: list[Problem], compute_dtype=torch.float64, max_elements: int = MAX_BLOCK_ELEMENTS,
                       fill_keys=None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each problem's out ``(b, s_q, h_q, d_v)`` and LSE ``(b, h_q, s_q)``, in ``compute_dtype``.
    ``fill_keys``: a one-pass gathering of a block's keys, the same bits (``block_attention.run_block``)."""
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
    planned = [block_indices(block, problems) for block in blocks]
    host = [a for runs, lengths, limits in planned for a in [lengths, limits] + [x for run in runs for x in run[3:]]]
    sent = iter(send_indices(host, problems[0].q.device))
    for block, (runs, host_lengths, host_limits) in zip(blocks, planned):
        lengths, limits = next(sent), next(sent)
        sent_runs = [(pi, start, end, next(sent), next(sent)) for pi, start, end, _, _ in runs]
        run_block(block, problems, results, sent_runs, lengths, limits, compute_dtype,
                   shortest=int(host_lengths.min()), fewest_seen=int(host_limits.min()), fill_keys=fill_keys)
    return results


def oracle_block_bytes(requests: int, longest_keys: int, query_rows: int, key_width: int) -> int:
    """The size estimate's bytes of one call's largest own block (``plan_blocks``): float64 keys and
    scores, ``max(query_rows, key_width)`` entries per key (``query_rows``: s_q * h_q; ``key_width``:
    h_kv * d), for ``requests`` requests of ``longest_keys`` keys, no more than ``MAX_BLOCK_ELEMENTS``,
    and one temporary of either size."""
    return min(MAX_BLOCK_ELEMENTS, requests * max(longest_keys, 1) * max(query_rows, key_width)) * 8 * 3


def oracle_output_bytes(entries: int) -> int:
    """The float64 out ``mla_attention_many`` returns for a call of ``entries`` (b * s_q * h_q * d_v)."""
    return entries * 8

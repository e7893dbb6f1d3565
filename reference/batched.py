"""The oracle's fast form: many attention problems at once, in blocks of one fixed shape.

A *problem* is one kernel call's attention (``Problem``).  Every request of every problem
is computed in a *block*: requests of one shape class (query, heads, widths, dtypes,
scales) whose key counts round up to the same bucket.  The block's shape is a function of
the class and the device alone: it always has ``block_rows`` request slots, spare slots
repeat a real request and are thrown away, and every key row is padded to the bucket.  So
each matmul and each reduction a request goes through has the same shape whatever the
request's company, and a request gets the same bits computed alone or beside a thousand
others: a case's numbers cannot depend on how the harness batched its cases.

Batching is what makes it fast on a GPU: a chunk of small cases costs a few dozen
launches per block instead of per case.  On the CPU, where a spare slot costs real
arithmetic, a block is a single request.

The arithmetic per block is the batched definition (``attention.mla_attention_loop``):
keys gathered head-major, ``(rows, h_kv, n, d)``, so both matmuls read them in place;
padded key slots read a real token of the same request (their score is masked and their
weight is exactly 0), so poisoned memory never leaks in; the softmax scale goes on q and
the normalisation on the output.  Planning reads block tables and lengths on the host.
"""

import math
from dataclasses import dataclass

import numpy as np
import torch

from .fp8 import dequantize_fp8, is_fp8

MAX_BLOCK_ELEMENTS = 2 ** 24   # entries of a block's largest float64 tensor (scores or keys), past one request
BLOCK_ROWS = {"cuda": 64, "cpu": 1}   # the most requests in a block, by device type


@dataclass(frozen=True)
class Problem:
    """One call's attention: q ``(b, s_q, h_q, d_qk)``, the pool ``(pages, page_size, h_kv, d_qk)``,
    and on the host, the block table ``(b, width)`` and each request's key count."""

    q: torch.Tensor
    kv_pool: torch.Tensor
    block_table: np.ndarray
    lengths: tuple
    softmax_scale: float
    d_v: int
    causal: bool = True
    descale_q: float | None = None
    descale_k: float | None = None


def key_bucket(n: int) -> int:
    """The key count a request of ``n`` keys is padded to: a multiple of 64 (every row of a block
    starts equally aligned), and within a quarter-octave above 256 (at most 25% padding)."""
    if n <= 256:
        return max(64, -(-n // 64) * 64)
    step = 1 << ((n - 1).bit_length() - 3)
    return -(-n // step) * step


def block_rows(n_keys: int, per_key: int, device_type: str, max_elements: int) -> int:
    """Request slots in a block of ``n_keys``-key rows: as many as fit ``max_elements``, up to the device's cap."""
    cap = BLOCK_ROWS.get(device_type, 1)
    return max(1, min(cap, max_elements // (n_keys * per_key)))


def read_as(x: torch.Tensor, descale, dtype) -> torch.Tensor:
    if is_fp8(x.dtype):
        return dequantize_fp8(x, 1.0 if descale is None else float(descale), dtype)
    if descale is not None:
        raise ValueError("a descale was given for a non-fp8 tensor")
    return x.to(dtype)


def _shape_class(p: Problem, n_keys: int, compute_dtype) -> tuple:
    b, s_q, h_q, d_qk = p.q.shape
    return (s_q, h_q, p.kv_pool.shape[2], d_qk, p.d_v, n_keys, p.q.dtype, p.kv_pool.dtype, p.q.device,
            p.kv_pool.device, p.softmax_scale, p.descale_q, p.descale_k, compute_dtype)


@dataclass
class _Block:
    key: tuple                       # the shape class
    rows: int                        # request slots
    members: list                    # (problem index, request index), at most ``rows``


def plan_blocks(problems: list[Problem], compute_dtype, max_elements: int) -> list[_Block]:
    """Every request with keys, in blocks by shape class, in the order the problems give them."""
    open_blocks, blocks = {}, []
    for pi, p in enumerate(problems):
        _, s_q, h_q, d_qk = p.q.shape
        per_key = max(s_q * h_q, p.kv_pool.shape[2] * d_qk)    # scores and keys, per key
        for r, n in enumerate(p.lengths):
            if n <= 0:
                continue                  # no keys: out 0, LSE +inf, and nothing read
            n_keys = key_bucket(n)
            key = _shape_class(p, n_keys, compute_dtype)
            block = open_blocks.get(key)
            if block is None or len(block.members) == block.rows:
                rows = block_rows(n_keys, per_key, p.q.device.type, max_elements)
                block = open_blocks[key] = _Block(key, rows, [])
                blocks.append(block)
            block.members.append((pi, r))
    return blocks


def _runs(members):
    """``(problem index, first slot, end slot)`` for each run of consecutive slots of one problem."""
    runs, start = [], 0
    for j in range(1, len(members) + 1):
        if j == len(members) or members[j][0] != members[start][0]:
            runs.append((members[start][0], start, j))
            start = j
    return runs


def _block_indices(block: _Block, problems: list[Problem]) -> tuple[list, np.ndarray]:
    """On the host: per run of one problem's slots, its request rows and the pool rows
    ``(slot * h_kv + head)`` of their keys; and the block's key limits ``(rows, s_q)``, how many keys
    each query token sees.  Spare slots repeat the last real request."""
    slots = block.members + [block.members[-1]] * (block.rows - len(block.members))
    s_q, _, h_kv, _, _, n_keys = block.key[:6]
    t = np.arange(n_keys)
    runs, limits = [], []
    for pi, start, end in _runs(slots):
        p = problems[pi]
        page_size, width = p.kv_pool.shape[1], p.block_table.shape[1]
        requests = np.array([r for _, r in slots[start:end]])
        lengths = np.array([p.lengths[r] for r in requests])
        # columns past the table only ever back padded keys, which are replaced below
        pages = p.block_table[requests][:, np.minimum(t // page_size, width - 1)].astype(np.int64)
        key_slots = pages * page_size + t % page_size
        key_slots = np.where(t < lengths[:, None], key_slots, key_slots[:, :1])   # padding: the first token
        pool_rows = key_slots[:, None, :] * h_kv + np.arange(h_kv)[None, :, None]
        runs.append((pi, start, end, requests, pool_rows.reshape(-1)))
        i = np.arange(s_q)
        limit = lengths[:, None] - s_q + i[None, :] + 1 if p.causal else np.repeat(lengths[:, None], s_q, 1)
        limits.append(np.clip(limit, 0, None))
    return runs, np.concatenate(limits)


def mla_attention_many(problems: list[Problem], compute_dtype=torch.float64,
                       max_elements: int = MAX_BLOCK_ELEMENTS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each problem's out ``(b, s_q, h_q, d_v)`` and LSE ``(b, h_q, s_q)``, in ``compute_dtype``."""
    results = []
    for p in problems:
        b, s_q, h_q, _ = p.q.shape
        results.append((torch.zeros(b, s_q, h_q, p.d_v, dtype=compute_dtype, device=p.q.device),
                        torch.full((b, h_q, s_q), math.inf, dtype=compute_dtype, device=p.q.device)))
    blocks = plan_blocks(problems, compute_dtype, max_elements)
    if not blocks:
        return results
    planned = [_block_indices(block, problems) for block in blocks]
    host = [a for runs, limits in planned for run in runs for a in run[3:]] + [limits for _, limits in planned]
    sent = iter(_send(host, problems[0].q.device))
    sent_runs = [[(pi, start, end, next(sent), next(sent)) for pi, start, end, _, _ in runs] for runs, _ in planned]
    for block, runs in zip(blocks, sent_runs):
        _run_block(block, problems, results, runs, next(sent), compute_dtype)
    return results


def _send(arrays: list[np.ndarray], device) -> list[torch.Tensor]:
    """Host index arrays onto the device in one asynchronous copy, as int64 views into one buffer."""
    packed = torch.from_numpy(np.concatenate([a.reshape(-1) for a in arrays]).astype(np.int64))
    if torch.device(device).type != "cpu":
        packed = packed.pin_memory().to(device, non_blocking=True)
    return list(torch.split(packed, [a.size for a in arrays]))


def _run_block(block, problems, results, runs, limit, compute_dtype):
    """Gather a block's queries and keys run by run, attend, and copy each real request's rows out."""
    s_q, h_q, h_kv, d_qk, d_v, n_keys = block.key[:6]
    first = problems[block.members[0][0]]
    rows, device = block.rows, first.q.device
    q = torch.empty(rows, s_q * h_q * d_qk, dtype=first.q.dtype, device=device)
    keys = torch.empty(rows * h_kv * n_keys, d_qk, dtype=first.kv_pool.dtype, device=first.kv_pool.device)
    per_slot = h_kv * n_keys
    for pi, start, end, requests, pool_rows in runs:
        p = problems[pi]
        torch.index_select(p.q.reshape(p.q.shape[0], -1), 0, requests, out=q[start:end])
        torch.index_select(p.kv_pool.reshape(-1, d_qk), 0, pool_rows.to(p.kv_pool.device),
                           out=keys[start * per_slot:end * per_slot])
    keys = read_as(keys.view(rows, h_kv, n_keys, d_qk).to(device), first.descale_k, compute_dtype)
    qf = read_as(q.view(rows, s_q, h_q, d_qk), first.descale_q, compute_dtype) * first.softmax_scale
    out, lse = attend_block(qf, keys, limit.view(rows, s_q), d_v, h_q // h_kv)
    real = len(block.members)
    for pi, start, end, requests, _ in runs:
        if start >= real:
            break                                   # spare slots only
        end = min(end, real)
        out_p, lse_p = results[pi]
        out_p.index_copy_(0, requests[:end - start], out[start:end])
        lse_p.index_copy_(0, requests[:end - start], lse[start:end])


def attend_block(qf, keys, limit, d_v, group):
    """Attention of ``rows`` requests: q ``(rows, s_q, h_q, d)`` (scaled), keys ``(rows, h_kv, n, d)``,
    ``limit (rows, s_q)``: how many keys each query token sees.  Out ``(rows, s_q, h_q, d_v)``, LSE
    ``(rows, h_q, s_q)``; a token that sees no key gets out 0 and LSE +inf."""
    rows, s_q, h_q, d_qk = qf.shape
    h_kv, n_keys = keys.shape[1], keys.shape[2]
    qf = qf.view(rows, s_q, h_kv, group, d_qk).permute(0, 2, 3, 1, 4).reshape(rows, h_kv, group * s_q, d_qk)
    scores = torch.matmul(qf, keys.transpose(-1, -2)).view(rows, h_kv, group, s_q, n_keys)
    t = torch.arange(n_keys, device=qf.device)
    visible = t[None, None, :] < limit[:, :, None]                     # (rows, s_q, n)
    scores.masked_fill_(~visible[:, None, None], -math.inf)
    top = scores.amax(dim=-1, keepdim=True)                            # (rows, h_kv, g, s_q, 1)
    empty = torch.isneginf(top)                                        # a token that sees no key
    weights = scores.sub_(torch.where(empty, 0.0, top)).exp_()
    total = weights.sum(dim=-1, keepdim=True)
    o = torch.matmul(weights.view(rows, h_kv, group * s_q, n_keys), keys[..., :d_v])
    o = (o.view(rows, h_kv, group, s_q, d_v) / total).masked_fill_(empty, 0.0)
    lse = torch.where(empty, math.inf, total.log() + top)
    return o.permute(0, 3, 1, 2, 4).reshape(rows, s_q, h_q, d_v), lse.view(rows, h_q, s_q)

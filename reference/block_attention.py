"""One block of the batched oracle (``batched`` plans the blocks): its requests' queries and keys
gathered, and their attention.

The arithmetic per block is the batched definition (``attention.key_set_attention_loop``):
keys gathered page by page (a dense key set) or slot by slot (``keysets``) into head-major
``(rows, h_kv, n, d)``, so both matmuls read them in place; keys past a request's length are
zeroed (their scores are masked and their weight is exactly 0, so poisoned memory never leaks in);
the softmax scale goes on q and the normalisation on the output.

A caller may hand ``run_block`` a one-pass form of the key gathering, ``fill_keys`` (the harness hands its
Triton pass, ``widen_kernel.fill``): it writes the bits ``_gather_and_widen`` writes, or declines and
PyTorch's form runs.  This package never imports it.
"""

import math

import numpy as np
import torch

from .fp8 import dequantize_fp8, is_fp8


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


def _runs(slots):
    """``(problem index, first slot, end slot)`` for each run of consecutive slots of one problem."""
    runs, start = [], 0
    for j in range(1, len(slots) + 1):
        if j == len(slots) or slots[j][0] != slots[start][0]:
            runs.append((slots[start][0], start, j))
            start = j
    return runs


def block_indices(block, problems: list) -> tuple[list, np.ndarray, np.ndarray]:
    """On the host: per run of one call's slots, its request rows and the pool rows (pages, or single
    slots) their keys are read from ``(k, n_keys // unit)``; and the block's key counts ``(rows,)`` and
    limits ``(rows, s_q)`` (how many keys each query token sees).  Spare slots repeat the last real request.
    ``block`` is a ``batched._Block`` of these ``batched.Problem``s (planned there, which imports this)."""
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


def send_indices(arrays: list[np.ndarray], device) -> list[torch.Tensor]:
    """Host index arrays onto the device in one asynchronous copy, as int64 views into one buffer."""
    packed = torch.from_numpy(np.concatenate([a.reshape(-1) for a in arrays]).astype(np.int64))
    if torch.device(device).type != "cpu":
        packed = packed.pin_memory().to(device, non_blocking=True)
    return list(torch.split(packed, [a.size for a in arrays]))


def run_block(block, problems, results, runs, lengths, limits, compute_dtype, shortest, fewest_seen, fill_keys=None):
    """Gather a block's queries and key rows (pages or slots) run by run, attend, and copy each real request's rows out.
    ``shortest`` is the fewest keys of the block's requests, ``fewest_seen`` the fewest any token sees:
    keys before them are never padding or masked, so the masking starts there.  ``fill_keys(keys, pool_rows,
    rows, lengths, unit) -> bool``: a one-pass gathering of a block of one run, true where it wrote the keys
    (the module's note); None or false: PyTorch's form."""
    k = block.key
    s_q, h_q, h_kv, d_qk, d_v, n_keys, unit = k.s_q, k.h_q, k.h_kv, k.d_qk, k.d_v, k.n_keys, k.unit
    first = problems[block.members[0][0]]
    rows, device = block.rows, first.q.device
    q = torch.empty(rows, s_q * h_q * d_qk, dtype=first.q.dtype, device=device)
    for pi, start, end, requests, _ in runs:
        p = problems[pi]
        torch.index_select(p.q.reshape(p.q.shape[0], -1), 0, requests, out=q[start:end])
    # head-major, (rows, h_kv, n, d), so both matmuls read the keys in place
    keys = torch.empty(rows, h_kv, n_keys, d_qk, dtype=compute_dtype, device=device)
    if not (fill_keys and len(runs) == 1 and fill_keys(keys, _pool_rows(first, k), runs[0][4], lengths, unit)):
        _gather_and_widen(keys, block, problems, runs, lengths, shortest)
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


def _pool_rows(p, k) -> torch.Tensor:
    """The pool as rows of one page, or one slot, each (``k.unit`` slots)."""
    return p.kv_pool.reshape(p.kv_pool.shape[0] * k.page_size // k.unit, -1)


def _gather_and_widen(keys, block, problems, runs, lengths, shortest):
    """PyTorch's form of the gathering (``run_block``'s ``fill_keys`` in one pass), for any block: the key
    rows copied out run by run, the keys past each request's length zeroed, and the whole widened into
    ``keys`` in one strided copy."""
    k = block.key
    rows, n_keys, n_rows = block.rows, k.n_keys, k.n_keys // k.unit
    pool_device = problems[block.members[0][0]].kv_pool.device
    pages = torch.empty(rows * n_rows, k.unit * k.h_kv * k.d_qk, dtype=k.kv_dtype, device=pool_device)
    for pi, start, end, _, run_rows in runs:
        torch.index_select(_pool_rows(problems[pi], k), 0, run_rows.view(-1).to(pool_device),
                           out=pages[start * n_rows:end * n_rows])
    # keys past a request's length (a page's unused tail: poison) are zeroed: their weight is 0, and
    # 0 * NaN would not be.  Zeroed through their bits (+0.0 in every float dtype), before widening.
    if shortest < n_keys:
        padding = torch.arange(shortest, n_keys, device=pool_device)[None, :] >= lengths.to(pool_device)[:, None]
        as_bits(pages).view(rows, n_keys, -1)[:, shortest:].masked_fill_(padding[:, :, None], 0)
    keys.copy_(pages.to(keys.device).view(rows, n_keys, k.h_kv, k.d_qk).permute(0, 2, 1, 3))


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

"""The reference, called on cases' inputs: what every backend is compared with.

The oracle's unit of work is a key set (``reference.keysets``): what each query token reads.  The dense
inputs fill it from the block table and lengths (``inputs.key_sets``); a sparse case's key sets are its
index rows (``keysets.per_token``'s form), read from its records by ``sparse_oracle``.  All the calls
handed over together go to ``reference.mla_attention_many`` at once: a chunk of small cases shares its
launches, and each call gets the bits it gets alone (``reference/batched.py``).  On CUDA a block's keys are
gathered in one Triton pass (``widen_kernel.fill``, handed over here).
"""

import dataclasses

import numpy as np
import torch

from reference import Problem, descale_scalar, joins_shared_blocks, mla_attention_many
from reference.batched import MAX_BLOCK_ELEMENTS
from reference.block_attention import read_as
from reference.sparse import weighted_value_magnitudes

from ..building.inputs import Inputs, key_counts, key_sets
from ..fast import widen_kernel


def problem(inputs: Inputs) -> Problem:
    """The attention these inputs ask for, with the key sets read on the host."""
    return Problem(inputs.q, inputs.kv_pool, key_sets(inputs), inputs.softmax_scale, inputs.d_v,
                   descale_scalar(inputs.descale_q), descale_scalar(inputs.descale_k))


def gains_from_company(inputs: Inputs) -> bool:
    """Whether these inputs' oracle is cheaper with other calls' (short requests on a GPU share blocks);
    either way its bits are the same."""
    return joins_shared_blocks(inputs.q.device, key_counts(inputs))


def model_precision(inputs: Inputs) -> Inputs:
    """fp8 only: the unquantised q and KV, for the end-to-end error."""
    return dataclasses.replace(inputs, q=inputs.q_model, kv_pool=inputs.kv_pool_model, descale_q=None,
                               descale_k=None, q_model=None, kv_pool_model=None)


def expected_many(calls: list[Inputs], compute_dtype=torch.float64) -> list[tuple]:
    """The oracle's ``(out, lse)`` for each of these inputs (for fp8: the quantised q and KV), together."""
    return mla_attention_many([problem(inputs) for inputs in calls], compute_dtype, fill_keys=widen_kernel.fill)


def expected(inputs: Inputs, compute_dtype=torch.float64):
    """The oracle on exactly the kernel's inputs."""
    return expected_many([inputs], compute_dtype)[0]


# A second look's block of rows: its listed keys (rows x longest x d float64 entries) no more than the
# oracle's own largest block (``reference.batched.MAX_BLOCK_ELEMENTS``, which the size estimate budgets)
LOOK_BLOCK_ELEMENTS = MAX_BLOCK_ELEMENTS


def value_magnitudes(inputs: Inputs, rows: torch.Tensor) -> torch.Tensor:
    """``sum_j p_j |V_j|`` ``(len(rows), heads, d_v)`` float64 of the flattened query ``rows`` (``b * s_q``), each
    row over the keys its token reads: the scale of a kernel's weight-rounding error there
    (``weight_rounding``)."""
    return torch.cat([torch.cat([weighted_value_magnitudes(q, keys, indices, inputs.softmax_scale, inputs.d_v)
                                 for q, keys, indices in heads], dim=1)
                      for heads in _listed_rows(inputs, rows)])


def score_magnitudes(inputs: Inputs, rows: torch.Tensor) -> torch.Tensor:
    """``scale * sum_j p_j sum_i |q_i k_ij|`` ``(len(rows), heads)`` float64 of the flattened query ``rows``: the
    scale of a float32 kernel's score-rounding error in LSE there (``weight_rounding.LSE``)."""
    blocks = []
    for heads in _listed_rows(inputs, rows):
        parts = []
        for q, keys, indices in heads:
            keys_seen = weighted_value_magnitudes(q, keys, indices, inputs.softmax_scale, keys.shape[-1])  # sum p|k|
            parts.append((keys_seen * q.abs()).sum(-1) * inputs.softmax_scale)
        blocks.append(torch.cat(parts, dim=1))
    return torch.cat(blocks)


def _listed_rows(inputs: Inputs, rows: torch.Tensor):
    """The flattened query ``rows`` in blocks (``LOOK_BLOCK_ELEMENTS``), each block a list per KV head of
    ``(q (block rows, its query heads, d), keys (slots, d), indices (block rows, longest))``, float64 as the
    kernel reads them: ``keys`` only the slots the block's rows read (a serving-scale pool whole in float64
    is tens of GiB), each row's ``indices`` into them (-1 past its keys).  The KV heads' query heads in
    order, so their results join along the head axis, and the blocks along the rows."""
    b, s_q, heads, d = inputs.q.shape
    page_size, kv_heads = inputs.kv_pool.shape[1], inputs.kv_pool.shape[2]
    sets = key_sets(inputs)
    lists = [sets.slot_list(t // s_q)[:sets.visible[t // s_q, t % s_q]] for t in rows.tolist()]
    q = read_as(inputs.q.reshape(b * s_q, heads, d)[rows.to(inputs.q.device)], descale_scalar(inputs.descale_q),
                torch.float64)
    per_block = max(1, LOOK_BLOCK_ELEMENTS // (max([len(x) for x in lists] + [1]) * d))
    group = heads // kv_heads
    for r0 in range(0, len(lists), per_block):
        block = lists[r0:r0 + per_block]
        slots = np.unique(np.concatenate([np.asarray(x, dtype=np.int64) for x in block] + [np.zeros(0, np.int64)]))
        indices = np.full((len(block), max([len(x) for x in block] + [1])), -1, dtype=np.int64)
        for i, listed in enumerate(block):
            indices[i, :len(listed)] = np.searchsorted(slots, listed)
        pages, offsets = (torch.from_numpy(x).to(inputs.kv_pool.device) for x in np.divmod(slots, page_size))
        yield [(q[r0:r0 + per_block, g * group:(g + 1) * group],
                read_as(inputs.kv_pool[pages, offsets, g], descale_scalar(inputs.descale_k), torch.float64),
                torch.from_numpy(indices)) for g in range(kv_heads)]

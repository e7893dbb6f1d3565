"""The reference, called on cases' inputs: what every backend is compared with.

All the calls handed over together go to ``reference.mla_attention_many`` at once: a chunk of
small cases shares its launches, and each call gets the bits it gets alone (``reference/batched.py``).
"""

import dataclasses

import torch

from reference import Problem, descale_scalar, joins_shared_blocks, mla_attention_many

from .inputs import Inputs, host_copy


def problem(inputs: Inputs) -> Problem:
    """The attention these inputs ask for, with the table and lengths read from the host's copies."""
    host = host_copy(inputs)
    return Problem(inputs.q, inputs.kv_pool, host.block_table.numpy(), tuple(host.cache_seqlens.tolist()),
                   inputs.softmax_scale, inputs.d_v, inputs.causal,
                   descale_scalar(inputs.descale_q), descale_scalar(inputs.descale_k))


def gains_from_company(inputs: Inputs) -> bool:
    """Whether these inputs' oracle is cheaper with other calls' (short requests on a GPU share blocks);
    either way its bits are the same."""
    return joins_shared_blocks(inputs.q.device, host_copy(inputs).cache_seqlens.tolist())


def model_precision(inputs: Inputs) -> Inputs:
    """fp8 only: the unquantised q and KV, for the end-to-end error."""
    return dataclasses.replace(inputs, q=inputs.q_model, kv_pool=inputs.kv_pool_model, descale_q=None,
                               descale_k=None, q_model=None, kv_pool_model=None)


def expected_many(calls: list[Inputs], compute_dtype=torch.float64) -> list[tuple]:
    """The oracle's ``(out, lse)`` for each of these inputs (for fp8: the quantised q and KV), together."""
    return mla_attention_many([problem(inputs) for inputs in calls], compute_dtype)


def expected(inputs: Inputs, compute_dtype=torch.float64):
    """The oracle on exactly the kernel's inputs."""
    return expected_many([inputs], compute_dtype)[0]

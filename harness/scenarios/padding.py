"""``padding``: table padding (-1, 1, a huge id) and unused-slot contents (NaN, large values) must not matter."""

import dataclasses

import torch

from ..building.pool import PADDING_VALUES, build_block_table
from ..judging.checks import PADDING
from ._common import build_inputs, judge, launch
from ._evidence import bitwise_equal, first_difference


def padding_variants(inputs):
    """The same logical inputs with other table padding and other garbage in unused slots."""
    width = inputs.block_table.shape[1] + 2            # every request gets padded entries
    seqs = inputs.cache_seqlens.tolist()
    real = torch.zeros(inputs.num_pages * inputs.page_size, dtype=torch.bool)
    for r, n in enumerate(seqs):
        real[inputs.req_to_token[inputs.req_pool_indices[r], :n].long()] = True
    real = real.to(inputs.device)
    variants = {}
    for policy in ("minus_one", "one", "huge"):
        table = build_block_table(inputs.req_to_token, inputs.req_pool_indices, seqs, inputs.page_size, width,
                                  PADDING_VALUES[policy]).to(inputs.device)
        variants[f"table={policy}"] = dataclasses.replace(inputs, block_table=table)
    base_table = variants["table=minus_one"].block_table
    for fill_name, fill in (("nan", float("nan")), ("large", 3.0e4 if not inputs.is_fp8 else 400.0)):
        pool = inputs.kv_pool.clone()
        flat = pool.view(-1, *pool.shape[2:])
        junk = torch.full_like(flat[~real], fill, dtype=torch.float32).to(pool.dtype)
        flat[~real] = junk
        variants[f"unused={fill_name}"] = dataclasses.replace(inputs, kv_pool=pool, block_table=base_table)
    return variants


def run(case, backend, device, waits: bool = True):
    inputs = build_inputs(case, device)
    call = launch(backend, inputs, waits)
    out, lse = call.out, call.lse
    failures, messages, same, others = [], [], {}, []
    for name, variant in padding_variants(inputs).items():
        others.append(launch(backend, variant, waits))
        o, l = others[-1].out, others[-1].lse
        same[name] = bitwise_equal(o, out) and bitwise_equal(l, lse)
        if not same[name]:
            failures.append(PADDING)
            where = first_difference(o, out) if not bitwise_equal(o, out) else "lse " + first_difference(l, lse)
            messages.append(f"{case.id}: output changes with {name}: {where}")
    return judge(case, backend, inputs, call, others=others, extra_failures=failures,
                 extra_metrics={PADDING: {"identical": same}}, extra_messages=messages)

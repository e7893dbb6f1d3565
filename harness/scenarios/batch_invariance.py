"""``batch_invariance``: each request alone against inside the batch, bounded by the dtype's tolerance."""

import dataclasses

from ..building.pool import pages_for
from ..judging.checks import BATCH_INVARIANCE
from ..judging.compare import check_tensor, describe
from ..judging.tolerances import TOLERANCES
from ._common import build_inputs, judge, launch
from ._evidence import bitwise_equal


def request_alone(inputs, r: int):
    """Request ``r`` as a batch of one, over the same pool."""
    one = lambda t: t[r:r + 1]   # noqa: E731
    n_pages = max(1, pages_for(int(inputs.cache_seqlens[r]), inputs.page_size))
    optional = {name: one(t) for name in ("q_model", "q_nope", "q_rope") if (t := getattr(inputs, name)) is not None}
    return dataclasses.replace(
        inputs, q=one(inputs.q), block_table=one(inputs.block_table)[:, :n_pages].contiguous(),
        cache_seqlens=one(inputs.cache_seqlens), seq_lens=one(inputs.seq_lens),
        req_pool_indices=one(inputs.req_pool_indices), **optional)


def run(case, backend, device, waits: bool = True):
    inputs = build_inputs(case, device)
    call = launch(backend, inputs, waits)
    out, lse, others = call.out, call.lse, []
    tol = TOLERANCES[case.dtype]
    failures, messages = [], []
    worst_out = worst_lse = 0.0
    bitwise = True
    for r in range(inputs.batch_size):
        others.append(launch(backend, request_alone(inputs, r), waits))
        o, l = others[-1].out, others[-1].lse
        in_batch_lse = None if lse is None else lse[r:r + 1]
        bitwise &= bitwise_equal(o, out[r:r + 1]) and bitwise_equal(l, in_batch_lse)
        co = check_tensor("out", o, out[r:r + 1].double(), tol.out)
        cl = None if l is None else check_tensor("lse", l, in_batch_lse.double(), tol.lse)
        worst_out, worst_lse = max(worst_out, co.max_abs_err), max(worst_lse, cl.max_abs_err if cl else 0.0)
        for c in filter(None, (co, cl)):
            if not c.passed:
                failures.append(BATCH_INVARIANCE)
                messages.append(f"{case.id}: request {r} alone vs in the batch: {describe(c)}")
    metrics = {BATCH_INVARIANCE: {"bitwise_equal": bitwise, "max_abs_dev_out": worst_out,
                                  "max_abs_dev_lse": worst_lse}}
    return judge(case, backend, inputs, call, others=others, extra_failures=failures, extra_metrics=metrics,
                 extra_messages=messages)

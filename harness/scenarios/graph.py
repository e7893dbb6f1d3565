"""``graph``: capture a CUDA graph once at a bucket batch size, replay it many steps.

As SGLang serves: the graph is captured at the bucket size with every row at
the fill seq len; each step then has a smaller or equal real batch whose
requests have grown, padding rows get the fill value, the engine writes the
new tokens' KV, and the backend copies fresh metadata into the captured
buffers before replay.  Inputs come from the same ``KVStore`` every scenario's
inputs come from, and the engine's eager call goes through the same ``launch``.
Checks, per step:

- graph replay == an eager call on the same padded batch and buffers, bit for bit;
- graph replay vs the engine's eager call on the real batch alone (-1 padded
  table, fresh metadata): within the dtype's tolerance, bitwise equality recorded;
- the real rows against the oracle, within tolerance (dtypes, LSE base and empty rows as the backend declares);
- the metadata and table buffers keep their addresses.
"""

import torch

from .. import oracle
from ..checks import GRAPH_ADDRESSES, GRAPH_REPLAY_VS_EAGER, GRAPH_VS_ENGINE_EAGER, INPUTS_UNCHANGED, tensor_check
from ..compare import check_tensor, describe, describe_failure
from ..conventions import kernel_view
from ..inputs import KVStore, cache_seqlens_for, draw_normal, draw_seq_lens, model_dtype_of
from ..outcome import Outcome
from ..phases import phase
from ..pool import pages_for, validate_block_table
from ..tolerances import TOLERANCES
from ._common import bitwise_equal, compare_with, first_difference, launch

GRAPH_STEPS = 24


def _real_batch_sizes(bucket: int, gen: torch.Generator) -> list[int]:
    sizes = torch.randint(1, bucket + 1, (GRAPH_STEPS,), generator=gen).tolist()
    sizes[0] = bucket                     # one full step, and at least one padded one
    sizes[1] = max(1, bucket - 1) if bucket > 1 else 1
    return sizes


def run(case, backend, device):
    if not hasattr(backend, "graph_session"):
        # the harness's limit, not the kernel's: say so rather than blame the kernel
        return Outcome.unsupported(f"mla-verify reproduces CUDA-graph capture and replay only for SGLang's FlashMLA "
                                   f"path (a backend's graph_session); {backend.name} has none yet")
    if torch.device(device).type != "cuda":
        return Outcome.unsupported("CUDA-graph replay needs a CUDA device")
    gen = torch.Generator().manual_seed(case.seed)
    bucket, s_q, P = case.batch_size, case.s_q, case.page_size
    drafts = s_q if case.mode == "verify" else 0
    grow = s_q                                    # decode: one token a step; verify: the accepted drafts
    dgen = torch.Generator(device=device).manual_seed(case.seed)
    model_dtype = model_dtype_of(case)
    with phase("inputs"):
        prefix0 = [max(1, n) for n in draw_seq_lens(case)]
        final = [n + GRAPH_STEPS * grow for n in cache_seqlens_for(case, prefix0)]
        tokens = draw_normal((sum(final), case.kv_heads, case.d_qk), dgen, model_dtype)
        store = KVStore(case, final, tokens, device)
    layout = store.layout

    def rows_pages(cache):
        return [layout.req_to_token[layout.req_pool_indices[r], torch.arange(pages_for(n, P)) * P] // P
                for r, n in enumerate(cache)]

    first_cache = cache_seqlens_for(case, prefix0)
    store.write_up_to(first_cache)
    template = store.inputs(torch.zeros(bucket, s_q, case.heads, case.d_qk, dtype=model_dtype, device=device),
                            first_cache)
    session = backend.graph_session(bucket, max(final), template)
    capture_fill = [session.SEQ_LEN_FILL + drafts] * bucket
    session.capture(bucket, rows_pages([session.SEQ_LEN_FILL] * bucket))
    addresses = session.addresses()

    tol = TOLERANCES[case.dtype]
    failures, messages = [], []
    worst = {"graph_vs_engine_eager_out": 0.0, "ref_out_worst_ratio": 0.0, "ref_lse_worst_ratio": 0.0}
    engine_bitwise = True
    sizes = _real_batch_sizes(bucket, gen)
    last_checks = None
    kernel_ms = 0.0
    for step, bs in enumerate(sizes):
        prefix = [n + step * grow for n in prefix0]
        cache = cache_seqlens_for(case, prefix)
        store.write_up_to(cache[:bs])
        q_model = draw_normal((bs, s_q, case.heads, case.d_qk), dgen, model_dtype)
        padded_seq = torch.tensor(prefix[:bs] + [session.SEQ_LEN_FILL] * (bucket - bs), dtype=torch.int32,
                                  device=device)
        padded_cache = cache[:bs] + capture_fill[bs:]
        # padding rows have req_pool_index 0 in SGLang, so their one page is req_to_token[0, 0] // P
        pad_page = layout.req_to_token[0, :1].long() // P
        pages = rows_pages(padded_cache[:bs]) + [pad_page] * (bucket - bs)
        validate_block_table(session.table, torch.tensor(padded_cache, dtype=torch.int32), layout.num_pages, P)
        out_g, lse_g = session.replay(q_model, padded_seq, pages)
        out_g, lse_g = out_g[:bs].clone(), lse_g[:bs].clone()
        if session.addresses() != addresses:
            failures.append(GRAPH_ADDRESSES)
            messages.append(f"{case.id}: step {step}: metadata/table buffers moved: {session.addresses()} "
                            f"vs {addresses} at capture")
        width = max(1, max(pages_for(n, P) for n in padded_cache))
        out_e, lse_e = session.eager_same_buffers(width)
        if not (bitwise_equal(out_g, out_e[:bs]) and bitwise_equal(lse_g, lse_e[:bs])):
            failures.append(GRAPH_REPLAY_VS_EAGER)
            messages.append(f"{case.id}: step {step} (bs {bs}/{bucket}): replay differs from an eager call on "
                            f"the same buffers, {first_difference(out_g, out_e[:bs])}")
        inputs = store.inputs(q_model, cache[:bs])
        eager = launch(backend, inputs)              # the engine's eager call on the real batch
        out_s, lse_s = eager.out, eager.lse
        kernel_ms += float(eager.kernel_ms)
        if bool(eager.witness.changed):
            failures.append(INPUTS_UNCHANGED)
            messages.append(f"{case.id}: step {step}: the eager call changed its inputs: {eager.witness.describe()}")
        engine_bitwise &= bitwise_equal(out_g, out_s) and bitwise_equal(lse_g, lse_s)
        dev_check = check_tensor("out", out_g, out_s.double(), tol.out)
        worst["graph_vs_engine_eager_out"] = max(worst["graph_vs_engine_eager_out"], dev_check.max_abs_err)
        if not dev_check.passed:
            failures.append(GRAPH_VS_ENGINE_EAGER)
            messages.append(f"{case.id}: step {step}: replay vs the engine's eager call: {describe(dev_check)}")
        with phase("oracle"):
            exp_out, exp_lse = oracle.expected(kernel_view(inputs, backend.capabilities))
        with phase("compare"):
            co, cl, _ = compare_with(backend, inputs, out_g, lse_g, exp_out, exp_lse, tol)
        worst["ref_out_worst_ratio"] = max(worst["ref_out_worst_ratio"], co.worst_ratio)
        worst["ref_lse_worst_ratio"] = max(worst["ref_lse_worst_ratio"], cl.worst_ratio)
        for c in (co, cl):
            if not c.passed:
                failures.extend(tensor_check(c.name, f) for f in c.failures)
                messages.append(f"step {step}: " + describe_failure(case.id, c))
        last_checks = (co, cl)
    return Outcome.judged(
        sorted(set(failures)), messages=messages[:20],
        metrics={"out": last_checks[0].to_dict(), "lse": last_checks[1].to_dict(),
                 "graph": {"steps": GRAPH_STEPS, "bucket": bucket, "real_batch_sizes": sizes,
                           "engine_eager_bitwise_equal": engine_bitwise, **worst}},
        details={"seq_lens": prefix0, "cache_seqlens": first_cache}, kernel_ms=kernel_ms)

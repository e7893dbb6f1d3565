"""The CUDA-graph replay scenario: capture once at a bucket batch size, replay many steps.

As SGLang serves: the graph is captured at the bucket size with every row at
the fill seq len; each step then has a smaller or equal real batch whose
requests have grown, padding rows get the fill value, the engine writes the
new tokens' KV, and the backend copies fresh metadata into the captured
buffers before replay.  Checks, per step:

- graph replay == an eager call on the same padded batch and buffers, bit for bit;
- graph replay vs the engine's eager call on the real batch alone (-1 padded
  table, fresh metadata): within the dtype's tolerance, bitwise equality recorded;
- the real rows against the oracle, within tolerance;
- the metadata and table buffers keep their addresses.
"""

import dataclasses

import torch

from . import oracle
from .compare import check_tensor, describe, describe_failure, expected_lse_for
from .inputs import TORCH_DTYPES, Inputs, cache_seqlens_for, draw_seq_lens, k_scale_for, poisoned, write_kv
from .pool import PADDING_VALUES, allocate, build_block_table, validate_block_table
from .scenarios import bitwise_equal, first_difference
from .tolerances import tolerance_for

GRAPH_STEPS = 24


def _real_batch_sizes(bucket: int, gen: torch.Generator) -> list[int]:
    sizes = torch.randint(1, bucket + 1, (GRAPH_STEPS,), generator=gen).tolist()
    sizes[0] = bucket                     # one full step, and at least one padded one
    sizes[1] = max(1, bucket - 1) if bucket > 1 else 1
    return sizes


def run_graph_scenario(case, backend, device) -> dict:
    from reference import quantize_fp8

    gen = torch.Generator().manual_seed(case.seed)
    bucket, s_q, P = case.batch_size, case.s_q, case.page_size
    prefix0 = [max(1, n) for n in draw_seq_lens(case)]
    grow = s_q                                            # decode: one token a step; verify: the accepted drafts
    final = [n + GRAPH_STEPS * grow for n in cache_seqlens_for(case, prefix0)]
    layout = allocate(final, P, case.extra_pages, torch.Generator().manual_seed(case.seed + 1))
    dgen = torch.Generator(device=device).manual_seed(case.seed)
    fp8 = case.dtype.startswith("fp8")
    model_dtype = torch.bfloat16 if fp8 else TORCH_DTYPES[case.dtype]
    tokens = torch.randn(sum(final), case.kv_heads, case.d_qk, generator=dgen, device=device).to(model_dtype)
    pool_shape = (layout.num_pages, P, case.kv_heads, case.d_qk)
    pool_model = poisoned(pool_shape, model_dtype, device)
    k_scale = None
    if fp8:
        k_scale = k_scale_for(case, tokens)
        pool = poisoned(pool_shape, TORCH_DTYPES[case.dtype], device)
        stored = quantize_fp8(tokens, k_scale, TORCH_DTYPES[case.dtype])
    else:
        pool, stored = pool_model, tokens
    descale = None if not fp8 else torch.tensor([k_scale], dtype=torch.float32, device=device)

    def step_inputs(cache, q_model, bs):
        """Inputs of the real batch at this step, laid out as the engine's eager path sees them."""
        width = max(1, max((n + P - 1) // P for n in cache[:bs]))
        table = build_block_table(layout.req_to_token, layout.req_pool_indices[:bs], cache[:bs], P, width,
                                  PADDING_VALUES["minus_one"]).to(device)
        step_layout = dataclasses.replace(layout, req_pool_indices=layout.req_pool_indices[:bs],
                                          block_table=table.cpu(),
                                          cache_seqlens=torch.tensor(cache[:bs], dtype=torch.int32))
        q = quantize_fp8(q_model, k_scale, TORCH_DTYPES[case.dtype]) if fp8 else q_model
        return Inputs(case=case, q=q, kv_pool=pool, block_table=table,
                      cache_seqlens=torch.tensor(cache[:bs], dtype=torch.int32, device=device),
                      seq_lens=torch.tensor([n - (s_q if case.mode == "verify" else 0) for n in cache[:bs]],
                                            dtype=torch.int32, device=device),
                      layout=step_layout, descale_q=descale, descale_k=descale,
                      q_model=q_model if fp8 else None, kv_pool_model=pool_model if fp8 else None)

    def rows_pages(cache):
        return [layout.req_to_token[layout.req_pool_indices[r], torch.arange((n + P - 1) // P) * P] // P
                for r, n in enumerate(cache)]

    written = [0] * bucket

    def write_up_to(cache):
        """The engine's KV writes: every token up to the current length (drafts included)."""
        for store, src in ((pool, stored), (pool_model, tokens)) if fp8 else ((pool, stored),):
            write_kv(store, layout, src, written[:len(cache)], cache)
        for r, n in enumerate(cache):
            written[r] = max(written[r], n)

    first_cache = cache_seqlens_for(case, prefix0)
    write_up_to(first_cache)
    template = step_inputs(first_cache, torch.zeros(bucket, s_q, case.heads, case.d_qk, dtype=model_dtype,
                                                    device=device), bucket)
    session = backend.graph_session(bucket, max(final), template)
    capture_fill = [session.SEQ_LEN_FILL + (s_q if case.mode == "verify" else 0)] * bucket
    session.capture(bucket, rows_pages([session.SEQ_LEN_FILL] * bucket))
    addresses = session.addresses()

    tol = tolerance_for(case.dtype)
    failures, messages = [], []
    worst = {"graph_vs_engine_eager_out": 0.0, "ref_out_worst_ratio": 0.0, "ref_lse_worst_ratio": 0.0}
    engine_bitwise = True
    sizes = _real_batch_sizes(bucket, gen)
    last_checks = None
    for step, bs in enumerate(sizes):
        prefix = [n + step * grow for n in prefix0]
        cache = cache_seqlens_for(case, prefix)
        write_up_to(cache[:bs])
        q_model = torch.randn(bs, s_q, case.heads, case.d_qk, generator=dgen, device=device).to(model_dtype)
        padded_seq = torch.tensor(prefix[:bs] + [session.SEQ_LEN_FILL] * (bucket - bs), dtype=torch.int32,
                                  device=device)
        padded_cache = cache[:bs] + capture_fill[bs:]
        # padding rows have req_pool_index 0 in SGLang, so their one page is req_to_token[0, 0] // P
        pad_page = layout.req_to_token[0, :1].long() // P
        pages = rows_pages(padded_cache[:bs]) + [pad_page] * (bucket - bs)
        validate_block_table(session.table, torch.tensor(padded_cache, dtype=torch.int32), pool.shape[0], P)
        out_g, lse_g = session.replay(q_model, padded_seq, pages)
        out_g, lse_g = out_g[:bs].clone(), lse_g[:bs].clone()
        if session.addresses() != addresses:
            failures.append("graph.addresses")
            messages.append(f"{case.id}: step {step}: metadata/table buffers moved: {session.addresses()} "
                            f"vs {addresses} at capture")
        width = max(1, max((n + P - 1) // P for n in padded_cache))
        out_e, lse_e = session.eager_same_buffers(width)
        if not (bitwise_equal(out_g, out_e[:bs]) and bitwise_equal(lse_g, lse_e[:bs])):
            failures.append("graph.replay_vs_eager")
            messages.append(f"{case.id}: step {step} (bs {bs}/{bucket}): replay differs from an eager call on "
                            f"the same buffers, {first_difference(out_g, out_e[:bs])}")
        inputs = step_inputs(cache, q_model, bs)
        out_s, lse_s = backend.run(inputs)
        engine_bitwise &= bitwise_equal(out_g, out_s) and bitwise_equal(lse_g, lse_s)
        dev_check = check_tensor("out", out_g, out_s.double(), tol.out)
        worst["graph_vs_engine_eager_out"] = max(worst["graph_vs_engine_eager_out"], dev_check.max_abs_err)
        if not dev_check.passed:
            failures.append("graph.vs_engine_eager")
            messages.append(f"{case.id}: step {step}: replay vs the engine's eager call: "
                            + describe(dev_check))
        exp_out, exp_lse = oracle.expected(inputs)
        exp_lse = expected_lse_for(exp_lse, backend.capabilities.empty_row_lse)
        co, cl = check_tensor("out", out_g, exp_out, tol.out), check_tensor("lse", lse_g, exp_lse, tol.lse)
        worst["ref_out_worst_ratio"] = max(worst["ref_out_worst_ratio"], co.worst_ratio)
        worst["ref_lse_worst_ratio"] = max(worst["ref_lse_worst_ratio"], cl.worst_ratio)
        for c in (co, cl):
            if not c.passed:
                failures.extend(f"{c.name}.{f}" for f in c.failures)
                messages.append(f"step {step}: " + describe_failure(case.id, c))
        last_checks = (co, cl)
    failed = sorted(set(failures))
    return {
        "status": "fail" if failed else "pass",
        "reason": "; ".join(failed) or None,
        "failed_checks": failed,
        "messages": messages[:20] if messages else None,
        "metrics": {"out": last_checks[0].to_dict(), "lse": last_checks[1].to_dict(),
                    "graph": {"steps": GRAPH_STEPS, "bucket": bucket, "real_batch_sizes": sizes,
                              "engine_eager_bitwise_equal": engine_bitwise, **worst}},
        "seq_lens": prefix0, "cache_seqlens": first_cache,
    }

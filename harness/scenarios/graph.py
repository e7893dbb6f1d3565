"""``graph``: capture a CUDA graph once at a bucket batch size, replay it many steps.

As SGLang serves: the graph is captured at the bucket size with every row at
the fill seq len; each step then has a smaller or equal real batch whose
requests have grown, padding rows get the fill value, the engine writes the
new tokens' KV, and the backend fills its captured buffers for the step before
replay.  Inputs come from the same ``KVStore`` every scenario's inputs come
from, and the engine's eager call goes through the same ``launch``.

Two kinds of session go through the same steps (a backend's ``graph_session``):

- block-table sessions (FlashMLA, flashmla_graph.py; FlagGems, flaggems_graph.py): the step's table rows are
  written, the table is checked, then ``replay`` refreshes metadata and replays;
- token-stream sessions (FlashInfer fa3/fa2, SGLang Triton; csr_graph.py):
  ``prepare`` fills ``kv_indptr`` / ``kv_indices`` (and plans, or sizes the KV
  splits) on the host side, the stream is checked, then ``launch`` replays.

Checks, per step:

- every index the kernel will read is checked before the replay (the gate);
- graph replay == an eager call on the same padded batch and buffers, bit for bit,
  unless two eager calls on those buffers differ from each other (then the kernel is
  not deterministic there, measured, and the row says so instead);
- graph replay vs the engine's eager call on the real batch alone (fresh metadata):
  within the dtype's tolerance, bitwise equality recorded;
- the real rows against the oracle, within tolerance (dtypes, LSE base and empty rows as the backend declares;
  a kernel without an LSE, FlagGems' ``flash_mla``, gets no LSE check, recorded as in the call scenario);
- the captured buffers keep their addresses; the eager call leaves its inputs unchanged.
"""

import torch

from ..backends import builtins_supporting
from ..backends.base import Feature
from ..backends.csr_graph import check_token_stream
from ..building.inputs import KVStore, cache_seqlens_for, draw_normal, draw_seq_lens, model_dtype_of
from ..building.pool import pages_for, validate_block_table
from ..judging import oracle
from ..judging.checks import (
    GRAPH_ADDRESSES,
    GRAPH_REPLAY_VS_EAGER,
    GRAPH_VS_ENGINE_EAGER,
    INPUTS_UNCHANGED,
    tensor_check,
)
from ..judging.compare import check_tensor, describe, describe_failure
from ..judging.conventions import kernel_view
from ..judging.tolerances import TOLERANCES
from ..phases import phase
from ..recording.outcome import Outcome
from ._common import compare_with, launch
from ._evidence import bitwise_equal, first_difference

GRAPH_STEPS = 24


def _real_batch_sizes(bucket: int, gen: torch.Generator) -> list[int]:
    sizes = torch.randint(1, bucket + 1, (GRAPH_STEPS,), generator=gen).tolist()
    sizes[0] = bucket                     # one full step, and at least one padded one
    sizes[1] = max(1, bucket - 1) if bucket > 1 else 1
    return sizes


def graph_backends() -> str:
    """The built-in backends with a ``graph_session``, as their classes declare (``Feature.GRAPH``)."""
    *others, last = builtins_supporting(Feature.GRAPH)
    return f"{', '.join(others)} and {last}" if others else last


def no_graph_reason(backend) -> str:
    """What is missing, in the backend's own words when it gives them."""
    own = backend.no_graph_session
    return f"{backend.name}: " + (own or "no graph_session: mla-verify reproduces an engine's CUDA-graph capture "
                                  f"and replay only for {graph_backends()}")


def replay_checked(session, q_model, padded_seq, padded_prefix, padded_cache, pages, layout):
    """Fill the step's buffers, check every index the kernel will read, then replay."""
    if hasattr(session, "prepare"):                     # token-stream session
        session.prepare(q_model, padded_seq, pages)
        indptr, indices = session.index_stream()
        lengths = padded_cache if session.KV_COVERS == "cache" else padded_prefix
        check_token_stream(indptr, indices, lengths, layout.num_pages * layout.page_size)
        return session.launch()
    session.write_table(pages)     # what replay writes first, so the gate sees this step's table
    validate_block_table(session.table, torch.tensor(padded_cache, dtype=torch.int32), layout.num_pages,
                         layout.page_size)
    return session.replay(q_model, padded_seq, pages)


def check_same_buffers(session, out_g, lse_g, bs, width):
    """``(verdict, message)``: ``"equal"``, ``"differs"`` (a failure) or ``"nondeterministic"`` (two eager
    calls on the same buffers differ from each other, so replay-vs-eager bitwise is not judged)."""
    out_e, lse_e = session.eager_same_buffers(width)
    if bitwise_equal(out_g, out_e[:bs]) and bitwise_equal(lse_g, None if lse_e is None else lse_e[:bs]):
        return "equal", ""
    out_e2, lse_e2 = session.eager_same_buffers(width)
    if not (bitwise_equal(out_e, out_e2) and bitwise_equal(lse_e, lse_e2)):
        return "nondeterministic", (f"two eager calls on the same buffers differ from each other "
                                    f"({first_difference(out_e, out_e2)}): replay vs eager not judged bitwise")
    return "differs", f"replay differs from an eager call on the same buffers, {first_difference(out_g, out_e[:bs])}"


def run(case, backend, device):
    reason = refusal(case, backend, device)
    return Outcome.unsupported(reason) if reason else run_steps(case, backend, device)


def refusal(case, backend, device) -> str | None:
    """Why the case is ``unsupported`` here, before anything is built (``list`` marks the case with it)."""
    if not backend.supports(Feature.GRAPH):
        # the harness's limit, not the kernel's: say so rather than blame the kernel
        return no_graph_reason(backend)
    if torch.device(device).type != "cuda":
        return "CUDA-graph replay needs a CUDA device"
    return None


def run_steps(case, backend, device):
    """Build the store and the session, then the steps (tests drive this with a CPU stand-in for the graph)."""
    gen = torch.Generator().manual_seed(case.seed)
    s_q = case.s_q
    grow = s_q                                    # decode: one token a step; verify: the accepted drafts
    dgen = torch.Generator(device=device).manual_seed(case.seed)
    model_dtype = model_dtype_of(case)
    with phase("inputs"):
        prefix0 = [max(1, n) for n in draw_seq_lens(case)]
        final = [n + GRAPH_STEPS * grow for n in cache_seqlens_for(case, prefix0)]
        tokens = draw_normal((sum(final), case.kv_heads, case.d_qk), dgen, model_dtype)
        store = KVStore(case, final, tokens, device)
    first_cache = cache_seqlens_for(case, prefix0)
    store.write_up_to(first_cache)
    template = store.inputs(torch.zeros(case.batch_size, s_q, case.heads, case.d_qk, dtype=model_dtype,
                                        device=device), first_cache)
    session = backend.graph_session(case.batch_size, max(final), template)
    return _steps(case, backend, store, session, prefix0, first_cache, gen, dgen)


def _steps(case, backend, store, session, prefix0, first_cache, gen, dgen):
    bucket, s_q, P = case.batch_size, case.s_q, case.page_size
    layout, model_dtype = store.layout, model_dtype_of(case)
    drafts = s_q if case.mode == "verify" else 0
    fill = session.SEQ_LEN_FILL

    def rows_pages(cache):
        return [layout.req_to_token[layout.req_pool_indices[r], torch.arange(pages_for(n, P)) * P] // P
                for r, n in enumerate(cache)]

    session.capture(bucket, rows_pages([fill] * bucket))
    addresses = session.addresses()
    tol = TOLERANCES[case.dtype]
    failures, messages, nondeterministic = [], [], []
    # a kernel without an LSE: its ratio is recorded as absent (None), never as a pass
    worst = {"graph_vs_engine_eager_out": 0.0, "ref_out_worst_ratio": 0.0,
             "ref_lse_worst_ratio": 0.0 if backend.capabilities.has_lse else None}
    engine_bitwise, kernel_ms, last_checks = True, 0.0, None
    sizes = _real_batch_sizes(bucket, gen)
    # padding rows have req_pool_index 0 in SGLang, so their one page is req_to_token[0, 0] // P
    pad_page = layout.req_to_token[0, :1].long() // P
    for step, bs in enumerate(sizes):
        prefix = [n + step * s_q for n in prefix0]
        cache = cache_seqlens_for(case, prefix)
        store.write_up_to(cache[:bs])
        q_model = draw_normal((bs, s_q, case.heads, case.d_qk), dgen, model_dtype)
        padded_prefix = prefix[:bs] + [fill] * (bucket - bs)
        padded_cache = cache[:bs] + [fill + drafts] * (bucket - bs)
        pages = rows_pages(padded_cache[:bs]) + [pad_page] * (bucket - bs)
        padded_seq = torch.tensor(padded_prefix, dtype=torch.int32, device=q_model.device)
        out_g, lse_g = replay_checked(session, q_model, padded_seq, padded_prefix, padded_cache, pages, layout)
        out_g, lse_g = out_g[:bs].clone(), None if lse_g is None else lse_g[:bs].clone()
        if session.addresses() != addresses:
            failures.append(GRAPH_ADDRESSES)
            messages.append(f"{case.id}: step {step}: captured buffers moved: {session.addresses()} "
                            f"vs {addresses} at capture")
        width = max(1, max(pages_for(n, P) for n in padded_cache))
        verdict, why = check_same_buffers(session, out_g, lse_g, bs, width)
        if verdict == "differs":
            failures.append(GRAPH_REPLAY_VS_EAGER)
        if verdict != "equal":
            nondeterministic += [step] if verdict == "nondeterministic" else []
            messages.append(f"{case.id}: step {step} (bs {bs}/{bucket}): {why}")
        inputs = store.inputs(q_model, cache[:bs])
        eager = launch(backend, inputs)              # the engine's eager call on the real batch
        kernel_ms += float(eager.kernel_ms)
        engine_bitwise &= _vs_engine_eager(case, step, eager, out_g, lse_g, tol, worst, failures, messages)
        last_checks = _judge_step(case, backend, inputs, out_g, lse_g, tol, step, worst, failures, messages)
    out_check, lse_check = last_checks
    return Outcome.judged(
        sorted(set(failures)), messages=messages[:20],
        metrics={"out": out_check.to_dict(), **({} if lse_check is None else {"lse": lse_check.to_dict()}),
                 "graph": {"steps": GRAPH_STEPS, "bucket": bucket, "real_batch_sizes": sizes,
                           "session": type(session).__name__,
                           "index": "token stream" if hasattr(session, "prepare") else "block table",
                           "engine_eager_bitwise_equal": engine_bitwise,
                           "eager_nondeterministic_steps": nondeterministic, **worst}},
        details={"seq_lens": prefix0, "cache_seqlens": first_cache,
                 **({"lse_produced": False} if lse_check is None else {})}, kernel_ms=kernel_ms)


def _vs_engine_eager(case, step, eager, out_g, lse_g, tol, worst, failures, messages) -> bool:
    """The engine's eager call left its inputs alone and agrees with the replay; True if bit for bit."""
    if bool(eager.witness.changed):
        failures.append(INPUTS_UNCHANGED)
        messages.append(f"{case.id}: step {step}: the eager call changed its inputs: {eager.witness.describe()}")
    dev_check = check_tensor("out", out_g, eager.out.double(), tol.out)
    worst["graph_vs_engine_eager_out"] = max(worst["graph_vs_engine_eager_out"], dev_check.max_abs_err)
    if not dev_check.passed:
        failures.append(GRAPH_VS_ENGINE_EAGER)
        messages.append(f"{case.id}: step {step}: replay vs the engine's eager call: {describe(dev_check)}")
    return bitwise_equal(out_g, eager.out) and bitwise_equal(lse_g, eager.lse)


def _judge_step(case, backend, inputs, out_g, lse_g, tol, step, worst, failures, messages):
    """The real rows against the oracle."""
    with phase("oracle"):
        exp_out, exp_lse = oracle.expected(kernel_view(inputs, backend.capabilities))
    with phase("compare"):
        co, cl, _ = compare_with(backend, inputs, out_g, lse_g, exp_out, exp_lse, tol)
    worst["ref_out_worst_ratio"] = max(worst["ref_out_worst_ratio"], co.worst_ratio)
    if cl is not None:           # None: the kernel declares no LSE (compare_with records no check)
        worst["ref_lse_worst_ratio"] = max(worst["ref_lse_worst_ratio"], cl.worst_ratio)
    for c in (co, cl):
        if c is not None and not c.passed:
            failures.extend(tensor_check(c.name, f) for f in c.failures)
            messages.append(f"step {step}: " + describe_failure(case.id, c))
    return co, cl

"""Scenarios: what is done with a case's inputs.

``call`` is one kernel call compared with the oracle; ``determinism`` calls twice
and wants the same bits; ``padding`` varies table padding and unused-slot
contents and wants the same bits; ``batch_invariance`` runs each request alone;
``graph`` (graph.py) captures and replays a CUDA graph.  Each returns the outcome
part of a result row: ``status``, ``reason``, ``failed_checks``, ``metrics`` and,
for a failure, ``messages`` (one line each) and ``diagnostics``.
"""

import dataclasses
import math
import time

import torch

from . import diagnostics, oracle
from .compare import check_tensor, describe_failure, expected_lse_for
from .conventions import kernel_view
from .inputs import Inputs, generate
from .pool import validate_block_table
from .tolerances import END_TO_END, Tolerance, tolerance_for


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def launch(backend, inputs: Inputs):
    """Gate, run and time one kernel call; returns ``(out, lse, kernel_ms)``."""
    validate_block_table(inputs.block_table, inputs.cache_seqlens, inputs.kv_pool.shape[0],
                         inputs.kv_pool.shape[1])
    if hasattr(backend, "prepare"):       # one-time setup (e.g. a JIT build), kept out of kernel time
        backend.prepare(inputs)
    _sync(inputs.device)
    t0 = time.perf_counter()
    out, lse = backend.run(inputs)
    _sync(inputs.device)
    kernel_ms = (time.perf_counter() - t0) * 1e3
    if lse is not None and backend.capabilities.lse_base == "2":
        lse = lse.double() * math.log(2)
    return out, lse, kernel_ms


def compare_with(case, backend, out, lse, exp_out, exp_lse, tol: Tolerance):
    exp_lse = expected_lse_for(exp_lse, backend.capabilities.empty_row_lse)
    lse_check = None if lse is None else check_tensor("lse", lse, exp_lse, tol.lse)   # None: kernel has no LSE
    return check_tensor("out", out, exp_out, tol.out), lse_check, exp_lse


def judge(case, backend, inputs, out, lse, kernel_ms=None, extra_failures=(), extra_metrics=None,
          extra_messages=()) -> dict:
    """Compare one call's out and LSE with the oracle and build the outcome part of a row.

    ``extra_*`` carry a scenario's own checks (determinism, padding, ...), which gate like the
    comparison does.
    """
    t0 = time.perf_counter()
    exp_out, exp_lse = oracle.expected(kernel_view(inputs, backend.capabilities))   # what the kernel was given
    tol = tolerance_for(case.dtype)
    out_check, lse_check, exp_lse = compare_with(case, backend, out, lse, exp_out, exp_lse, tol)
    checks = {"out": out_check, "lse": lse_check} if lse is not None else {"out": out_check}
    informational = {}
    if inputs.is_fp8 and inputs.q_model is not None:
        # The end-to-end error (against unquantised inputs) includes the engine's quantisation of q
        # and KV, which no kernel can undo: it is recorded beside the kernel's error, not gated on.
        e2e_out, e2e_lse = oracle.expected_model_precision(inputs)
        o, l, _ = compare_with(case, backend, out, lse, e2e_out, e2e_lse, END_TO_END[case.dtype])
        o.name, l.name = "out_end_to_end", "lse_end_to_end"
        informational = {"out_end_to_end": o, "lse_end_to_end": l} if l is not None else {"out_end_to_end": o}
    _sync(inputs.device)
    ref_ms = (time.perf_counter() - t0) * 1e3
    failed = [c for c in checks.values() if not c.passed]
    failed_checks = [f"{c.name}.{f}" for c in failed for f in c.failures] + sorted(set(extra_failures))
    messages = [describe_failure(case.id, c) for c in failed] + list(extra_messages)
    warnings = [describe_failure(case.id, c) for c in informational.values() if not c.passed]
    checks.update(informational)
    outcome = {
        "status": "fail" if failed_checks else "pass",
        "reason": "; ".join(failed_checks) or None,
        "failed_checks": failed_checks,
        "metrics": {**{name: c.to_dict() for name, c in checks.items()}, **(extra_metrics or {})},
        "seq_lens": inputs.seq_lens.cpu().tolist(),
        "cache_seqlens": inputs.cache_seqlens.cpu().tolist(),
        "k_scale": None if inputs.descale_k is None else float(inputs.descale_k[0]),
        "kernel_ms": kernel_ms, "reference_ms": ref_ms,
    }
    if lse is None:
        outcome["lse_produced"] = False      # no LSE to check: recorded, never counted as an LSE pass
    if warnings:
        outcome["warnings"] = warnings
    if messages:
        outcome["messages"] = messages
    if failed:
        outcome["diagnostics"] = diagnostics.summarize(inputs, out, exp_lse if lse is None else lse,
                                                       exp_out, exp_lse, tol)
    return outcome


def call(case, backend, device) -> dict:
    """One kernel call, compared with the oracle."""
    inputs = generate(case, device)
    out, lse, kernel_ms = launch(backend, inputs)
    return judge(case, backend, inputs, out, lse, kernel_ms)


# ---- scenarios beyond one call ------------------------------------------------------------

def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and bits (NaN payloads included); two missing LSEs are equal."""
    if a is None or b is None:
        return a is b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    as_bytes = lambda t: t.contiguous().reshape(-1).view(torch.uint8)   # noqa: E731
    return bool(torch.equal(as_bytes(a), as_bytes(b)))


def first_difference(a: torch.Tensor, b: torch.Tensor) -> str:
    if a.shape != b.shape:
        return f"shapes {tuple(a.shape)} and {tuple(b.shape)}"
    diff = ~((a == b) | (torch.isnan(a.float()) & torch.isnan(b.float())))
    if not bool(diff.any()):
        return "bit patterns differ (e.g. NaN payload or -0.0)"
    idx = [int(i) for i in diff.nonzero()[0]]
    return f"first at index {idx}: {float(a[tuple(idx)]):.6g} vs {float(b[tuple(idx)]):.6g}"


def determinism(case, backend, device) -> dict:
    """The same call twice must be bitwise equal."""
    inputs = generate(case, device)
    out1, lse1, _ = launch(backend, inputs)
    out2, lse2, _ = launch(backend, inputs)
    failures, messages = [], []
    for name, a, b in (("out", out1, out2), ("lse", lse1, lse2)):
        if not bitwise_equal(a, b):
            failures.append("determinism")
            messages.append(f"{case.id}: {name} differs between two identical calls, {first_difference(a, b)}")
    return judge(case, backend, inputs, out1, lse1, extra_failures=failures,
                 extra_metrics={"determinism": {"bitwise_equal": not failures}}, extra_messages=messages)


def padding_variants(inputs):
    """The same logical inputs with other table padding and other garbage in unused slots."""
    from .pool import PADDING_VALUES, build_block_table
    lay = inputs.layout
    width = inputs.block_table.shape[1] + 2            # every request gets padded entries
    seqs = lay.cache_seqlens.tolist()
    real = torch.zeros(inputs.kv_pool.shape[0] * inputs.kv_pool.shape[1], dtype=torch.bool)
    for r, n in enumerate(seqs):
        real[lay.req_to_token[lay.req_pool_indices[r], :n].long()] = True
    real = real.to(inputs.device)
    variants = {}
    for policy in ("minus_one", "one", "huge"):
        table = build_block_table(lay.req_to_token, lay.req_pool_indices, seqs, lay.page_size, width,
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


def padding(case, backend, device) -> dict:
    """Table padding (-1, 1, a huge id) and unused-slot contents (NaN, large values) must not matter."""
    inputs = generate(case, device)
    out, lse, _ = launch(backend, inputs)
    failures, messages, same = [], [], {}
    for name, variant in padding_variants(inputs).items():
        o, l, _ = launch(backend, variant)
        same[name] = bitwise_equal(o, out) and bitwise_equal(l, lse)
        if not same[name]:
            failures.append("padding")
            where = first_difference(o, out) if not bitwise_equal(o, out) else "lse " + first_difference(l, lse)
            messages.append(f"{case.id}: output changes with {name}: {where}")
    return judge(case, backend, inputs, out, lse, extra_failures=failures,
                 extra_metrics={"padding": {"identical": same}}, extra_messages=messages)


def request_alone(inputs, r: int):
    """Request ``r`` as a batch of one, over the same pool."""
    lay = inputs.layout
    one = lambda t: t[r:r + 1]   # noqa: E731
    n_pages = max(1, (int(lay.cache_seqlens[r]) + lay.page_size - 1) // lay.page_size)
    table = one(inputs.block_table)[:, :n_pages].contiguous()
    # token-slot kernels index through the layout: request r alone is row r of it too
    layout = dataclasses.replace(lay, req_pool_indices=one(lay.req_pool_indices), block_table=table,
                                 cache_seqlens=one(lay.cache_seqlens))
    return dataclasses.replace(inputs, q=one(inputs.q), block_table=table, layout=layout,
                               cache_seqlens=one(inputs.cache_seqlens), seq_lens=one(inputs.seq_lens),
                               q_model=None if inputs.q_model is None else one(inputs.q_model))


def batch_invariance(case, backend, device) -> dict:
    """Each request alone against inside the batch: report the deviation, bounded by the dtype's tolerance."""
    inputs = generate(case, device)
    out, lse, _ = launch(backend, inputs)
    tol = tolerance_for(case.dtype)
    failures, messages = [], []
    worst_out = worst_lse = 0.0
    bitwise = True
    for r in range(case.batch_size):
        o, l, _ = launch(backend, request_alone(inputs, r))
        bitwise &= bitwise_equal(o, out[r:r + 1]) and bitwise_equal(l, None if lse is None else lse[r:r + 1])
        co = check_tensor("out", o, out[r:r + 1].double(), tol.out)
        cl = None if l is None else check_tensor("lse", l, lse[r:r + 1].double(), tol.lse)
        worst_out, worst_lse = max(worst_out, co.max_abs_err), max(worst_lse, cl.max_abs_err if cl else 0.0)
        for c in filter(None, (co, cl)):
            if not c.passed:
                failures.append("batch_invariance")
                messages.append(f"{case.id}: request {r} alone vs in the batch: " +
                                describe_failure(case.id, c).split(": ", 1)[1])
    metrics = {"batch_invariance": {"bitwise_equal": bitwise, "max_abs_dev_out": worst_out,
                                    "max_abs_dev_lse": worst_lse}}
    return judge(case, backend, inputs, out, lse, extra_failures=failures, extra_metrics=metrics,
                 extra_messages=messages)


def graph(case, backend, device) -> dict:
    if not hasattr(backend, "graph_session"):
        return {"status": "unsupported", "reason": f"backend {backend.name} has no CUDA-graph mode"}
    if torch.device(device).type != "cuda":
        return {"status": "unsupported", "reason": "CUDA-graph replay needs a CUDA device"}
    from .graph import run_graph_scenario
    return run_graph_scenario(case, backend, device)


SCENARIOS = {"call": call, "determinism": determinism, "padding": padding,
             "batch_invariance": batch_invariance, "graph": graph}


def run(case, backend, device) -> dict:
    if case.scenario not in SCENARIOS:
        return {"status": "unsupported", "reason": f"scenario '{case.scenario}' is not implemented yet"}
    return SCENARIOS[case.scenario](case, backend, device)

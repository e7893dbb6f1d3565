"""Scenarios: what is done with a case's inputs.

``call`` is one kernel call compared with the oracle.  Each scenario returns the
outcome part of a result row: ``status``, ``reason``, ``metrics`` and, for a
failure, ``messages`` (one line each) and ``diagnostics``.
"""

import math
import time

import torch

from . import diagnostics, oracle
from .compare import check_tensor, describe_failure, expected_lse_for
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
    _sync(inputs.device)
    t0 = time.perf_counter()
    out, lse = backend.run(inputs)
    _sync(inputs.device)
    kernel_ms = (time.perf_counter() - t0) * 1e3
    if backend.capabilities.lse_base == "2":
        lse = lse.double() * math.log(2)
    return out, lse, kernel_ms


def compare_with(case, backend, out, lse, exp_out, exp_lse, tol: Tolerance):
    exp_lse = expected_lse_for(exp_lse, backend.capabilities.empty_row_lse)
    return check_tensor("out", out, exp_out, tol.out), check_tensor("lse", lse, exp_lse, tol.lse), exp_lse


def call(case, backend, device) -> dict:
    inputs = generate(case, device)
    out, lse, kernel_ms = launch(backend, inputs)
    t0 = time.perf_counter()
    exp_out, exp_lse = oracle.expected(inputs)
    tol = tolerance_for(case.dtype)
    out_check, lse_check, exp_lse = compare_with(case, backend, out, lse, exp_out, exp_lse, tol)
    checks = {"out": out_check, "lse": lse_check}
    if inputs.is_fp8:
        e2e_out, e2e_lse = oracle.expected_model_precision(inputs)
        e2e = END_TO_END[case.dtype]
        o, l, _ = compare_with(case, backend, out, lse, e2e_out, e2e_lse, e2e)
        o.name, l.name = "out_end_to_end", "lse_end_to_end"
        checks.update(out_end_to_end=o, lse_end_to_end=l)
    _sync(device)
    ref_ms = (time.perf_counter() - t0) * 1e3
    failed = [c for c in checks.values() if not c.passed]
    outcome = {
        "status": "fail" if failed else "pass",
        "reason": "; ".join(f"{c.name}: {'/'.join(c.failures)}" for c in failed) or None,
        "failed_checks": [f"{c.name}.{f}" for c in failed for f in c.failures],
        "metrics": {name: c.to_dict() for name, c in checks.items()},
        "seq_lens": inputs.seq_lens.cpu().tolist(),
        "cache_seqlens": inputs.cache_seqlens.cpu().tolist(),
        "k_scale": None if inputs.descale_k is None else float(inputs.descale_k[0]),
        "kernel_ms": kernel_ms, "reference_ms": ref_ms,
    }
    if failed:
        outcome["messages"] = [describe_failure(case.id, c) for c in failed]
        outcome["diagnostics"] = diagnostics.summarize(inputs, out, lse, exp_out, exp_lse, tol)
    return outcome


SCENARIOS = {"call": call}


def run(case, backend, device) -> dict:
    if case.scenario not in SCENARIOS:
        return {"status": "unsupported", "reason": f"scenario '{case.scenario}' is not implemented yet"}
    return SCENARIOS[case.scenario](case, backend, device)

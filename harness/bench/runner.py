"""Verify first, then time: one bench row per (case, backend).

A case's inputs are generated once and shared by every backend, and the backends
take turns on each case, so they are compared on the same tensors, close in time.
A backend first makes one call that is judged against the float64 oracle exactly
as ``mla-verify run`` judges it; only a pass is timed.  A wrong kernel has no speed:
its row keeps the failure and carries no timing.
"""

import gc
import time
from dataclasses import dataclass

import torch

from .. import scenarios
from ..errors import InputError
from ..judging.tolerances import TOLERANCES
from ..phases import PhaseClock, PhaseError
from ..recording.outcome import Outcome, result_row
from ..recording.status import Status
from . import counting, crosscheck, launchers, timing
from .sparse import bench_sparse

CPU_NOTE = "CPU wall-clock timing: these are not GPU numbers"


@dataclass
class BenchOptions:
    iters: int = 50
    warmup: int = 5
    cross_check: bool = False
    l2_flush: str = "read"


def rerun_command(case, backend_spec: str, device: str) -> str:
    return f"mla-verify bench --suite {case.suite} --backend {backend_spec} --device {device} --case {case.id}"


def _error(e: Exception, what: str) -> str:
    return f"{what}{type(e).__name__}: {e}".splitlines()[0][:500]


def gpu_kernel_times(launch, flush: timing.L2Flush, options: BenchOptions):
    """Seconds per call of ``launch`` on the GPU with ``flush`` before each, a per-kernel breakdown (or None)
    and how it was timed: kineto, else CUDA events."""
    try:
        kernel_s, breakdown = timing.kernel_times_kineto(launch, options.iters, options.warmup, flush)
        return kernel_s, breakdown, f"kineto device time; {flush.describe()}"
    except Exception as e:   # no CUPTI, or a trace that does not split cleanly: CUDA events, and say so
        kernel_s = timing.kernel_times_events(launch, options.iters, options.warmup, flush)
        return kernel_s, None, f"CUDA events around each call; {flush.describe()} (kineto failed: {e})"[:300]


def measure(backend, inputs, eager_out, out_bound, ceilings, options: BenchOptions) -> dict:
    """Kernel and end-to-end times of a verified call, counted against the ceilings."""
    gpu = inputs.device.type == "cuda"
    launch, scope = launchers.kernel_launch(backend, inputs)
    step, e2e_mode, e2e_note = launchers.e2e_step(backend, inputs, eager_out, out_bound)
    breakdown = None
    if gpu:
        flush = timing.L2Flush(inputs.device, mode=options.l2_flush)
        kernel_s, breakdown, timer = gpu_kernel_times(launch, flush, options)
        e2e_s = timing.e2e_times_cuda(step, options.iters, options.warmup, flush) if step else None
        del flush
    else:
        kernel_s = timing.wall_times(launch, options.iters, options.warmup)
        e2e_s = timing.wall_times(step, options.iters, options.warmup) if step else None
        timer = CPU_NOTE
    kernel = timing.summary(kernel_s)
    work = counting.count_inputs(inputs, backend.capabilities)
    out = {
        "timed": True, "gpu_numbers": gpu, "timer": timer, "kernel_scope": scope,
        "iters": options.iters, "warmup": options.warmup,
        "seqlen_mean": float(inputs.cache_seqlens.double().mean()),
        "kernel_us": kernel, "e2e_mode": e2e_mode,
        "e2e_us": timing.summary(e2e_s) if e2e_s else None,
        **counting.roofline(work, kernel["p50"] / 1e6, ceilings.copy_bytes_per_s, ceilings.matmul_flop_per_s),
        "ceilings": ceilings.to_dict(),
    }
    if e2e_note:
        out["e2e_note"] = e2e_note
    if breakdown:
        top = sorted(breakdown.items(), key=lambda kv: -kv[1])[:6]
        out["kernels_us"] = {name[:160]: us for name, us in top}
    if options.cross_check:
        # the first method gates (crosscheck.methods); each is compared with the harness timed its way
        def harness_us_with(mode: str) -> float:
            kernel_s, _, _ = gpu_kernel_times(launch, timing.L2Flush(inputs.device, mode=mode), options)
            return timing.summary(kernel_s)["p50"]
        out["cross_check"], out["cross_check_others"] = crosscheck.cross_check(
            launch, kernel["p50"], options.l2_flush, harness_us_with)
    return out


def bench_one(case, backend, spec: str, device: str, get_inputs, ceilings, options: BenchOptions) -> dict:
    started = time.perf_counter()
    clock = PhaseClock()                   # the verification's phases (the row's reference_ms among them)
    if case.scenario == "sparse":          # its own inputs and entry point (bench/sparse.py)
        with clock:
            outcome, bench = bench_sparse(case, backend, device, ceilings, options, gpu_kernel_times, CPU_NOTE)
        return _row(case, backend, spec, device, outcome, bench, started, clock)
    bench = None
    try:
        reason = backend.unsupported_reason(case, device)
        if reason is not None:
            outcome, bench = Outcome.unsupported(reason), {"timed": False, "why": reason}
        else:
            inputs = get_inputs()
            with clock:
                call = scenarios.launch(backend, inputs)
                out = call.out
                outcome = scenarios.judge(case, backend, inputs, call)
    except InputError:
        raise
    except PhaseError as e:   # the kernel (or the harness) raised: a row, and the run goes on
        outcome = Outcome.raised(e.phase, e.error)
        bench = {"timed": False, "why": f"{e.phase} raised: {outcome.reason}"}
    if outcome.status is Status.PASS:
        try:
            bench = measure(backend, inputs, out, TOLERANCES[case.dtype].out, ceilings, options)
            outcome.kernel_ms = bench["kernel_us"]["p50"] / 1e3
        except Exception as e:   # timing machinery failed (no CUPTI, capture refused): no number, say why
            bench = {"timed": False, "why": _error(e, "timing failed: ")}
            outcome.kernel_ms = None
    elif bench is None:
        bench = {"timed": False, "why": f"failed verification ({outcome.reason}): a wrong kernel has no speed"}
        outcome.kernel_ms = None
    return _row(case, backend, spec, device, outcome, bench, started, clock)


def _row(case, backend, spec: str, device: str, outcome, bench: dict, started: float, clock: PhaseClock) -> dict:
    return result_row(case, backend, spec, device, outcome, time.perf_counter() - started, phase_ms=clock.read(),
                      rerun=rerun_command(case, spec, device), extra={"kind": "bench", "bench": bench}).to_json()


def run_bench(cases, backends, device: str, ceilings, options: BenchOptions, record) -> list[dict]:
    """Every (case, backend) in case-major order; ``record(row)`` is called as each row is done."""
    rows = []
    for case in cases:
        cache = {}

        def get_inputs(case=case, cache=cache):
            if "inputs" not in cache:
                cache["inputs"] = scenarios.build_inputs(case, device)
            return cache["inputs"]
        for spec, backend in backends:
            row = bench_one(case, backend, spec, device, get_inputs, ceilings, options)
            rows.append(row)
            record(row)
        cache.clear()
        gc.collect()
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
    return rows

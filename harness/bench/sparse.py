"""``mla-verify bench`` on sparse cases: verified as ``run`` verifies them, then ``run_sparse`` timed and
counted as FlashMLA's sparse test counts it (``counting.count_sparse``), against the same ceilings.

What is timed is the backend's whole ``run_sparse`` (for FlashMLA: the scheduler metadata, the head
padding and the kernel, as SGLang pays them each step); the row's ``kernel_scope`` says so.
"""

import dataclasses

from ..building.sparse_inputs import build, output_buffer
from ..recording.outcome import Outcome
from ..recording.status import Status
from ..scenarios import sparse as sparse_scenario
from . import counting, timing

SCOPE = "the backend's whole run_sparse (metadata, head padding and kernel)"


def bench_sparse(case, backend, device: str, ceilings, options, gpu_kernel_times, cpu_note: str):
    """``(outcome, bench)``: the verification's outcome, and the timing (or why there is none)."""
    outcome: Outcome = sparse_scenario.run(case, backend, device)
    if outcome.status is not Status.PASS:
        why = outcome.reason if outcome.status is Status.UNSUPPORTED else \
            f"failed verification ({outcome.reason}): a wrong kernel has no speed"
        return outcome, {"timed": False, "why": why}
    scase = build(case, device)                      # the same seed: the inputs just verified
    inputs = dataclasses.replace(scase.inputs, out=output_buffer(scase.inputs))

    def launch():
        return backend.run_sparse(inputs)
    if inputs.device.type == "cuda":
        flush = timing.L2Flush(inputs.device, mode=options.l2_flush)
        kernel_s, _, timer = gpu_kernel_times(launch, flush, options)
        del flush
    else:
        kernel_s, timer = timing.wall_times(launch, options.iters, options.warmup), cpu_note
    kernel = timing.summary(kernel_s)
    work = counting.count_sparse(inputs, inputs.indices)
    outcome.kernel_ms = kernel["p50"] / 1e3
    return outcome, {
        "timed": True, "gpu_numbers": inputs.device.type == "cuda", "timer": timer, "kernel_scope": SCOPE,
        "iters": options.iters, "warmup": options.warmup, "kernel_us": kernel, "e2e_mode": None, "e2e_us": None,
        "counted_as": "FlashMLA tests/lib.py count_flop_and_mem_vol_for_decode (docs/sparse.md)",
        **counting.roofline(work, kernel["p50"] / 1e6, ceilings.copy_bytes_per_s, ceilings.matmul_flop_per_s),
        "ceilings": ceilings.to_dict(),
    }

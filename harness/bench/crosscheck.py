"""Independent measurements of the same launch, to trust the harness's kernel times.

- FlashMLA's own timer, ``kernelkit.bench.bench_kineto`` from FlashMLA's ``tests/``
  directory, when it is importable (put FlashMLA's ``tests`` on ``PYTHONPATH``; it is
  imported, never copied here).  It times the way the harness claims to (kineto kernel
  time, one call at a time after an L2-clearing memset) but is FlashMLA's code, not
  ours: when it is there, it is the cross-check, and the two must agree within +-3%.
- ``triton.testing.do_bench_cudagraph`` replays many captured calls back to back with
  no flush and times the replays with CUDA events.  It is the cross-check when
  kernelkit is not there, and recorded beside it when it is.
- ``triton.testing.do_bench`` clears a 256 MB buffer before each call and times that
  call alone with CUDA events, launch latency included; always recorded beside.

Like with like: each timer flushes L2 its own way (``Method.flush``), and the harness's side of
each comparison is timed with that flush, whatever ``--l2-flush`` the row's kernel time used
(``cross_check``).  What the H200 showed (docs/gpu-runs.md, 2026-12-03): FlashMLA b=128, L=4096
with ``--l2-flush write`` (kernelkit's memset protocol): harness and kernelkit agree within 1%
at h=16 and h=128.  With the read flush on the harness's side, h=16 was 8% faster than after
kernelkit's memset (no dirty lines to write back), and the cross-check failed a correct kernel.
do_bench_cudagraph agreed at h=16 and was 10-13% slower at h=128: back to back, the
compute-bound kernel runs slower than one call at a time.
"""

import math
import re
from dataclasses import dataclass

import torch

TOLERANCE = 0.03


def available() -> str | None:
    """None when a cross-check can run here, else why not."""
    if not torch.cuda.is_available():
        return "--cross-check needs a CUDA device (it times with CUDA graphs)"
    try:
        import triton.testing  # noqa: F401
    except Exception as e:   # not installed, or broken against this torch
        return f"--cross-check needs triton: {type(e).__name__}: {e}"
    return None


def do_bench_cudagraph_us(fn, rep_ms: int = 50) -> float:
    """Median microseconds per call of ``fn`` under ``triton.testing.do_bench_cudagraph``."""
    from triton.testing import do_bench_cudagraph
    with torch.cuda.stream(torch.cuda.Stream()):   # older triton refuses to capture on the default stream
        try:
            ms = do_bench_cudagraph(fn, rep=rep_ms, return_mode="median")
        except TypeError:                            # a triton without return_mode
            ms = do_bench_cudagraph(fn, rep=rep_ms)
    return float(ms) * 1e3


def do_bench_us(fn, rep_ms: int = 50) -> float:
    """Median microseconds per call of ``fn`` under ``triton.testing.do_bench`` (L2 cleared before each call)."""
    from triton.testing import do_bench
    return float(do_bench(fn, rep=rep_ms, return_mode="median")) * 1e3


def kernelkit_available() -> bool:
    try:
        import kernelkit.bench  # noqa: F401
    except Exception:
        return False
    return True


API_CALL = re.compile(r"^(cuda|cu[A-Z])")     # CUDA runtime and driver API calls, by their names


def kernelkit_us(fn, num_tests: int = 30) -> float:
    """Mean microseconds per call of ``fn`` under FlashMLA's ``kernelkit.bench.bench_kineto``: every
    kernel of the call, summed, over its ``num_tests`` flushed calls.  The flush's own kernels are
    named by timing a call that launches nothing, and left out."""
    from kernelkit.bench import bench_kineto
    flush = set(bench_kineto(lambda: None, num_tests=2).time_ranges)
    result = bench_kineto(fn, num_tests=num_tests)
    # its events include the host's CUDA API calls (cudaLaunchKernel, cudaDeviceSynchronize): not kernels
    seconds = sum(end - start for name, ranges in result.time_ranges.items()
                  if name not in flush and not API_CALL.match(name) for start, end in ranges)
    if not seconds:
        raise RuntimeError(f"kernelkit recorded no kernel of the call (only {sorted(flush)})")
    return seconds / num_tests * 1e6


@dataclass(frozen=True)
class Method:
    describe: str
    time_us: object
    flush: str            # how it clears L2 before a call, as ``timing.L2Flush`` names it: the harness's side uses it


# kernelkit's flush is a memset, do_bench's a zero_() of 256 MB: both write.  do_bench_cudagraph does not flush.
KERNELKIT = Method("FlashMLA kernelkit.bench.bench_kineto (8 GB memset before each call), mean", kernelkit_us, "write")
DO_BENCH = Method("triton.testing.do_bench (L2 cleared before each call), median", do_bench_us, "write")
DO_BENCH_CUDAGRAPH = Method("triton.testing.do_bench_cudagraph (back to back, no flush), median",
                            do_bench_cudagraph_us, "none")


def compare(harness_us: float, independent_us: float, method: str, harness_flush: str | None = None) -> dict:
    ratio = harness_us / independent_us if independent_us > 0 else math.nan
    return {"method": method, "harness_p50_us": harness_us, "harness_flush": harness_flush,
            "independent_us": independent_us, "ratio": ratio, "tolerance": TOLERANCE,
            "agrees": bool(abs(ratio - 1) <= TOLERANCE)}


def methods() -> list[Method]:
    """The cross-check first (it gates), then the timers recorded beside it."""
    return ([KERNELKIT] if kernelkit_available() else []) + [DO_BENCH_CUDAGRAPH, DO_BENCH]


def cross_check(launch, measured_us: float, measured_flush: str, harness_us_with) -> tuple[dict, list[dict]]:
    """Each method's time of ``launch`` against the harness's, both with the method's own L2 flush.

    ``measured_us`` is the harness's p50 already taken with ``measured_flush`` (``--l2-flush``); for any
    other flush ``harness_us_with(flush)`` times the harness's side again, once per flush.  Returns the
    gating comparison (the first method) and those recorded beside it.
    """
    harness_us = {measured_flush: measured_us}
    checks = []
    for method in methods():
        try:
            if method.flush not in harness_us:
                harness_us[method.flush] = harness_us_with(method.flush)
            checks.append(compare(harness_us[method.flush], method.time_us(launch), method.describe, method.flush))
        except Exception as e:   # the launch cannot be captured: say so, the row keeps its kernel time
            error = f"{type(e).__name__}: {e}".splitlines()[0][:500]
            checks.append({"method": method.describe, "agrees": False, "error": error})
    return checks[0], checks[1:]

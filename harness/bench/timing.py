"""Timing: kernel time as FlashMLA's kernelkit measures it, end-to-end time, percentiles.

Kernel time on a GPU: kineto (``torch.profiler`` with CUDA activity) records every
device activity of ``iters`` iterations; before each one, a 256 MiB buffer is rewritten
(``bitwise_not_``), so the kernel starts with a cold L2 (an H200 has 50 MB).  The
flush's own kernel is named by profiling it alone first, then its events split the
trace into iterations and are dropped; an iteration's time is the sum of its other
device activities' durations (kernels, and any memcpy/memset the call issues).

End-to-end time on a GPU: CUDA events around one step (metadata or ``plan()`` plus the
launch or graph replay) on an idle, synchronised GPU, so host work inside the step
shows up in the elapsed time, as an engine pays it.

On the CPU both are wall clock (``time.perf_counter``), no L2 flush: not GPU numbers.
"""

import math
import time
from collections import defaultdict

import torch

FLUSH_BYTES = 256 << 20
WIDE_SPREAD = 1.10      # p90/p10 above this: the numbers are noisy (a shared GPU, clocks moving)


def percentile(values, p: float) -> float:
    """The p-th percentile (0..100), linear between ranks (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return math.nan
    k = (len(xs) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary(seconds: list[float]) -> dict:
    """p10/p50/p90 in microseconds, the spread p90/p10 and whether it is wide."""
    us = [s * 1e6 for s in seconds]
    p10, p50, p90 = (percentile(us, p) for p in (10, 50, 90))
    spread = p90 / p10 if p10 > 0 else math.inf
    return {"p10": p10, "p50": p50, "p90": p90, "n": len(us), "spread": spread, "wide": spread > WIDE_SPREAD}


class L2Flush:
    """Rewrites a buffer larger than any L2 (a 256 MiB read and write)."""

    def __init__(self, device, nbytes: int = FLUSH_BYTES):
        self.buf = torch.zeros(nbytes, dtype=torch.uint8, device=device)
        self.nbytes = nbytes

    def __call__(self):
        self.buf.bitwise_not_()


def _device_events(prof):
    from torch.autograd import DeviceType
    return sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start)


def _profile(fn, iters: int):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    return _device_events(prof)


def split_iterations(events, flush_names: set, iters: int):
    """Per-iteration sums of non-flush durations (seconds) and the mean time per kernel name (us).

    ``events`` are device events in start order, each with ``name`` and ``time_range``; a run of
    flush events opens an iteration.  Anything inconsistent raises: a wrong number is worse than none.
    """
    sums, per_name = [], defaultdict(float)
    in_flush = False
    for e in events:
        if e.name in flush_names:
            if not in_flush:
                sums.append(0.0)
            in_flush = True
            continue
        in_flush = False
        if not sums:
            continue                     # before the first flush: not ours
        dur = (e.time_range.end - e.time_range.start) / 1e6
        sums[-1] += dur
        per_name[e.name] += dur * 1e6 / iters
    if len(sums) != iters:
        raise RuntimeError(f"kineto: found {len(sums)} flushed iterations, expected {iters}")
    if any(s <= 0 for s in sums):
        raise RuntimeError("kineto: an iteration recorded no kernel (is CUPTI available?)")
    return sums, dict(per_name)


_FLUSH_NAMES: dict = {}   # per (device, size): the flush's kernel names, profiled once a process


def flush_kernel_names(flush: L2Flush) -> set:
    key = (str(flush.buf.device), flush.nbytes)
    if key not in _FLUSH_NAMES:
        names = {e.name for e in _profile(flush, 2)}
        if not names:
            raise RuntimeError("kineto recorded no device activity for the L2 flush (is CUPTI available?)")
        _FLUSH_NAMES[key] = names
    return _FLUSH_NAMES[key]


def kernel_times_kineto(fn, iters: int, warmup: int, flush: L2Flush):
    """Seconds per iteration of ``fn``'s device work, L2 flushed before each; plus a per-kernel breakdown."""
    flush_names = flush_kernel_names(flush)
    for _ in range(warmup):
        flush()
        fn()
    torch.cuda.synchronize()

    def step():
        flush()
        fn()
    return split_iterations(_profile(step, iters), flush_names, iters)


def kernel_times_events(fn, iters: int, warmup: int, flush: L2Flush) -> list[float]:
    """The fallback when kineto records nothing: CUDA events around each call, L2 flushed before it.

    The flush (a 256 MiB rewrite) keeps the GPU busy while the host enqueues the call, so the events
    see device time; gaps between the call's kernels count, which kineto's sum leaves out.
    """
    for _ in range(warmup):
        flush()
        fn()
    pairs = []
    for _ in range(iters):
        flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / 1e3 for s, e in pairs]


def e2e_times_cuda(step, iters: int, warmup: int, flush: L2Flush) -> list[float]:
    """Seconds per ``step`` from an idle GPU: host work inside ``step`` counts."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(iters):
        flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return times


def wall_times(fn, iters: int, warmup: int) -> list[float]:
    """CPU: wall-clock seconds per call."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times

"""Timing: kernel time as FlashMLA's kernelkit measures it, end-to-end time, percentiles.

Kernel time on a GPU: kineto (``torch.profiler`` with CUDA activity) records every
device activity of ``iters`` iterations; before each one the L2 is flushed (an H200
has 50 MB).  The default flush *reads* a 256 MiB buffer (a row-wise amax): it evicts
everything and leaves clean lines, so the timed kernel does not pay the write-back of
the flush's own dirty lines, as it would after kernelkit's memset (``--l2-flush write``
rewrites the buffer instead; ``none`` runs a 1 KiB marker).  The flush's kernels are
named by profiling it alone first; that sequence of names splits the trace into
iterations and is dropped.  An iteration's time is the sum of its other device
activities' durations (kernels, and any memcpy/memset the call issues).

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


FLUSH_MODES = ("read", "write", "none")


class L2Flush:
    """Sweeps a buffer larger than any L2 between timed calls (``mode``: read, write or none)."""

    def __init__(self, device, nbytes: int = FLUSH_BYTES, mode: str = "read"):
        if mode not in FLUSH_MODES:
            raise ValueError(f"L2 flush mode {mode!r} (known: {', '.join(FLUSH_MODES)})")
        self.mode = mode
        self.nbytes = nbytes if mode != "none" else 1024
        self.buf = torch.zeros(self.nbytes, dtype=torch.uint8, device=device)

    def __call__(self):
        if self.mode == "read":      # row-wise amax in uint8: one kernel, no cast to a wider temporary,
            self.buf.view(-1, 1024).amax(dim=1)      # no cross-block semaphores; writes 1/1024 of what it reads
        else:                        # "write", and "none": the same op on a 1 KiB buffer, a marker only
            self.buf.bitwise_not_()

    def describe(self) -> str:
        if self.mode == "none":
            return "no L2 flush (a 1 KiB marker kernel between calls)"
        verb = "read (row-wise amax)" if self.mode == "read" else "rewritten (bitwise_not_)"
        return f"L2 flushed before each call: {self.nbytes >> 20} MiB {verb}"


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


def split_iterations(events, flush_seq: tuple, iters: int):
    """Per-iteration sums of non-flush durations (seconds) and the mean time per kernel name (us).

    ``events`` are device events in start order, each with ``name`` and ``time_range``.  Each run of
    names equal to ``flush_seq`` (the flush's own kernels, in order) opens an iteration and is
    dropped; a backend kernel that shares one name with the flush is still counted.  Anything
    inconsistent raises: a wrong number is worse than none.
    """
    names = [e.name for e in events]
    k = len(flush_seq)
    sums, per_name = [], defaultdict(float)
    i = 0
    while i < len(events):
        if tuple(names[i:i + k]) == flush_seq:
            sums.append(0.0)
            i += k
            continue
        if sums:                         # before the first flush: not ours
            e = events[i]
            dur = (e.time_range.end - e.time_range.start) / 1e6
            sums[-1] += dur
            per_name[e.name] += dur * 1e6 / iters
        i += 1
    if len(sums) != iters:
        raise RuntimeError(f"kineto: found {len(sums)} flushed iterations, expected {iters}")
    if any(s <= 0 for s in sums):
        raise RuntimeError("kineto: an iteration recorded no kernel (is CUPTI available?)")
    return sums, dict(per_name)


_FLUSH_SEQ: dict = {}   # per (device, mode): the flush's kernel names in order, profiled once a process


def flush_sequence(flush: L2Flush) -> tuple:
    key = (str(flush.buf.device), flush.mode, flush.nbytes)
    if key not in _FLUSH_SEQ:
        flush()                          # the first call may carry one-off work
        torch.cuda.synchronize()
        names = tuple(e.name for e in _profile(flush, 1))
        if not names:
            raise RuntimeError("kineto recorded no device activity for the L2 flush (is CUPTI available?)")
        _FLUSH_SEQ[key] = names
    return _FLUSH_SEQ[key]


def kernel_times_kineto(fn, iters: int, warmup: int, flush: L2Flush):
    """Seconds per iteration of ``fn``'s device work, L2 flushed before each; plus a per-kernel breakdown."""
    flush_seq = flush_sequence(flush)
    for _ in range(warmup):
        flush()
        fn()
    torch.cuda.synchronize()

    def step():
        flush()
        fn()
    return split_iterations(_profile(step, iters), flush_seq, iters)


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

"""Milliseconds a call takes on the GPU, for the micro-benchmarks beside this file."""
import torch


def timed(call) -> float:
    """``call()``'s mean over 10 calls after one warm-up, from CUDA events around them (ms)."""
    call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 10

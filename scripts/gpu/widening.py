"""The oracle's widening of gathered keys to float64 (``reference/block_attention.run_block``), timed two ways on
CUDA: the strided copy into a head-major tensor, and (one KV head) the contiguous widening.

Usage: python scripts/gpu/widening.py   (prints milliseconds per widening and GB/s of float64 written)
"""
import torch

for rows, n_keys, d in ((64, 4096, 576), (8, 16384, 576), (256, 256, 576)):
    pages = torch.randn(rows * n_keys, d, device="cuda").to(torch.bfloat16)

    def strided():
        keys = torch.empty(rows, 1, n_keys, d, dtype=torch.float64, device="cuda")
        return keys.copy_(pages.view(rows, n_keys, 1, d).permute(0, 2, 1, 3))

    def contiguous():
        return pages.view(rows, n_keys, 1, d).to(torch.float64).view(rows, 1, n_keys, d)

    assert torch.equal(strided(), contiguous())
    for name, form in (("strided", strided), ("contiguous", contiguous)):
        for _ in range(3):
            form()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            form()
        end.record()
        torch.cuda.synchronize()
        ms = start.elapsed_time(end) / 20
        print(f"rows {rows}, keys {n_keys}, d {d}: {name:10s} {ms:.3f} ms, {rows * n_keys * d * 8 / ms / 1e6:.0f} GB/s")

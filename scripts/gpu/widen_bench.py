"""The oracle's key widening: the Triton kernel (``reference/widen_kernel.py``) against PyTorch's three passes
(``block_attention._gather_and_widen``) on blocks of bf16 pages of 576-wide keys; ms a call (CUDA events over
10 calls), TB/s of float64 written plus bf16 read, and whether the keys are the same bits.

Usage: python scripts/gpu/widen_bench.py
"""
import types

import torch
from cuda_timing import timed

from reference import block_attention, widen_kernel

PAGE, WIDTH = 64, 576


def compare(kernel, requests: int, n_keys: int, fewest: int):
    pages = requests * n_keys // PAGE + 8
    pool = torch.randn(pages, PAGE, 1, WIDTH, device="cuda").to(torch.bfloat16)
    rows = torch.randperm(pages - 1, device="cuda")[:requests * n_keys // PAGE].view(requests, -1) + 1
    lengths = torch.randint(fewest, n_keys + 1, (requests,), device="cuda")
    key = types.SimpleNamespace(unit=PAGE, page_size=PAGE, h_kv=1, d_qk=WIDTH, n_keys=n_keys, kv_dtype=torch.bfloat16)
    block = types.SimpleNamespace(key=key, rows=requests, members=[(0, i) for i in range(requests)])
    problem = types.SimpleNamespace(kv_pool=pool)
    runs = [(0, 0, requests, None, rows.reshape(-1))]
    by_torch = torch.empty(requests, 1, n_keys, WIDTH, dtype=torch.float64, device="cuda")
    by_kernel = torch.empty_like(by_torch)
    moved = by_torch.numel() * 10                    # 8 bytes written and 2 read a value
    ms_torch = timed(lambda: block_attention._gather_and_widen(by_torch, block, [problem], runs, lengths,
                                                               int(lengths.min())))
    ms_kernel = timed(lambda: widen_kernel.run(kernel, by_kernel, block_attention._pool_rows(problem, key),
                                               runs[0][4], lengths, PAGE))
    same = torch.equal(by_torch.view(torch.int64), by_kernel.view(torch.int64))
    print(f"{requests} x {n_keys}: PyTorch {ms_torch:.3f} ms ({moved / ms_torch / 1e9:.2f} TB/s), "
          f"kernel {ms_kernel:.3f} ms ({moved / ms_kernel / 1e9:.2f} TB/s), same bits: {same}")


if __name__ == "__main__":
    found = widen_kernel.usable_kernel("cuda:0")
    for shape in [(16, 4096, 3000), (64, 1024, 600), (2, 16384, 16000), (128, 512, 300)]:
        compare(found, *shape)

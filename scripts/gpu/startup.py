"""A worker's start-up, step by step, in a fresh process: the import of torch, the CUDA context, the
backend, each Triton kernel's first launch (``worker_process._warm_up``'s steps) and cuBLAS.

Usage: python scripts/gpu/startup.py BACKEND   (run it twice: the first run fills Triton's cache)
"""
import sys
import time

last = [time.perf_counter()]
first = last[0]


def lap(what):
    now = time.perf_counter()
    print(f"  {what}: {now - last[0]:.3f} s", flush=True)
    last[0] = now


import torch  # noqa: E402  (timed)

lap("import torch")
torch.empty(1, device="cuda")
lap("CUDA context")
from harness.running.backend_loader import load_backend  # noqa: E402

load_backend(sys.argv[1])
lap(f"load_backend({sys.argv[1]})")
from harness.judging import compare_kernel, integrity  # noqa: E402
from reference import widen_kernel  # noqa: E402

steps = [("integrity.warm_up (imports Triton)", integrity.warm_up), ("compare_kernel.warm_up", compare_kernel.warm_up),
         ("widen_kernel.warm_up", widen_kernel.warm_up)]
for name, warm_up in steps:
    warm_up("cuda")
    torch.cuda.synchronize()
    lap(name)
a = torch.ones(8, 8, dtype=torch.float64, device="cuda")
(a @ a).sum().item()
lap("cuBLAS float64")
print(f"  total {time.perf_counter() - first:.3f} s")

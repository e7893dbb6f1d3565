"""Do several processes' CUDA contexts slow each other's small work?  Each process runs the same loop of
small kernels with a host sync every SYNC_EVERY iterations; prints the aggregate rate for 1..N processes.

Usage: python scripts/gpu/contexts.py [MAX_PROCESSES=4] [SYNC_EVERY=1 50]
(2026-12-03, H200, `contexts.py 4 1 10`: a sync every iteration, 13,549 iterations/s alone and 6,820-6,886
for 2-4 processes together; every 10, 28,701 alone and 42,961 for 4; docs/gpu-runs.md, a fifth session)
"""
import multiprocessing as mp
import sys
import time

ITERATIONS = 3000


def loop(ready, go, done, sync_every):
    import torch
    x = torch.randn(4096, device="cuda")
    torch.cuda.synchronize()
    ready.put(None)
    go.get()
    t0 = time.perf_counter()
    for i in range(ITERATIONS):
        y = (x * 2 + 1).sum()
        if i % sync_every == 0:
            y.item()
    torch.cuda.synchronize()
    done.put(time.perf_counter() - t0)


def rate(processes: int, sync_every: int) -> float:
    ctx = mp.get_context("spawn")
    ready, go, done = ctx.Queue(), ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=loop, args=(ready, go, done, sync_every)) for _ in range(processes)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get()
    t0 = time.perf_counter()
    for _ in procs:
        go.put(None)
    for _ in procs:
        done.get()
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    return processes * ITERATIONS / wall


if __name__ == "__main__":
    most = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    for sync_every in [int(a) for a in sys.argv[2:]] or [1, 50]:
        alone = rate(1, sync_every)
        for n in range(1, most + 1):
            r = alone if n == 1 else rate(n, sync_every)
            print(f"sync every {sync_every:3d}: {n} process(es) {r:8.0f} iterations/s ({r / alone:.2f}x one)")

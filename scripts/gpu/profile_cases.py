"""Profile chunked runs in this process (no isolation) on the small cases of a suite: where the host time goes.

Usage: python scripts/gpu/profile_cases.py SUITE BACKEND DEVICE [N|all] > profile.txt
(N: the first N cases with L <= 140; all: every case of the suite, in its order; every:K: each K-th case)
"""
import cProfile
import pstats
import sys
import time

from harness.planning import cases as case_mod
from harness.running import chunk
from harness.running.backend_loader import load_backend

suite, spec, device = sys.argv[1:4]
n = sys.argv[4] if len(sys.argv) > 4 else "400"
cases = case_mod.load_suite(suite).cases
if n.startswith("every:"):
    small = cases[::int(n.split(":")[1])]
else:
    small = cases if n == "all" else [c for c in cases if "4096" not in c.seqlen][:int(n)]
backend = load_backend(spec)
chunk.run_chunk(small[:20], backend, spec, device)
profile = cProfile.Profile()
t0 = time.perf_counter()
profile.enable()
rows = [row for cases in chunk.plan(small) for row in chunk.run_chunk(cases, backend, spec, device)]
profile.disable()
wall = time.perf_counter() - t0
print(f"{len(small)} cases in {wall:.2f} s: {len(small) / wall:.1f} cases/s; "
      f"kernel {sum(r.get('kernel_ms') or 0 for r in rows) / 1e3:.2f} s, "
      f"oracle+compare {sum(r.get('reference_ms') or 0 for r in rows) / 1e3:.2f} s")
stats = pstats.Stats(profile)
stats.sort_stats("cumulative").print_stats(45)
stats.sort_stats("tottime").print_stats(30)

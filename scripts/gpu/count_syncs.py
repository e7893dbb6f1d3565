"""Count the host-device waits of chunked runs, by where they come from: each wait stalls a worker while the
other workers' work holds the one GPU.

Usage: python scripts/gpu/count_syncs.py SUITE BACKEND every:K > syncs.txt
Runs each K-th case of SUITE in chunks as a worker does (cases do not wait for their kernels), with
``torch.cuda.set_sync_debug_mode("warn")``, and prints the waits per chunk grouped by the innermost frame of
mla-verify's own code.  Only the waits PyTorch reports are counted (``.item()``, ``.tolist()``, a copy to the
host, ``nonzero``, ...); an explicit ``torch.cuda.synchronize`` is not.
"""
import collections
import sys
import traceback
import warnings

import torch

from harness.planning import cases as case_mod
from harness.running import chunk
from harness.running.backend_loader import load_backend

OWN = ("/harness/", "/reference/")

suite, spec, every = sys.argv[1:4]
cases = case_mod.load_suite(suite).cases[::int(every.split(":")[1])]
backend = load_backend(spec)
chunk.run_chunk(cases[:4], backend, spec, "cuda", context_lost=lambda row: False)    # warm-up, not counted
sites = collections.Counter()


def where() -> str:
    frames = [f for f in traceback.extract_stack()[:-2] if any(p in f.filename for p in OWN)]
    if not frames:
        return "?"
    return " < ".join(f"{f.filename.split('/', 3)[-1] if '/' in f.filename else f.filename}:{f.lineno} {f.name}"
                      for f in reversed(frames[-3:]))


def record(message, category, filename, lineno, file=None, line=None):
    sites[where()] += 1


plan = chunk.plan(cases)
torch.cuda.set_sync_debug_mode("warn")
with warnings.catch_warnings():
    warnings.simplefilter("always")
    warnings.showwarning = record
    rows = [row for c in plan for row in chunk.run_chunk(c, backend, spec, "cuda", context_lost=lambda row: False)]
torch.cuda.set_sync_debug_mode(0)
total = sum(sites.values())
print(f"{len(rows)} cases in {len(plan)} chunks: {total} waits, {total / len(plan):.1f} a chunk, "
      f"{total / len(rows):.2f} a case; statuses {collections.Counter(r['status'] for r in rows)}")
for site, n in sites.most_common(40):
    print(f"{n:7d}  {site}")

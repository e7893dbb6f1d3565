"""One element of a sparse case, explained: the oracle's value, the same sum with the softmax weights rounded
to bf16 before the P.V product (what a bf16 kernel does), the error model's scale 2^-9 * sqrt(sum p^2 v^2),
the row's key count and heaviest weights; on a GPU also FlashMLA sparse decode's value in three runs (bitwise
equal or not) and how many of the case's elements exceed the bf16 out bound.  Inputs are built on the device
the run would use (CUDA and CPU draws differ), so run it where the failing row was recorded.

    python3 scripts/gpu/sparse_element.py CASE_ID n,t,h,d      # the index a failing row's message names
"""
import sys

import torch

from harness.building.sparse_cache import dequantize, read_records
from harness.building.sparse_inputs import build
from harness.judging.sparse_oracle import expected_views
from harness.planning.cases import load_suite

cid, idx = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
case = next(c for c in load_suite("flashmla-sparse-upstream").cases if c.id == cid)
sc = build(case, "cuda" if torch.cuda.is_available() else "cpu"); inp = sc.inputs
print(case.id, "q", tuple(inp.q.shape), "topk", inp.topk, "fmt", inp.kv_format, "scale", inp.softmax_scale)
out, lse = expected_views(sc, ("exact",))["exact"]
n, t, h, d = idx
print("oracle out", float(out[n, t, h, d]), "lse", float(lse[n, h, t]))
rows = inp.indices[n, t].long(); rows = rows[rows >= 0]
pool = inp.kv_pool.view(inp.kv_pool.shape[0], -1)
keys = dequantize(read_records(pool, rows, inp.fmt, inp.page_size), inp.fmt, "exact")
q = inp.q[n, t, h].double()
s = (keys @ q) * inp.softmax_scale
p = torch.exp(s - s.max()); v = keys[:, d]
exact = float((p * v).sum() / p.sum())
pb = p.to(torch.bfloat16).double()
emul = float((pb * v).sum() / p.sum())
print(f"keys {len(rows)}; exact {exact:.6f}; P rounded to bf16: {emul:.6f} (diff {emul-exact:+.6f}); "
      f"2^-9*sqrt(sum p^2 v^2)/sum p = {2**-9*float(((p/p.sum())**2*v**2).sum().sqrt()):.6f}; "
      f"max |v| {float(v.abs().max()):.3f}; top p {sorted((p/p.sum()).tolist())[-3:]}")
top = torch.topk(p / p.sum(), min(3, p.numel()))
print("top weights", top.values.tolist(), "their v", v[top.indices].tolist())
if torch.cuda.is_available():
    import dataclasses

    from harness.building.sparse_inputs import output_buffer
    from harness.running.backend_loader import load_backend
    be = load_backend("flashmla-sparse")
    gots = []
    for _ in range(3):
        o, l = be.run_sparse(dataclasses.replace(inp, out=output_buffer(inp)))
        gots.append(o)
    print("kernel", [float(g[n, t, h, d]) for g in gots], "runs bitwise equal:",
          all(torch.equal(gots[0].view(torch.int16), g.view(torch.int16)) for g in gots))
    err = (gots[0].double() - out).abs()
    bound = 5e-3 + 1e-2 * out.abs()
    print("elements over the bf16 bound:", int((err > bound).sum()), "of", err.numel(),
          "max err", float(err.max()), "at", [int(i) for i in (err == err.max()).nonzero()[0]])

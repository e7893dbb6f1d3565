"""Probe what the installed FlashMLA accepts: kv heads, head counts, fp16, fp8 q dtype, empty rows.

Usage: python scripts/probe_flashmla.py   (on a GPU box; exit 2 where torch sees no CUDA device)
Prints one line per probe; the findings set FlashMLABackend.capabilities (a run of 2026-12-02 is in
docs/kernel-packages.md and docs/archive/gpu-runs-history.md).
"""

import dataclasses
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))    # the checkout's harness: a GPU box installs none
from harness.backends.flashmla import FlashMLABackend  # noqa: E402
from harness.building.inputs import generate  # noqa: E402
from harness.judging.compare import check_tensor  # noqa: E402
from harness.judging.oracle import expected  # noqa: E402
from harness.judging.tolerances import TOLERANCES  # noqa: E402
from harness.planning.cases import Case  # noqa: E402


def probe(backend, label, **fields):
    case = Case(id=f"probe/{label}/0", seed=7, **fields)
    try:
        inputs = generate(case, "cuda")
        out, lse = backend.run(inputs)
        torch.cuda.synchronize()
        eo, el = expected(inputs)
        tol = TOLERANCES[case.dtype if case.dtype in ("bf16", "fp16", "fp8_e4m3") else "fp8_e4m3"]
        co, cl = check_tensor("out", out, eo, tol.out), check_tensor("lse", lse, el, tol.lse)
        print(f"{label:<28} ran  out {co.passed} cos {co.cos_diff:.2e} ratio {co.worst_ratio:.3f} "
              f"| lse {cl.passed} ratio {cl.worst_ratio:.3f} | out dtype {out.dtype} lse {tuple(lse.shape)}")
    except Exception as e:
        print(f"{label:<28} FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        torch.cuda.synchronize()


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return
    if not torch.cuda.is_available():
        print("probe_flashmla.py: torch sees no CUDA device; run it on a GPU box", file=sys.stderr)
        sys.exit(2)
    b = FlashMLABackend()
    print(b.availability(), b.info())
    base = dict(batch_size=4, heads=16, seqlen="uniform:1:300")
    probe(b, "decode h16", **base)
    for h in (1, 3, 9, 63, 64, 126, 128):
        probe(b, f"decode h{h}", **{**base, "heads": h})
    for hkv in (2, 3, 8):
        probe(b, f"decode h24 hkv{hkv}", **{**base, "heads": 24, "kv_heads": hkv})
    probe(b, "verify s_q 8 h128", **{**base, "mode": "verify", "draft_tokens": 8, "heads": 128})
    probe(b, "verify noncausal s_q 4", **{**base, "mode": "verify", "draft_tokens": 4, "causal": False})
    probe(b, "fp16", **{**base, "dtype": "fp16"})
    probe(b, "fp8 e4m3", **{**base, "dtype": "fp8_e4m3"})
    probe(b, "fp8 e4m3 verify 4", **{**base, "dtype": "fp8_e4m3", "mode": "verify", "draft_tokens": 4})
    probe(b, "empty rows", **{**base, "seqlen": "list:0,5,0,130"})
    probe(b, "all empty", **{**base, "seqlen": "list:0"})
    probe(b, "page 32", **{**base, "page_size": 32})
    probe(b, "long 32k h128", **{**base, "batch_size": 2, "heads": 128, "seqlen": "equal:32768"})
    # fp8 with a bf16 q: does the kernel quantise itself or refuse?
    case = Case(id="probe/fp8-bf16q/0", seed=3, **{**base, "dtype": "fp8_e4m3"})
    inputs = generate(case, "cuda")
    try:
        out, lse = b.run(dataclasses.replace(inputs, q=inputs.q_model))
        torch.cuda.synchronize()
        print("fp8 with bf16 q               ran (kernel accepts bf16 q)")
    except Exception as e:
        print(f"fp8 with bf16 q               FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    # e5m2 bytes fed as the seed would (reinterpreted as e4m3)
    case = Case(id="probe/e5m2/0", seed=3, **{**base, "dtype": "fp8_e5m2"})
    inputs = generate(case, "cuda")
    try:
        fake = dataclasses.replace(inputs, kv_pool=inputs.kv_pool.view(torch.float8_e4m3fn),
                                   q=inputs.q.view(torch.float8_e4m3fn))
        out, lse = b.run(fake)
        eo, _ = expected(inputs)
        co = check_tensor("out", out, eo, TOLERANCES["fp8_e5m2"].out)
        print(f"e5m2 bytes as e4m3           ran, matches e5m2 reference: {co.passed} (cos {co.cos_diff:.3g})")
    except Exception as e:
        print(f"e5m2 bytes as e4m3           FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}")


if __name__ == "__main__":
    main()

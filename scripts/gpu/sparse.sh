#!/usr/bin/env bash
# Issue 27 on the H200: the sparse suite on every sparse backend (torch's float32 gather on CUDA, FlashMLA's
# sparse decode as SGLang calls it, and the second opinions FlashMLA sparse prefill and FlagGems'
# flash_mla_sparse_fwd over the bf16-dequantized pool), side by side in one results file and report, then
# the sparse tests.  Assumes sgl-flash-mla and flag-gems are installed under .site/ (scripts/gpu/setup_site.sh).
# No network.  A backend that does not import gives unsupported rows that say why.
#   OUT=/some/dir bash scripts/gpu/sparse.sh        # OUT defaults to reports/sparse
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
PY=${PYTHON:-python3}
OUT=${OUT:-reports/sparse}
mkdir -p "$OUT"
log="$OUT/sparse.log"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$log"
$PY -c "import torch, importlib.metadata as md; print('torch', torch.__version__, 'sgl-flash-mla', md.version('sgl-flash-mla'))" 2>&1 | tee -a "$log"
for b in flashmla-sparse flashmla-sparse-prefill flaggems-sparse; do
  echo "$b: $($PY -m harness.cli list --json --backend "$b" 2>&1 | tail -1 | sed 's/^ *//')" | tee -a "$log"
done

results="$OUT/sparse.jsonl"
rm -f "$results"
timeout 900 $PY -m harness.cli run --suite sparse --device cuda --out "$results" --no-progress \
  --backend torch,flashmla-sparse,flashmla-sparse-prefill,flaggems-sparse 2>&1 | tee -a "$log"
echo "run exit: ${PIPESTATUS[0]}" | tee -a "$log"
$PY -m harness.cli report "$results" -o "$OUT/sparse.html" 2>&1 | tail -2 | tee -a "$log"

# per backend: statuses, and the worst out/LSE error in the gating view and in the exact view beside it
$PY - "$results" <<'PY' 2>&1 | tee -a "$log"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for b in sorted({r["backend"] for r in rows}):
    mine = [r for r in rows if r["backend"] == b]
    print(b, {s: sum(r["status"] == s for r in mine) for s in sorted({r["status"] for r in mine})})
    for key in ("out", "lse", "out_exact", "lse_exact"):
        vals = [(r["metrics"][key]["max_abs_err"], r["metrics"][key]["cos_diff"], r["case_id"])
                for r in mine if key in r.get("metrics", {})]
        if vals:
            worst = max(vals)
            print(f"  {key}: max abs {worst[0]:.3g} ({worst[2]}), worst cos diff {max(v[1] for v in vals):.3g}")
    for r in mine:
        if r["status"] not in ("pass",):
            print("  ", r["case_id"], r["status"], (r.get("messages") or [r.get("reason")])[0][:300])
PY

# SCALE=1: also the sparse-scale suite on FlashMLA's sparse decode (cases over the memory budget are unsupported)
if [ "${SCALE:-0}" = 1 ]; then
  timeout 900 $PY -m harness.cli run --suite sparse-scale --device cuda --out "$OUT/sparse-scale.jsonl" --no-progress \
    --backend flashmla-sparse 2>&1 | tail -12 | tee -a "$log"
fi

$PY -m pytest -q -p no:cacheprovider -rs tests/test_sparse_reference.py tests/test_sparse_cache.py \
  tests/test_sparse_scenario.py tests/test_sparse_backends.py tests/test_sparse_mutants.py \
  tests/test_sparse_upstream.py tests/test_sparse_scale.py 2>&1 | tee "$OUT/sparse-tests.log" | tail -15
echo "sparse tests exit: ${PIPESTATUS[0]}" | tee -a "$log"

#!/usr/bin/env bash
# A quick run of each kernel family beyond FlashMLA (FlashInfer fa3/fa2, SGLang Triton decode +
# extend, SGLang verify_mla, FlagGems) on the smoke, verify and fp8 suites (and edge for fa3 and sglang-triton).
# Assumes the wheel sets are installed in the checkout as .site/fi (flashinfer), .site/sg (sglang + flag_gems)
# and .site/fm (sgl-flash-mla).  No network.  Keeps going when a backend fails, hangs or crashes: each
# backend runs in its own process under a time limit.  About 4 minutes, FlashInfer's JIT builds included
# (~20 s per module, cached under $MLA_VERIFY_CACHE for the next run).
# Usage: [OUT=dir] [PYTHON=python3] bash scripts/gpu/kernels.sh        (OUT defaults to reports/kernels)
case ${1:-} in -h|--help) awk 'NR == 1 {next} /^#/ {sub(/^# ?/, ""); print; next} {exit}' "$0"; exit 0;; esac
set -u
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
OUT=${OUT:-reports/kernels}
mkdir -p "$OUT"
site=""
for d in .site/fi .site/sg .site/fm; do [ -d "$d" ] && site="$site:$PWD/$d"; done
export PYTHONPATH="$PWD$site" PYTHONUNBUFFERED=1
export MLA_VERIFY_CACHE=${MLA_VERIFY_CACHE:-$PWD/.site/mvc}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
# FlashInfer's JIT needs nvcc and ninja on PATH: the image's, else the ninja wheel's
command -v ninja >/dev/null || PATH="$PATH:$($PY -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null)"
export PATH="$PATH:$CUDA_HOME/bin"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
echo "PYTHONPATH=$PYTHONPATH"
echo "nvcc: $(command -v nvcc || echo missing)  ninja: $(command -v ninja || echo missing)"
echo "MLA_VERIFY_CACHE=$MLA_VERIFY_CACHE"
for b in flashinfer-fa3 flashinfer-fa2 sglang-triton sglang-verify-mla flaggems; do
  echo "$b: $($PY -m harness.cli list --json --backend "$b" 2>&1 | tail -1 | sed 's/^ *//')"
done

summarize() {   # results file -> counts, every row that did not pass, worst errors, JIT build times
  $PY - "$1" <<'PYEOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print("   " + ", ".join(f"{s} {sum(r['status'] == s for r in rows)}" for s in sorted({r["status"] for r in rows})))
ran = [r for r in rows if r.get("metrics")]
for key in ("out", "lse"):
    vals = [(r["metrics"][key].get("rel_l2", 0.0), r["metrics"][key].get("max_abs_err", 0.0), r["case_id"])
            for r in ran if key in r["metrics"]]
    if vals:
        worst = max(vals)
        print(f"   worst {key}: rel L2 {worst[0]:.2e}, max abs {max(v[1] for v in vals):.2e} ({worst[2]})")
if ran and any(r.get("lse_produced") is False for r in ran):
    print("   LSE: not produced by this kernel (not checked)")
info = rows[-1].get("backend_info", {}) if rows else {}
if info.get("jit_build_s"):
    print(f"   first plan() incl. JIT build, s: {info['jit_build_s']}")
kernel = [r["kernel_ms"] for r in ran if r.get("kernel_ms") is not None]
if kernel:
    print(f"   kernel calls: {len(kernel)}, total {sum(kernel) / 1e3:.2f} s (first includes any build)")
from collections import Counter
for reason, n in Counter(r.get("reason") for r in rows if r["status"] == "unsupported").most_common(6):
    print(f"   unsupported x{n}: {(reason or '')[:220]}")
for r in [r for r in rows if r["status"] not in ("pass", "unsupported")][:15]:
    print(f"   {r['case_id']}: {r['status']}: {(r.get('reason') or '')[:220]}")
    for m in (r.get("messages") or [])[:1]:
        print(f"      {m[:300]}")
PYEOF
}

run() {   # backend, suites, seconds, [extra args]
  local b=$1 suites=$2 limit=$3; shift 3
  local tag="$b-${suites//,/+}${1:+-$(echo "${@: -1}" | tr '/' '_')}"
  local out="$OUT/$tag.jsonl" start=$(date +%s)
  rm -f "$out"
  timeout -k 10 "$limit" $PY -m harness.cli run --suite "$suites" --backend "$b" --workers 0 --no-progress \
      --out "$out" "$@" > "$OUT/$tag.log" 2>&1
  local rc=$?
  echo "== $b on $suites $*: exit $rc$([ $rc -eq 124 ] && echo ' (time limit)') in $(( $(date +%s) - start )) s"
  tail -n 3 "$OUT/$tag.log" | sed 's/^/   | /'
  [ -s "$out" ] && summarize "$out" || echo "   no results in $out"
}

t0=$(date +%s)
# limits are worst cases; a warm JIT cache (a second run on the same machine) makes FlashInfer's quick
run flashinfer-fa3 smoke,verify,fp8,edge 150     # JIT: bf16, fp16, bf16 q + e4m3 KV (+ e5m2 unless refused)
run flashinfer-fa2 smoke,fp8 80
run sglang-triton smoke,verify,fp8,edge 100      # edge: empty rows, stale padding, 32k, scenarios
run sglang-verify-mla verify,fp8 45
run flaggems smoke 30                            # decode at its fixed scale 1/sqrt(576); the rest unsupported
echo "== all: $(( $(date +%s) - t0 )) s; results and logs in $OUT"

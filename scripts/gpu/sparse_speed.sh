#!/usr/bin/env bash
# Sparse speed against FlashMLA's own test, in one call: FlashMLA's own sparse-decoding test and the
# flashmla-sparse-upstream suite (the same 4,748-case matrix, float64 oracle, crash isolation on: the CLI's
# defaults), each printing cases/s.  FlashMLA's test runs only when .upstream/flashmla-tests/test_flash_mla_sparse_decoding.py
# travelled (FlashMLA 9241ae3 tests/, unmodified, with lib.py, ref.py, quant.py and kernelkit); it is run
# by scripts/gpu/run_legacy.py (use_legacy=True added: the wheel's SM90 sparse decode is legacy).
# Usage: [OUT=dir] [LIMIT=seconds] bash scripts/gpu/sparse_speed.sh   (OUT defaults to reports/sparse-speed)
# LIMIT=SECONDS bounds each of the two runs (default 540).
case ${1:-} in -h|--help) awk 'NR == 1 {next} /^#/ {sub(/^# ?/, ""); print; next} {exit}' "$0"; exit 0;; esac
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
PY=${PYTHON:-python3}
OUT=${OUT:-reports/sparse-speed}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
own=.upstream/flashmla-tests/test_flash_mla_sparse_decoding.py
if [ -f "$own" ]; then
  t0=$(date +%s.%N)
  timeout "${LIMIT:-540}" $PY scripts/gpu/run_legacy.py "$own" > "$OUT/flashmla-own-sparse.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  started=$(grep -c 'Running on' "$OUT/flashmla-own-sparse.log")
  passed=$(( rc == 0 ? started : (started > 0 ? started - 1 : 0) ))
  grep -E 'correctness cases passed' "$OUT/flashmla-own-sparse.log" | tail -1
  awk -v s="$started" -v p="$passed" -v rc="$rc" -v t0="$t0" -v t1="$t1" 'BEGIN { w = t1 - t0
    printf "flashmla own sparse test: rc %d; cases started %d, passed %d (of 4748); wall %.1f s; %.2f cases/s\n",
           rc, s, p, w, (w > 0 ? p / w : 0) }'
else
  echo "no $own: FlashMLA's own sparse test not run (carry .upstream)"
fi

results="$OUT/sparse-upstream.jsonl"
rm -f "$results"
t0=$(date +%s.%N)
timeout "${LIMIT:-540}" $PY -m harness.cli run --suite flashmla-sparse-upstream --backend flashmla-sparse \
  --device cuda --no-progress --out "$results" > "$OUT/sparse-upstream.log" 2>&1
rc=$?
t1=$(date +%s.%N)
tail -4 "$OUT/sparse-upstream.log"
awk -v rc="$rc" -v t0="$t0" -v t1="$t1" -v n="$(wc -l < "$results" 2>/dev/null || echo 0)" 'BEGIN { w = t1 - t0
  printf "mla-verify flashmla-sparse-upstream: rc %d; rows %d; wall %.1f s (process start included); %.2f cases/s\n",
         rc, n, w, (w > 0 ? n / w : 0) }'
# statuses, where the time went, and every row that did not pass
$PY - "$results" <<'PY'
import collections, json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print(dict(collections.Counter(r["status"] for r in rows)))
phases = collections.Counter()
for r in rows:
    phases.update(r.get("phase_ms") or {})
print("summed phase ms:", {k: round(v) for k, v in phases.most_common()})
for r in rows:
    if r["status"] != "pass":
        print("  ", r["case_id"], r["status"], (r.get("messages") or [r.get("reason")])[0][:200])
PY

#!/usr/bin/env bash
# Issue 13 on the H200: the flashmla-upstream matrix at 1 worker and at the default worker count,
# FlashMLA's own dense-decoding test on the same matrix (when .upstream/flashmla-tests travelled),
# and make verify with FlashMLA.  Usage: speed.sh [WORKERS...]
set -u
. scripts/gpu/env.sh
mkdir -p "$OUT/speed"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
for w in ${*:-1 default}; do
  flag=$([ "$w" = default ] && echo "" || echo "--workers $w")
  start=$(date +%s.%N)
  python3 -m harness.cli run --suite flashmla-upstream --backend flashmla $flag --no-progress \
    --out "$OUT/speed/upstream-w$w.jsonl" > "$OUT/speed/upstream-w$w.log" 2>&1
  echo "upstream workers=$w rc=$? wall $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
  tail -4 "$OUT/speed/upstream-w$w.log"
done
if [ -d .upstream/flashmla-tests ] && [ -f scripts/gpu/flashmla_own_test.sh ]; then
  bash scripts/gpu/flashmla_own_test.sh > "$OUT/speed/flashmla-own-test.log" 2>&1; tail -5 "$OUT/speed/flashmla-own-test.log"
fi
start=$(date +%s.%N)
make verify SETUP= MLA="python3 -m harness.cli" STAMP=h200-speed > "$OUT/speed/verify.log" 2>&1
echo "make verify rc=$? wall $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
tail -6 "$OUT/speed/verify.log"
cp reports/verify-h200-speed.jsonl "$OUT/speed/" 2>/dev/null

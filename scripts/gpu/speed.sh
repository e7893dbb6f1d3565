#!/usr/bin/env bash
# Issue 13 on the H200: FlashMLA's own dense-decoding test (when .upstream/flashmla-tests travelled), the
# flashmla-upstream matrix under mla-verify (default chunks, then --chunk 1: the rows must be the same),
# and make verify with FlashMLA.  Usage: [OWN_TEST=0] [CHUNKS="32 1"] speed.sh
set -u
. scripts/gpu/env.sh
mkdir -p "$OUT/speed"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
if [ "${OWN_TEST:-1}" = 1 ] && [ -d .upstream/flashmla-tests ]; then
  bash scripts/gpu/flashmla_own_test.sh > "$OUT/speed/flashmla-own-test.log" 2>&1; tail -1 "$OUT/speed/flashmla-own-test.log"
fi
for chunk in ${CHUNKS:-32 1}; do
  start=$(date +%s.%N)
  python3 -m harness.cli run --suite flashmla-upstream --backend flashmla --chunk $chunk --no-progress \
    --out "$OUT/speed/upstream-chunk$chunk.jsonl" > "$OUT/speed/upstream-chunk$chunk.log" 2>&1
  echo "upstream --chunk $chunk rc=$? wall $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
  tail -3 "$OUT/speed/upstream-chunk$chunk.log"
done
python3 scripts/gpu/same_rows.py "$OUT/speed/upstream-chunk32.jsonl" "$OUT/speed/upstream-chunk1.jsonl"
start=$(date +%s.%N)
make verify SETUP= MLA="python3 -m harness.cli" STAMP=h200-speed > "$OUT/speed/verify.log" 2>&1
echo "make verify rc=$? wall $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
tail -6 "$OUT/speed/verify.log"
# every row that did not pass, so a failure is named here even when the results file does not come back
python3 -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["status"] not in ("pass", "unsupported"):
        print("not passed:", r["case_id"], r["status"], (r.get("reason") or "")[:300])' reports/verify-h200-speed.jsonl
cp reports/verify-h200-speed.jsonl "$OUT/speed/" 2>/dev/null

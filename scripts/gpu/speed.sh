#!/usr/bin/env bash
# Dense speed against FlashMLA's own test, in one call: FlashMLA's dense-decoding test (when
# .upstream/flashmla-tests travelled), the flashmla-upstream matrix under mla-verify at each chunk size
# (--chunk 32, then --chunk 1: same_rows.py between the first two, which must hold the same rows), then
# make verify (`auto`: every kernel that loads); each step prints its cases/s or wall time.
# Usage: [OWN_TEST=0] [CHUNKS="32 1"] [OUT=dir] bash scripts/gpu/speed.sh      (OUT defaults to reports/speed-gpu)
case ${1:-} in -h|--help) awk 'NR == 1 {next} /^#/ {sub(/^# ?/, ""); print; next} {exit}' "$0"; exit 0;; esac
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
OUT=${OUT:-reports/speed-gpu}
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
set -- ${CHUNKS:-32 1}
[ $# -ge 2 ] && python3 scripts/gpu/same_rows.py "$OUT/speed/upstream-chunk$1.jsonl" "$OUT/speed/upstream-chunk$2.jsonl"
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

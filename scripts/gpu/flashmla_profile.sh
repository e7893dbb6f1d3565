#!/usr/bin/env bash
# Issue 28 item 5 on the H200: FlashMLA as SGLang 0.5.23 calls it (engine profile sglang-0.5.23: a grown eager
# block-table scratch with stale tails, graph metadata as (num_sms, 8) views, the full-width captured table)
# beside the seed's profile, on make verify's default suites (the Makefile's SUITES); then the profile tests.
# Assumes the wheel sets under .site/* (scripts/gpu/setup_site.sh).  No network.
#   OUT=/some/dir bash scripts/gpu/flashmla_profile.sh      # OUT defaults to reports/flashmla-profile
# Writes $OUT/profiles.jsonl, $OUT/profiles.log, $OUT/profiles.html and $OUT/profile-report.txt (the counts).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
export HYPOTHESIS_PROFILE=ci
OUT=${OUT:-reports/flashmla-profile}
mkdir -p "$OUT"
report="$OUT/profile-report.txt"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  echo "commit $MLA_VERIFY_COMMIT"
} | tee "$report"
start=$(date +%s)
rm -f "$OUT/profiles.jsonl"
suites=$(sed -n 's/^SUITES ?= //p' Makefile)      # make verify's default suites
echo "suites $suites" | tee -a "$report"
timeout -k 10 480 python3 -m harness.cli run --suite "$suites" \
    --backend flashmla,flashmla@sglang-0.5.23 --no-progress --out "$OUT/profiles.jsonl" > "$OUT/profiles.log" 2>&1
echo "== run: exit $? in $(( $(date +%s) - start )) s" | tee -a "$report"
tail -n 5 "$OUT/profiles.log" | sed 's/^/   | /' | tee -a "$report"
python3 -m harness.cli report "$OUT/profiles.jsonl" -o "$OUT/profiles.html" > "$OUT/report.log" 2>&1
echo "== report: exit $?" | tee -a "$report"
python3 - "$OUT/profiles.jsonl" <<'PY' 2>&1 | tee -a "$report"
import collections, json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for backend in sorted({r["backend"] for r in rows}):
    mine = [r for r in rows if r["backend"] == backend]
    print(backend, dict(collections.Counter(r["status"] for r in mine)))
    for r in [r for r in mine if r["status"] not in ("pass", "unsupported")][:20]:
        print(f"   {r['status']:13s} {r['case_id']}: {(r.get('reason') or '')[:200]}")
PY
timeout -k 10 100 python3 -m pytest -q -p no:cacheprovider -rs tests/test_flashmla_profiles.py tests/test_graph_sessions.py \
    > "$OUT/profile-tests.log" 2>&1
echo "== tests: exit $?" | tee -a "$report"
tail -n 3 "$OUT/profile-tests.log" | sed 's/^/   | /' | tee -a "$report"

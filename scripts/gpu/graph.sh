#!/usr/bin/env bash
# Issue 28 items 1-3 on the H200: the graph suite (capture once at the bucket batch, 24 replays with growing
# requests and smaller real batches, every step judged) on FlashMLA, FlashInfer fa3/fa2 and SGLang Triton, as
# SGLang 0.5.23 captures each; then the graph sessions' tests (CPU fill tests + the GPU runs).
# Assumes the wheel sets under .site/* (scripts/gpu/setup_site.sh).  No network.
#   OUT=/some/dir bash scripts/gpu/graph.sh      # OUT defaults to reports/graph
# Writes $OUT/graph.jsonl, $OUT/graph.log, $OUT/graph-tests.log and $OUT/graph-report.txt (the summary).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
export HYPOTHESIS_PROFILE=ci
OUT=${OUT:-reports/graph}
mkdir -p "$OUT"
# FlashInfer's JIT needs nvcc and ninja on PATH: the image's, else the ninja wheel's
command -v ninja >/dev/null || PATH="$PATH:$(python3 -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null)"
report="$OUT/graph-report.txt"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  echo "commit $MLA_VERIFY_COMMIT"
} | tee "$report"

start=$(date +%s)
rm -f "$OUT/graph.jsonl"
timeout -k 10 400 python3 -m harness.cli run --suite graph \
    --backend flashmla,flashinfer-fa3,flashinfer-fa2,sglang-triton --workers 0 --no-progress \
    --out "$OUT/graph.jsonl" > "$OUT/graph.log" 2>&1
echo "== graph suite: exit $? in $(( $(date +%s) - start )) s" | tee -a "$report"
tail -n 5 "$OUT/graph.log" | sed 's/^/   | /' | tee -a "$report"

python3 - "$OUT/graph.jsonl" <<'PY' 2>&1 | tee -a "$report"
import json, sys
from collections import Counter, defaultdict
try:
    rows = [json.loads(line) for line in open(sys.argv[1])]
except FileNotFoundError:
    sys.exit("no results file")
by = defaultdict(list)
for r in rows:
    by[r["backend"]].append(r)
for backend, rs in by.items():
    print(f"{backend}: " + ", ".join(f"{s} {n}" for s, n in sorted(Counter(r["status"] for r in rs).items())))
    for r in rs:
        g = (r.get("metrics") or {}).get("graph", {})
        line = f"   {r['case_id']}: {r['status']}"
        if g:
            line += (f" steps {g.get('steps')} bucket {g.get('bucket')} {g.get('index')}; "
                     f"engine-eager bitwise {g.get('engine_eager_bitwise_equal')}, "
                     f"max |graph - engine eager| {g.get('graph_vs_engine_eager_out', 0):.2e}, "
                     f"oracle worst ratio out {g.get('ref_out_worst_ratio', 0):.3f} "
                     f"lse {g.get('ref_lse_worst_ratio', 0):.3f}; "
                     f"eager nondeterministic at steps {g.get('eager_nondeterministic_steps')}")
        print(line)
        if r["status"] not in ("pass",):
            print(f"      reason: {(r.get('reason') or '')[:300]}  checks: {r.get('failed_checks')}")
            for m in (r.get("messages") or [])[:3]:
                print(f"      {m[:300]}")
PY

timeout -k 10 150 python3 -m pytest -q -p no:cacheprovider -rs tests/test_graph_sessions.py > "$OUT/graph-tests.log" 2>&1
rc=$?
echo "== graph tests: exit $rc" | tee -a "$report"
tail -n 15 "$OUT/graph-tests.log" | tee -a "$report"
exit "$rc"

#!/usr/bin/env bash
# Issue 28 item 4 on the H200: FlagGems on every default suite (the Makefile's SUITES, read from it, so there
# is one list), now that its fixed softmax scale
# (1/sqrt(d_qk), it has no scale argument) is declared as data and every case runs at it (the oracle too).
# Before: 9 of its 172 make-verify cases ran, the rest unsupported for their scale.  What stays unsupported
# must be what its API cannot take (verify/s_q > 1, fp8, non-causal), each reason quoting its source.
# BACKENDS defaults to flaggems (flash_mla, dense) and flaggems-sparse (flash_mla_sparse_fwd, the sparse suite):
# FlagGems' two MLA kernels, so every decode case of the default suites reaches one of them
# (docs/kernel-backends.md, "FlagGems coverage").
# Assumes the wheel sets under .site/* (scripts/gpu/setup_site.sh).  No network.
#   OUT=/some/dir bash scripts/gpu/flaggems_all.sh      # OUT defaults to reports/flaggems
# Writes $OUT/flaggems.jsonl, $OUT/flaggems.log, $OUT/flaggems.html and $OUT/flaggems-report.txt (the counts).
# Then the graph suite alone on flaggems (its graph_session, flaggems_graph.py: each row's 24 replayed steps)
# into $OUT/flaggems-graph.jsonl, and tests/test_flaggems_graph.py; ONLY=graph runs just that part:
#   ONLY=graph OUT=/some/dir bash scripts/gpu/flaggems_all.sh
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
OUT=${OUT:-reports/flaggems}
mkdir -p "$OUT"
report="$OUT/flaggems-report.txt"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  echo "commit $MLA_VERIFY_COMMIT"
  python3 -c "import importlib.metadata as m; print('flag-gems', m.version('flag-gems'))" 2>&1
} | tee "$report"

graph_part() {
  start=$(date +%s)
  rm -f "$OUT/flaggems-graph.jsonl"
  timeout -k 10 300 python3 -m harness.cli run --suite graph --backend flaggems --workers 0 --no-progress \
      --out "$OUT/flaggems-graph.jsonl" > "$OUT/flaggems-graph.log" 2>&1
  echo "== graph suite on flaggems: exit $? in $(( $(date +%s) - start )) s" | tee -a "$report"
  python3 - "$OUT/flaggems-graph.jsonl" <<'PY' 2>&1 | tee -a "$report"
import json, sys
for r in (json.loads(line) for line in open(sys.argv[1])):
    g = (r.get("metrics") or {}).get("graph")
    line = f"   {r['case_id']}: {r['status']}"
    if g:
        line += (f" steps {g['steps']} bucket {g['bucket']} sizes {g['real_batch_sizes']}; engine-eager bitwise "
                 f"{g['engine_eager_bitwise_equal']}, max |graph - engine eager| {g['graph_vs_engine_eager_out']:.2e}, "
                 f"oracle worst ratio out {g['ref_out_worst_ratio']:.3f}, lse {g['ref_lse_worst_ratio']}; "
                 f"eager nondeterministic at {g['eager_nondeterministic_steps']}")
    print(line)
    if r["status"] != "pass":
        print(f"      reason: {(r.get('reason') or '')[:300]}  checks: {r.get('failed_checks')}")
        for m in (r.get("messages") or [])[:3]:
            print(f"      {m[:300]}")
PY
  timeout -k 10 200 python3 -m pytest -q -p no:cacheprovider -rs tests/test_flaggems_graph.py \
      tests/test_flaggems_coverage.py > "$OUT/flaggems-graph-tests.log" 2>&1
  echo "== flaggems graph tests: exit $?" | tee -a "$report"
  tail -n 8 "$OUT/flaggems-graph-tests.log" | tee -a "$report"
}
if [ "${ONLY:-}" = graph ]; then graph_part; exit 0; fi

start=$(date +%s)
rm -f "$OUT/flaggems.jsonl"
SUITES=${SUITES:-$(sed -n 's/^SUITES ?= *//p' Makefile)}
BACKENDS=${BACKENDS:-flaggems,flaggems-sparse}
echo "suites $SUITES; backends $BACKENDS" | tee -a "$report"
timeout -k 10 540 python3 -m harness.cli run --suite "$SUITES" \
    --backend "$BACKENDS" --no-progress --out "$OUT/flaggems.jsonl" > "$OUT/flaggems.log" 2>&1
echo "== run: exit $? in $(( $(date +%s) - start )) s" | tee -a "$report"
tail -n 5 "$OUT/flaggems.log" | sed 's/^/   | /' | tee -a "$report"
python3 -m harness.cli report "$OUT/flaggems.jsonl" -o "$OUT/flaggems.html" --max-drilldowns 200 \
    > "$OUT/report.log" 2>&1
echo "== report: exit $? ($OUT/flaggems.html)" | tee -a "$report"

python3 - "$OUT/flaggems.jsonl" <<'PY' 2>&1 | tee -a "$report"
import collections, json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
count = collections.Counter(r["status"] for r in rows)
ran = sum(count[s] for s in ("pass", "fail", "error", "crash", "timeout"))
print(f"{len(rows)} rows; ran {ran} (pass {count['pass']}, fail {count['fail']}); "
      + ", ".join(f"{s} {n}" for s, n in sorted(count.items())))
print(f"rows at the kernel's fixed scale (fixed_by_kernel): {sum('fixed_by_kernel' in r for r in rows)}")
by = collections.Counter((r["backend"], r["suite"], r["scenario"], r["status"]) for r in rows)
for (backend, suite, scenario, status), n in sorted(by.items()):
    print(f"   {backend:16s} {suite:8s} {scenario:17s} {status:12s} {n}")
print("unsupported, by reason:")
for (backend, reason), n in collections.Counter((r["backend"], r["reason"]) for r in rows
                                                 if r["status"] == "unsupported").most_common():
    print(f"   {n:4d}  {backend}: {reason[:220]}")
print("not passed (first 40):")
for r in [r for r in rows if r["status"] not in ("pass", "unsupported")][:40]:
    print(f"   {r['status']:13s} {r['case_id']}: {(r.get('reason') or '')[:200]}")
PY

graph_part

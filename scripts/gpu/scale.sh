#!/usr/bin/env bash
# The scale suite (issue 12) on a GPU: FlashMLA, then the torch backend on the same cases.
# For each: wall time, peak GPU memory (nvidia-smi sampled every 100 ms, whole device) and, from the
# results, the slowest cases' input+oracle time.  Run from the checkout on the H200:
#   OUT=/some/dir bash scripts/gpu/scale.sh        # OUT defaults to reports/; PYTHON to python3
set -u
OUT=${OUT:-reports}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

rc=0
for backend in flashmla torch; do
  out="$OUT/scale.jsonl"; [ "$backend" = torch ] && out="$OUT/scale-torch.jsonl"
  rm -f "$out"
  samples="$OUT/scale-$backend-gpu-mem.txt"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$samples" 2>/dev/null &
  sampler=$!
  start=$(date +%s%N)
  $PY -m harness.cli run --suite scale --backend "$backend" --no-progress --out "$out" || rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
  peak=$(sort -n "$samples" | tail -1)
  echo "== scale on $backend: $((ms / 1000)).$(printf %03d $((ms % 1000))) s wall, peak GPU memory used ${peak:-?} MiB (nvidia-smi)"
  [ -f "$out" ] || { echo "   no results file $out"; continue; }
  $PY - "$out" <<'PYEOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
ran = [r for r in rows if r.get("wall_s") is not None and r["status"] != "unsupported"]
print(f"   {len(rows)} rows: " + ", ".join(f"{s} {sum(r['status'] == s for r in rows)}"
                                         for s in sorted({r['status'] for r in rows})))
print(f"   case wall time {sum(r['wall_s'] for r in ran):.1f} s, oracle+compare "
      f"{sum((r.get('reference_ms') or 0) for r in ran) / 1e3:.1f} s, kernel {sum((r.get('kernel_ms') or 0) for r in ran) / 1e3:.2f} s")
for r in sorted(ran, key=lambda r: -r["wall_s"])[:5]:
    print(f"   slowest: {r['case_id']:<22} {r['wall_s']:6.2f} s  oracle {(r.get('reference_ms') or 0) / 1e3:6.2f} s  {r['status']}")
for r in rows:
    if r["status"] not in ("pass",):
        print(f"   {r['case_id']}: {r['status']}: {r.get('reason')}")
PYEOF
done
exit $rc

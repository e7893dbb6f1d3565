#!/usr/bin/env bash
# Issue 26 item 1 (key sets) on the H200: the flashmla-upstream matrix under the old tree (.base, unpacked
# from 06f7273, carried with the checkout) and under this one; the rows must be the same apart from timings
# and env, and each run's cases/s is printed.  Usage: [SUITE=..] [BACKEND=..] [ROUNDED=key,..] [CLOSE=rel]
# keysets_same_rows.sh (from the repo root; ROUNDED: keys compared to 12 digits; CLOSE: every float within
# rel; see same_rows.py)
set -u
. scripts/gpu/env.sh
root=$PWD
mkdir -p "$OUT/keysets"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
[ -d .base/harness ] || { echo "no .base tree: carry .base"; exit 2; }
run() {   # run NAME DIR: the matrix from DIR (python -m puts the working directory first on sys.path)
  local name=$1 dir=$2 start
  start=$(date +%s.%N)
  (cd "$dir" && PYTHONPATH="$dir${PYTHONPATH#"$root"}" python3 -m harness.cli run --suite "${SUITE:-flashmla-upstream}" \
     --backend "${BACKEND:-flashmla}" --no-progress --out "$OUT/keysets/$name.jsonl" > "$OUT/keysets/$name.log" 2>&1)
  local rc=$? wall
  wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  rows=$(wc -l < "$OUT/keysets/$name.jsonl")
  echo "$name rc=$rc rows=$rows, ${wall} s with the process start; the run's own cases/s:"
  tail -3 "$OUT/keysets/$name.log"
}
run before "$root/.base"
run after "$root"
# env (the commit, the tree) differs by design, and rows since 06f7273 carry two more fields (placement,
# backend_info.profile): drop them, then compare everything but timings
python3 - "$OUT/keysets/before.jsonl" "$OUT/keysets/after.jsonl" <<'PY'
import json, sys
for path in sys.argv[1:]:
    rows = [json.loads(line) for line in open(path)]
    with open(path.replace(".jsonl", "-noenv.jsonl"), "w") as f:
        for r in rows:
            r.pop("env", None)
            r.pop("placement", None)
            (r.get("backend_info") or {}).pop("profile", None)
        f.writelines(json.dumps(r) + "\n" for r in rows)
PY
python3 scripts/gpu/same_rows.py "$OUT/keysets/before-noenv.jsonl" "$OUT/keysets/after-noenv.jsonl" ${ROUNDED:+--ignore "$ROUNDED"} ${CLOSE:+--close "$CLOSE"}
echo "same_rows rc=$?"

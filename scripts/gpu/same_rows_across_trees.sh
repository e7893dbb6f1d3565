#!/usr/bin/env bash
# Do two trees give the same rows?  A suite under another commit's tree (.base, unpacked with
# `git archive REV | tar -x -C .base` and carried with the checkout) and under this one, each run's cases/s
# printed, then same_rows.py between the two results files (env, placement and backend_info.profile dropped:
# the first differs by design, the others are absent from older trees' rows).
# Usage: [SUITE=flashmla-upstream] [BACKEND=flashmla] [ROUNDED=key,..] [CLOSE=rel] [DROP=key,..] [SHARED=1]
#        [OUT=dir] bash scripts/gpu/same_rows_across_trees.sh     (exit: same_rows.py's; 2 without .base)
# ROUNDED: keys compared to 12 significant digits; CLOSE: every float within rel; DROP: keys left out;
# SHARED=1: only the cases both trees have (see same_rows.py).
case ${1:-} in -h|--help) awk 'NR == 1 {next} /^#/ {sub(/^# ?/, ""); print; next} {exit}' "$0"; exit 0;; esac
set -u
cd "$(dirname "$0")/../.."
[ -d .base/harness ] || { echo "same_rows_across_trees.sh: no .base tree in $PWD (git archive REV | tar -x -C .base)" >&2; exit 2; }
. scripts/gpu/env.sh
root=$PWD
OUT=$(realpath -m "${OUT:-reports/same-rows}")      # absolute: each tree runs from its own folder
mkdir -p "$OUT/trees"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
run() {   # run NAME DIR: the matrix from DIR (python -m puts the working directory first on sys.path)
  local name=$1 dir=$2 start
  start=$(date +%s.%N)
  (cd "$dir" && PYTHONPATH="$dir${PYTHONPATH#"$root"}" python3 -m harness.cli run --suite "${SUITE:-flashmla-upstream}" \
     --backend "${BACKEND:-flashmla}" --no-progress --out "$OUT/trees/$name.jsonl" > "$OUT/trees/$name.log" 2>&1)
  local rc=$? wall
  wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  rows=$(wc -l < "$OUT/trees/$name.jsonl")
  echo "$name rc=$rc rows=$rows, ${wall} s with the process start; the run's own cases/s:"
  tail -3 "$OUT/trees/$name.log"
}
run before "$root/.base"
run after "$root"
# env differs by design; placement and backend_info.profile are absent from older trees' rows
python3 scripts/gpu/same_rows.py "$OUT/trees/before.jsonl" "$OUT/trees/after.jsonl" --drop "env,placement,profile${DROP:+,$DROP}" \
  ${ROUNDED:+--ignore "$ROUNDED"} ${CLOSE:+--close "$CLOSE"} ${SHARED:+--shared}
rc=$?
echo "same_rows rc=$rc"
exit "$rc"

#!/usr/bin/env bash
# Issue 25's speed bar on the H200: the upstream matrix (2328 cases) on FlashMLA, for trees unpacked with
# `git archive REV | tar -x -C DIR` (carried, ignored), alternated ROUNDS times so drift hits each alike.
# Usage: ROUNDS=2 witness_speed.sh DIR... ; prints one line per run: tree, rc, cases/s.
set -u
. scripts/gpu/env.sh
site=${PYTHONPATH#"$PWD"}
mkdir -p "$OUT/witness"
for round in $(seq "${ROUNDS:-2}"); do
  for tree in "$@"; do
    log="$OUT/witness/$(basename "$tree")-$round.log"
    start=$(date +%s.%N)
    (cd "$tree" && PYTHONPATH="$PWD$site" python3 -m harness.cli run --suite flashmla-upstream --backend flashmla \
      --no-progress --out "$OUT/witness/$(basename "$tree")-$round.jsonl") > "$log" 2>&1
    rc=$?
    wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    echo "$tree round $round rc=$rc wall ${wall}s | $(grep -E 'cases/s|verdict' "$log" | tr '\n' ' ')"
  done
done

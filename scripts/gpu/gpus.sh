#!/usr/bin/env bash
# Issue 30 on one H200: the flashmla-upstream matrix with `run --gpus all` (the default) and with
# `run --gpus 0`, then same_rows.py between them (placement and timings aside they must be the same rows),
# and a row's placement.  With MLA_VERIFY_FAKE_GPUS unset a one-GPU box runs both unpinned, as before.
#   bash scripts/gpu/gpus.sh              (outputs under $OUT/gpus; SUITE= BACKEND= try it elsewhere)
set -u
suite=${SUITE:-flashmla-upstream} backend=${BACKEND:-flashmla}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
mkdir -p "$OUT/gpus"
nvidia-smi -L || echo "no nvidia-smi"
for gpus in all 0; do
  start=$(date +%s.%N)
  python3 -m harness.cli run --suite "$suite" --backend "$backend" --gpus $gpus --no-progress \
    --out "$OUT/gpus/upstream-gpus-$gpus.jsonl" > "$OUT/gpus/upstream-gpus-$gpus.log" 2>&1
  echo "upstream --gpus $gpus rc=$? wall $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
  tail -3 "$OUT/gpus/upstream-gpus-$gpus.log"
done
python3 scripts/gpu/same_rows.py "$OUT/gpus/upstream-gpus-all.jsonl" "$OUT/gpus/upstream-gpus-0.jsonl"
echo "same_rows rc=$?"
# the pinned path on the one real GPU: one pretend GPU (the test hook) pins its workers by index, so they run
# with CUDA_VISIBLE_DEVICES=0 and the set's memory gate reads GPU 0 by NVML.  Rows must be the same, placement aside
start=$(date +%s.%N)
MLA_VERIFY_FAKE_GPUS=1 python3 -m harness.cli run --suite "$suite" --backend "$backend" --no-progress \
  --out "$OUT/gpus/upstream-pinned.jsonl" > "$OUT/gpus/upstream-pinned.log" 2>&1
echo "upstream pinned to GPU 0 rc=$? wall $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
tail -3 "$OUT/gpus/upstream-pinned.log"
for f in upstream-gpus-0 upstream-pinned; do
  python3 -c 'import json, sys
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        row = json.loads(line); row.pop("placement", None); out.write(json.dumps(row) + "\n")' \
    "$OUT/gpus/$f.jsonl" "$OUT/gpus/$f.noplace.jsonl"
done
python3 scripts/gpu/same_rows.py "$OUT/gpus/upstream-gpus-0.noplace.jsonl" "$OUT/gpus/upstream-pinned.noplace.jsonl"
echo "same_rows (pinned, placement aside) rc=$?"
python3 -c 'import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
print("placement:", collections.Counter(json.dumps(r.get("placement")) for r in rows).most_common(3))
print("rerun_after:", sum("rerun_after" in r for r in rows))' "$OUT/gpus/upstream-gpus-all.jsonl"
# two shards of the same matrix, merged by report: every case once, no shard named absent
for k in 1 2; do
  python3 -m harness.cli run --suite "$suite" --backend "$backend" --shard $k/2 --no-progress \
    --out "$OUT/gpus/upstream-shard$k.jsonl" > "$OUT/gpus/upstream-shard$k.log" 2>&1
  echo "shard $k/2 rc=$? $(grep -o 'shard [0-9]/2: [0-9]* of the [0-9]* case(s)' "$OUT/gpus/upstream-shard$k.log")"
done
python3 -m harness.cli report "$OUT/gpus/upstream-shard1.jsonl" "$OUT/gpus/upstream-shard2.jsonl" \
  -o "$OUT/gpus/upstream-shards.html"
echo "report of the two shards rc=$?"

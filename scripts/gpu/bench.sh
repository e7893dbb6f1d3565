#!/usr/bin/env bash
# The bench record on a GPU box (the H200): a cross-check of the harness's kernel times, then the
# record suite with every paged-MLA backend side by side, then the reports.  Aimed at about 4 minutes;
# each step is time-limited (90, 60, 240 s).
#
# Usage: [OUT=dir] [BACKENDS=a,b] bash scripts/gpu/bench.sh        (default OUT: reports/bench-gpu)
#
# Writes into $OUT: gpu.txt (nvidia-smi before the runs), crosscheck{,-noflush}.{jsonl,csv,log},
# crosscheck.html, bench.{jsonl,csv,log,html}, and cache/ceilings-<device>.json (the measured ceilings).
# The kernel packages come from PYTHONPATH: every folder under .site/ is added to it, and FlashMLA's tests/
# when .upstream/flashmla-tests travelled, so the cross-check also times with its kernelkit.
# A backend that does not load (not installed, not merged yet) is a line in bench.log, not an abort;
# each step has a time limit, and rows finished before it are kept (JSONL is written row by row).
case ${1:-} in -h|--help) awk 'NR == 1 {next} /^#/ {sub(/^# ?/, ""); print; next} {exit}' "$0"; exit 0;; esac
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-reports/bench-gpu}
mkdir -p "$OUT"
for d in .site/*/; do [ -d "$d" ] && PYTHONPATH="$PWD/${d%/}${PYTHONPATH:+:$PYTHONPATH}"; done
[ -d .upstream/flashmla-tests/kernelkit ] && PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD/.upstream/flashmla-tests"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export MLA_VERIFY_CACHE_DIR=${MLA_VERIFY_CACHE_DIR:-$OUT/cache}
MLA="python3 -m harness.cli"
BACKENDS=${BACKENDS:-flashmla,flashinfer-fa3,flashinfer-fa2,sglang-triton}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,utilization.gpu \
  --format=csv > "$OUT/gpu.txt" 2>&1 || true
cat "$OUT/gpu.txt"

csv_from_rows() {   # a step cut short by its time limit has rows but no CSV yet
  [ -f "$1.jsonl" ] && [ ! -s "$1.csv" ] && python3 -c "import sys
from harness.bench.output import write_csv
from harness.recording.results import read_rows
write_csv(read_rows(sys.argv[1] + '.jsonl'), sys.argv[1] + '.csv')" "$1"
}

echo "== 1. cross-check: harness kineto p50 vs triton do_bench_cudagraph, FlashMLA b=128 L=4096 h=16/128 bf16"
timeout 90 $MLA bench --suite bench --case bench/flashmla-headline --backend flashmla --cross-check \
  --remeasure-ceilings --iters 50 --out "$OUT/crosscheck.jsonl" --csv "$OUT/crosscheck.csv" 2>&1 \
  | tee "$OUT/crosscheck.log"
echo "cross-check exit: ${PIPESTATUS[0]}"
csv_from_rows "$OUT/crosscheck"

echo "== 1b. the same without the L2 flush (do_bench_cudagraph never flushes): how much the flush moves it"
timeout 60 $MLA bench --suite bench --case bench/flashmla-headline --backend flashmla --cross-check --l2-flush none \
  --iters 50 --out "$OUT/crosscheck-noflush.jsonl" --csv "$OUT/crosscheck-noflush.csv" 2>&1 \
  | tee "$OUT/crosscheck-noflush.log"
echo "cross-check (no flush) exit: ${PIPESTATUS[0]}"

echo "== 2. record: $BACKENDS on cases/bench.toml"
timeout 240 $MLA bench --suite bench --backend "$BACKENDS" --iters 30 \
  --out "$OUT/bench.jsonl" --csv "$OUT/bench.csv" 2>&1 | tee "$OUT/bench.log"
echo "record exit: ${PIPESTATUS[0]} (124: cut at its time limit; rows so far are kept)"
csv_from_rows "$OUT/bench"

echo "== 3. reports"
for f in crosscheck bench; do
  [ -s "$OUT/$f.jsonl" ] && $MLA report "$OUT/$f.jsonl" -o "$OUT/$f.html" --title "mla-verify bench: $f"
done
ls -la "$OUT"

#!/usr/bin/env bash
# Time FlashMLA's own dense-decoding test against the installed sgl-flash-mla wheel.
# The test is tests/test_flash_mla_dense_decoding.py of github.com/deepseek-ai/FlashMLA (commit in
# .upstream/flashmla-tests/SOURCE), copied unmodified with its kernelkit helpers into the ignored folder
# .upstream/flashmla-tests (carry it).  It is a __main__ script, not a pytest file: 2352 cases (2304
# correctness, 32 zero-length corner, 16 performance), each printing "Running on TestParam(...)", and it stops
# at the first failing case.  scripts/gpu/run_legacy.py runs it as __main__, adding use_legacy=True to its dense calls
# (the wheel has dense decoding on its legacy side only).  Prints cases run, wall time and cases/s.
# Usage: . scripts/gpu/env.sh && bash scripts/gpu/flashmla_own_test.sh [--dtype bf16|fp16]
# LIMIT=SECONDS stops the test there (timeout) and still prints the counts; LOG=FILE keeps its output.
# Exit: the test's (2 when .upstream/flashmla-tests did not travel).
case ${1:-} in -h|--help) awk 'NR == 1 {next} /^#/ {sub(/^# ?/, ""); print; next} {exit}' "$0"; exit 0;; esac
set -u
cd "$(dirname "$0")/../.."
dir=.upstream/flashmla-tests
[ -f "$dir/test_flash_mla_dense_decoding.py" ] || { echo "no $dir/test_flash_mla_dense_decoding.py (carry .upstream)" >&2; exit 2; }
log=${LOG:-$(mktemp)}
echo "FlashMLA test at $(sed -n 's/^commit: *\([0-9a-f]*\).*/\1/p' "$dir/SOURCE")"
t0=$(date +%s.%N)
${LIMIT:+timeout "$LIMIT"} "${PYTHON:-python3}" scripts/gpu/run_legacy.py "$dir/test_flash_mla_dense_decoding.py" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
t1=$(date +%s.%N)
started=$(grep -c '^Running on TestParam(' "$log")
perf=$(grep -cE '^[0-9.]+ ms, [0-9]+ TFLOPS' "$log")
passed=$(( rc == 0 ? started : (started > 0 ? started - 1 : 0) ))
awk -v s="$started" -v p="$passed" -v f="$perf" -v rc="$rc" -v t0="$t0" -v t1="$t1" 'BEGIN {
  w = t1 - t0
  printf "flashmla_own_test: rc %d%s; cases started %d, passed %d (of 2352; %d timed); wall %.1f s; %.2f cases/s\n",
         rc, (rc == 124 ? " (LIMIT reached)" : ""), s, p, f, w, (w > 0 ? p / w : 0) }'
exit "$rc"

#!/usr/bin/env bash
# Rerun one case under compute-sanitizer's memcheck so that a stray read is caught every time, not only when
# it lands on unmapped memory: every tensor its own allocation (no caching), each padded by 64 KiB, in this
# process (--workers 0).
# Usage: . scripts/gpu/env.sh; bash scripts/gpu/sanitize.sh SUITE CASE_ID [BACKEND]   (BACKEND: flashmla)
# Prints memcheck's first errors (kernel, read size, address) and its error count (docs/kernel-findings.md,
# finding 6).  Exit 2 without a SUITE and CASE_ID or without compute-sanitizer.
case ${1:-} in -h|--help) awk 'NR == 1 {next} /^#/ {sub(/^# ?/, ""); print; next} {exit}' "$0"; exit 0;; esac
set -u
[ $# -ge 2 ] || { echo "sanitize.sh: needs SUITE and CASE_ID (--help: usage)" >&2; exit 2; }
suite=$1 case=$2 backend=${3:-flashmla}
cs=${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer
[ -x "$cs" ] || cs=$(ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
[ -n "$cs" ] || { echo "no compute-sanitizer found (install the CUDA toolkit)" >&2; exit 2; }
log=${LOG:-$(mktemp)}
PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$cs" --tool memcheck --padding 65536 --print-limit 3 \
  "${PYTHON:-python3}" -m harness.cli run --no-progress --backend "$backend" --workers 0 --suite "$suite" \
  --case "$case" --out "${log}.jsonl" > "$log" 2>&1
grep -E "Invalid|^=========     at |by thread|out of bounds|ERROR SUMMARY" "$log" | head -12
echo "full log: $log"

#!/usr/bin/env bash
# The bench cross-check on the H200: FlashMLA b=128, L=4096, h=16/128, with the L2 flushed and without,
# against FlashMLA's kernelkit timer (carry .upstream) and triton's do_bench_cudagraph / do_bench,
# and the SM clock sampled while it runs (back-to-back compute can run at lower clocks than one call).
set -u
. scripts/gpu/env.sh
# FlashMLA's own timer (kernelkit, from FlashMLA's tests/) is the cross-check when it travelled in .upstream
[ -d .upstream/flashmla-tests/kernelkit ] && export PYTHONPATH="$PYTHONPATH:$PWD/.upstream/flashmla-tests"
dir=reports/gpu-x; mkdir -p $dir
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 50 > $dir/clocks.txt &
sampler=$!
for flush in read none; do
  timeout 120 python3 -m harness.cli bench --suite bench --case bench/flashmla-headline --backend flashmla \
    --cross-check --l2-flush $flush --iters 50 --out $dir/crosscheck-$flush.jsonl > $dir/crosscheck-$flush.log 2>&1
  echo "bench --l2-flush $flush rc=$?"; grep -E "cross-check|ceilings|rror" $dir/crosscheck-$flush.log | cut -c1-600
done
kill $sampler
echo "SM clock MHz min/median/max while timing: $(sort -n -t, -k1 $dir/clocks.txt | awk -F, '{a[NR]=$1} END {print a[1], a[int(NR/2)], a[NR]}')"
echo "power W max: $(sort -n -t, -k2 $dir/clocks.txt | tail -1)"

#!/usr/bin/env bash
# The trust issue on the H200: the GPU tests, make verify with FlashMLA, and the upstream matrix's speed.
set -u
. scripts/gpu/env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, flash_mla; print('torch', torch.__version__, 'flash_mla', flash_mla.__file__)"
python3 -m pytest -q -p no:cacheprovider tests/test_flashmla.py tests/test_isolation.py tests/test_trust.py 2>&1 | tail -5
time make verify SETUP= MLA="python3 -m harness.cli" STAMP=h200-trust JUNIT=$OUT/junit.xml > $OUT/verify.log 2>&1; echo "make verify rc=$?"
tail -25 $OUT/verify.log
cp reports/verify-h200-trust.jsonl reports/verify-h200-trust.html $OUT/ 2>/dev/null
python3 -m harness.cli run --suite flashmla-upstream --backend flashmla --workers 1 --no-progress --out $OUT/upstream.jsonl 2>&1 | tail -4

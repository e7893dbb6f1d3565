#!/usr/bin/env bash
# The GPU test lane: the whole test suite on a GPU box with every kernel set installed (each under
# .site/NAME, scripts/gpu/setup_site.sh), so GPU-only tests run and none may fail there.
# Usage: bash scripts/gpu/test.sh [pytest args]   (files given: only those; LOG=FILE keeps the output,
#        default $OUT/test.log or /tmp/test.log; JOBS=N pytest processes, a file each at a time, default 4
#        where pytest-xdist imports, 0 for one process)
# Prints the versions first, then pytest's summary with every skip's reason (-rs).  Exit: pytest's.
case ${1:-} in -h|--help) awk 'NR == 1 {next} /^#/ {sub(/^# ?/, ""); print; next} {exit}' "$0"; exit 0;; esac
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
export HYPOTHESIS_PROFILE=ci
log=${LOG:-${OUT:-/tmp}/test.log}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$log"
python3 - <<'PY' 2>&1 | tee -a "$log"
import importlib.metadata as md
for name in ("torch", "triton", "numpy", "sgl-flash-mla", "flashinfer-python", "sglang", "flag-gems", "hypothesis"):
    try:
        print(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name}: not installed")
PY
# the lane ran past 420 s in one process on a 16-core H200 box: its files share the GPU, 4 at a time
jobs=${JOBS:-4}
spread=()
if [ "$jobs" != 0 ] && python3 -c 'import xdist' 2>/dev/null; then spread=(-n "$jobs" --dist loadfile); fi
python3 -m pytest -q -p no:cacheprovider -rs "${spread[@]}" "$@" 2>&1 | tee -a "$log"
rc=${PIPESTATUS[0]}
echo "test lane exit: $rc"
exit "$rc"

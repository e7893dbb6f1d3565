#!/usr/bin/env bash
# make setup on a CUDA machine: install the FlashMLA package that matches this machine's torch,
# keeping that torch.  Says loudly what make verify will verify when no package can be installed.
# Usage: scripts/install_kernels.sh PYTHON
case ${1:-} in -h|--help) awk 'NR == 1 {next} /^#/ {sub(/^# ?/, ""); print; next} {exit}' "$0"; exit 0;; esac
set -u
py=${1:-python3}
if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "mla-verify setup: no CUDA device visible to torch: make verify checks the pure-PyTorch backend"
  exit 0
fi
torch_version=$("$py" -c 'import torch; print(torch.__version__)')
if "$py" -c 'import flash_mla' 2>/dev/null || "$py" -c 'import sgl_kernel.flash_mla' 2>/dev/null; then
  echo "mla-verify setup: a FlashMLA package already imports on torch $torch_version"
  exit 0
fi
# sgl-flash-mla 1.0.0 is built on torch's stable C ABI; it declares torch>=2.14.1 but loads on 2.11
# (docs/gpu-runs.md), so it goes in without its dependencies, which would replace this torch.
if "$py" -m pip install -q --no-deps "sgl-flash-mla==1.0.0" && "$py" -c 'import flash_mla' 2>/tmp/flash_mla_import.err; then
  echo "mla-verify setup: installed sgl-flash-mla 1.0.0 for torch $torch_version"
  exit 0
fi
echo "mla-verify setup: WARNING: no FlashMLA package imports on torch $torch_version" \
     "($(tail -n 1 /tmp/flash_mla_import.err 2>/dev/null || echo 'pip could not install sgl-flash-mla'))."
echo "mla-verify setup: make verify will verify every other kernel that imports, else only the pure-PyTorch" \
     "backend; use 'make verify REQUIRE_KERNEL=1' to fail instead."
exit 0

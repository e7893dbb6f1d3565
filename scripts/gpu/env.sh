# source me on the H200: every installed wheel set on PYTHONPATH, the checkout first.
site=""
for d in "$PWD"/.site/*/; do [ -d "$d" ] && site="$site:${d%/}"; done
export PYTHONPATH="$PWD$site" PYTHONUNBUFFERED=1
export FLASHINFER_WORKSPACE_BASE="$PWD/.site/cache"
export MLA_VERIFY_COMMIT=${MLA_VERIFY_COMMIT:-$(cat .commit 2>/dev/null || echo unknown)}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH="$PATH:$CUDA_HOME/bin"

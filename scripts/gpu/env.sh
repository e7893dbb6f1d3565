# Source me on a GPU box, from the checkout's root: the checkout, then every wheel set installed under .site/
# (scripts/gpu/setup_site.sh), on PYTHONPATH; every JIT's cache under one root in .site/mvc (MLA_VERIFY_CACHE,
# kept between calls while the machine stays warm; set it first to move it); nvcc on PATH; the rows'
# commit from a carried .commit file (a copied tree has no .git).
# Usage: . scripts/gpu/env.sh
site=""
# a wheel set holds a *.dist-info; the cache root (.site/mvc) does not, and its flashinfer/ folder on the path
# would import as an empty flashinfer package
for d in "$PWD"/.site/*/; do ls -d "$d"*.dist-info >/dev/null 2>&1 && site="$site:${d%/}"; done
export PYTHONPATH="$PWD$site" PYTHONUNBUFFERED=1
export MLA_VERIFY_CACHE=${MLA_VERIFY_CACHE:-$PWD/.site/mvc}
export MLA_VERIFY_COMMIT=${MLA_VERIFY_COMMIT:-$(cat .commit 2>/dev/null || echo unknown)}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH="$PATH:$CUDA_HOME/bin"

#!/usr/bin/env bash
# On an offline GPU box: install a carried wheel set into its own ignored folder of the checkout,
# .site/NAME, kept between calls while the machine stays warm (pip --no-index --no-deps: nothing is fetched,
# and the machine's torch stays), with its bytecode compiled now: the box sets PYTHONDONTWRITEBYTECODE=1, so
# a module without a .pyc is compiled again by every process that imports it (SGLang's: 8 s a process on
# the H200).  A WHEEL_DIR with no wheel (not carried this time) leaves .site/NAME as it is.
# Usage: bash scripts/gpu/setup_site.sh NAME WHEEL_DIR        (from the checkout's root; then . scripts/gpu/env.sh)
case ${1:-} in -h|--help) awk 'NR == 1 {next} /^#/ {sub(/^# ?/, ""); print; next} {exit}' "$0"; exit 0;; esac
set -eu
[ $# -eq 2 ] || { echo "setup_site.sh: needs NAME and WHEEL_DIR (--help: usage)" >&2; exit 2; }
name=$1 wheels=$2
if [ -d "$wheels" ] && ls "$wheels"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --compile --no-cache-dir --upgrade --target ".site/$name" "$wheels"/*.whl
  echo "installed $(ls "$wheels" | wc -l) wheel(s) into .site/$name"
else
  echo "no wheels in $wheels: .site/$name left as it is"
fi

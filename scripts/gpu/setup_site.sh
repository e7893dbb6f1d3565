#!/usr/bin/env bash
# On the offline H200: install each carried wheel set into its own ignored folder of the checkout,
# .site/NAME, kept between calls while the machine stays warm.  Usage: setup_site.sh NAME WHEEL_DIR
set -eu
name=$1 wheels=$2
if [ -d "$wheels" ] && ls "$wheels"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target ".site/$name" "$wheels"/*.whl
  echo "installed $(ls "$wheels" | wc -l) wheel(s) into .site/$name"
fi

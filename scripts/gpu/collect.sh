#!/usr/bin/env bash
# Pack a folder of GPU-run outputs into one archive under $OUT (the device tool returns at most 8 files).
# Usage: collect.sh DIR NAME  ->  $OUT/NAME.tgz
set -u
[ -d "$1" ] && tar czf "$OUT/$2.tgz" -C "$(dirname "$1")" "$(basename "$1")" && ls -la "$OUT/$2.tgz"

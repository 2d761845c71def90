#!/usr/bin/env bash
# Runs every benchmark program built under $1/bench (named bench_*).
set -euo pipefail
BUILD=${1:-build-bench}
found=0
while IFS= read -r b; do
  found=1
  echo "== $(basename "$b")"
  "$b"
done < <(find "$BUILD/bench" -type f -name 'bench_*' -perm -u+x | sort)
if [[ $found -eq 0 ]]; then echo "no benchmarks built" >&2; fi

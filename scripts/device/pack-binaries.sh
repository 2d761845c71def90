#!/usr/bin/env bash
# Packs binaries built here for a run on the lent GPU machine without a build there
# (scripts/device/make-devroot.sh is the way to build there instead). That machine
# lacks some of their shared libraries (ICU, PCRE2, cpp-httplib, OpenSSL, Brotli,
# CUPTI), so the tarball holds bin/ (the binaries, stripped) and lib/ (every shared
# library they load but the C and C++ runtimes, which it has). The device tool carries
# at most 64 MiB — the git tree (tracked and untracked-not-ignored files) plus the
# carried paths — so this prints what the tree leaves and fails when the tarball does
# not fit beside it.
#   usage (from the repo root): bash scripts/device/pack-binaries.sh OUT.tar.xz [BINARY ...]
#   BINARY defaults to the CUDA test and bench binaries under build/. E.g. OUT
#   build-carry/payload.tar.xz (build* is git-ignored; carry ["build-carry"]), and the
#   remote script: mkdir -p /tmp/p && xz -dc build-carry/payload.tar.xz | tar -C /tmp/p
#   -xf - && export LD_LIBRARY_PATH=/tmp/p/lib, then /tmp/p/bin/engine_cuda_tests …
set -euo pipefail
if [ $# -lt 1 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
  [ $# -ge 1 ] && exit 0 || exit 2
fi
out=$1
shift
bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
  for b in build/tests/backend/backend_cuda_tests build/tests/engine/engine_cuda_tests \
    build/bench/cuda/bench_cuda_model build/bench/cuda/bench_cuda_kernels \
    build/bench/cuda/libpkv_kernel_timeline.so; do
    [ -f "$b" ] && bins+=("$b")
  done
fi
[ ${#bins[@]} -gt 0 ] || { echo "pack-binaries: no binaries (build the CUDA targets first)" >&2; exit 1; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for b in "${bins[@]}"; do
  [ -f "$b" ] || { echo "pack-binaries: $b: no such file" >&2; exit 1; }
  strip -o "$stage/bin/$(basename "$b")" "$b"
  # Each resolved dependency but the C / C++ runtimes and the loader.
  ldd "$b" | awk '$3 ~ /^\// {print $3}' |
    { grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libutil|ld-linux[^/]*)\.so' || true; } |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
done
mkdir -p "$(dirname "$out")"
tar -C "$stage" -cf - bin lib | xz -9e -T2 >"$out.tmp"
mv "$out.tmp" "$out"
size=$(stat -c %s "$out")
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null |
  awk '{s += $1} END {print s + 0}')
limit=$((64 * 1024 * 1024))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "$out: $(mib "$size") ($(ls "$stage/bin" | tr '\n' ' ')+ $(ls "$stage/lib" | wc -l) libraries)"
echo "the git tree: $(mib "$tree"); left for carried paths: $(mib $((limit - tree)))"
if [ $((tree + size)) -gt $limit ]; then
  echo "pack-binaries: the tree and this tarball exceed the 64 MiB carry limit;" \
    "carry fewer binaries or remove older payloads from the carried folder" >&2
  exit 1
fi

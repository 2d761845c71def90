#!/usr/bin/env bash
# The installed library works for a program outside this source tree:
#   1. `cmake --install BUILD --prefix TMP` (headers, libpagedkv.a, CMake package,
#      pagedkv.pc);
#   2. the installed headers include nothing from src/;
#   3. tests/install/consumer builds with find_package(pagedkv) and runs on MODEL;
#   4. the same source builds with `pkg-config --cflags --libs pagedkv` and runs.
# The temporary prefix is removed on every exit.
#
#   install_test.sh BUILD_DIR SOURCE_DIR MODEL_DIR CXX
set -euo pipefail
build=$1 src=$2 model=$3 cxx=$4
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pkv_install_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

step() { echo "== $*"; }

step "cmake --install $build --prefix $tmp/prefix"
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
prefix=$tmp/prefix
for f in include/pagedkv/engine.h include/pagedkv/sampling.h include/pagedkv/status.h \
         include/pagedkv/version.h include/pagedkv/pagedkv.h; do
  [[ -f $prefix/$f ]] || { echo "missing $f"; exit 1; }
done
lib=$(find "$prefix" -name libpagedkv.a | head -n1)
pc=$(find "$prefix" -name pagedkv.pc | head -n1)
cfg=$(find "$prefix" -name pagedkvConfig.cmake | head -n1)
[[ -n $lib && -n $pc && -n $cfg ]] || { echo "missing library ($lib), pc ($pc) or CMake package ($cfg)"; exit 1; }

step "installed headers include only <pagedkv/...> and the standard library"
if grep -nE '#include "(util|kv|backend|model|jinja|tokenizer|engine|cli|server)/' "$prefix"/include/pagedkv/*.h; then
  echo "an installed header includes an internal (src/) header"; exit 1
fi

step "find_package(pagedkv)"
cmake -S "$src/tests/install/consumer" -B "$tmp/cmake-build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" >"$tmp/configure.log" \
  || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/cmake-build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
"$tmp/cmake-build/consumer" "$model"

step "pkg-config pagedkv"
export PKG_CONFIG_PATH=$(dirname "$pc")
flags=$(pkg-config --cflags --libs pagedkv)
echo "pkg-config --cflags --libs pagedkv: $flags"
# shellcheck disable=SC2086
"$cxx" -std=c++20 "$src/tests/install/consumer/main.cc" -o "$tmp/consumer_pc" $flags
"$tmp/consumer_pc" "$model"
echo "install test passed"

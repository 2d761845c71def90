#!/usr/bin/env bash
# One short call on the GPU machine for issue 12's decode graphs, device-side
# greedy sampling and fused projections: build engine_cuda_tests and
# bench_cuda_model only, run the cuda engine tests (FILTER, default all), then the
# benchmark (its last lines are the same-run A/B table), each under a share of
# BUDGET_S seconds counted from the start. Outputs go to $OUT (or ./out).
#   usage (from the repo root): bash bench/cuda/run_graphs_on_device.sh
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
START=$(date +%s)
BUDGET=${BUDGET_S:-185}
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DPAGEDKV_BUILD_BENCH=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build build-dev -j"$(nproc)" --target engine_cuda_tests bench_cuda_model \
  >"$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "build done at $(( $(date +%s) - START )) s"
T2=$(date +%s)
TCAP=$(( $(left) * ${TEST_SHARE:-50} / 100 ))
timeout "$TCAP" ./build-dev/tests/engine/engine_cuda_tests --gtest_filter="${FILTER:-*}" \
  >"$OUT/tests.log" 2>&1
echo "tests rc $? in $(( $(date +%s) - T2 )) s (cap $TCAP)"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[       OK|Failure|Expected|Which is|graphs:" "$OUT/tests.log" | head -70
T1=$(date +%s)
timeout "$(( $(left) - 3 ))" ./build-dev/bench/cuda/bench_cuda_model 2>&1 | grep -v "pagedkv info" >"$OUT/bench.log"
echo "bench $(( $(date +%s) - T1 )) s"
grep -E "graphs captured|^==|rows: " "$OUT/bench.log" | head -30
tail -7 "$OUT/bench.log"

#!/usr/bin/env bash
# One call on the GPU machine: build the CUDA tests and benchmarks, run the tests
# (cuda label), a compute-sanitizer memcheck pass over a subset (SANITIZE=0 skips),
# the kernel benchmarks and the torch baselines (BENCH=0 skips). Outputs go to $OUT
# (or ./out).
#   usage (from the repo root): bash bench/cuda/run_on_device.sh
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DPAGEDKV_BUILD_BENCH=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build build-dev -j"$(nproc)" --target backend_cuda_tests bench_cuda_kernels \
  >"$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "== tests"
./build-dev/tests/backend/backend_cuda_tests 2>&1 | tee "$OUT/tests.log" | grep -E "FAILED|Failure|OK \]|PASSED|SKIPPED|error|gpu |cpu |qwen3-a" | head -80
if [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  echo "== memcheck"
  compute-sanitizer --tool memcheck --print-limit 5 ./build-dev/tests/backend/backend_cuda_tests \
    --gtest_filter='*h8_kv1*:*h16_kv8_d128_w0_bf16*:*m3_k200*:*Rms*:*Topk*:*Argmax*:*TilePointers*:*CudaKVStorageTest*:*d16*:*Qwen3Hf*' \
    >"$OUT/memcheck.log" 2>&1; echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|FAILED" "$OUT/memcheck.log" | head
fi
[ "${BENCH:-1}" = 1 ] || exit 0
echo "== benchmarks"
./build-dev/bench/cuda/bench_cuda_kernels "$OUT/ours.csv" 2>&1 | tee "$OUT/bench.log"
PYTHONUNBUFFERED=1 python3 bench/cuda/sdpa_baseline.py "$OUT/torch.csv" 2>&1 | tee "$OUT/torch.log"

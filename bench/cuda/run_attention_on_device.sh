#!/usr/bin/env bash
# One call on the GPU machine for the attention kernels (issue 12): build the CUDA
# tests, the kernel and model benchmarks and the CLI; run every cuda test; then the
# attention rows of bench_cuda_kernels (thread-per-key, warp and tensor-core kernels,
# and the tensor-core kernel's launch shapes), bench_cuda_model's default
# configuration with PAGEDKV_CUDA_ATTENTION=simt and =mma, and the 8K cold / cached
# time to first token with each kernel (bf16 KV, one seed).
#   usage (repo root, after `source .devroot/setup.sh`; scripts/device/make-devroot.sh
#   makes .devroot, name it in the call's carry): bash bench/cuda/run_attention_on_device.sh
#   The attention tests run a second time with the two-round wide decode kernel
#   forced (PAGEDKV_CUDA_ATTN_WIDE2_WAVES). SKIP_TESTS=1 skips the tests;
#   WIDE_WAVES="2 4 8" adds bench_cuda_model runs with
#   PAGEDKV_CUDA_ATTN_WIDE_WAVES set to each (the wide decode kernel on launches of
#   that many waves: a launch-shape A/B, the same bits). VARIANTS="A=0 B=1,C=2" adds a
#   bench_cuda_model run per space-separated item with its comma-separated
#   environment assignments (same-run A/B of knobs that keep the bits).
#   SKIP_KERNELS=1 skips bench_cuda_kernels, SKIP_SIMT=1 the simt model run,
#   SKIP_TTFT=1 the time-to-first-token runs.
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DPAGEDKV_BUILD_BENCH=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
T0=$(date +%s)
cmake --build build-dev -j"$(nproc)" --target engine_cuda_tests backend_cuda_tests server_cuda_tests \
  bench_cuda_kernels bench_cuda_model pagedkv >"$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  for t in backend/backend_cuda_tests engine/engine_cuda_tests server/server_cuda_tests; do
    echo "== $t"
    ./build-dev/tests/$t 2>&1 | tee "$OUT/$(basename $t).log" | grep -E "FAILED|Failure|PASSED|graphs:" | head -40
  done
  echo "== attention tests, every head_dim 64/128 decode launch in the two-round wide kernel"
  PAGEDKV_CUDA_ATTN_WIDE_WAVES=0 PAGEDKV_CUDA_ATTN_WIDE2_WAVES=100000 \
    ./build-dev/tests/backend/backend_cuda_tests --gtest_filter='*Attention*' 2>&1 |
    grep -E "FAILED|Failure|PASSED" | head -20
fi
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  echo "== bench_cuda_kernels (attention rows)"
  PKV_BENCH_ATTN_ONLY=1 timeout 240 ./build-dev/bench/cuda/bench_cuda_kernels "$OUT/kernels.csv" 2>&1 | grep -E "attn|hbm"
fi
KERNELS="simt mma"
[ "${SKIP_SIMT:-0}" = 1 ] && KERNELS=mma
for kernel in $KERNELS; do
  echo "== bench_cuda_model, PAGEDKV_CUDA_ATTENTION=$kernel"
  PAGEDKV_CUDA_ATTENTION=$kernel PAGEDKV_BENCH_FIRST_CONFIG=5 timeout 120 ./build-dev/bench/cuda/bench_cuda_model 2>&1 | grep -v "pagedkv info" | tail -12
done
for waves in ${WIDE_WAVES:-}; do
  echo "== bench_cuda_model, PAGEDKV_CUDA_ATTN_WIDE_WAVES=$waves"
  PAGEDKV_CUDA_ATTN_WIDE_WAVES=$waves PAGEDKV_BENCH_FIRST_CONFIG=5 timeout 120 ./build-dev/bench/cuda/bench_cuda_model 2>&1 | grep -v "pagedkv info" | tail -6
done
for variant in ${VARIANTS:-}; do
  echo "== bench_cuda_model, ${variant//,/ }"
  env ${variant//,/ } PAGEDKV_BENCH_FIRST_CONFIG=5 timeout 120 ./build-dev/bench/cuda/bench_cuda_model 2>&1 | grep -v "pagedkv info" | tail -6
done
[ "${SKIP_TTFT:-0}" = 1 ] && exit 0
P=./build-dev/src/cli/pagedkv
$P make-model --preset qwen3-0.6b-shape --dtype bf16 --out /tmp/m06 >/dev/null 2>&1 || { echo make-model failed; exit 1; }
PROMPTS=$(python3 - <<'PY'
import random
r = random.Random(1)
ids = lambda n: " ".join(str(r.randint(1, 9999)) for _ in range(n))
w, X, s1, s2 = ids(16), ids(8192), ids(64), ids(64)
print(";".join([w, X + " " + s1, X + " " + s2]))
PY
)
for kernel in simt mma; do
  echo "== TTFT, $kernel: warm-up; X+s1 (cold, 8,256 tokens); X+s2 (8,192 cached)"
  PAGEDKV_CUDA_ATTENTION=$kernel $P generate --device cuda --model /tmp/m06 --prompt-ids "$PROMPTS" \
    --max-tokens 1 --stats 2>&1 | grep -E "^\[stats\]|rror" |
    sed -E 's/.*(prompt [0-9]+):.*prompt_tokens=([0-9]+) cached_tokens=([0-9]+).*ttft_ms=([0-9.]+).*/\1 tokens=\2 cached=\3 ttft_ms=\4/'
done

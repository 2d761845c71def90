#!/usr/bin/env bash
# One call on the GPU machine for issue 12's model forward: build the CUDA engine
# tests, the CLI and bench_cuda_model; run the tests (cuda label), the CLI with
# --device cuda (logits against transformers' fixture, generate, bench), then the
# decode table on the qwen3-0.6b-shape checkpoint. Outputs go to $OUT (or ./out).
#   usage (from the repo root, after `source .devroot/setup.sh`: scripts/device/make-devroot.sh
#   makes it, name .devroot in the call's carry): bash bench/cuda/run_model_on_device.sh
#   PROFILE_ONLY=1: build bench_cuda_model only and print the per-step phase profile;
#   WITH_PROFILE=1: print that profile after the full run too;
#   SKIP_BENCH=1: stop before bench_cuda_model (then run it in a second call on the
#   still-warm machine: the build-dev folder stays).
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
J=$(nproc)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv | tee "$OUT/gpu.txt"
lscpu | grep -E "Model name|^CPU\(s\)" | tee -a "$OUT/gpu.txt"
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DPAGEDKV_BUILD_BENCH=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
T0=$(date +%s)
TARGETS="engine_cuda_tests backend_cuda_tests server_cuda_tests pagedkv bench_cuda_model"
[ "${PROFILE_ONLY:-0}" = 1 ] && TARGETS=bench_cuda_model
cmake --build build-dev -j"$J" --target $TARGETS \
  >"$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "build $(( $(date +%s) - T0 )) s"
if [ "${PROFILE_ONLY:-0}" = 1 ]; then
  PAGEDKV_CUDA_PROFILE=1 timeout 120 ./build-dev/bench/cuda/bench_cuda_model 2>&1 | grep -v "pagedkv info" | tee "$OUT/profile.log"
  exit 0
fi
echo "== engine_cuda_tests"
./build-dev/tests/engine/engine_cuda_tests 2>&1 | tee "$OUT/tests.log" |
  grep -E "FAILED|Failure|Expected|Which is|OK \]|PASSED|SKIPPED|error|qwen3-a" | head -80
echo "== backend_cuda_tests"
./build-dev/tests/backend/backend_cuda_tests 2>&1 | tee "$OUT/backend_tests.log" |
  grep -E "FAILED|Failure|PASSED|qwen3-a" | head -40
echo "== server_cuda_tests"
./build-dev/tests/server/server_cuda_tests 2>&1 | tee "$OUT/server_tests.log" |
  grep -E "FAILED|Failure|PASSED|OK \]" | head -20
echo "== CLI --device cuda (logits with f32 KV: the device default is bf16)"
FIX=tests/data/hf-reference/qwen3-a
MOE=tests/data/hf-reference/qwen3_moe-a
P=./build-dev/src/cli/pagedkv
PAGEDKV_KV_DTYPE=f32 $P logits --device cuda --model $FIX --input-ids $FIX/reference.safetensors --out /tmp/l_gpu.safetensors
$P logits --device cpu --model $FIX --input-ids $FIX/reference.safetensors --out /tmp/l_cpu.safetensors
PAGEDKV_KV_DTYPE=f32 $P logits --device cuda --model $MOE --input-ids $MOE/reference.safetensors --out /tmp/m_gpu.safetensors
python3 - "$FIX/reference.safetensors" /tmp/l_gpu.safetensors /tmp/l_cpu.safetensors "$MOE/reference.safetensors" /tmp/m_gpu.safetensors <<'PY' || true
import json, struct, sys
import numpy as np
def load(path, name):
    b = open(path, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    t = h[name]; s, e = t["data_offsets"]
    return np.frombuffer(b[8 + n + s:8 + n + e], dtype=np.float32).reshape(t["shape"])
ref = load(sys.argv[1], "full_logits")
moe = load(sys.argv[4], "full_logits")
for name, path, ref in (("qwen3-a gpu", sys.argv[2], ref), ("qwen3-a cpu", sys.argv[3], ref),
                        ("qwen3_moe-a gpu", sys.argv[5], moe)):
    x = load(path, "logits")
    r = ref[:x.shape[0]]
    rel = (np.abs(x - r).max(axis=1) / np.abs(r).max(axis=1)).max()
    print(f"pagedkv logits --device {name} vs transformers: worst per-row rel {rel:.3g}")
PY
PAGEDKV_DEVICE=cuda $P generate --model $FIX --prompt-ids "1 2 3 4 5" --max-tokens 12 --stats 2>&1 | tail -4
$P generate --device cpu --model $FIX --prompt-ids "1 2 3 4 5" --max-tokens 12 2>&1 | tail -2
$P generate --device cuda:7 --model $FIX --prompt-ids "1 2 3" --max-tokens 2 2>&1 | tail -2
PAGEDKV_DEVICE=cuda timeout 120 $P bench --preset tiny --concurrency 1,8 --requests 16 --max-tokens 16 2>&1 | tail -6
[ "${SKIP_BENCH:-0}" = 1 ] && exit 0
echo "== bench_cuda_model"
if [ "${PROFILE_ONLY:-0}" != 1 ]; then
  timeout 360 ./build-dev/bench/cuda/bench_cuda_model 2>&1 | grep -v "pagedkv info" | tee "$OUT/bench.log"
fi
[ "${WITH_PROFILE:-0}" = 1 ] || exit 0
echo "== where a decode step goes (PAGEDKV_CUDA_PROFILE=1)"
PAGEDKV_CUDA_PROFILE=1 timeout 120 ./build-dev/bench/cuda/bench_cuda_model 2>&1 | grep -v "pagedkv info" | tee "$OUT/profile.log"

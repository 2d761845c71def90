#!/bin/bash
# TTFT with an 8,192-token cached prefix against cold on the GPU (issue 12: <= 10% of
# cold). Builds the CLI only, writes a random Qwen3-0.6B-shape bf16 checkpoint, and
# runs `pagedkv generate --device cuda --stats --max-tokens 1` over three prompts per
# seed: a warm-up, X + s1 (cold) and X + s2 (X cached), for bf16 and f32 KV.
#   usage (from the repo root, on the GPU machine): bash bench/cuda/ttft_cached_prefix_on_device.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
t0=$(date +%s)
cmake -S . -B build-ttft -DCMAKE_BUILD_TYPE=Release -DPAGEDKV_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90 > $OUT/cfg.log 2>&1 || { tail -20 $OUT/cfg.log; exit 1; }
cmake --build build-ttft -j16 --target pagedkv > $OUT/build.log 2>&1 || { grep -A5 error $OUT/build.log | head -30; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
P=./build-ttft/src/cli/pagedkv
$P make-model --preset qwen3-0.6b-shape --dtype bf16 --out /tmp/m06 > /dev/null 2>&1 || { echo make-model failed; exit 1; }
prompts() {  # $1 = seed: warm-up; X+s1 (cold); X+s2 (8,192 cached)
python3 - "$1" <<'PY'
import random, sys
r = random.Random(int(sys.argv[1]))
ids = lambda n: " ".join(str(r.randint(1, 9999)) for _ in range(n))
w, X, s1, s2 = ids(16), ids(8192), ids(64), ids(64)  # 8,192 = 512 blocks of 16
print(";".join([w, X + " " + s1, X + " " + s2]))
PY
}
for kv in bf16 f32; do
  for seed in 1 2 3; do
    echo "== cuda, $kv KV, seed $seed: warm-up; X+s1 (cold, 8,256 tokens); X+s2 (8,192 cached)"
    PAGEDKV_KV_DTYPE=$kv $P generate --device cuda --model /tmp/m06 --prompt-ids "$(prompts $seed)" --max-tokens 1 --stats 2>&1 \
      | grep -E "^\[stats\]|rror" | sed -E 's/.*(prompt [0-9]+):.*prompt_tokens=([0-9]+) cached_tokens=([0-9]+).*ttft_ms=([0-9.]+).*/\1 tokens=\2 cached=\3 ttft_ms=\4/'
  done
done
echo "total $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# Where one kernel's instructions and stalls go (issue 12): Nsight Compute profiles
# one launch with the full section set and its per-instruction (SASS) counters, and
# bench/cuda/sass_profile_summary.py prints the stall reasons, the opcode mix, the
# hot regions (a loop body's instructions × its executions) and the worst
# instructions. This is how the tensor-core attention's MMAs were found to be 6% of
# its instructions (docs/performance.md, "Tensor-core prefill attention: where the
# instructions went").
#   usage (repo root on the GPU machine, a built BIN):
#     KERNEL=attn_mma_kernel PKV_BENCH_PREFILL_ONLY=mma_bf16 bash bench/cuda/profile_sass_on_device.sh
#   KERNEL: a regex on the demangled kernel name (required); SKIP=6: launches of it
#   to pass first (warm-ups; default 6); BIN=build-dev/bench/cuda/bench_cuda_kernels
#   and ARGS: the program and its arguments. The program's own environment (e.g.
#   PKV_BENCH_GEMM_ONLY=1 PKV_BENCH_GEMM_ROWS=64 with KERNEL=cluster_tile) passes
#   through. Writes $OUT/sass.ncu-rep, $OUT/sass.csv and $OUT/sass_details.txt.
set -uo pipefail
: "${KERNEL:?set KERNEL to a regex on the kernel name}"
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
BIN=${BIN:-build-dev/bench/cuda/bench_cuda_kernels}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
# shellcheck disable=SC2086 # ARGS is a word list
"$NCU" --clock-control none --set full --import-source no --kernel-name-base demangled \
  -k "regex:$KERNEL" --launch-skip "${SKIP:-6}" --launch-count 1 -f -o "$OUT/sass" \
  "$BIN" ${ARGS:-} >"$OUT/sass_run.log" 2>&1 || { tail -20 "$OUT/sass_run.log"; exit 1; }
"$NCU" -i "$OUT/sass.ncu-rep" --page details >"$OUT/sass_details.txt" 2>&1
"$NCU" -i "$OUT/sass.ncu-rep" --page source --csv --print-source sass >"$OUT/sass.csv" 2>&1
grep -E "^  [a-z].*\(|Duration|Registers Per|Issued Ipc Active|Eligible Warps|Achieved Occ" \
  "$OUT/sass_details.txt" | head -8
python3 "$(dirname "$0")/sass_profile_summary.py" "$OUT/sass.csv" 20

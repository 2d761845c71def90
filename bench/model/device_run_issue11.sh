#!/bin/bash
# Issue 11 device run (16-core host of the H200): build, exactness tests, the table
# (with each phase's op profile), the 1 GiB bandwidth and GEMM figures.
# Usage (from the device tool, in a copy of the tree, after unpacking the Debian
# packages of .devdeps and exporting their paths, e.g. `source .devdeps/setup.sh`;
# when the tree that travels must stay small, a copy without static libraries and
# docs, tar.xz-compressed, did the same): bash bench/model/device_run_issue11.sh
set -u
cd "$(dirname "$0")/../.."
(lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket|MHz|L2|L3"; grep -o 'amx[a-z_0-9]*\|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' '; echo; nproc) > $OUT/lscpu.txt 2>&1
cat $OUT/lscpu.txt
t0=$(date +%s)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPAGEDKV_BUILD_BENCH=ON -DPAGEDKV_CUDA=OFF > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
cmake --build build -j16 --target backend_tests engine_kv_dtype_parity_tests engine_parity_tests bench_model_throughput >> $OUT/build.log 2>&1 || { grep -B2 -A8 error $OUT/build.log | head -60; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
( ./build/tests/backend/backend_tests; ./build/tests/engine/engine_kv_dtype_parity_tests; ./build/tests/engine/engine_parity_tests ) > $OUT/tests.log 2>&1
grep -E "PASSED|FAILED" $OUT/tests.log
echo "tests: $(( $(date +%s) - t0 )) s"
PAGEDKV_BENCH_MODEL_DIR=/tmp/pkvmodels ./build/bench/model/bench_model_throughput --table 2>&1 | grep -v "pagedkv info" | tee $OUT/table.txt
echo "== prefill and decode again, f32 KV (run-to-run spread)"
PAGEDKV_BENCH_TABLE_SHORT=1 PAGEDKV_BENCH_MODEL_DIR=/tmp/pkvmodels ./build/bench/model/bench_model_throughput --table 2>&1 | grep -E "^prefill|^decode," | tee $OUT/table_again.txt
echo "== decode with bf16 KV (PAGEDKV_KV_DTYPE=bf16)"
PAGEDKV_BENCH_TABLE_SHORT=1 PAGEDKV_KV_DTYPE=bf16 PAGEDKV_BENCH_MODEL_DIR=/tmp/pkvmodels ./build/bench/model/bench_model_throughput --table 2>&1 | grep -E "^prefill|^decode," | tee $OUT/table_bf16kv.txt
echo "total: $(( $(date +%s) - t0 )) s"

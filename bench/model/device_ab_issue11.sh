#!/bin/bash
# Issue 11 A/B run on the 16-core host of the H200: the same tree built twice —
# B as it is, A with the files under BASE_DIR copied over it (e.g. main's
# versions of the files a branch changed, same relative paths) — then issue 11's
# short table (prefill, decode at 1/8/32 requests, op profiles) run A B in
# one call, so both builds see the same machine (figures move a lot between
# machine starts); then exactness tests and bench_sampler of the B build, and a
# second round B A while the time budget allows.
# Usage (device tool, in a copy of the tree, after `source .devroot/setup.sh`; scripts/device/make-devroot.sh makes it):
#   bash bench/model/device_ab_issue11.sh BASE_DIR
set -u
cd "$(dirname "$0")/../.."
BASE=$(cd "${1:?usage: device_ab_issue11.sh BASE_DIR}" && pwd)
(lscpu | grep -E "Model name|^CPU\(s\)|Thread|MHz|L2|L3"; nproc) > $OUT/lscpu.txt 2>&1
cat $OUT/lscpu.txt
t0=$(date +%s)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPAGEDKV_BUILD_BENCH=ON -DPAGEDKV_CUDA=OFF > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
T="bench_model_throughput bench_sampler engine_sampler_tests engine_parity_tests"
cmake --build build -j16 --target $T >> $OUT/build.log 2>&1 || { grep -B2 -A8 error $OUT/build.log | head -60; exit 1; }
echo "build B: $(( $(date +%s) - t0 )) s"
cp build/bench/model/bench_model_throughput /tmp/bench_B
mkdir -p /tmp/saved_b
(cd "$BASE" && find . -type f) | while read -r f; do
  mkdir -p "/tmp/saved_b/$(dirname "$f")"; cp "$f" "/tmp/saved_b/$f"; cp "$BASE/$f" "$f"; done
cmake --build build -j16 --target bench_model_throughput >> $OUT/build.log 2>&1 || { grep -B2 -A8 error $OUT/build.log | head -60; exit 1; }
cp build/bench/model/bench_model_throughput /tmp/bench_A
(cd /tmp/saved_b && find . -type f) | while read -r f; do cp "/tmp/saved_b/$f" "$f"; done
echo "build A: $(( $(date +%s) - t0 )) s"
table() {  # $1 = A or B, $2 = round
  echo "== $1, round $2 ($(( $(date +%s) - t0 )) s)"
  PAGEDKV_BENCH_TABLE_SHORT=1 PAGEDKV_BENCH_MODEL_DIR=/tmp/pkvmodels /tmp/bench_$1 --table 2>&1 \
    | grep -v "pagedkv info" > $OUT/table_$1$2.txt
  grep -E "^prefill|^decode,|op profile|all ops" $OUT/table_$1$2.txt
}
table A 1
table B 1
# Exactness of the B build on this host, then the sampler bench (its rows are CPU time).
( ./build/tests/engine/engine_sampler_tests; ./build/tests/engine/engine_parity_tests ) > $OUT/tests.log 2>&1
grep -E "PASSED|FAILED" $OUT/tests.log
./build/bench/engine/bench_sampler 10 > $OUT/sampler.txt 2>&1; tail -22 $OUT/sampler.txt
# A second round while the time allows (BUDGET_S, default 300 s for the whole script).
if [ $(( $(date +%s) - t0 )) -lt $(( ${BUDGET_S:-300} - 70 )) ]; then table B 2; table A 2; fi
echo "total: $(( $(date +%s) - t0 )) s"

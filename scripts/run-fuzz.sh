#!/usr/bin/env bash
# Runs every libFuzzer target of a `make fuzz` build for FUZZ_SECONDS each and
# prints, per target, the total executions and libFuzzer's coverage (cov: edges,
# ft: features). Usage: scripts/run-fuzz.sh BUILD_DIR [SECONDS]
#
# Each target starts from its checked-in seeds (fuzz/corpus/<t>) and regression
# inputs (fuzz/regression/<t>); what it learns goes to BUILD_DIR/fuzz-work/<t>/corpus
# (kept between runs, never into the repository). A crash, leak, timeout or
# out-of-memory input is saved under BUILD_DIR/fuzz-work/<t>/ as crash-*, leak-*,
# timeout-* or oom-*; the script then exits 1 after running every target.
# Knobs (env): FUZZ_SECONDS (60), FUZZ_TIMEOUT (per-input seconds, 10),
# FUZZ_RSS_MB (2048), FUZZ_MAX_LEN (bytes, 65536), FUZZ_TARGETS (space-separated
# subset), FUZZ_JOBS (parallel targets, 1).
set -uo pipefail

build=${1:?usage: run-fuzz.sh BUILD_DIR [SECONDS]}
secs=${2:-${FUZZ_SECONDS:-60}}
timeout=${FUZZ_TIMEOUT:-10}
rss=${FUZZ_RSS_MB:-2048}
max_len=${FUZZ_MAX_LEN:-65536}
root=$(cd "$(dirname "$0")/.." && pwd)
targets=${FUZZ_TARGETS:-$(cat "$build/fuzz-targets.txt" | tr ';' ' ')}

run_target() {
  local t=$1
  local work="$build/fuzz-work/$t"
  mkdir -p "$work/corpus"
  local dict=()
  [[ -f "$root/fuzz/dict/$t.dict" ]] && dict=(-dict="$root/fuzz/dict/$t.dict")
  local seeds=("$root/fuzz/corpus/$t")
  [[ -d "$root/fuzz/regression/$t" ]] && seeds+=("$root/fuzz/regression/$t")
  # halt_on_error: the first finding of a sanitizer ends the run (with its input saved).
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$build/fuzz/fuzz_$t" "$work/corpus" "${seeds[@]}" "${dict[@]}" \
      -max_total_time="$secs" -timeout="$timeout" -rss_limit_mb="$rss" -max_len="$max_len" \
      -print_final_stats=1 -artifact_prefix="$work/" >"$work/log.txt" 2>&1
  echo $? >"$work/rc"
}

jobs=${FUZZ_JOBS:-1}
for t in $targets; do
  rm -f "$build/fuzz-work/$t/rc"
  run_target "$t" &
  while (( $(jobs -rp | wc -l) >= jobs )); do wait -n; done
done
wait

status=0
printf '%-15s %12s %10s %8s %8s %7s  %s\n' target executions exec/s cov ft corpus result
for t in $targets; do
  log="$build/fuzz-work/$t/log.txt"
  rc=$(cat "$build/fuzz-work/$t/rc" 2>/dev/null || echo 1)
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  eps=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | grep 'cov:' | tail -1)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.*corp: \([0-9]*\).*/\1/p' <<<"$last")
  result=ok
  if [[ $rc != 0 ]]; then
    result="FAILED (rc $rc): $(ls "$build/fuzz-work/$t" | grep -E '^(crash|leak|timeout|oom|slow-unit)-' | head -3 | tr '\n' ' ')"
    status=1
  fi
  printf '%-15s %12s %10s %8s %8s %7s  %s\n' "$t" "${execs:-?}" "${eps:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result"
done
if [[ $status != 0 ]]; then
  echo "run-fuzz: findings above; logs in $build/fuzz-work/<target>/log.txt" >&2
fi
exit $status

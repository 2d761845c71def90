#!/usr/bin/env bash
# Where the GPU time of a decode step goes, kernel by kernel (issue 12): Nsight
# Compute times every kernel of STEPS decode steps of one request (a PROMPT-token
# prompt, Qwen3-0.6B shape, bf16 weights and KV, the default path: graphs, device
# greedy, programmatic launch) and prints the per-kernel summary, most time first.
# ncu runs kernels one at a time, so the sum is GPU time without overlap or launch
# gaps; compare it with bench_cuda_model's step time for the rest.
#   usage (repo root on the GPU machine, a built build-dev/ with the CLI; see
#   run_attention_on_device.sh): bash bench/cuda/profile_decode_on_device.sh
#   PROMPT=512 and STEPS=3 may be overridden. Every kernel of the run is timed; the
#   run's last kernel (the sampler's) ends each step, and the last STEPS steps are
#   summed (the prefill and the first decode step, which captures the graph, are
#   left out).
#   ROWS=n (8, 32 or 64): a step of n concurrent decode rows instead, through
#   bench_cuda_model's own workload (a shared 512-token prefix + 16 tokens each;
#   PAGEDKV_BENCH_REQUESTS=n, the default configuration only).
#   BUILD=build-dev names the build folder.
set -uo pipefail
PROMPT=${PROMPT:-512}
STEPS=${STEPS:-3}
ROWS=${ROWS:-1}
BUILD=${BUILD:-build-dev}
P=./$BUILD/src/cli/pagedkv
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
CSV=${OUT:-/tmp}/ncu_decode_rows$ROWS.csv
if [ "$ROWS" = 1 ]; then
  [ -d /tmp/m06 ] || $P make-model --preset qwen3-0.6b-shape --dtype bf16 --out /tmp/m06 >/dev/null
  IDS=$(python3 -c "import random; r=random.Random(3); print(' '.join(str(r.randint(1, 9999)) for _ in range($PROMPT)))")
  "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
    $P generate --device cuda --model /tmp/m06 --prompt-ids "$IDS" --max-tokens $((STEPS + 2)) \
    2>/dev/null >"$CSV"
else
  PAGEDKV_BENCH_FIRST_CONFIG=5 PAGEDKV_BENCH_REQUESTS=$ROWS \
    "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
    ./$BUILD/bench/cuda/bench_cuda_model 2>/dev/null >"$CSV"
fi
python3 - "$CSV" "$STEPS" <<'PY'
import csv, sys, collections
path, steps = sys.argv[1], int(sys.argv[2])
rows = list(csv.reader(open(path)))
at = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if at is None: sys.exit("no kernels in " + path)
head = rows[at]
rows = [head] + [r for r in rows[at + 1:] if len(r) == len(head)]
ki, mi, vi = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
unit = head.index("Metric Unit")
seq = []
for r in rows[1:]:
    if r[mi] != "gpu__time_duration.sum": continue
    v = float(r[vi].replace(",", ""))
    v *= {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[r[unit]]
    seq.append((r[ki].split("(")[0].split("<")[0].replace("void ", ""), v))
end = seq[-1][0]
cuts = [i for i, (k, _) in enumerate(seq) if k == end]
if len(cuts) < steps + 1: sys.exit(f"only {len(cuts)} steps end with {end}")
picked = seq[cuts[-steps - 1] + 1:cuts[-1] + 1]
t = collections.defaultdict(float); n = collections.Counter()
for k, v in picked:
    t[k] += v / steps; n[k] += 1
total = sum(t.values())
print(f"a decode step (mean of the last {steps}; each ends with {end}): "
      f"{len(picked) / steps:.0f} kernels, {total:.1f} us of GPU time (ncu, one at a time)")
print(f"{'kernel':<44} {'a step':>6} {'us a step':>10} {'us each':>9} {'share':>6}")
for k, v in sorted(t.items(), key=lambda x: -x[1]):
    each = n[k] / steps
    print(f"{k[:44]:<44} {each:>6.0f} {v:>10.1f} {v / each:>9.2f} {100 * v / total:>5.1f}%")
PY

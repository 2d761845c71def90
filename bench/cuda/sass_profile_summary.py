#!/usr/bin/env python3
"""Where a kernel's instructions and stalls go, from Nsight Compute's SASS view.

Reads the CSV that `ncu --import REPORT --page source --csv --print-source sass`
writes for one profiled launch (taken with `--set full`, which collects the
per-instruction counters) and prints:
  - the warp-stall reasons, as shares of all stall samples;
  - the opcode mix: each opcode's share of the executed instructions and of the
    stall samples (e.g. HMMA at 6% of the instructions says the MMAs are not what
    bounds the kernel);
  - the hot regions: runs of consecutive instructions executed the same number of
    times (a loop body, a branch's side), with their size and shares, so a loop's
    cost per iteration can be read off (instructions × executions);
  - the instructions with the most stall samples, with their top two reasons.
Used for issue 12's attention kernel (docs/performance.md, "Tensor-core prefill
attention: where the instructions went"); bench/cuda/profile_sass_on_device.sh
takes the profile.
  usage: sass_profile_summary.py SASS.csv [TOP]
"""
import collections
import csv
import re
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = list(csv.reader(open(sys.argv[1], newline="")))
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    at = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if at is None:
        sys.exit(f"{sys.argv[1]}: no SASS table (an 'Address' header row)")
    if at > 0 and rows[0] and rows[0][0] == "Kernel Name":
        print("kernel:", rows[0][1][:160])
    head, data = rows[at], [r for r in rows[at + 1:] if len(r) == len(rows[at])]
    col = {name: i for i, name in enumerate(head)}
    for need in ("Source", "Instructions Executed", "Warp Stall Sampling (All Samples)"):
        if need not in col:
            sys.exit(f"{sys.argv[1]}: no '{need}' column (profile with --set full)")
    src, execs = col["Source"], col["Instructions Executed"]
    samples = col["Warp Stall Sampling (All Samples)"]
    stalls = [n for n in head if n.startswith("stall_") and "Not Issued" not in n]
    total_i = sum(number(r[execs]) for r in data) or 1.0
    total_s = sum(number(r[samples]) for r in data) or 1.0
    print(f"{len(data)} SASS instructions, {total_i:,.0f} executed (warp level), "
          f"{total_s:,.0f} stall samples")

    reasons = collections.Counter()
    for r in data:
        for n in stalls:
            reasons[n] += number(r[col[n]])
    print("\nstall reasons (share of samples)")
    for n, v in reasons.most_common(10):
        print(f"  {n[len('stall_'):]:<22} {100 * v / total_s:5.1f}%")

    ops_i, ops_s = collections.Counter(), collections.Counter()
    for r in data:
        m = re.match(r"\s*(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", r[src])
        op = m.group(1) if m else r[src].strip()
        ops_i[op] += number(r[execs])
        ops_s[op] += number(r[samples])
    print("\nopcode        instructions  samples")
    for op, v in ops_i.most_common(top):
        print(f"  {op:<12} {100 * v / total_i:9.1f}% {100 * ops_s[op] / total_s:7.1f}%")

    regions, start = [], 0
    for i in range(1, len(data) + 1):
        if i == len(data) or number(data[i][execs]) != number(data[start][execs]):
            part = data[start:i]
            runs = number(part[0][execs])
            regions.append((part[0][0], runs, len(part), runs * len(part),
                            sum(number(r[samples]) for r in part)))
            start = i
    print("\nregions (consecutive instructions run equally often; ≥ 1% of either)")
    print(f"  {'address':<14} {'runs':>10} {'instrs':>6} {'instr%':>7} {'samples%':>8}")
    for addr, runs, n, inst, samp in regions:
        if inst >= 0.01 * total_i or samp >= 0.01 * total_s:
            print(f"  {addr[-14:]:<14} {runs:>10,.0f} {n:>6} {100 * inst / total_i:6.1f}% "
                  f"{100 * samp / total_s:7.1f}%")

    print(f"\nthe {top} instructions with the most stall samples")
    for r in sorted(data, key=lambda r: -number(r[samples]))[:top]:
        why = sorted(((number(r[col[n]]), n[len("stall_"):]) for n in stalls), reverse=True)[:2]
        print(f"  {r[0][-6:]} {number(r[samples]):>7,.0f}  {r[src].strip()[:58]:<58} "
              + ", ".join(f"{n} {v:,.0f}" for v, n in why if v > 0))


if __name__ == "__main__":
    main()

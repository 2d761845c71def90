#!/usr/bin/env python3
"""Where a CUDA graph step's time goes, from a kernel timeline.

Reads the CSV that bench/cuda/kernel_timeline.cc writes (CUPTI activity records of
a whole run) and summarizes the replays of one captured graph: by default the graph
replayed most often, its first two replays left out (warm-up). For each replay, the
cycle runs from the graph's first kernel to the next replay's first kernel, so it
holds the work launched outside the graph (copies, sampling kernels) and the time
the GPU waits for the host.

Per kernel of the graph, in start order:
  gap      the GPU idle before it: its start minus the latest end of everything
           before it (launch latency that nothing hid);
  exposed  how far it pushed the step's frontier: its end minus the later of its
           start and the latest end before it. A kernel that starts early under
           programmatic launch and ends before its predecessor is exposed 0.
The gaps and exposed times of the graph's kernels add up to the graph's span.
Kernels are grouped by name (template arguments dropped) and listed by exposed time.

usage: kernel_timeline_summary.py TIMELINE.csv [--graph ID] [--skip N] [--top N]
                                   [--sequence N]
"""
import argparse
import collections
import statistics
import sys


def load(path):
    kernels, copies, apis = [], [], []
    with open(path) as f:
        for line in f:
            p = line.rstrip("\n").split(",")
            if p[0] == "k" and len(p) >= 12:
                name = ",".join(p[11:])
                if not name or name.endswith("::"):  # no name recorded: the launch shape
                    name = f"grid {p[7]} block {p[8]}"
                kernels.append(dict(start=int(p[1]), end=int(p[2]), corr=int(p[3]),
                                    graph=int(p[4]), node=int(p[5]), grid=p[7], block=p[8],
                                    name=name))
            elif p[0] in "ms" and len(p) >= 8:
                copies.append(dict(kind=p[0], start=int(p[1]), end=int(p[2]), corr=int(p[3]),
                                   graph=int(p[4]), bytes=int(p[7])))
            elif p[0] in "ad" and len(p) >= 6:
                apis.append(dict(kind=p[0], start=int(p[1]), end=int(p[2]), corr=int(p[3]),
                                 name=p[5]))
    return kernels, copies, apis


def base_name(name):
    depth, out = 0, []
    for c in name:
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif depth == 0:
            out.append(c)
    s = "".join(out)
    if s.startswith("void "):
        s = s[5:]
    return s.split("::")[-1] if "::" in s else s


def us(ns):
    return ns / 1000.0


def walk(ks):
    """One replay's kernels in start order, each with its gap and exposed time (ns)."""
    ks = sorted(ks, key=lambda k: k["start"])
    frontier = ks[0]["start"]
    for k in ks:
        gap = max(0, k["start"] - frontier)
        exposed = max(0, k["end"] - max(frontier, k["start"]))
        frontier = max(frontier, k["end"])
        yield k, gap, exposed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--graph", type=int, default=None, help="graph id (default: most replayed)")
    ap.add_argument("--skip", type=int, default=2, help="replays left out at the start")
    ap.add_argument("--top", type=int, default=30, help="kernel groups listed")
    ap.add_argument("--sequence", type=int, default=0,
                    help="also list the first N kernels of the last summarized replay")
    args = ap.parse_args()
    kernels, copies, apis = load(args.csv)
    if not kernels:
        sys.exit(f"no kernel records in {args.csv}")

    # Graph launches: the graph's kernels of one launch share its correlation id.
    launches = collections.defaultdict(list)
    for k in kernels:
        if k["graph"] != 0:
            launches[(k["graph"], k["corr"])].append(k)
    per_graph = collections.Counter(g for g, _ in launches)
    if not per_graph:
        sys.exit("no graph launches in the record")
    graph = args.graph if args.graph is not None else per_graph.most_common(1)[0][0]
    print("graphs (id: replays): " + ", ".join(f"{g}: {n}" for g, n in per_graph.most_common(8)))
    steps = sorted((ks for (g, _), ks in launches.items() if g == graph),
                   key=lambda ks: min(k["start"] for k in ks))
    steps = steps[args.skip:]
    if len(steps) < 2:
        sys.exit(f"graph {graph}: fewer than 2 replays after the first {args.skip}")
    print(f"graph {graph}: {len(steps)} replays summarized, {len(steps[0])} kernels each")

    # Everything on the GPU in start order, for the cycles' busy time.
    gpu = sorted([(k["start"], k["end"], k["graph"] == graph, base_name(k["name"]))
                  for k in kernels] +
                 [(c["start"], c["end"], False, "memcpy" if c["kind"] == "m" else "memset")
                  for c in copies])
    starts = [min(k["start"] for k in ks) for ks in steps]

    groups = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])  # count, dur, exposed, gap
    spans, cycles, outside, idle_gpu = [], [], [], []
    outside_work = collections.defaultdict(lambda: [0, 0.0])
    for i, ks in enumerate(steps[:-1]):
        for k, gap, exposed in walk(ks):
            g = groups[base_name(k["name"])]
            g[0] += 1
            g[1] += k["end"] - k["start"]
            g[2] += exposed
            g[3] += gap
        span = max(k["end"] for k in ks) - min(k["start"] for k in ks)
        spans.append(span)
        c0, c1 = starts[i], starts[i + 1]
        cycles.append(c1 - c0)
        # Busy time in the cycle: the union of every GPU interval inside it.
        busy, cur_s, cur_e = 0, None, None
        for s, e, in_graph, name in gpu:
            if e <= c0 or s >= c1:
                continue
            s, e = max(s, c0), min(e, c1)
            if not in_graph and s >= c0 + span:
                w = outside_work[name]
                w[0] += 1
                w[1] += e - s
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    busy += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None:
            busy += cur_e - cur_s
        idle_gpu.append((c1 - c0) - busy)
        outside.append((c1 - c0) - span)

    n = len(spans)
    med = statistics.median
    print(f"\na replay cycle (graph start to the next one), median of {n}: {us(med(cycles)):.1f} us")
    print(f"  the graph's span:                 {us(med(spans)):.1f} us")
    print(f"  after it, before the next replay: {us(med(outside)):.1f} us "
          f"(GPU idle in the whole cycle: {us(med(idle_gpu)):.1f} us)")
    if outside_work:
        print("  GPU work after the graph, a cycle: " + ", ".join(
            f"{name} {w[0] / n:.0f}x {us(w[1]) / n:.1f} us"
            for name, w in sorted(outside_work.items(), key=lambda x: -x[1][1])))

    # Host calls inside the cycles (runtime API), by name.
    c_lo, c_hi = starts[0], starts[n]
    host = collections.defaultdict(lambda: [0, 0.0])
    for a in apis:
        if a["kind"] == "a" and c_lo <= a["start"] < c_hi:
            h = host[a["name"]]
            h[0] += 1
            h[1] += a["end"] - a["start"]
    if host:
        print("  host runtime calls a cycle (count, us): " + ", ".join(
            f"{name} {h[0] / n:.1f}x {us(h[1]) / n:.1f}"
            for name, h in sorted(host.items(), key=lambda x: -x[1][1])[:8]))

    tot_exp = sum(g[2] for g in groups.values()) / n
    tot_gap = sum(g[3] for g in groups.values()) / n
    print(f"\nthe graph's kernels, a replay: exposed {us(tot_exp):.1f} us + gaps {us(tot_gap):.1f} us"
          f" = span {us(tot_exp + tot_gap):.1f} us")
    print(f"{'kernel':44s} {'a step':>6s} {'dur us':>8s} {'exposed':>8s} {'gap':>7s} "
          f"{'exp/each':>8s} {'share':>6s}")
    for name, (cnt, dur, exp, gap) in sorted(groups.items(), key=lambda x: -x[1][2])[:args.top]:
        print(f"{name[:44]:44s} {cnt / n:6.0f} {us(dur) / n:8.1f} {us(exp) / n:8.1f} "
              f"{us(gap) / n:7.1f} {us(exp) / cnt:8.2f} {100 * exp / n / max(tot_exp + tot_gap, 1):5.1f}%")

    if args.sequence > 0:
        t0 = min(k["start"] for k in steps[-2])
        print("\nthe last summarized replay, kernel by kernel (us from its first start):")
        print(f"{'#':>4s} {'start':>8s} {'end':>8s} {'dur':>7s} {'gap':>6s} {'exposed':>7s}  kernel grid block")
        for i, (k, gap, exposed) in enumerate(walk(steps[-2])):
            if i >= args.sequence:
                break
            print(f"{i:4d} {us(k['start'] - t0):8.1f} {us(k['end'] - t0):8.1f} "
                  f"{us(k['end'] - k['start']):7.1f} {us(gap):6.1f} {us(exposed):7.1f}  "
                  f"{base_name(k['name'])} {k['grid']} {k['block']}")


if __name__ == "__main__":
    main()

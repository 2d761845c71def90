"""torch baselines for bench_cuda_kernels, on the same shapes, in the same run.

Decode: torch SDPA over contiguous bf16 KV [B, 8, L, 128] with 16 query heads
(enable_gqa), GB/s = K+V bytes / time. Prefill: SDPA causal, B=1, TFLOP/s counting
the causal half. GEMM: torch.matmul in bf16 (x bf16 too: the usual fast path), on
the kernel bench's shapes and on a decode step's 196 GEMMs plus the LM head.
Median of 20 CUDA-event timings after 3 warm-ups. Writes CSV to argv[1] if given.
ATTN_ONLY=1 stops after the attention rows (the attention A/B runs).
"""
import os
import sys
import torch
import torch.nn.functional as F


def median_ms(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


rows = []


def report(name, shape, ms, value, unit):
    rows.append((name, shape, ms, value, unit))
    print(f"{name:26s} {shape:34s} {ms:9.4f} ms {value:10.1f} {unit}", flush=True)


dev = "cuda"
for B, L in [(1, 32768), (32, 8192), (64, 8192), (256, 8192)]:
    q = torch.randn(B, 16, 1, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn(B, 8, L, 128, device=dev, dtype=torch.bfloat16)
    v = torch.randn(B, 8, L, 128, device=dev, dtype=torch.bfloat16)
    ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    report("sdpa_decode", f"{B} rows x {L} ctx", ms, 2 * k.numel() * 2 / (ms * 1e-3) / 1e9, "GB/s")
    del q, k, v
for L in [4096, 16384]:
    q = torch.randn(1, 16, L, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, 8, L, 128, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, 8, L, 128, device=dev, dtype=torch.bfloat16)
    ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
    report("sdpa_prefill", f"1 x {L} causal", ms, 4 * 16 * 128 * L * L / 2 / (ms * 1e-3) / 1e12, "TFLOP/s")
ATTN_ONLY = os.environ.get("ATTN_ONLY") == "1"
for m, k_, n in [] if ATTN_ONLY else [(1, 1024, 3072), (16, 1024, 3072), (64, 1024, 3072), (512, 1024, 3072),
                 (4096, 1024, 3072), (4096, 4096, 4096)]:
    x = torch.randn(m, k_, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, k_, device=dev, dtype=torch.bfloat16)
    ms = median_ms(lambda: x @ w.t())
    report("torch_matmul_bf16", f"{m}x{k_}x{n}", ms, 2 * m * k_ * n / (ms * 1e-3) / 1e12, "TFLOP/s")
# A decode step's GEMMs (bench_cuda_kernels' step_gemms_28_layers): 28 layers of the
# Qwen3-0.6B shape, each its own weights, x in bf16 (cuBLAS, not batch-invariant).
layer = [(1024, 2048), (1024, 1024), (1024, 1024), (2048, 1024), (1024, 3072), (1024, 3072),
         (3072, 1024)]
ws = [] if ATTN_ONLY else [torch.randn(n, k_, device=dev, dtype=torch.bfloat16) for _ in range(28) for k_, n in layer]
head = None if ATTN_ONLY else torch.randn(151936, 1024, device=dev, dtype=torch.bfloat16)
wbytes = sum(w.numel() * 2 for w in ws)
for m in [] if ATTN_ONLY else [1, 8, 32, 64]:
    xs = {k_: torch.randn(m, k_, device=dev, dtype=torch.bfloat16) for k_ in (1024, 2048, 3072)}
    g = torch.cuda.CUDAGraph()  # replayed: no Python launch overhead in the figure
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        [xs[w.shape[1]] @ w.t() for w in ws]
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        outs = [xs[w.shape[1]] @ w.t() for w in ws]
    ms = median_ms(g.replay, reps=10)
    report("torch_step_gemms_graph", f"{m} rows (196 GEMMs, 840 MB)", ms, wbytes / (ms * 1e-3) / 1e9, "GB/s")
    del g, outs
    ms = median_ms(lambda: xs[1024] @ head.t())
    report("torch_lm_head", f"{m} rows x 1024 x 151936", ms, head.numel() * 2 / (ms * 1e-3) / 1e9, "GB/s")
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as f:
        f.write("name,shape,ms,value,unit\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")

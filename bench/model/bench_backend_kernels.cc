// Google Benchmark of the CPU matmul kernel (GFLOP/s, from CPU time) at decode
// (M=1, M=32) and prefill (M=64, M=256) shapes, f32 and bf16 weights, on the
// backend's thread pool; CPU attention (qwen3-0.6B's and the small preset's heads)
// for prefill/extend chunks and decode rows over paged K/V, hot (the K/V in
// cache) and cold (`*Cold`: enough copies that each iteration reads them from
// DRAM, as a serving step does); and one core's FMA peak on the same ISA path.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_isa.h"
#include "backend/half.h"

namespace {

using pagedkv::backend::AttentionArgs;
using pagedkv::backend::WeightDType;
using pagedkv::backend::cpu::ThreadPool;

void BM_Matmul(benchmark::State& st) {
  const int64_t M = st.range(0), K = st.range(1), N = st.range(2);
  const bool bf16 = st.range(3) != 0;
  const int threads = static_cast<int>(st.range(4));
  pagedkv::backend::cpu::set_matmul_packing_for_testing(st.range(5) != 0);
  // K block of the packed nest (0: the default, 512).
  const int64_t kc = st.range(6) > 0 ? st.range(6) : 512;
  pagedkv::backend::cpu::set_matmul_blocking_for_testing(kc, 96);
  std::mt19937 g(1);
  std::normal_distribution<float> d;
  std::vector<float> x(M * K), w(N * K), y(M * N);
  for (auto& v : x) v = d(g);
  for (auto& v : w) v = d(g);
  std::vector<uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = pagedkv::f32_to_bf16(w[i]);
  ThreadPool pool(threads);
  for (auto _ : st) {
    pagedkv::backend::cpu::matmul(
        x.data(), M, K, bf16 ? static_cast<const void*>(wb.data()) : w.data(),
        bf16 ? WeightDType::kBF16 : WeightDType::kF32, N, y.data(), &pool);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GFLOPs"] = benchmark::Counter(
      2.0 * M * N * K * st.iterations(), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

BENCHMARK(BM_Matmul)
    ->ArgNames({"M", "K", "N", "bf16", "threads", "packed", "kc"})
    ->Args({1, 1024, 3072, 0, 1, 1, 0})
    ->Args({1, 1024, 3072, 0, 2, 1, 0})
    ->Args({1, 1024, 3072, 1, 2, 1, 0})
    ->Args({64, 1024, 3072, 0, 1, 1, 0})
    ->Args({64, 1024, 3072, 0, 2, 1, 0})
    ->Args({64, 1024, 3072, 1, 2, 1, 0})
    ->Args({8, 1024, 3072, 1, 1, 1, 0})
    ->Args({8, 3072, 1024, 1, 1, 1, 0})
    ->Args({16, 1024, 3072, 1, 1, 1, 0})
    ->Args({32, 1024, 3072, 1, 1, 1, 0})
    ->Args({256, 1024, 3072, 1, 1, 1, 0})
    ->Args({256, 3072, 1024, 1, 1, 1, 0})
    ->Args({32, 1024, 3072, 1, 1, 0, 0})
    ->Args({256, 1024, 3072, 1, 1, 0, 0})
    ->Args({256, 3072, 1024, 1, 1, 0, 0})
    // The 32-row decode step's shapes, by K block.
    ->Args({32, 1024, 3072, 1, 1, 1, 128})
    ->Args({32, 1024, 3072, 1, 1, 1, 256})
    ->Args({32, 3072, 1024, 1, 1, 1, 128})
    ->Args({32, 3072, 1024, 1, 1, 1, 256})
    ->Args({32, 3072, 1024, 1, 1, 1, 0})
    // A weight stream from DRAM (an lm_head slice, 64 MiB of bf16): packed vs direct.
    ->Args({32, 1024, 32768, 1, 2, 1, 0})
    ->Args({32, 1024, 32768, 1, 2, 0, 0})
    // The prefill GEMMs of `pagedkv bench --preset qwen3-0.6b-shape` (f32 weights):
    // a user message (64 rows) and a system prompt + message (320 rows), one core.
    ->Args({64, 1024, 2048, 0, 1, 1, 0})
    ->Args({64, 3072, 1024, 0, 1, 1, 0})
    ->Args({320, 1024, 3072, 0, 1, 1, 0})
    ->Args({320, 3072, 1024, 0, 1, 1, 0})
    // The same from DRAM (128 MiB of f32 weights, as a 4-layer step streams them).
    ->Args({64, 1024, 32768, 0, 1, 1, 0})
    ->Args({64, 1024, 32768, 0, 2, 1, 0})
    // The 4-layer preset's decode from DRAM (issue 11's 2-core batching goal): one
    // row and eight stream the same 128 MiB; eight should cost little more.
    ->Args({1, 1024, 32768, 0, 2, 1, 0})
    ->Args({8, 1024, 32768, 0, 2, 1, 0})
    ->Args({8, 1024, 32768, 0, 1, 1, 0})
    // Issue 11's prefill shapes with bf16 weights (a 512-token prompt through
    // qwen3-0.6B's projections: QKV, gate+up, O, down), two threads and one.
    ->Args({512, 1024, 3072, 1, 2, 1, 0})
    ->Args({512, 1024, 4096, 1, 2, 1, 0})
    ->Args({512, 2048, 1024, 1, 2, 1, 0})
    ->Args({512, 3072, 1024, 1, 2, 1, 0})
    ->Args({512, 1024, 3072, 1, 1, 1, 0})
    ->Args({512, 3072, 1024, 1, 1, 1, 0})
    // The `small` preset's decode steps (issue 11's 2-core batching goal): gate/up
    // and down of f32 weights at 1 and 8 rows.
    ->Args({1, 256, 512, 0, 1, 1, 0})
    ->Args({8, 256, 512, 0, 1, 1, 0})
    ->Args({8, 256, 512, 0, 2, 1, 0})
    ->Args({8, 512, 256, 0, 1, 1, 0})
    ->Unit(benchmark::kMicrosecond);

// Attention over paged K/V, 16-token blocks in shuffled order (as a pool hands them
// out), heads NH query / KVH KV of head_dim HD. rows = 0: one request's chunk of Q
// queries at positions N-Q … N-1 (prefill when Q = N, extend when Q < N). rows > 0:
// that many decode rows (one query each at position N-1), with their own blocks
// except the first `shared` blocks, which all rows share (a common prefix, as the
// chat workload's system prompt). GFLOP/s counts the score and value products,
// 4·head_dim FLOPs per (query head, key) pair attended.
void attention_bench(benchmark::State& st, int32_t NH, int32_t KVH, int32_t HD, bool has_shared,
                     bool cold = false) {
  const int32_t Q = static_cast<int32_t>(st.range(0)), N = static_cast<int32_t>(st.range(1));
  const int kvd = static_cast<int>(st.range(2));
  const int threads = static_cast<int>(st.range(3));
  const int rows = static_cast<int>(st.range(4));
  const int32_t shared = has_shared ? static_cast<int32_t>(st.range(5)) : 0;
  const int32_t B = 16;
  const int nargs0 = rows > 0 ? rows : 1;
  const int32_t tiles = (N + B - 1) / B;
  const int64_t tile_elems = static_cast<int64_t>(B) * KVH * HD;
  // cold: enough copies of the rows (each with its own K/V) that one pass over
  // them all (~256 MiB of K/V) leaves none in cache; an iteration runs one copy.
  const int64_t set_bytes = 2 * int64_t{nargs0} * tiles * tile_elems * (kvd == 0 ? 4 : 2);
  const int sets =
      cold ? static_cast<int>(std::max<int64_t>(1, (int64_t{256} << 20) / set_bytes)) : 1;
  const int nargs = nargs0 * sets;
  std::mt19937 g(7);
  std::normal_distribution<float> d;
  std::vector<float> kf(nargs * tiles * tile_elems), vf(kf.size());
  for (auto& v : kf) v = d(g);
  for (auto& v : vf) v = d(g);
  std::vector<uint16_t> kh(kf.size()), vh(vf.size());
  for (size_t i = 0; i < kf.size(); ++i) {
    kh[i] = kvd == 1 ? pagedkv::f32_to_bf16(kf[i]) : pagedkv::f32_to_f16(kf[i]);
    vh[i] = kvd == 1 ? pagedkv::f32_to_bf16(vf[i]) : pagedkv::f32_to_f16(vf[i]);
  }
  std::vector<int32_t> order(static_cast<size_t>(nargs) * tiles);
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::shuffle(order.begin(), order.end(), g);
  const int32_t nq = rows > 0 ? 1 : Q;
  std::vector<float> q(static_cast<size_t>(nargs) * nq * NH * HD), out(q.size());
  for (auto& v : q) v = d(g);
  std::vector<int32_t> pos(static_cast<size_t>(nargs) * nq);
  std::vector<const float*> kt(order.size()), vt(order.size());
  std::vector<AttentionArgs> args(nargs);
  double pairs = 0;
  for (int r = 0; r < nargs; ++r) {
    for (int32_t t = 0; t < tiles; ++t) {
      const int first = r / nargs0 * nargs0;  // the copy's first row owns its shared blocks
      const int64_t off = order[(t < shared ? first : r) * tiles + t] * tile_elems;
      kt[r * tiles + t] =
          kvd == 0 ? kf.data() + off : reinterpret_cast<const float*>(kh.data() + off);
      vt[r * tiles + t] =
          kvd == 0 ? vf.data() + off : reinterpret_cast<const float*>(vh.data() + off);
    }
    for (int32_t i = 0; i < nq; ++i) {
      pos[r * nq + i] = N - nq + i;
      pairs += pos[r * nq + i] + 1;
    }
    AttentionArgs& a = args[r];
    a.q = q.data() + static_cast<size_t>(r) * nq * NH * HD;
    a.out = out.data() + static_cast<size_t>(r) * nq * NH * HD;
    a.num_tokens = nq;
    a.num_heads = NH;
    a.num_kv_heads = KVH;
    a.head_dim = HD;
    a.positions = pos.data() + r * nq;
    a.scale = 0.08838834764831845f;
    a.tile = B;
    a.k_tiles = kt.data() + r * tiles;
    a.v_tiles = vt.data() + r * tiles;
    a.num_tiles = tiles;
    a.kv_dtype = kvd == 0 ? WeightDType::kF32 : kvd == 1 ? WeightDType::kBF16 : WeightDType::kF16;
  }
  ThreadPool pool(threads);
  int set = 0;
  for (auto _ : st) {
    pagedkv::backend::cpu::attention_batch(args.data() + set * nargs0, nargs0,
                                           threads > 1 ? &pool : nullptr);
    benchmark::DoNotOptimize(out.data());
    set = set + 1 == sets ? 0 : set + 1;
  }
  st.counters["GFLOPs"] =
      benchmark::Counter(4.0 * HD * NH * pairs / sets * st.iterations(),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// qwen3-0.6B's heads: 16 query / 8 KV heads, head_dim 128.
void BM_Attention(benchmark::State& st) { attention_bench(st, 16, 8, 128, false); }
// The `small` preset's heads (issue 11's 2-core batching goal): 8 query / 4 KV
// heads, head_dim 32; decode rows over ~320 keys, alone or sharing a 256-token prefix.
void BM_AttentionSmall(benchmark::State& st) { attention_bench(st, 8, 4, 32, true); }
// Decode rows whose K/V comes from DRAM, as in a serving step (the other layers'
// and requests' K/V evicted it): qwen3-0.6B's heads and the small preset's.
void BM_AttentionCold(benchmark::State& st) { attention_bench(st, 16, 8, 128, true, true); }
void BM_AttentionSmallCold(benchmark::State& st) { attention_bench(st, 8, 4, 32, true, true); }
// One decode row's GQA pair over a single KV head (head_dim 128) whose K/V stays in
// L2: the kernel's own cost per key without the memory, e.g. of widening bf16 K/V.
void BM_AttentionOneKvHead(benchmark::State& st) { attention_bench(st, 2, 1, 128, true); }

BENCHMARK(BM_AttentionSmall)
    ->ArgNames({"Q", "N", "kv", "threads", "rows", "shared"})
    ->Args({96, 320, 0, 1, 0, 0})
    ->Args({1, 320, 0, 1, 1, 0})
    ->Args({1, 320, 0, 1, 8, 0})
    ->Args({1, 320, 0, 1, 8, 16})
    ->Args({1, 320, 1, 1, 8, 16})
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_AttentionSmallCold)
    ->ArgNames({"Q", "N", "kv", "threads", "rows", "shared"})
    ->Args({1, 320, 0, 1, 1, 0})
    ->Args({1, 320, 0, 1, 8, 16})
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_AttentionOneKvHead)
    ->ArgNames({"Q", "N", "kv", "threads", "rows", "shared"})
    ->Args({1, 512, 0, 1, 1, 0})
    ->Args({1, 512, 1, 1, 1, 0})
    ->Args({1, 2048, 1, 1, 1, 0})
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_AttentionCold)
    ->ArgNames({"Q", "N", "kv", "threads", "rows", "shared"})
    ->Args({1, 384, 0, 1, 1, 0})
    ->Args({1, 384, 0, 1, 8, 16})
    ->Args({1, 384, 1, 1, 8, 16})
    ->Args({1, 2048, 0, 1, 8, 16})
    ->Args({1, 4096, 1, 1, 1, 0})
    ->Args({1, 4096, 1, 2, 8, 0})
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_Attention)
    ->ArgNames({"Q", "N", "kv", "threads", "rows"})
    // Prefill / extend chunks (kv: 0 f32, 1 bf16).
    ->Args({128, 256, 0, 1, 0})
    ->Args({128, 384, 0, 1, 0})
    ->Args({512, 512, 0, 1, 0})
    ->Args({256, 2048, 0, 1, 0})
    ->Args({128, 384, 1, 1, 0})
    ->Args({512, 512, 1, 1, 0})
    ->Args({512, 512, 0, 2, 0})
    // Decode: 1 and 8 rows.
    ->Args({1, 384, 0, 1, 1})
    ->Args({1, 384, 0, 1, 8})
    ->Args({1, 2048, 0, 1, 8})
    ->Args({1, 384, 1, 1, 8})
    ->Args({1, 384, 0, 2, 8})
    ->Unit(benchmark::kMicrosecond);

// The FMA peak of one core on the matmul's ISA path (12 independent chains), from
// CPU time like the GEMM figures.
void BM_FmaPeak(benchmark::State& st) {
  const std::string isa = pagedkv::backend::cpu::isa_name();
  const bool zmm = isa.rfind("avx512", 0) == 0, ymm = isa.rfind("avx2", 0) == 0;
  double flops = 0;
  for (auto _ : st) {
    if (zmm) flops += pagedkv::backend::cpu::fma_peak_flops_avx512(int64_t{1} << 24);
    if (ymm) flops += pagedkv::backend::cpu::fma_peak_flops_avx2(int64_t{1} << 24);
  }
  st.counters["peak_GFLOPs"] =
      benchmark::Counter(flops, benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  st.SetLabel(isa);
}
BENCHMARK(BM_FmaPeak)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

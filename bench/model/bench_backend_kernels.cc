// Google Benchmark of the CPU matmul kernel (GFLOP/s, from CPU time) at decode
// (M=1, M=32) and prefill (M=64, M=256) shapes, f32 and bf16 weights, on the
// backend's thread pool, and one core's FMA peak on the same ISA path.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_isa.h"
#include "backend/half.h"

namespace {

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

// Google Benchmark of the CPU matmul kernel (GFLOP/s) at decode (M=1) and prefill
// (M=64) shapes, f32 and bf16 weights, on the backend's thread pool.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "backend/cpu/kernels.h"
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
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();

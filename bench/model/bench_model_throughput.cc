// Model throughput on the CPU backend: prefill and decode tokens/s for the tiny,
// small and qwen3-0.6b-shape presets (random weights from make_random_model,
// cached under $PAGEDKV_BENCH_MODEL_DIR or ~/.cache/pagedkv/models), and time to
// first token for a 2,048-token prompt cold vs with its first 2,032 tokens in the
// prefix cache. Each figure is printed with the baseline it is a ratio to,
// measured in the same run: prefill is compared with feeding the same prompt one
// token at a time; cached TTFT with cold TTFT.
// Every run goes through the Engine (step() mode), as every front end does.
//
// Issue 11's table (--table, or as part of the full run): on the qwen3-0.6b-shape
// bf16 checkpoint, prefill of one 512-token prompt, pure decode throughput at 1, 8
// and 32 concurrent requests (each request = a shared 512-token prefix, from the
// prefix cache, + 16 own tokens; the engine batches every decode row of a step in
// one forward, and only the pure-decode steps are timed), GEMM GFLOP/s at a
// prefill shape against the measured FMA peak of all threads, and a STREAM-like
// memory bandwidth with decode's fraction of that roofline.
// Usage: bench_model_throughput [--quick | --table [PRESET]]
//   --quick skips the 0.6B-shape preset; --table runs only issue 11's table
//   (on PRESET, default qwen3-0.6b-shape) with the backend's op profile of each
//   timed phase, same-run baselines (direct matmul nest only, no prefetch) and a
//   K-block × row-block sweep; PAGEDKV_BENCH_TABLE_SHORT=1 stops after the
//   prefill and decode rows.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "backend/half.h"
#include "bench_engine.h"
#include "bench_machine.h"
#include "bench_model.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "pagedkv/engine.h"

using namespace pagedkv;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

std::vector<int32_t> prompt(size_t n, int32_t vocab) {
  std::mt19937 g(42);
  return bench::random_tokens(g, n, vocab);
}

// An engine on `m` (paged KV, `initial_mb` MiB growing to 4 GiB), `chunk` prompt
// tokens per step.
std::unique_ptr<engine::Engine> engine_for(const std::shared_ptr<model::Model>& m, int64_t chunk,
                                           uint64_t initial_mb = 64) {
  engine::EngineOptions o;
  o.paged_cache_memory_mb = 4096;
  o.paged_cache_initial_memory_mb = initial_mb;
  o.max_num_batched_tokens = chunk;
  return bench::create_engine(m, o);
}

// One greedy request through the engine (step() mode): the seconds until its
// first token (prefill), the seconds after it (decode), and what it returned.
struct Timed {
  double first_s = 0, rest_s = 0;
  engine::RequestResult result;
};
Timed run(engine::Engine& e, const std::vector<int32_t>& p, int max_tokens) {
  const engine::RequestHandlePtr h = bench::submit_fixed(e, p, max_tokens, /*return_logits=*/true);
  Timed t;
  auto t0 = Clock::now();
  while (!h->done() && e.stats().completion_tokens == 0) e.step();
  t.first_s = secs(t0);
  t0 = Clock::now();
  e.run_until_idle();
  t.rest_s = secs(t0);
  t.result = bench::wait_ok(h);
  return t;
}

void throughput(const std::string& preset, model::DType dt, size_t prompt_len, int decode_tokens,
                size_t serial_len) {
  auto m = bench::load_random_model(preset, dt);
  auto p = prompt(prompt_len, m->config().vocab_size);
  // Prefill: the whole prompt in one step; then decode.
  Timed r = run(*engine_for(m, static_cast<int64_t>(prompt_len)), p, decode_tokens + 1);
  const double prefill_s = r.first_s, decode_s = r.rest_s;
  // Baseline: the first serial_len prompt tokens fed one token per step, on a fresh cache.
  std::vector<int32_t> head(p.begin(), p.begin() + static_cast<ptrdiff_t>(serial_len));
  const double serial_s = run(*engine_for(m, 1), head, 1).first_s;
  double prefill_tps = prompt_len / prefill_s, serial_tps = serial_len / serial_s;
  std::printf(
      "%-18s %-5s prefill %5zu tok: %9.1f tok/s (%.2fx one-token-per-step %.1f tok/s) | decode: "
      "%8.1f tok/s (%.1f ms/token)\n",
      preset.c_str(), dt == model::DType::kBF16 ? "bf16" : "f32", prompt_len, prefill_tps,
      prefill_tps / serial_tps, serial_tps, decode_tokens / decode_s,
      1000 * decode_s / decode_tokens);
}

void ttft(const std::string& preset, model::DType dt) {
  auto m = bench::load_random_model(preset, dt);
  auto p = prompt(2048, m->config().vocab_size);
  Timed cold = run(*engine_for(m, 2048), p, 1);
  auto e = engine_for(m, 2048);
  run(*e, std::vector<int32_t>(p.begin(), p.begin() + 2032), 1);  // warms the prefix cache
  Timed hot = run(*e, p, 1);
  const bool same = cold.result.logits == hot.result.logits;
  std::printf(
      "%-18s %-5s TTFT 2048-token prompt: cold %.1f ms, %lld tokens cached %.2f ms → %.0fx faster; "
      "logits bit-identical: %s\n",
      preset.c_str(), dt == model::DType::kBF16 ? "bf16" : "f32", cold.first_s * 1000,
      static_cast<long long>(hot.result.usage.cached_prompt_tokens), hot.first_s * 1000,
      cold.first_s / hot.first_s, same ? "yes" : "NO");
}

// Aggregate decode tok/s at `n` concurrent requests through the engine: a
// 512-token prefix is computed once (the prefix cache), then n requests of that
// prefix + 16 own tokens each are submitted together; the engine prefills their
// suffixes and then runs one forward of n decode rows per step. Only the steps
// with no prefill row are timed.
bool g_profile = false;  // --table: print where each timed phase spends its time

double batched_decode(const std::shared_ptr<model::Model>& m, int n, size_t prefix_len, int steps) {
  const int32_t V = m->config().vocab_size;
  auto e = engine_for(m, 2048, 2048);  // allocated up front: no pool growth while timed
  auto prefix = prompt(prefix_len, V);
  auto warm = bench::submit_fixed(*e, prefix, 1);
  e->run_until_idle();
  bench::wait_ok(warm);
  std::vector<engine::RequestHandlePtr> hs;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p = prefix;
    std::mt19937 g(1000 + i);
    for (int j = 0; j < 16; ++j) p.push_back(static_cast<int32_t>(g() % V));
    hs.push_back(bench::submit_fixed(*e, p, steps + 1));  // the first token comes from prefill
  }
  double sec = 0;
  int64_t tokens = 0;
  auto& cpu = static_cast<backend::cpu::CpuBackend&>(backend::cpu_backend());
  cpu.profile_report();  // starts the op profile over
  for (;;) {
    const bool pure_decode = e->stats().running == n && e->stats().waiting == 0;
    cpu.set_profiling(pure_decode);
    auto t = Clock::now();
    engine::StepReport rep = e->step();
    const double dt = secs(t);
    cpu.set_profiling(false);
    if (rep.idle()) break;
    if (pure_decode && rep.prefill_rows == 0 && rep.decode_rows == n) {
      sec += dt;
      tokens += rep.decode_rows;
    }
  }
  if (g_profile) {
    std::printf("  op profile of the pure-decode steps (%.2f ms of wall time in step()):\n%s",
                sec * 1e3, cpu.profile_report().c_str());
  }
  for (auto& h : hs) bench::wait_ok(h);
  if (e->stats().cached_prompt_tokens < static_cast<uint64_t>(n) * (prefix_len / 16 * 16)) {
    std::fprintf(stderr, "error: the shared prefix was not served from the prefix cache\n");
    std::exit(1);
  }
  return sec > 0 ? tokens / sec : 0;
}

// STREAM-like bandwidth over `bytes` with every thread of the backend's pool:
// read (sum of 64-bit words) and copy (memcpy; read + write bytes counted).
void bandwidth(size_t bytes, double* read_gbs, double* copy_gbs) {
  auto* pool = static_cast<backend::cpu::CpuBackend&>(backend::cpu_backend()).pool();
  const size_t words = bytes / 8;
  std::vector<uint64_t> a(words), b(words);
  pool->parallel_for(static_cast<int64_t>(words), 4096, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) a[i] = static_cast<uint64_t>(i), b[i] = 0;
  });
  std::vector<uint64_t> sums(words / 4096 + 1);
  double best_r = 0, best_c = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t = Clock::now();
    pool->parallel_for(static_cast<int64_t>(words), 1 << 16, [&](int64_t s, int64_t e) {
      uint64_t acc = 0;
      for (int64_t i = s; i < e; ++i) acc += a[i];
      sums[s / 4096] = acc;
    });
    best_r = std::max(best_r, bytes / secs(t) / 1e9);
    t = Clock::now();
    pool->parallel_for(static_cast<int64_t>(words), 1 << 16, [&](int64_t s, int64_t e) {
      std::memcpy(b.data() + s, a.data() + s, static_cast<size_t>(e - s) * 8);
    });
    best_c = std::max(best_c, 2.0 * bytes / secs(t) / 1e9);
  }
  *read_gbs = best_r;
  *copy_gbs = best_c;
}

// GEMM GFLOP/s of the backend's matmul at one shape (bf16 weights).
double gemm_gflops(int64_t M, int64_t K, int64_t N, int reps) {
  auto* pool = static_cast<backend::cpu::CpuBackend&>(backend::cpu_backend()).pool();
  std::mt19937 g(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(M * K)), y(static_cast<size_t>(M * N));
  std::vector<uint16_t> w(static_cast<size_t>(N * K));
  for (auto& v : x) v = d(g);
  for (auto& v : w) v = f32_to_bf16(0.05f * d(g));
  backend::cpu::matmul(x.data(), M, K, w.data(), backend::WeightDType::kBF16, N, y.data(), pool);
  auto t = Clock::now();
  for (int r = 0; r < reps; ++r)
    backend::cpu::matmul(x.data(), M, K, w.data(), backend::WeightDType::kBF16, N, y.data(), pool);
  return 2.0 * M * N * K * reps / secs(t) / 1e9;
}

void issue11_table(const std::string& preset) {
  backend::Backend& be = backend::cpu_backend();
  // KV in bf16 unless PAGEDKV_KV_DTYPE names one: llama.cpp's figures are with its
  // default f16 KV cache, the same two bytes an element.
  model::LoadOptions lo;
  if (std::getenv("PAGEDKV_KV_DTYPE") == nullptr) lo.kv_dtype = model::KVDType::kBF16;
  const std::string dir = bench::random_model_dir(preset, model::DType::kBF16);
  auto m = bench::load_random_model(preset, model::DType::kBF16, lo);
  std::printf("== issue 11 table (%s, bf16 weights, %s KV): %s\n", preset.c_str(),
              std::string(kv::kv_dtype_name(m->kv_geometry().dtype)).c_str(),
              be.describe().c_str());
  const auto& c = m->config();
  // Weight bytes streamed per decode step: every matrix once (the tied embedding
  // is read once, as lm_head) = the checkpoint's size, give or take its header.
  const double weight_bytes =
      static_cast<double>(std::filesystem::file_size(dir + "/model.safetensors"));
  // Prefill: one 512-token prompt in one step (best of 2, fresh engine each).
  auto& cpu = static_cast<backend::cpu::CpuBackend&>(be);
  auto prefill = [&](bool profile) {
    double best = 0, best_s = 0;
    std::string report;
    for (int rep = 0; rep < 2; ++rep) {
      auto e = engine_for(m, 512, 1024);  // allocated up front: no pool growth while timed
      auto h = bench::submit_fixed(*e, prompt(512, c.vocab_size), 1);
      cpu.profile_report();
      cpu.set_profiling(profile);
      auto t = Clock::now();
      engine::StepReport r = e->step();
      const double s = secs(t);
      cpu.set_profiling(false);
      bench::wait_ok(h);
      if (r.prefill_rows != 1 || r.tokens != 512) {
        std::fprintf(stderr, "error: the 512-token prefill took more than one step\n");
        std::exit(1);
      }
      if (512 / s > best) {
        best = 512 / s;
        best_s = s;
        report = cpu.profile_report();
      }
    }
    if (profile)
      std::printf("  op profile of the prefill step (%.2f ms of wall time in step()):\n%s",
                  best_s * 1e3, report.c_str());
    return best;
  };
  // Same run baseline: the direct (unpacked) matmul loop nest only.
  backend::cpu::set_matmul_packing_for_testing(false);
  const double prefill_direct = prefill(false);
  backend::cpu::set_matmul_packing_for_testing(true);
  const double prefill_tps = prefill(g_profile);
  std::printf(
      "prefill, 512-token prompt        %8.1f tok/s   (llama.cpp on the H200 host: 753; "
      "direct matmul nest only: %.1f tok/s)\n",
      prefill_tps, prefill_direct);
  const double llama[3] = {55, 162, 243};
  const int ns[3] = {1, 8, 32};
  double d1 = 0;
  for (int i = 0; i < 3; ++i) {
    double tps = batched_decode(m, ns[i], 512, ns[i] == 1 ? 24 : 12);
    if (i == 0) d1 = tps;
    std::printf(
        "decode, %2d request%s             %8.1f tok/s   (llama.cpp: %.0f; x%.2f of 1 request)\n",
        ns[i], ns[i] == 1 ? " " : "s", tps, llama[i], tps / d1);
  }
  if (std::getenv("PAGEDKV_BENCH_TABLE_SHORT") != nullptr) return;  // prefill + decode rows only
  double peak =
      backend::cpu::measure_fma_peak_gflops(static_cast<backend::cpu::CpuBackend&>(be).pool());
  for (auto [M, K, N] : {std::array<int64_t, 3>{512, 1024, 3072},
                         {512, 3072, 1024},
                         {1, 1024, 3072},
                         {8, 1024, 3072},
                         {32, 1024, 3072}}) {
    const int reps = M == 1 ? 200 : M <= 32 ? 50 : 5;
    double gf = gemm_gflops(M, K, N, reps);
    backend::cpu::set_matmul_packing_for_testing(false);
    double direct = gemm_gflops(M, K, N, reps);
    backend::cpu::set_matmul_packing_for_testing(true);
    std::printf(
        "GEMM M=%-4lld K=%-4lld N=%-4lld bf16   %8.1f GFLOP/s = %.0f%% of the measured FMA peak "
        "%.0f GFLOP/s (direct nest only: %.1f)\n",
        static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(N), gf,
        peak > 0 ? 100.0 * gf / peak : 0.0, peak, direct);
  }
  // Decode's weight streaming from DRAM: the lm_head shape (311 MB of bf16), with
  // and without the direct nest's prefetch of the next tile.
  for (int64_t M : {1, 8, 32}) {
    const int64_t K = 1024, N = 151936;
    const double on = gemm_gflops(M, K, N, 10);
    backend::cpu::set_matmul_prefetch_for_testing(false);
    const double off = gemm_gflops(M, K, N, 10);
    backend::cpu::set_matmul_prefetch_for_testing(true);
    std::printf(
        "GEMM M=%lld K=1024 N=151936 (311 MB bf16 from DRAM): prefetch %.1f GB/s, "
        "without %.1f GB/s of weights\n",
        static_cast<long long>(M), on / (2.0 * M) * 2, off / (2.0 * M) * 2);
  }
  // The packed nest's blocking at the two prefill shapes (same bits for all).
  for (auto [M, K, N] : {std::array<int64_t, 3>{512, 1024, 3072}, {512, 3072, 1024}}) {
    std::printf("GEMM M=%lld K=%lld N=%lld by K block x row block:", static_cast<long long>(M),
                static_cast<long long>(K), static_cast<long long>(N));
    for (int64_t kc : {128, 256, 512})
      for (int64_t mb : {48, 96, 192}) {
        backend::cpu::set_matmul_blocking_for_testing(kc, mb);
        std::printf(" %lldx%lld %.0f", static_cast<long long>(kc), static_cast<long long>(mb),
                    gemm_gflops(M, K, N, 5));
      }
    std::printf(" GFLOP/s\n");
    backend::cpu::set_matmul_blocking_for_testing(512, 96);
  }
  double rd = 0, cp = 0;
  bandwidth(size_t{1} << 30, &rd, &cp);
  const double roof = rd * 1e9 / weight_bytes;
  std::printf(
      "memory bandwidth (STREAM-like, 1 GiB, all threads): read %.1f GB/s, copy %.1f GB/s\n", rd,
      cp);
  std::printf(
      "decode roofline: %.0f MB of bf16 weights per step -> %.1f tok/s at the read "
      "bandwidth; 1-request decode reaches %.0f%% of it\n",
      weight_bytes / 1e6, roof, 100.0 * d1 / roof);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  bool table = argc > 1 && std::string(argv[1]) == "--table";
  if (table) {
    g_profile = true;
    issue11_table(argc > 2 ? argv[2] : "qwen3-0.6b-shape");
    return 0;
  }
  std::printf("load average at start: %s\n", bench::load_average().c_str());
  std::printf("== model throughput (CPU backend, paged KV, f32 compute)\n");
  throughput("tiny", model::DType::kF32, 512, 64, 512);
  throughput("tiny", model::DType::kBF16, 512, 64, 512);
  throughput("small", model::DType::kF32, 512, 64, 512);
  throughput("small", model::DType::kBF16, 512, 64, 512);
  if (!quick) throughput("qwen3-0.6b-shape", model::DType::kBF16, 64, 16, 64);
  std::printf("== time to first token, cold vs prefix-cached\n");
  ttft("tiny", model::DType::kF32);
  ttft("small", model::DType::kF32);
  if (!quick) issue11_table("qwen3-0.6b-shape");
  return 0;
}

// Model throughput on the CPU backend: prefill and decode tokens/s for the tiny,
// small and qwen3-0.6b-shape presets (random weights from make_random_model,
// cached under $PAGEDKV_BENCH_MODEL_DIR or ~/.cache/pagedkv/models), and time to
// first token for a 2,048-token prompt cold vs with its first 2,032 tokens in the
// prefix cache. Each figure is printed with the baseline it is a ratio to,
// measured in the same run: prefill is compared with feeding the same prompt one
// token at a time; cached TTFT with cold TTFT.
//
// Issue 11's table (--table, or as part of the full run): on the qwen3-0.6b-shape
// bf16 checkpoint, prefill of one 512-token prompt, pure decode throughput at 1, 8
// and 32 concurrent requests (all rows of a step in one forward batch; each
// request = a shared 512-token prefix, from the prefix cache, + 16 own tokens),
// GEMM GFLOP/s at a prefill shape against the measured FMA peak of all threads,
// and a STREAM-like memory bandwidth with decode's fraction of that roofline.
// Usage: bench_model_throughput [--quick | --table [PRESET]]
//   --quick skips the 0.6B-shape preset; --table runs only issue 11's table
//   (on PRESET, default qwen3-0.6b-shape).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "backend/half.h"
#include "engine/sampler.h"
#include "model/make_model.h"
#include "model/pool_kv_store.h"
#include "model/request_runner.h"

using namespace pagedkv;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

std::string model_dir(const std::string& preset, model::DType dt) {
  const char* env = std::getenv("PAGEDKV_BENCH_MODEL_DIR");
  std::string base = env && *env ? env
                                 : std::string(std::getenv("HOME") ? std::getenv("HOME") : "/tmp") +
                                       "/.cache/pagedkv/models";
  std::string dir =
      base + "/qwen3-" + preset + (dt == model::DType::kBF16 ? "-bf16" : "-f32") + "-seed1";
  if (!std::filesystem::exists(dir + "/model.safetensors")) {
    model::MakeModelOptions o;
    o.preset = preset;
    o.seed = 1;
    o.dtype = dt;
    o.out_dir = dir;
    auto t = Clock::now();
    Status s = model::make_random_model(o);
    if (!s.ok()) {
      std::fprintf(stderr, "make-model failed: %s\n", s.to_string().c_str());
      std::exit(1);
    }
    std::printf("  (made %s in %.1f s)\n", dir.c_str(), secs(t));
  }
  return dir;
}

std::vector<int32_t> prompt(size_t n, int32_t vocab) {
  std::mt19937 g(42);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

void check(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
    std::exit(1);
  }
}

std::unique_ptr<kv::PagedKVCache> cache_for(model::Model& m, uint64_t initial_mb = 64) {
  kv::PoolBudgetConfig c;
  c.paged_cache_memory_mb = 4096;
  c.paged_cache_initial_memory_mb = initial_mb;
  auto r = model::make_paged_cache(m, c);
  check(r.status());
  return std::move(*r);
}

void throughput(const std::string& preset, model::DType dt, size_t prompt_len, int decode_tokens,
                size_t serial_len) {
  auto m = model::load_model(model_dir(preset, dt));
  check(m.status());
  auto c = cache_for(**m);
  auto p = prompt(prompt_len, (*m)->config().vocab_size);
  std::vector<float> logits;
  // Prefill: the whole prompt in one step.
  model::RequestRunner r(**m, model::KVPath::kPaged, c.get());
  check(r.begin(p).status());
  auto t = Clock::now();
  check(r.prefill(0, model::LogitsRequest::kLast, &logits));
  double prefill_s = secs(t);
  // Decode.
  t = Clock::now();
  for (int i = 0; i < decode_tokens; ++i) check(r.decode(engine::argmax(logits), &logits));
  double decode_s = secs(t);
  r.end(false);
  // Baseline: the first serial_len prompt tokens fed one token per step, on a fresh cache.
  auto c2 = cache_for(**m);
  model::RequestRunner s(**m, model::KVPath::kPaged, c2.get());
  std::vector<int32_t> head(p.begin(), p.begin() + serial_len);
  check(s.begin(head).status());
  t = Clock::now();
  check(s.prefill(1, model::LogitsRequest::kLast, &logits));
  double serial_s = secs(t);
  s.end(false);
  double prefill_tps = prompt_len / prefill_s, serial_tps = serial_len / serial_s;
  std::printf(
      "%-18s %-5s prefill %5zu tok: %9.1f tok/s (%.2fx one-token-per-step %.1f tok/s) | decode: "
      "%8.1f tok/s (%.1f ms/token)\n",
      preset.c_str(), dt == model::DType::kBF16 ? "bf16" : "f32", prompt_len, prefill_tps,
      prefill_tps / serial_tps, serial_tps, decode_tokens / decode_s,
      1000 * decode_s / decode_tokens);
}

void ttft(const std::string& preset, model::DType dt) {
  auto m = model::load_model(model_dir(preset, dt));
  check(m.status());
  auto p = prompt(2048, (*m)->config().vocab_size);
  std::vector<float> cold_logits, warm_logits;
  auto c = cache_for(**m);
  model::RequestRunner cold(**m, model::KVPath::kPaged, c.get());
  auto t = Clock::now();
  check(cold.begin(p).status());
  check(cold.prefill(0, model::LogitsRequest::kLast, &cold_logits));
  double cold_s = secs(t);
  cold.end(false);
  auto c2 = cache_for(**m);
  {
    model::RequestRunner w(**m, model::KVPath::kPaged, c2.get());
    std::vector<int32_t> head(p.begin(), p.begin() + 2032);
    check(w.begin(head).status());
    check(w.prefill(0, model::LogitsRequest::kNone, nullptr));
    w.end(false);
  }
  model::RequestRunner hot(**m, model::KVPath::kPaged, c2.get());
  t = Clock::now();
  auto hit = hot.begin(p);
  check(hit.status());
  check(hot.prefill(0, model::LogitsRequest::kLast, &warm_logits));
  double hot_s = secs(t);
  hot.end(false);
  bool same = cold_logits == warm_logits;
  std::printf(
      "%-18s %-5s TTFT 2048-token prompt: cold %.1f ms, %lld tokens cached %.2f ms → %.0fx faster; "
      "logits bit-identical: %s\n",
      preset.c_str(), dt == model::DType::kBF16 ? "bf16" : "f32", cold_s * 1000,
      static_cast<long long>(*hit), hot_s * 1000, cold_s / hot_s, same ? "yes" : "NO");
}

// Aggregate decode tok/s at `n` concurrent requests: every step is one forward
// batch of n decode rows (context ~ prefix + 16 tokens), logits only.
double batched_decode(model::Model& m, kv::PagedKVCache* cache, int n, size_t prefix_len,
                      int steps) {
  const int32_t V = m.config().vocab_size;
  auto prefix = prompt(prefix_len, V);
  std::vector<std::unique_ptr<model::RequestRunner>> rs;
  std::vector<int32_t> next(static_cast<size_t>(n));
  std::vector<float> logits;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p = prefix;
    std::mt19937 g(1000 + i);
    for (int j = 0; j < 16; ++j) p.push_back(static_cast<int32_t>(g() % V));
    rs.push_back(std::make_unique<model::RequestRunner>(m, model::KVPath::kPaged, cache));
    check(rs.back()->begin(p).status());
    check(rs.back()->prefill(0, model::LogitsRequest::kLast, &logits));
    next[i] = engine::argmax(logits);
  }
  model::PoolKVBlockStore store(cache->pool());
  auto t = Clock::now();
  for (int s = 0; s < steps; ++s) {
    model::ForwardBatch b;
    b.path = model::KVPath::kPaged;
    b.kv_store = &store;
    for (int i = 0; i < n; ++i) {
      const int64_t ctx = rs[i]->num_tokens();
      check(rs[i]->adapter()->allocate_suffix_blocks(ctx + 1));
      model::ForwardRow& row = b.add_row(std::span<const int32_t>(&next[i], 1),
                                         static_cast<int32_t>(ctx), model::LogitsRequest::kLast);
      row.block_tables = {rs[i]->adapter()->block_table()};
    }
    model::ForwardOutput out;
    check(m.forward(b, &out));
    for (int i = 0; i < n; ++i) {
      check(rs[i]->adapter()->record_tokens(std::span<const int32_t>(&next[i], 1)));
      next[i] = engine::argmax(out.last_logits(i));
    }
  }
  double sec = secs(t);
  for (auto& r : rs) r->end(false);
  return n * steps / sec;
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
  std::printf("== issue 11 table (%s bf16): %s\n", preset.c_str(), be.describe().c_str());
  const std::string dir = model_dir(preset, model::DType::kBF16);
  auto m = model::load_model(dir);
  check(m.status());
  const auto& c = (*m)->config();
  // Weight bytes streamed per decode step: every matrix once (the tied embedding
  // is read once, as lm_head) = the checkpoint's size, give or take its header.
  const double weight_bytes =
      static_cast<double>(std::filesystem::file_size(dir + "/model.safetensors"));
  // Prefill: one 512-token prompt in one step (best of 2, fresh cache each).
  double prefill_tps = 0;
  for (int rep = 0; rep < 2; ++rep) {
    auto cache = cache_for(**m, 1024);  // allocated up front: no pool growth while timed
    model::RequestRunner r(**m, model::KVPath::kPaged, cache.get());
    auto p = prompt(512, c.vocab_size);
    std::vector<float> logits;
    check(r.begin(p).status());
    auto t = Clock::now();
    check(r.prefill(0, model::LogitsRequest::kLast, &logits));
    prefill_tps = std::max(prefill_tps, 512 / secs(t));
    r.end(false);
  }
  std::printf("prefill, 512-token prompt        %8.1f tok/s   (llama.cpp on the H200 host: 753)\n",
              prefill_tps);
  const double llama[3] = {55, 162, 243};
  const int ns[3] = {1, 8, 32};
  double d1 = 0;
  for (int i = 0; i < 3; ++i) {
    auto cache = cache_for(**m, 2048);
    double tps = batched_decode(**m, cache.get(), ns[i], 512, ns[i] == 1 ? 24 : 12);
    if (i == 0) d1 = tps;
    std::printf(
        "decode, %2d request%s             %8.1f tok/s   (llama.cpp: %.0f; x%.2f of 1 request)\n",
        ns[i], ns[i] == 1 ? " " : "s", tps, llama[i], tps / d1);
  }
  double peak =
      backend::cpu::measure_fma_peak_gflops(static_cast<backend::cpu::CpuBackend&>(be).pool());
  for (auto [M, K, N] : {std::array<int64_t, 3>{512, 1024, 3072},
                         {512, 3072, 1024},
                         {1, 1024, 3072},
                         {32, 1024, 3072}}) {
    double gf = gemm_gflops(M, K, N, M == 1 ? 200 : 5);
    std::printf(
        "GEMM M=%-4lld K=%-4lld N=%-4lld bf16   %8.1f GFLOP/s = %.0f%% of the measured FMA peak "
        "%.0f GFLOP/s\n",
        static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(N), gf,
        peak > 0 ? 100.0 * gf / peak : 0.0, peak);
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
    issue11_table(argc > 2 ? argv[2] : "qwen3-0.6b-shape");
    return 0;
  }
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    char buf[128] = {0};
    if (std::fgets(buf, sizeof(buf), f)) std::printf("load average at start: %s", buf);
    std::fclose(f);
  }
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

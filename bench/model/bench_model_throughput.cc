// Model throughput on the CPU backend: prefill and decode tokens/s for the tiny,
// small and qwen3-0.6b-shape presets (random weights from make_random_model,
// cached under $PAGEDKV_BENCH_MODEL_DIR or ~/.cache/pagedkv/models), and time to
// first token for a 2,048-token prompt cold vs with its first 2,032 tokens in the
// prefix cache. Each figure is printed with the baseline it is a ratio to,
// measured in the same run: prefill is compared with feeding the same prompt one
// token at a time; cached TTFT with cold TTFT.
// Usage: bench_model_throughput [--quick]   (--quick skips the 0.6B-shape preset)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "model/make_model.h"
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

std::unique_ptr<kv::PagedKVCache> cache_for(model::Model& m) {
  kv::PoolBudgetConfig c;
  c.paged_cache_memory_mb = 4096;
  c.paged_cache_initial_memory_mb = 64;
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

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::string(argv[1]) == "--quick";
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
  return 0;
}

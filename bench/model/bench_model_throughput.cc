// Model throughput on the CPU backend: prefill and decode tokens/s for the tiny,
// small and qwen3-0.6b-shape presets (random weights from make_random_model,
// cached under $PAGEDKV_BENCH_MODEL_DIR or ~/.cache/pagedkv/models), and time to
// first token for a 2,048-token prompt cold vs with its first 2,032 tokens in the
// prefix cache. Each figure is printed with the baseline it is a ratio to,
// measured in the same run: prefill is compared with feeding the same prompt one
// token at a time; cached TTFT with cold TTFT.
// Every run goes through the Engine (step() mode), as every front end does.
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
#include "model/model.h"
#include "pagedkv/engine.h"

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

// An engine on `m` (paged KV, 64 MiB growing to 4 GiB), `chunk` prompt tokens per step.
std::unique_ptr<engine::Engine> engine_for(const std::shared_ptr<model::Model>& m, int64_t chunk) {
  engine::EngineOptions o;
  o.paged_cache_memory_mb = 4096;
  o.paged_cache_initial_memory_mb = 64;
  o.max_num_batched_tokens = chunk;
  auto e = engine::Engine::create(m, o);
  check(e.status());
  return std::move(*e);
}

std::shared_ptr<model::Model> load(const std::string& preset, model::DType dt) {
  auto m = model::load_model(model_dir(preset, dt));
  check(m.status());
  return std::shared_ptr<model::Model>(std::move(*m));
}

// One greedy request through the engine (step() mode): the seconds until its
// first token (prefill), the seconds after it (decode), and what it returned.
struct Timed {
  double first_s = 0, rest_s = 0;
  engine::RequestResult result;
};
Timed run(engine::Engine& e, const std::vector<int32_t>& p, int max_tokens) {
  engine::GenerateRequest r;
  r.prompt = p;
  r.sampling.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.return_logits = true;
  auto h = e.submit(r);
  check(h.status());
  Timed t;
  auto t0 = Clock::now();
  while (!(*h)->done() && e.stats().completion_tokens == 0) e.step();
  t.first_s = secs(t0);
  t0 = Clock::now();
  e.run_until_idle();
  t.rest_s = secs(t0);
  t.result = (*h)->wait();
  if (t.result.finish_reason == engine::FinishReason::kError) check(t.result.error);
  return t;
}

void throughput(const std::string& preset, model::DType dt, size_t prompt_len, int decode_tokens,
                size_t serial_len) {
  auto m = load(preset, dt);
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
  auto m = load(preset, dt);
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
